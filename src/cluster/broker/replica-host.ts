/**
 * The partition replicas a broker hosts, which change while it runs: a replica is opened when the broker joins or
 * bootstraps a partition (or at start for the partitions it hosts), and closed and deleted when it leaves one.
 *
 * It also supervises them. A replica that fails (a storage error, a broken invariant) is reported `dead` and opened
 * again after a backoff (1 s, doubling up to a minute), since the cause may clear (a full disk that was freed); the
 * broker keeps serving its other partitions meanwhile. A replica whose storage cannot even be opened is retried the
 * same way and reported `dead` until it opens. The backoff keeps growing across restarts until a replica has run a
 * whole longest backoff without failing, so a cause that persists is not retried (and logged) every second.
 */
import type { Logger } from "pino";
import { monotonicNowMs } from "../../time/monotonic.js";
import type { Member } from "../raft/index.js";
import { PartitionReplica, type PartitionReplicaOptions } from "./partition-replica.js";
import type { ReplicaReport } from "./protocol.js";

/** The report of a hosted partition whose replica does not run: not open yet (`unhealthy`), or failed (`dead`). */
export function inactiveReplicaReport(partitionId: number, health: "unhealthy" | "dead"): ReplicaReport {
  return {
    partitionId,
    role: "inactive",
    health,
    term: 0,
    commitIndex: 0,
    appliedIndex: 0,
    leaderId: null,
    logSizeEntries: 0,
  };
}

/** What the host needs to open a replica beyond its partition id and bootstrap. */
export type ReplicaFactory = (
  partitionId: number,
  bootstrap: readonly Member[] | null,
  onFailure: (error: Error) => void,
) => PartitionReplicaOptions;

/** Options of a ReplicaHost. */
export interface ReplicaHostOptions {
  readonly replicaOptions: ReplicaFactory;
  readonly logger: Logger;
  /** First pause before a failed replica is opened again; it doubles up to `maxRestartBackoffMs`. */
  readonly restartBackoffMs: number;
  readonly maxRestartBackoffMs: number;
  /**
   * Runs before a dead replica is opened again (or opened to delete its data); a rejection fails that attempt,
   * which is retried after the backoff. The broker reopens its storage here when the storage itself failed.
   */
  readonly beforeRestart?: () => Promise<void>;
}

/** How often a partition's replica failed lately, for its restart backoff. */
interface RestartHistory {
  /** Failures since the replica last ran a whole `maxRestartBackoffMs` without failing. */
  failures: number;
  /** When the replica last opened, or null while it is dead. */
  openedAtMs: number | null;
}

/** A partition whose replica is down and waits to be opened again. */
interface DeadReplica {
  readonly partitionId: number;
  readonly bootstrap: readonly Member[] | null;
  readonly error: Error;
  attempts: number;
  timer: NodeJS.Timeout | null;
  /** Whether the broker's storage cannot be opened at all (nothing to retry, nothing to delete). */
  readonly unopenable: boolean;
}

/** The replicas of one broker; see the module comment. */
export class ReplicaHost {
  private readonly replicas = new Map<number, PartitionReplica>();
  private readonly opening = new Map<number, Promise<PartitionReplica>>();
  private readonly dead = new Map<number, DeadReplica>();
  /** The bootstrap each running replica was opened with, to open it again with the same after a failure. */
  private readonly bootstraps = new Map<number, readonly Member[] | null>();
  private readonly restartHistory = new Map<number, RestartHistory>();
  private closed = false;

  constructor(private readonly options: ReplicaHostOptions) {}

  /** The running replica of `partitionId`, if any. */
  get(partitionId: number): PartitionReplica | undefined {
    return this.replicas.get(partitionId);
  }

  /** Partition ids with a replica here: running, being opened, or dead and waiting for a restart. */
  partitionIds(): number[] {
    return [...new Set([...this.replicas.keys(), ...this.opening.keys(), ...this.dead.keys()])].sort(
      (left, right) => left - right,
    );
  }

  /** The running replicas. */
  running(): PartitionReplica[] {
    return [...this.replicas.values()];
  }

  /** Reports of every replica here, dead ones included, by ascending partition id. */
  reports(): ReplicaReport[] {
    const reports = [...this.replicas.values()].map((replica) => replica.report());
    for (const dead of this.dead.values()) reports.push(inactiveReplicaReport(dead.partitionId, "dead"));
    return reports.sort((left, right) => left.partitionId - right.partitionId);
  }

