/**
 * Applies the operations of cluster changes that fall to this broker, one at a time, in the order of the plan.
 *
 * The running change is part of the cluster configuration every broker holds and gossips. Whenever the configuration
 * changes (and on a timer), the executor looks at the change's next pending operation: when it names this broker (or
 * it is a coordinator operation and this broker acts as coordinator), it records the operation's transitional state,
 * applies it (operations.ts), and records its completion, which moves the change on to the next broker. A failing
 * attempt is retried with backoff, its last error kept for the monitoring response. A broker that restarts finds the
 * operation still pending and simply applies it again: every applier resumes from whatever state it finds.
 *
 * When nothing falls to it, the executor settles what a change left behind on this broker: a transitional state a
 * cancelled change never completed (a replica JOINING or LEAVING, a broker JOINING or LEAVING) and replicas this broker
 * runs but no longer hosts (a forced reconfiguration left them out, or a cancel decided on a view that had not yet
 * seen this broker's join replaced the configuration that recorded it). Each is settled from what the partition's
 * group says, never by guessing: a replica the configuration lists stays if the group counts it as a voter; one it
 * does not list is deleted only once its group no longer counts it, so no group keeps a voter that no broker hosts.
 */
import { isDeepStrictEqual } from "node:util";
import type { Logger } from "pino";
import { monotonicNowMs } from "../../time/monotonic.js";
import {
  beginOperation,
  type ClusterConfiguration,
  type ClusterOperation,
  completeOperation,
  describeOperation,
  operationInProgress,
  withBrokerState,
  withoutReplica,
  withReplicaState,
} from "../topology/index.js";
import { applyOperationHere, askLeader, type ChangeContext, type OperationRun, pause } from "./operations.js";
import type { OperationProgress, OperationView } from "./protocol.js";

/** Options of a ChangeExecutor. */
export interface ChangeExecutorOptions {
  /** How often the executor looks at the configuration when nothing told it to. */
  readonly pollIntervalMs: number;
  /** First pause after a failed attempt; it doubles up to `maxRetryBackoffMs`. */
  readonly retryBackoffMs: number;
  readonly maxRetryBackoffMs: number;
  /** Called when an operation this broker applied completed, with how long it took (for metrics). */
  readonly onOperationCompleted?: (operation: ClusterOperation, durationMs: number) => void;
}

/** Operations the coordinator applies; when it is gone, the next broker acting as coordinator applies them. */
const COORDINATOR_OPERATIONS = new Set(["START_PARTITION_SCALE_UP", "AWAIT_REDISTRIBUTION", "AWAIT_RELOCATION"]);

/** The operation being applied here and what the monitoring response shows of it. */
interface RunningOperation {
  readonly changeId: number;
  readonly operation: ClusterOperation;
  readonly controller: AbortController;
  /** When it started, as shown to operators (ISO 8601, the wall clock). */
  readonly startedAt: string;
  /** When it started on the monotonic clock, for its duration. */
  readonly startedAtMs: number;
  attempts: number;
  lastError: string | null;
  bytesTotal: number | null;
  bytesMoved: number | null;
  /** Bytes per millisecond, smoothed, for the estimate of the time left. */
  rateBytesPerMs: number | null;
  /** The monotonic time of the last sample. */
  lastSampleMs: number;
  lastSampleBytes: number;
  /** The monotonic time bytes last moved. */
  lastMovedMs: number;
}

/**
 * How long the bytes may stand still before the operation shows no estimate of its time left. Why: the smoothed
 * rate only shrinks while nothing moves, so a join stalled on a slow link showed 4,609 s left, then 2.4e25 s.
 */
const ESTIMATE_STALL_MS = 5_000;

/**
 * The seconds an operation moving bytes has left at `nowMs` (monotonic), from its smoothed rate, or null when it
 * cannot tell: no rate yet, nothing moved for `ESTIMATE_STALL_MS`, or every byte known moved while it goes on (a
 * learner behind a leader whose log grows as fast as it catches up showed 0 s left for 51 s).
 */
