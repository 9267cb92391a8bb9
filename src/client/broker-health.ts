/**
 * Whether a broker has started, from the health document of its own management port (`GET /actuator/health`).
 * The management server listens before the broker has learnt the cluster's configuration and opened its replicas,
 * and its liveness answers 200 from then on, so only the document's `broker` component tells that the start ended:
 * it says `RUNNING` then (`STARTING` with the step before, `STOPPING` while it stops). The document's status is
 * DOWN (503) while a hosted partition has no healthy replica, which a broker that just started may well say, so the
 * component is read whatever the status.
 */

/** The largest health document read, in bytes: it lists every partition the broker hosts. */
const MAX_HEALTH_BYTES = 1024 * 1024;

/** What is read of the health document. */
interface BrokerHealthView {
  components?: { broker?: { details?: { state?: unknown } } };
}

/**
 * Asks the broker at `managementUrl` once whether it has started; false when it does not answer within
 * `timeoutMs`, answers a document larger than the bound or not JSON, or says another state.
 */
export async function brokerHasStarted(managementUrl: string, timeoutMs: number): Promise<boolean> {
  try {
    const response = await fetch(`${managementUrl}/actuator/health`, { signal: AbortSignal.timeout(timeoutMs) });
    const text = await boundedText(response, MAX_HEALTH_BYTES);
    if (text === null) return false;
    const health = JSON.parse(text) as BrokerHealthView | null;
    return health?.components?.broker?.details?.state === "RUNNING";
  } catch {
    // Not listening yet, too slow, or not a health document: not started.
    return false;
  }
}

/** The body as text, or null when it is longer than `maxBytes` (it is then not read further). */
async function boundedText(response: Response, maxBytes: number): Promise<string | null> {
  if (response.body === null) return "";
  const reader = response.body.getReader();
  const chunks: Uint8Array[] = [];
  let sizeBytes = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    sizeBytes += value.byteLength;
    if (sizeBytes > maxBytes) {
      await reader.cancel();
      return null;
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks).toString("utf8");
}
