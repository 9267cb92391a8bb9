/**
 * Waiting for a local cluster to be ready: the gateway reports a leader for every partition. A broker that says it is
 * still starting (restoring its state) extends the wait; a child that exits ends it.
 */
import { dirname } from "node:path";
import type { Logger } from "pino";
import { monotonicNowMs } from "../../time/monotonic.js";
import { exitedDuringStart, type ManagedChild } from "./managed-child.js";

/** How often the readiness wait asks the brokers whether one is still starting. */
const BROKER_STARTING_POLL_MS = 2_000;

/**
 * Whether a broker of `children` says it is still starting (its management port's health names the step): a broker
 * restoring gigabytes of state takes minutes, and is progress rather than a start that went wrong.
 */
async function someBrokerStarting(host: string, children: readonly ManagedChild[]): Promise<boolean> {
  const answers = await Promise.all(
    children
      .filter((child) => child.nodeId !== undefined)
      .map(async (child) => {
        const port = child.ports.find((candidate) => candidate.purpose === "management port")?.port;
        if (port === undefined) return false;
        try {
          const response = await fetch(`http://${host}:${port}/actuator/health`, {
            signal: AbortSignal.timeout(2_000),
          });
          const body = (await response.json()) as { components?: { broker?: { details?: { state?: unknown } } } };
          return body.components?.broker?.details?.state === "STARTING";
        } catch {
          return false;
        }
      }),
  );
  return answers.includes(true);
}

/**
 * Polls the gateway's readiness until every partition has a leader, failing early when a child dies, and when
 * `readyTimeoutMs` passed since the start or since a broker last said it was still starting.
 */
export async function waitUntilReady(context: {
  host: string;
  managementUrl: string;
  children: readonly ManagedChild[];
  readyTimeoutMs: number;
  logger: Logger;
  signal: AbortSignal | undefined;
}): Promise<void> {
  const startedAtMs = monotonicNowMs();
  let lastProgressAtMs = startedAtMs;
  let lastStartingAtMs = Number.NEGATIVE_INFINITY;
  // Asked separately from the last answer, so that brokers none of which is starting are asked every 2 s, not 4 times a second.
  let startingAskedAtMs = Number.NEGATIVE_INFINITY;
  let lastState = "the gateway is not answering yet";
  for (;;) {
    if (context.signal?.aborted === true) throw new Error("the start of the local cluster was cancelled");
    const dead = context.children.find(
      (child) => child.process !== undefined && (child.process.exitCode !== null || child.process.signalCode !== null),
    );
    if (dead !== undefined) throw await exitedDuringStart(context.host, dead);
    try {
      const response = await fetch(`${context.managementUrl}/actuator/health/readiness`, {
        signal: AbortSignal.timeout(2_000),
      });
      const body = (await response.json()) as { status?: string; components?: unknown };
      if (response.status === 200 && body.status === "UP") return;
      lastState = `readiness ${body.status ?? response.status}: ${JSON.stringify(body.components ?? {})}`;
    } catch {
      // The gateway is still starting; keep polling within the bound.
    }
    const elapsedMs = monotonicNowMs() - startedAtMs;
    if (monotonicNowMs() - startingAskedAtMs >= BROKER_STARTING_POLL_MS) {
      startingAskedAtMs = monotonicNowMs();
      if (await someBrokerStarting(context.host, context.children)) {
        lastStartingAtMs = monotonicNowMs();
        lastState = "a broker is still opening its partitions";
      }
    }
    if (monotonicNowMs() - Math.max(startedAtMs, lastStartingAtMs) > context.readyTimeoutMs) {
      throw new Error(
        `the local cluster was not ready within ${context.readyTimeoutMs} ms (${lastState}); see the logs in ${dirname(context.children[0]?.logFile ?? ".")}`,
      );
    }
    if (monotonicNowMs() - lastProgressAtMs >= 5_000) {
      lastProgressAtMs = monotonicNowMs();
      context.logger.info(
        { elapsedMs, state: lastState },
        "waiting for every partition of the local cluster to have a leader",
      );
    }
    await new Promise((resolveWait) => setTimeout(resolveWait, 250));
  }
}
