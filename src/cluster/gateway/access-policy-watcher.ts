/**
 * Follows the cluster's access policy file (`service.gateway.accessPolicyFile`), which the platform's provisioner
 * rewrites whenever the allowlist, the monitoring clients or the deleted cluster clients change. The file must exist
 * and hold a valid policy when the gateway starts. Afterwards its status is polled: a new inode, size, modification
 * or change time means a new document, which replaces the policy in force in one step once it parses. A file that
 * turns invalid or unreadable leaves the last valid policy in force and is reported in one warning per change; the
 * warning names the file and what is wrong, never what the file holds (it holds password hashes).
 *
 * Timestamps have a coarse granularity, so two writes of the same size in quick succession can leave the status
 * unchanged. A file modified in the last moments is therefore read again at the next poll as well, and only a
 * different content counts as a change.
 */
import { isUtf8 } from "node:buffer";
import { createHash } from "node:crypto";
import { type BigIntStats, constants } from "node:fs";
import { open, stat } from "node:fs/promises";
import type { Logger } from "pino";
import { MAX_ACCESS_POLICY_BYTES, parseAccessPolicy } from "../../auth/access-policy.js";
import { ConfigurationError } from "../../config/errors.js";
import { EnforcedAccessPolicy } from "./access-guard.js";

/** Default time between two looks at the file's status. */
export const DEFAULT_ACCESS_POLICY_POLL_INTERVAL_MS = 500;

/** How recent a modification must be for the content to be checked again at the next poll. */
const SETTLING_TIME_MS = 2_000;

/** Options of `AccessPolicyWatcher.open`. */
export interface AccessPolicyWatcherOptions {
  /** The policy file. */
  path: string;
  logger: Logger;
  /** Time between two looks at the file's status (default 500 ms). */
  pollIntervalMs?: number;
  /** Told of every policy put in force after the first. */
  onApplied?: (policy: EnforcedAccessPolicy) => void;
  /** Told of every change of the file that left the last valid policy in force. */
  onRejected?: () => void;
}

/** The file's content and status, as one read saw them. */
interface FileSnapshot {
  text: string;
  digest: string;
  status: BigIntStats;
}

/** Why the file could not be used; `message` is safe to log (it never repeats the content). */
class PolicyFileProblem extends Error {}

/** Identity of a file version as its status shows it. */
function statusSignature(status: BigIntStats): string {
  return `${status.ino}:${status.size}:${status.mtimeNs}:${status.ctimeNs}`;
}

/**
 * Reads the policy file: a regular file of at most MAX_ACCESS_POLICY_BYTES bytes of UTF-8. Opened without blocking,
 * so a FIFO put in the file's place is refused instead of stalling the gateway.
 */
async function readPolicyFile(path: string): Promise<FileSnapshot> {
  let handle: Awaited<ReturnType<typeof open>>;
  try {
    handle = await open(path, constants.O_RDONLY | constants.O_NONBLOCK);
  } catch (error) {
    // Worded as `statusOf` words it: a file removed between a poll's look at its status and this open is the same
    // problem, and is reported once, the same way, whichever of the two found it.
    throw new PolicyFileProblem(`it cannot be read (${(error as NodeJS.ErrnoException).code ?? "unknown error"})`);
  }
  try {
    const status = await handle.stat({ bigint: true });
    if (!status.isFile()) throw new PolicyFileProblem("it is not a regular file");
    // One byte more than allowed tells a file at the limit from a larger one, whatever its status said.
    const buffer = Buffer.alloc(Math.min(Number(status.size), MAX_ACCESS_POLICY_BYTES) + 1);
    let length = 0;
    while (length < buffer.length) {
      const { bytesRead } = await handle.read(buffer, length, buffer.length - length, length);
      if (bytesRead === 0) break;
      length += bytesRead;
    }
    if (length > MAX_ACCESS_POLICY_BYTES) {
      throw new PolicyFileProblem(`it is larger than ${MAX_ACCESS_POLICY_BYTES} bytes`);
    }
    const bytes = buffer.subarray(0, length);
    if (!isUtf8(bytes)) throw new PolicyFileProblem("it is not UTF-8 text");
    return {
      text: bytes.toString("utf8"),
      digest: createHash("sha256").update(bytes).digest("hex"),
      status,
    };
  } catch (error) {
    if (error instanceof PolicyFileProblem) throw error;
    throw new PolicyFileProblem(`it cannot be read (${(error as NodeJS.ErrnoException).code ?? "unknown error"})`);
  } finally {
    await handle.close();
  }
}

/** Parses a snapshot into a policy ready to enforce; throws PolicyFileProblem saying what is wrong. */
function enforcedPolicyOf(snapshot: FileSnapshot): EnforcedAccessPolicy {
  try {
    return new EnforcedAccessPolicy(parseAccessPolicy(snapshot.text));
  } catch (error) {
    throw new PolicyFileProblem((error as Error).message);
  }
}

