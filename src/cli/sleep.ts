/** Pausing between the polls of commands that wait for something (a change, a backup, a cluster). */
import { setTimeout as delay } from "node:timers/promises";

/**
 * Waits `durationMs`, or less when `signal` aborts (the user pressed Ctrl-C); never rejects for the abort. Node's own
 * timer removes its listener from the signal when it fires: a command polls hundreds of times on one signal, and a
 * listener left behind by each poll makes Node warn about a leak in the middle of the command's output.
 */
export async function sleepUnlessInterrupted(durationMs: number, signal: AbortSignal): Promise<void> {
  try {
    await delay(durationMs, undefined, { signal });
  } catch (error) {
    if (!signal.aborted) throw error;
  }
}
