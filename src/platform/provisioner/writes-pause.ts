/**
 * Holding a cluster's writes back through its access policy file (`writesPaused`), which its gateway follows: a
 * restore starts the restored cluster with its writes paused, and takes them again only once it is committed. Until
 * the commit a failure (or a stop of the platform) puts the previous data back, and every write the restored cluster
 * had acknowledged would be discarded with it; reads are harmless and go on.
 */
import { readFileSync } from "node:fs";
import {
  InvalidAccessPolicyError,
  parseAccessPolicy,
  serializeAccessPolicy,
  withWritesPaused,
} from "../../auth/access-policy.js";
import { replacePrivateFile } from "../../files/private-files.js";
import { monotonicNowMs } from "../../time/monotonic.js";

/** How often `resumeWrites` looks again, unless told otherwise. */
const DEFAULT_POLL_INTERVAL_MS = 100;

/** Longest a health answer is waited for, so that one lost request does not hold the wait. */
const HEALTH_REQUEST_TIMEOUT_MS = 2_000;

/**
 * Rewrites the policy file at `policyFile` when the pause it holds is not `reason` (undefined: no pause), keeping
 * everything else. A file that does not parse is left alone when no pause is wanted, so that the gateway reports it as
 * it always did; when a pause is wanted it throws, since writes could not be held back.
 */
export function reconcileWritesPause(policyFile: string, reason: string | undefined): void {
  let policy: ReturnType<typeof parseAccessPolicy>;
  try {
    policy = parseAccessPolicy(readFileSync(policyFile, "utf8"));
  } catch (error) {
    if (reason === undefined && error instanceof InvalidAccessPolicyError) return;
    throw error;
  }
  if (policy.writesPaused?.reason === reason) return;
  replacePrivateFile(policyFile, serializeAccessPolicy(withWritesPaused(policy, reason)));
}

/** Whether the gateway's health document says that writes are taken. */
async function gatewayTakesWrites(managementUrl: string): Promise<boolean> {
  try {
    const response = await fetch(`${managementUrl}/actuator/health`, {
      signal: AbortSignal.timeout(HEALTH_REQUEST_TIMEOUT_MS),
    });
    const health = (await response.json()) as { components?: { writes?: { details?: { paused?: unknown } } } };
    return health.components?.writes?.details?.paused === false;
  } catch {
    return false;
  }
}

/** How `resumeWrites` ended. */
export type ResumeOutcome =
  | { readonly outcome: "taken" }
  /** The cluster stopped (or its provisioner closed) before its gateway took writes. */
  | { readonly outcome: "stopped" }
  /** `timeoutMs` passed; `writeError` is the last failure to write the file, if the file still holds the pause. */
  | { readonly outcome: "timed-out"; readonly writeError: unknown };

/**
 * Ends the pause in the policy file at `policyFile` and resolves once the gateway at `managementUrl` takes writes (it
 * reads the file every half second or so). A write of the file that fails (a full disk right after a restore) is tried
 * again at every look until it succeeds, since nothing else would end the pause; the wait ends early once
 * `stillRunning` says the cluster stopped.
 */
export async function resumeWrites(options: {
  policyFile: string;
  managementUrl: string;
  timeoutMs: number;
  /** Time between two looks (default 100 ms). */
  pollIntervalMs?: number;
  stillRunning: () => boolean;
}): Promise<ResumeOutcome> {
  const deadlineMs = monotonicNowMs() + options.timeoutMs;
  let written = false;
  let writeError: unknown;
  for (;;) {
    if (!options.stillRunning()) return { outcome: "stopped" };
    if (!written) {
      try {
        reconcileWritesPause(options.policyFile, undefined);
        written = true;
        writeError = undefined;
      } catch (error) {
        writeError = error;
      }
    }
    if (written && (await gatewayTakesWrites(options.managementUrl))) return { outcome: "taken" };
    if (monotonicNowMs() >= deadlineMs) return { outcome: "timed-out", writeError };
    await new Promise((resolve) => setTimeout(resolve, options.pollIntervalMs ?? DEFAULT_POLL_INTERVAL_MS).unref());
  }
}