/** The access policy file followed over time; `current()` is the policy in force. */
export class AccessPolicyWatcher {
  readonly #options: AccessPolicyWatcherOptions;
  readonly #pollIntervalMs: number;
  #current: EnforcedAccessPolicy;
  /** Status of the last version read, valid or not. */
  #lastSignature: string;
  /** Content digest of the last version read, valid or not. */
  #lastDigest: string;
  /** Whether the last version read was modified so recently that a same-sized rewrite may not show in its status. */
  #settling: boolean;
  /** The problem last reported, so that a file that stays broken is reported once. */
  #lastProblem: string | undefined;
  #timer: NodeJS.Timeout | undefined;
  #closed = false;

  private constructor(options: AccessPolicyWatcherOptions, snapshot: FileSnapshot, policy: EnforcedAccessPolicy) {
    this.#options = options;
    this.#pollIntervalMs = options.pollIntervalMs ?? DEFAULT_ACCESS_POLICY_POLL_INTERVAL_MS;
    this.#current = policy;
    this.#lastSignature = statusSignature(snapshot.status);
    this.#lastDigest = snapshot.digest;
    this.#settling = isSettling(snapshot.status);
  }

  /**
   * Reads the policy file and starts following it. Throws ConfigurationError naming the file when it is missing,
   * unreadable or not a valid policy: a gateway told to enforce a policy does not start without one.
   */
  static async open(options: AccessPolicyWatcherOptions): Promise<AccessPolicyWatcher> {
    let snapshot: FileSnapshot;
    let policy: EnforcedAccessPolicy;
    try {
      snapshot = await readPolicyFile(options.path);
      policy = enforcedPolicyOf(snapshot);
    } catch (error) {
      if (!(error instanceof PolicyFileProblem)) throw error;
      throw new ConfigurationError([
        `service.gateway.accessPolicyFile: the access policy file ${JSON.stringify(options.path)} cannot be used: ${error.message}`,
      ]);
    }
    const watcher = new AccessPolicyWatcher(options, snapshot, policy);
    watcher.#schedule();
    return watcher;
  }

  /** The policy in force. */
  current(): EnforcedAccessPolicy {
    return this.#current;
  }

  /** Stops following the file. */
  close(): void {
    this.#closed = true;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
  }

  #schedule(): void {
    if (this.#closed) return;
    this.#timer = setTimeout(() => {
      this.#poll()
        .catch((error: unknown) => this.#reject(`it cannot be read (${(error as Error).name})`))
        .finally(() => this.#schedule());
    }, this.#pollIntervalMs);
    // The servers keep a running gateway alive; a gateway that failed to start must not be kept alive by this.
    this.#timer.unref();
  }

  async #poll(): Promise<void> {
    let snapshot: FileSnapshot;
    try {
      const status = await statusOf(this.#options.path);
      if (statusSignature(status) === this.#lastSignature && !this.#settling) return;
      snapshot = await readPolicyFile(this.#options.path);
    } catch (error) {
      if (!(error instanceof PolicyFileProblem)) throw error;
      this.#reject(error.message);
      return;
    }
    if (this.#closed) return;
    this.#lastSignature = statusSignature(snapshot.status);
    this.#settling = isSettling(snapshot.status);
    if (snapshot.digest === this.#lastDigest) {
      // Readable again and unchanged: whatever made it unreadable is over, and deserves a warning if it returns.
      this.#lastProblem = undefined;
      return;
    }
    this.#lastDigest = snapshot.digest;
    let policy: EnforcedAccessPolicy;
    try {
      policy = enforcedPolicyOf(snapshot);
    } catch (error) {
      if (!(error instanceof PolicyFileProblem)) throw error;
      // A new invalid version is a new problem even when it is wrong in the same way as the one before.
      this.#lastProblem = undefined;
      this.#reject(error.message);
      return;
    }
    this.#current = policy;
    this.#lastProblem = undefined;
    const { ipAllowlist, monitoring, revokedClients } = policy.policy;
    this.#options.logger.info(
      {
        file: this.#options.path,
        allowlistEntries: ipAllowlist.length,
        monitoringEnabled: monitoring.enabled,
        monitoringClients: monitoring.clients.length,
        revokedClients: revokedClients.length,
      },
      "access policy applied",
    );
    this.#options.onApplied?.(policy);
  }

  #reject(problem: string): void {
    if (problem === this.#lastProblem) return;
    this.#lastProblem = problem;
    this.#options.logger.warn(
      { file: this.#options.path, problem },
      "access policy file not applied; the last valid policy stays in force",
    );
    this.#options.onRejected?.();
  }
}

/** The file's status (following symbolic links, as a mounted configuration map swaps them). */
async function statusOf(path: string): Promise<BigIntStats> {
  try {
    return await stat(path, { bigint: true });
  } catch (error) {
    throw new PolicyFileProblem(`it cannot be read (${(error as NodeJS.ErrnoException).code ?? "unknown error"})`);
  }
}

function isSettling(status: BigIntStats): boolean {
  return Math.abs(Date.now() - Number(status.mtimeMs)) < SETTLING_TIME_MS;
}
