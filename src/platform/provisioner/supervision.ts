/**
 * The contract between the local provisioner and the children it supervises (`flowplane broker` and `flowplane
 * gateway`), both sides of it: when a crashed child is started again (capped exponential backoff), and how a child
 * notices that its supervisor is gone.
 *
 * A supervised child is spawned with an IPC channel and `FLOWPLANE_SUPERVISOR=ipc` in its environment. The channel
 * closes when the supervisor exits for any reason, SIGKILL included, which no signal handler of the supervisor could
 * report; the child then stops as it would on SIGTERM. Without the variable, or without the channel, a broker or
 * gateway run by hand (or by another tool that happens to open a channel) is unaffected.
 */

/** The environment variable that tells a child it is supervised through its IPC channel. */
export const SUPERVISOR_VARIABLE = "FLOWPLANE_SUPERVISOR";

/** The value of `SUPERVISOR_VARIABLE` for a child supervised through its IPC channel. */
export const SUPERVISOR_CHANNEL = "ipc";

/** When a child that exited unexpectedly is started again. */
export interface RestartPolicy {
  /** Wait before restarting a child after its first crash in a row. */
  initialDelayMs: number;
  /** Longest wait between restarts: every further crash in a row doubles the wait up to this. */
  maximumDelayMs: number;
  /** A child that ran at least this long before crashing is healthy again: its next wait is the initial one. */
  stableAfterMs: number;
}

/** The restart policy of the local cluster unless its options say otherwise. */
export const DEFAULT_RESTART_POLICY: Readonly<RestartPolicy> = {
  initialDelayMs: 500,
  maximumDelayMs: 30_000,
  stableAfterMs: 60_000,
};

/** The policy `overrides` make of the defaults; throws when a value could make a crash loop spin. */
export function restartPolicy(overrides: Partial<RestartPolicy> = {}): RestartPolicy {
  const policy = { ...DEFAULT_RESTART_POLICY, ...overrides };
  for (const [name, value] of Object.entries(policy)) {
    // A zero wait would restart a child that crashes at start as fast as it can be spawned.
    if (!Number.isFinite(value) || value < 1) throw new Error(`restart policy: ${name} must be at least 1 ms`);
  }
  if (policy.maximumDelayMs < policy.initialDelayMs) {
    throw new Error("restart policy: maximumDelayMs must be at least initialDelayMs");
  }
  return policy;
}

/** The wait before the next restart of a child that crashed `crashesInARow` times before this crash. */
export function restartDelayMs(policy: RestartPolicy, crashesInARow: number): number {
  // Capping the exponent keeps the power finite; the maximum caps the wait long before.
  return Math.min(policy.initialDelayMs * 2 ** Math.min(crashesInARow, 52), policy.maximumDelayMs);
}

/** The part of `process` a supervised child watches (a parameter so tests can hand in their own). */
export interface SupervisedProcess {
  readonly channel?: { unref(): void } | undefined;
  readonly connected?: boolean;
  once(event: "disconnect", listener: () => void): unknown;
  off(event: "disconnect", listener: () => void): unknown;
  exit(code?: number): never;
}

/** What `watchSupervisor` gives a supervised child. */
export interface SupervisorWatch {
  /** Resolves when the channel to the supervisor closed: the supervisor is gone. */
  gone: Promise<void>;
  /** Stops watching (the child stops for another reason, or has stopped). */
  stop(): void;
}

/** How long a child whose supervisor is gone may take to stop cleanly before it exits anyway. */
export const ORPHAN_STOP_DEADLINE_MS = 30_000;

/**
 * Watches the channel to the supervisor when this process is a supervised child (see the module comment), else
 * returns undefined. Once the supervisor is gone the child has a bounded time to stop cleanly: nobody is left to
 * kill it if its clean stop hangs, so it then exits by itself.
 */
export function watchSupervisor(
  environment: Readonly<Record<string, string | undefined>>,
  target: SupervisedProcess = process as unknown as SupervisedProcess,
): SupervisorWatch | undefined {
  if (environment[SUPERVISOR_VARIABLE] !== SUPERVISOR_CHANNEL || target.channel === undefined) return undefined;
  let resolveGone: () => void = () => undefined;
  const gone = new Promise<void>((resolve) => {
    resolveGone = resolve;
  });
  const onDisconnect = (): void => {
    resolveGone();
    setTimeout(() => target.exit(1), ORPHAN_STOP_DEADLINE_MS).unref();
  };
  if (target.connected === false) {
    onDisconnect();
  } else {
    target.once("disconnect", onDisconnect);
    // Listening for "disconnect" holds the channel open as work to wait for; the child must still exit by itself
    // once it has stopped, so the channel must not keep it alive.
    target.channel.unref();
  }
  return {
    gone,
    stop() {
      // The deadline, once running, stays: it keeps nothing alive, and it still ends a child whose clean stop
      // returned while something else holds its event loop open.
      target.off("disconnect", onDisconnect);
    },
  };
}