  /** Why the replica of `partitionId` is dead, or null when it is not. */
  deadReason(partitionId: number): string | null {
    return this.dead.get(partitionId)?.error.message ?? null;
  }

  /**
   * Opens the replica of `partitionId` unless it runs already (or is being opened); `bootstrap` is used only when its
   * storage is empty. Resolves with the running replica; rejects when it cannot be opened (it is then supervised as
   * dead and retried).
   */
  ensure(partitionId: number, bootstrap: readonly Member[] | null): Promise<PartitionReplica> {
    if (this.closed) return Promise.reject(new Error("the broker is closing"));
    const running = this.replicas.get(partitionId);
    if (running !== undefined) {
      // A broker restarted before its PARTITION_BOOTSTRAP wrote the group's first configuration opens the replica
      // without one, as a joiner; a brand-new partition has no leader to add it, so it would wait for good. The
      // operation, resumed, asks again with the configuration: the replica, still empty, is opened again with it.
      if (bootstrap !== null && running.membership().configuration.members.length === 0) {
        return this.reopen(partitionId, running, bootstrap);
      }
      return Promise.resolve(running);
    }
    const opening = this.opening.get(partitionId);
    if (opening !== undefined) return opening;
    const dead = this.dead.get(partitionId);
    if (dead !== undefined) return Promise.reject(dead.error);
    return this.open(partitionId, bootstrap);
  }

  /** Whether the replica of `partitionId` is dead (failed, waiting to be opened again). */
  isDead(partitionId: number): boolean {
    return this.dead.has(partitionId) && !this.replicas.has(partitionId);
  }

  /**
   * Reports the replica of `partitionId` dead without trying to open it: the broker's storage itself cannot be
   * opened (damaged), so no replica of this broker can run until an operator repairs it and restarts the broker.
   */
  reportUnopenable(partitionId: number, error: Error): void {
    this.dead.set(partitionId, { partitionId, bootstrap: null, error, attempts: 1, timer: null, unopenable: true });
  }

  /** Closes the replica of `partitionId` and deletes its data; nothing happens when there is none. */
  async remove(partitionId: number): Promise<void> {
    await this.opening.get(partitionId)?.catch(() => undefined);
    const dead = this.dead.get(partitionId);
    if (dead !== undefined) {
      if (dead.timer !== null) clearTimeout(dead.timer);
      this.dead.delete(partitionId);
      // Damaged storage cannot be opened to delete anything: its files stay for the operator, as they are.
      if (dead.unopenable) return;
      // A dead replica's storage is closed: it is opened once more, only to delete its data.
    }
    this.restartHistory.delete(partitionId);
    let replica = this.replicas.get(partitionId);
    if (replica === undefined && dead !== undefined) {
      await this.options.beforeRestart?.();
      replica = await PartitionReplica.open(this.options.replicaOptions(partitionId, null, () => {}));
    }
    if (replica === undefined) return;
    this.replicas.delete(partitionId);
    this.bootstraps.delete(partitionId);
    await replica.destroy();
    this.options.logger.info({ partitionId }, "replica removed and its data deleted");
  }

  /**
   * Stops every running replica because of `error` (their storage failed under them): each is reported dead and
   * opened again after its backoff, as after its own failure. Resolves once they are closed.
   */
  async failAll(error: Error): Promise<void> {
    const closing: Promise<unknown>[] = [];
    for (const [partitionId, replica] of [...this.replicas]) {
      this.replicas.delete(partitionId);
      this.markDead(partitionId, this.bootstraps.get(partitionId) ?? null, error);
      closing.push(replica.close());
    }
    await Promise.allSettled(closing);
  }

  /** Closes every replica (their data stays). */
  async close(): Promise<void> {
    this.closed = true;
    for (const dead of this.dead.values()) if (dead.timer !== null) clearTimeout(dead.timer);
    await Promise.allSettled([...this.opening.values()]);
    const failures: unknown[] = [];
    await Promise.all(
      [...this.replicas.values()].map(async (replica) => {
        try {
          await replica.close();
        } catch (error) {
          failures.push(error);
        }
      }),
    );
    this.replicas.clear();
    if (failures.length > 0) throw failures[0];
  }