export function estimateSecondsLeft(
  bytes: {
    readonly bytesTotal: number | null;
    readonly bytesMoved: number | null;
    readonly rateBytesPerMs: number | null;
    readonly lastMovedMs: number;
  },
  nowMs: number,
): number | null {
  const { bytesTotal, bytesMoved, rateBytesPerMs, lastMovedMs } = bytes;
  if (bytesTotal === null || bytesMoved === null || rateBytesPerMs === null || rateBytesPerMs <= 0) return null;
  const left = bytesTotal - bytesMoved;
  if (left <= 0 || nowMs - lastMovedMs >= ESTIMATE_STALL_MS) return null;
  return Math.round(left / rateBytesPerMs / 1000);
}

/** The operation as the management API shows it (the spec's operation entry). */
export function operationView(operation: ClusterOperation): OperationView {
  return {
    operation: operation.operation,
    brokerId: operation.brokerId,
    ...(operation.partitionId === undefined ? {} : { partitionId: operation.partitionId }),
    ...(operation.priority === undefined ? {} : { priority: operation.priority }),
    ...(operation.brokers === undefined ? {} : { brokers: [...operation.brokers] }),
  };
}

/**
 * The broker that acts as coordinator: the lowest member id among the members this broker hears from (itself
 * included). While the lowest-id broker runs, it is the coordinator; when it is gone, the next one takes over.
 */
export function actingCoordinator(
  configuration: ClusterConfiguration,
  isReachable: (brokerId: number) => boolean,
): number | null {
  const ids = [...configuration.members.entries()]
    .filter(([, member]) => member.state !== "LEFT")
    .map(([brokerId]) => brokerId)
    .sort((left, right) => left - right);
  return ids.find((brokerId) => isReachable(brokerId)) ?? null;
}

/** See the module comment. */
export class ChangeExecutor {
  private running: RunningOperation | null = null;
  private evaluating = false;
  private evaluateAgain = false;
  private timer: NodeJS.Timeout | null = null;
  private closed = false;
  private readonly logger: Logger;
  /** Partitions whose replica lost its data and was removed from its group since this broker started. */
  private readonly removedAfterDataLoss = new Set<number>();
  /** Partitions whose replica the configuration no longer lists but its group cannot lose (logged once each). */
  private readonly keptUnlisted = new Set<number>();

  constructor(
    private readonly context: ChangeContext,
    private readonly options: ChangeExecutorOptions,
  ) {
    this.logger = context.logger.child({ component: "change-executor" });
  }

  /** Starts looking at the configuration periodically. */
  start(): void {
    this.timer = setInterval(() => this.kick(), this.options.pollIntervalMs);
    this.timer.unref();
    this.kick();
  }

  /** Looks at the configuration now (call it whenever the configuration changed). */
  kick(): void {
    if (this.closed) return;
    if (this.evaluating) {
      this.evaluateAgain = true;
      return;
    }
    this.evaluating = true;
    void this.evaluate()
      .catch((error: unknown) => this.logger.warn({ err: error }, "settling the cluster change failed; retrying"))
      .finally(() => {
        this.evaluating = false;
        if (this.evaluateAgain) {
          this.evaluateAgain = false;
          this.kick();
        }
      });
  }

  /** The operation this broker is applying, for the monitoring response; null when none. */
  progress(): OperationProgress | null {
    const running = this.running;
    if (running === null) return null;
    const estimatedSecondsLeft = estimateSecondsLeft(running, monotonicNowMs());
    return {
      changeId: running.changeId,
      operation: operationView(running.operation),
      startedAt: running.startedAt,
      attempts: running.attempts,
      lastError: running.lastError,
      bytesTotal: running.bytesTotal,
      bytesMoved: running.bytesMoved,
      estimatedSecondsLeft,
    };
  }

