/**
 * A steady write load through a gateway for end-to-end tests: `clients` publishers, each publication with a unique
 * message id (so one applied twice would come back as 409), pacing themselves between answers. What they record is
 * what a user would check afterwards: every acknowledged message reads back with its content, no key was
 * acknowledged twice, and nothing but 200 and the gateway's "unavailable / unknown outcome" answers came back.
 */

/** Answers that mean "not done" or "not known to be done"; never a violation on their own. */
const UNAVAILABLE_STATUSES = new Set([502, 503, 504]);

/** Options of a publisher load. */
export interface PublisherOptions {
  readonly gatewayUrl: string;
  readonly token: () => string;
  readonly clients: number;
  /** Pause of each publisher after each answer, to bound the machine's load. */
  readonly pauseMs: number;
  /** Prefix of correlation keys and message ids (unique per load). */
  readonly label: string;
}

/** What a publisher load saw. */
export interface PublisherReport {
  /** Acknowledged message key → its correlation key. */
  readonly acknowledged: ReadonlyMap<string, string>;
  readonly unavailable: number;
  readonly violations: readonly string[];
}

/** A running load; stop it to get its report. */
export interface PublisherLoad {
  /** Acknowledged publications so far. */
  acknowledgedCount(): number;
  stop(): Promise<PublisherReport>;
}

/** Starts the publishers. */
export function startPublishers(options: PublisherOptions): PublisherLoad {
  const acknowledged = new Map<string, string>();
  const violations: string[] = [];
  let unavailable = 0;
  let running = true;
  const publisher = async (client: number): Promise<void> => {
    for (let sequence = 0; running; sequence += 1) {
      const correlationKey = `${options.label}-${client}-${sequence}`;
      try {
        const response = await fetch(`${options.gatewayUrl}/v2/messages/publication`, {
          method: "POST",
          headers: { authorization: `Bearer ${options.token()}`, "content-type": "application/json" },
          body: JSON.stringify({
            name: options.label,
            correlationKey,
            messageId: correlationKey,
            timeToLive: 3_600_000,
            variables: { correlationKey },
          }),
          signal: AbortSignal.timeout(15_000),
        });
        if (response.status === 200) {
          const { messageKey } = (await response.json()) as { messageKey: string };
          if (acknowledged.has(messageKey)) violations.push(`message key ${messageKey} acknowledged twice`);
          acknowledged.set(messageKey, correlationKey);
        } else if (UNAVAILABLE_STATUSES.has(response.status)) {
          unavailable += 1;
        } else {
          violations.push(`publication ${correlationKey} answered ${response.status}: ${await response.text()}`);
        }
      } catch {
        // A timeout or a reset connection: the outcome is unknown, like a 502.
        unavailable += 1;
      }
      if (options.pauseMs > 0) await new Promise((resolve) => setTimeout(resolve, options.pauseMs));
    }
  };
  const publishers = Array.from({ length: options.clients }, (_, client) => publisher(client));
  return {
    acknowledgedCount: () => acknowledged.size,
    async stop() {
      running = false;
      await Promise.all(publishers);
      return { acknowledged, unavailable, violations };
    },
  };
}

/**
 * Reads every acknowledged message back through the gateway (retrying answers that mean "unavailable", bounded)
 * and returns what did not read back as published.
 */
export async function unreadableMessages(
  gatewayUrl: string,
  token: string,
  acknowledged: ReadonlyMap<string, string>,
): Promise<string[]> {
  const problems: string[] = [];
  const entries = [...acknowledged];
  // Sixteen readers at a time keep the check short without overloading the cluster.
  for (let start = 0; start < entries.length; start += 16) {
    await Promise.all(
      entries.slice(start, start + 16).map(async ([messageKey, correlationKey]) => {
        for (let attempt = 0; attempt < 100; attempt += 1) {
          const response = await fetch(`${gatewayUrl}/v2/messages/${messageKey}`, {
            headers: { authorization: `Bearer ${token}` },
            signal: AbortSignal.timeout(15_000),
          }).catch(() => null);
          if (response === null || UNAVAILABLE_STATUSES.has(response.status)) {
            await new Promise((resolve) => setTimeout(resolve, 200));
            continue;
          }
          if (response.status !== 200) {
            problems.push(`message ${messageKey} (${correlationKey}) answered ${response.status}`);
            return;
          }
          const body = (await response.json()) as { correlationKey: string; variables: unknown };
          if (body.correlationKey !== correlationKey) {
            problems.push(`message ${messageKey} holds ${body.correlationKey}, not ${correlationKey}`);
          }
          return;
        }
        problems.push(`message ${messageKey} (${correlationKey}) stayed unavailable`);
      }),
    );
  }
  return problems;
}