  /** Closes a running replica (its storage keeps what it holds) and opens it again with `bootstrap`. */
  private reopen(
    partitionId: number,
    running: PartitionReplica,
    bootstrap: readonly Member[],
  ): Promise<PartitionReplica> {
    this.options.logger.info(
      { partitionId },
      "opening a replica without a configuration again, with the first configuration of its brand-new group",
    );
    this.replicas.delete(partitionId);
    // Callers meanwhile wait for the replica reopened rather than open one of their own.
    const reopened = running
      .close()
      .catch(() => undefined)
      .then(() => {
        this.opening.delete(partitionId);
        return this.open(partitionId, bootstrap);
      });
    this.opening.set(partitionId, reopened);
    return reopened;
  }

  private open(partitionId: number, bootstrap: readonly Member[] | null): Promise<PartitionReplica> {
    const opening = PartitionReplica.open(
      this.options.replicaOptions(partitionId, bootstrap, (error) => this.onFailure(partitionId, bootstrap, error)),
    ).then(
      (replica) => {
        this.opening.delete(partitionId);
        if (this.closed) {
          void replica.close();
          throw new Error("the broker is closing");
        }
        this.replicas.set(partitionId, replica);
        this.bootstraps.set(partitionId, bootstrap);
        this.dead.delete(partitionId);
        const history = this.restartHistory.get(partitionId);
        if (history !== undefined) history.openedAtMs = monotonicNowMs();
        return replica;
      },
      (error: unknown) => {
        this.opening.delete(partitionId);
        const failure = error instanceof Error ? error : new Error(String(error));
        this.options.logger.error(
          { partitionId, err: failure },
          "could not open the partition replica; it is reported dead and retried",
        );
        this.markDead(partitionId, bootstrap, failure);
        throw failure;
      },
    );
    this.opening.set(partitionId, opening);
    return opening;
  }

  /** A running replica failed: it already stopped serving; close it and schedule a restart. */
  private onFailure(partitionId: number, bootstrap: readonly Member[] | null, error: Error): void {
    this.options.logger.error({ partitionId, err: error }, "partition replica failed; it is restarted after a pause");
    const replica = this.replicas.get(partitionId);
    this.replicas.delete(partitionId);
    this.markDead(partitionId, bootstrap, error);
    if (replica !== undefined) {
      replica.close().catch((closeError: unknown) => {
        this.options.logger.warn({ partitionId, err: closeError }, "closing a failed replica failed");
      });
    }
  }

  private markDead(partitionId: number, bootstrap: readonly Member[] | null, error: Error): void {
    if (this.closed) return;
    const previous = this.dead.get(partitionId);
    if (previous?.timer !== null && previous?.timer !== undefined) clearTimeout(previous.timer);
    const history = this.restartHistory.get(partitionId) ?? { failures: 0, openedAtMs: null };
    const ranWithoutFailing =
      history.openedAtMs !== null && monotonicNowMs() - history.openedAtMs >= this.options.maxRestartBackoffMs;
    history.failures = (ranWithoutFailing ? 0 : history.failures) + 1;
    history.openedAtMs = null;
    this.restartHistory.set(partitionId, history);
    const dead: DeadReplica = {
      partitionId,
      bootstrap,
      error,
      attempts: history.failures,
      timer: null,
      unopenable: false,
    };
    const backoffMs = Math.min(
      this.options.maxRestartBackoffMs,
      this.options.restartBackoffMs * 2 ** Math.min(30, dead.attempts - 1),
    );
    dead.timer = setTimeout(() => {
      dead.timer = null;
      if (this.closed || this.dead.get(partitionId) !== dead) return;
      // It stays listed as dead until it opens, so a failure counts as one more attempt.
      const prepared = this.options.beforeRestart?.() ?? Promise.resolve();
      prepared.then(
        () => {
          // Removed (it left its partition) or closed while the storage was being prepared: nothing to open.
          if (this.closed || this.dead.get(partitionId) !== dead) return;
          this.open(partitionId, bootstrap).catch(() => {
            // Already logged and marked dead again by `open`.
          });
        },
        (prepareError: unknown) => {
          if (this.closed || this.dead.get(partitionId) !== dead) return;
          const failure = prepareError instanceof Error ? prepareError : new Error(String(prepareError));
          this.options.logger.error(
            { partitionId, err: failure },
            "could not prepare to open the partition replica again; it is retried",
          );
          this.markDead(partitionId, bootstrap, failure);
        },
      );
    }, backoffMs);
    dead.timer.unref();
    this.dead.set(partitionId, dead);
  }
}