  /** Stops: the running operation is abandoned (a restart resumes it). */
  async close(): Promise<void> {
    this.closed = true;
    if (this.timer !== null) clearInterval(this.timer);
    this.running?.controller.abort();
    // Bounded: the attempt stops at its next step once aborted.
    for (let waited = 0; (this.running !== null || this.evaluating) && waited < 100; waited += 1) {
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }

  private async evaluate(): Promise<void> {
    const configuration = this.context.configuration();
    const operation = operationInProgress(configuration);
    const running = this.running;
    if (running !== null) {
      if (!this.isCurrent(configuration, running.changeId, running.operation)) running.controller.abort();
      return;
    }
    if (operation !== null && this.appliesHere(configuration, operation)) {
      void this.apply((configuration.pendingChange as { id: number }).id, operation);
      return;
    }
    await this.settle(configuration, operation);
  }

  private isCurrent(configuration: ClusterConfiguration, changeId: number, operation: ClusterOperation): boolean {
    const pendingChange = configuration.pendingChange;
    return (
      pendingChange !== null && pendingChange.id === changeId && isDeepStrictEqual(pendingChange.pending[0], operation)
    );
  }

  private appliesHere(configuration: ClusterConfiguration, operation: ClusterOperation): boolean {
    const coordinatorOperation =
      COORDINATOR_OPERATIONS.has(operation.operation) ||
      (operation.operation === "BROKER_REMOVE" && operation.brokers !== undefined);
    if (!coordinatorOperation) return operation.brokerId === this.context.nodeId;
    // The coordinator named in the plan applies it while it runs; when it is gone, whoever acts as coordinator does.
    if (operation.brokerId === this.context.nodeId) return true;
    if (this.context.isReachable(operation.brokerId)) return false;
    return actingCoordinator(configuration, (brokerId) => this.context.isReachable(brokerId)) === this.context.nodeId;
  }

  /** Applies one operation until it completes or the change moves on without it (cancelled, or done elsewhere). */
  private async apply(changeId: number, operation: ClusterOperation): Promise<void> {
    const controller = new AbortController();
    const running: RunningOperation = {
      changeId,
      operation,
      controller,
      startedAt: new Date().toISOString(),
      startedAtMs: monotonicNowMs(),
      attempts: 0,
      lastError: null,
      bytesTotal: null,
      bytesMoved: null,
      rateBytesPerMs: null,
      lastSampleMs: monotonicNowMs(),
      lastSampleBytes: 0,
      lastMovedMs: monotonicNowMs(),
    };
    this.running = running;
    const description = describeOperation(operation);
    this.logger.info({ changeId, operation: description }, "applying an operation of a cluster change");
    const run: OperationRun = {
      signal: controller.signal,
      reportBytes: (bytesMoved, bytesTotal) => this.sampleBytes(running, bytesMoved, bytesTotal),
    };
    try {
      // Bounded by the change: every attempt ends in completion, in the change moving on, or in a retry.
      for (;;) {
        if (controller.signal.aborted || this.closed) return;
        try {
          const current = this.context.configuration();
          if (!this.isCurrent(current, changeId, operation)) return;
          // Counted before the begin, which can fail too (a precondition, a full disk), so the pause grows with it.
          running.attempts += 1;
          const begun = beginOperation(current, this.context.now());
          if (begun !== current) await this.context.merge(begun);
          await applyOperationHere(this.context, operation, run);
          const latest = this.context.configuration();
          if (!this.isCurrent(latest, changeId, operation)) return;
          await this.context.merge(completeOperation(latest, this.context.now()));
          const durationMs = monotonicNowMs() - running.startedAtMs;
          this.options.onOperationCompleted?.(operation, durationMs);
          this.logger.info({ changeId, operation: description, durationMs }, "operation of a cluster change completed");
          return;
        } catch (error) {
          if (controller.signal.aborted || this.closed) return;
          running.lastError = error instanceof Error ? error.message : String(error);
          const backoffMs = Math.min(
            this.options.maxRetryBackoffMs,
            this.options.retryBackoffMs * 2 ** Math.min(20, running.attempts - 1),
          );
          this.logger.warn(
            { changeId, operation: description, attempts: running.attempts, backoffMs, error: running.lastError },
            "an operation of a cluster change failed; retrying after a pause",
          );
          await pause(backoffMs, controller.signal);
        }
      }
    } finally {
      if (this.running === running) this.running = null;
      this.kick();
    }
  }

  private sampleBytes(running: RunningOperation, bytesMoved: number, bytesTotal: number): void {
    const nowMs = monotonicNowMs();
    const elapsedMs = nowMs - running.lastSampleMs;
    if (elapsedMs >= 200) {
      const rate = Math.max(0, bytesMoved - running.lastSampleBytes) / elapsedMs;
      // Smoothed so one slow or fast interval does not swing the estimate.
      running.rateBytesPerMs = running.rateBytesPerMs === null ? rate : 0.7 * running.rateBytesPerMs + 0.3 * rate;
      running.lastSampleMs = nowMs;
      running.lastSampleBytes = bytesMoved;
    }
    if (bytesMoved > (running.bytesMoved ?? 0)) running.lastMovedMs = nowMs;
    running.bytesMoved = bytesMoved;
    running.bytesTotal = bytesTotal;
  }

  /**
   * Settles this broker's own entry and replicas when no operation falls to it (see the module comment). One step
   * at a time: each edit is merged (and gossiped), and the next evaluation continues from there.
   */
  private async settle(configuration: ClusterConfiguration, operation: ClusterOperation | null): Promise<void> {
    const nodeId = this.context.nodeId;
    const replicas = this.context.replicas;
    const member = configuration.members.get(nodeId);
    const concernsMe = operation !== null && (operation.brokerId === nodeId || operation.brokers?.includes(nodeId));
    if (member === undefined) {
      // Not a member: a broker waiting to be added hosts nothing, and neither does one that was removed.
      if (!concernsMe) await this.settleUnlistedReplicas(new Set());
      return;
    }
    const now = this.context.now();
    if (!concernsMe && (member.state === "JOINING" || member.state === "LEAVING")) {
      // A change that added or removed this broker was cancelled before it completed: it stays a member.
      await this.context.merge(withBrokerState(configuration, nodeId, "ACTIVE", now));
      return;
    }
    for (const [partitionId, replica] of member.partitions) {
      const mine = concernsMe && operation?.partitionId === partitionId;
      if (mine || replica.state === "ACTIVE") continue;
      await this.settleReplica(configuration, partitionId, replica.state);
      return;
    }
    for (const [partitionId, replica] of member.partitions) {
      if (await this.settleVoter(partitionId, replica.priority)) return;
    }
    const listed = new Set(member.partitions.keys());
    if (concernsMe && operation?.partitionId !== undefined) listed.add(operation.partitionId);
    if (await this.settleUnlistedReplicas(listed)) return;
    for (const partitionId of member.partitions.keys()) {
      if (replicas.partitionIds().includes(partitionId)) continue;
      await replicas.ensure(partitionId, null).catch(() => undefined);
    }
  }

  /**
   * An ACTIVE replica must be a voter of its group. One that is not is brought back, one leader request per
   * evaluation: a replica that holds no data while the configuration says it is ACTIVE lost its broker's data (a
   * replaced disk), and its leader still believes it holds what it once acknowledged, so it is first removed from
   * the group and then added as a new learner, which makes the leader replicate to it from scratch; a learner (after
   * such a removal, or a join whose promotion a restart interrupted) is promoted once caught up. Returns whether it
   * asked anything.
   *
   * The replica's own view of its group lags behind the leader's: right after a join completes, the leader has
   * committed the promotion but the append telling the joined replica may still be on its way, so the replica still
   * sees itself as a learner. Whether it lost its data is therefore decided by what it holds now, not by how it
   * opened: a joined replica also opened without data, and removing it for that would take a freshly promoted voter
   * out of its group for good after its change had completed. Nor is it promoted again when the leader's answer to
   * the (idempotent) learner request already counts it as a voter.
   */
  private async settleVoter(partitionId: number, priority: number): Promise<boolean> {
    const replica = this.context.replicas.get(partitionId);
    if (replica === undefined) return false;
    const nodeId = this.context.nodeId;
    const role = replica.committedConfiguration().members.find((candidate) => candidate.id === nodeId)?.role;
    // Its own view of its group can be stale for good: a voter the leader removed (a cancelled join that was rolled
    // back while the replica's promotion reached it, and then kept as a voter by that view) never hears of its
    // removal, and hears no leader either. So a voter that hears no leader asks the leader whether the group still
    // counts it, and is added again if not; a healthy voter is left alone.
    if (role === "voter" && replica.report().health === "healthy") return false;
    if (role !== "voter" && replica.holdsNoData && !this.removedAfterDataLoss.has(partitionId)) {
      const removed = await askLeader(this.context, partitionId, { type: "remove", member: nodeId });
      if (removed.outcome === "done") {
        this.logger.warn({ partitionId }, "this replica lost its data: removed from its group, to join it anew");
        this.removedAfterDataLoss.add(partitionId);
      }
      return true;
    }
    const added = await askLeader(this.context, partitionId, { type: "addLearner", member: nodeId, priority });
    if (added.outcome !== "done") return true;
    // The leader's answer shows its view: a voter there is only waiting for its own view to catch up, not promoted.
    if (added.members.some((member) => member.id === nodeId && member.role === "voter")) return true;
    const promoted = await askLeader(this.context, partitionId, { type: "promote", member: nodeId });
    if (promoted.outcome === "done") this.logger.info({ partitionId }, "this replica was promoted to a voter again");
    return true;
  }

  /**
   * The replicas this broker runs outside `listed`, which the configuration does not give it. Each is deleted once the
   * partition's leader answers that its group does not count it (a replica a forced reconfiguration left out), after
   * asking the leader to remove it when the group does (a voter whose join a stale cancel erased from the
   * configuration: deleting it outright would leave its group a voter short for good, a group of two unable to
   * commit). A replica the group cannot lose, its only voter, is kept with its data. One leader request per
   * evaluation; returns whether it asked one, so the caller waits for the next evaluation.
   */
  private async settleUnlistedReplicas(listed: ReadonlySet<number>): Promise<boolean> {
    for (const partitionId of this.context.replicas.partitionIds()) {
      if (listed.has(partitionId)) continue;
      const answer = await askLeader(this.context, partitionId, { type: "remove", member: this.context.nodeId });
      if (answer.outcome === "refused") {
        if (!this.keptUnlisted.has(partitionId)) {
          this.keptUnlisted.add(partitionId);
          this.logger.error(
            { partitionId, reason: answer.detail },
            "keeping a replica the configuration no longer gives this broker: its group cannot do without it",
          );
        }
        continue;
      }
      if (answer.outcome === "done") {
        this.logger.warn(
          { partitionId },
          "deleting a replica this broker no longer hosts: its group no longer counts it",
        );
        await this.context.replicas.remove(partitionId);
        this.keptUnlisted.delete(partitionId);
      }
      return true;
    }
    return false;
  }

  /** A replica left JOINING, LEAVING or BOOTSTRAPPING by a cancelled change: kept if its group counts it, else deleted. */
  private async settleReplica(
    configuration: ClusterConfiguration,
    partitionId: number,
    state: "JOINING" | "LEAVING" | "BOOTSTRAPPING",
  ): Promise<void> {
    const nodeId = this.context.nodeId;
    const replica = this.context.replicas.get(partitionId);
    const committed = replica?.committedConfiguration();
    const role = committed?.members.find((candidate) => candidate.id === nodeId)?.role;
    const keep =
      state === "BOOTSTRAPPING" ? replica !== undefined && replica.report().leaderId !== null : role === "voter";
    const now = this.context.now();
    if (keep) {
      this.logger.info({ partitionId, state }, "a cancelled change left this replica in its group: it stays ACTIVE");
      await this.context.merge(withReplicaState(configuration, nodeId, partitionId, "ACTIVE", now));
      return;
    }
    if (state !== "BOOTSTRAPPING") {
      // Before its data goes, the group must not list it (a learner the leader added, or a voter whose removal was
      // cut short): otherwise the group would keep a member no broker hosts. One request per evaluation.
      const answer = await askLeader(this.context, partitionId, { type: "remove", member: nodeId });
      if (answer.outcome !== "done") return;
    }
    this.logger.info({ partitionId, state }, "a cancelled change left this replica outside its group: deleting it");
    await this.context.replicas.remove(partitionId);
    await this.context.merge(withoutReplica(configuration, nodeId, partitionId, now));
  }
}
