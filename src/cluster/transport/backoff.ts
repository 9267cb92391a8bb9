/** Reconnection delays: exponential growth capped at a maximum, with jitter so that peers do not reconnect in step. */

/** Bounds of the reconnection delay. */
export interface BackoffOptions {
  /** Delay ceiling after the first failure. */
  readonly initialBackoffMs: number;
  /** Delay ceiling after many failures. */
  readonly maxBackoffMs: number;
}

/**
 * Delay before the next connection attempt after `consecutiveFailures` (≥ 1) failed ones. The ceiling doubles per
 * failure from `initialBackoffMs` up to `maxBackoffMs`; the delay is drawn uniformly from the upper half of the
 * ceiling using `random` (a value in [0, 1)), which keeps some spread without ever retrying immediately.
 */
export function backoffDelayMs(consecutiveFailures: number, options: BackoffOptions, random: () => number): number {
  if (!Number.isSafeInteger(consecutiveFailures) || consecutiveFailures < 1) {
    throw new Error(`consecutiveFailures must be an integer ≥ 1, got ${consecutiveFailures}`);
  }
  // Cap the exponent so the power cannot overflow to Infinity however long a peer stays down.
  const exponent = Math.min(consecutiveFailures - 1, 30);
  const ceilingMs = Math.min(options.maxBackoffMs, options.initialBackoffMs * 2 ** exponent);
  return Math.round(ceilingMs / 2 + random() * (ceilingMs / 2));
}
