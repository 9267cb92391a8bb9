/**
 * What a broker does to apply each operation of a cluster change (spec/cluster-management.md, "What a broker
 * does"). Every applier is written to be run again from the start after a crash or a failed attempt: it states the
 * outcome it wants (this replica is a voter, this replica is gone) and takes only the steps still missing, so the
 * change executor can simply retry it.
 *
 * Membership changes go through the partition's leader (`partition-membership` requests, see membership.ts), which
 * makes them single-server Raft changes: a joining replica is added as a learner, caught up from the leader's log or
 * snapshot, and promoted once it has stayed within a bounded lag of the commit index; a leaving replica is removed
 * once it no longer leads, and only then stops and deletes its data.
 */
import type { Logger } from "pino";
import { monotonicNowMs } from "../../time/monotonic.js";
import { majority } from "../raft/core/quorum.js";
import { type Member, votersOf } from "../raft/index.js";
import { applyOperation, type ClusterConfiguration, type ClusterOperation, replicasOf } from "../topology/index.js";
import type { CatchUpProgress, MembershipAnswer, MembershipChange } from "./membership.js";
import type { PeerRequest, PeerResponses } from "./peer-requests.js";
import type { ReplicaHost } from "./replica-host.js";

/** What an applier needs of its broker. */
export interface ChangeContext {
  readonly nodeId: number;
  readonly logger: Logger;
  readonly heartbeatIntervalMs: number;
  readonly electionTimeoutMs: number;
  readonly replicas: ReplicaHost;
  /** The configuration this broker holds now. */
  configuration(): ClusterConfiguration;
  /** Adopts a configuration this broker produced (persisted and gossiped before it resolves). */
  merge(configuration: ClusterConfiguration): Promise<void>;
  /** Whether the broker was heard from recently (this broker always is). */
  isReachable(nodeId: number): boolean;
  requestPeer<T extends PeerRequest>(nodeId: number, request: T, timeoutMs: number): Promise<PeerResponses[T["type"]]>;
  /** Answers a peer request in this broker, as another broker's request would be answered. */
  requestLocal<T extends PeerRequest>(request: T): Promise<PeerResponses[T["type"]]>;
  /** The current time as ISO 8601 text. */
  now(): string;
}

/** What one attempt at an operation reports and listens to. */
export interface OperationRun {
  readonly signal: AbortSignal;
  /** Reports the bytes the operation has to move and has moved (operations that move data). */
  reportBytes(bytesMoved: number, bytesTotal: number): void;
}

/** An operation that can never apply as planned (e.g. it would leave a partition without a quorum); retried anyway. */
export class OperationRefusedError extends Error {
  constructor(detail: string) {
    super(detail);
    this.name = "OperationRefusedError";
  }
}

/** Longest wait for one answer of another broker. */
const PEER_REQUEST_TIMEOUT_MS = 2_000;

/**
 * How long an operation may wait without any sign of progress (the learner's match index moving, an answer
 * changing) before the attempt fails and is retried; a stalled attempt then shows its last error to the operator.
 */
const STALL_TIMEOUT_MS = 60_000;

/** Entry size assumed for estimates before a joining replica received any entry. */
const ASSUMED_ENTRY_BYTES = 256;

/**
 * How long a partition's leader holds a membership request whose change is under way before it answers with its
 * progress (see `PartitionReplica.changeMembership`): it answers at once when the change took hold, so this bounds
 * only how stale the progress shown to operators gets, and how soon a stalled change is noticed.
 */
const MEMBERSHIP_WAIT_MS = 1_000;

/** How often a joining replica reports the bytes it received while its leader holds the promotion request. */
const BYTES_REPORT_INTERVAL_MS = 250;

/** Applies `operation`, which names this broker (or, for a coordinator operation, this broker acts for it). */
export async function applyOperationHere(
  context: ChangeContext,
  operation: ClusterOperation,
  run: OperationRun,
): Promise<void> {
  switch (operation.operation) {
    case "BROKER_ADD":
      // Applied by the new broker itself once it is up and holds the configuration: being here is the proof.
      return;
    case "BROKER_REMOVE":
      if (operation.brokers === undefined) assertHostsNothing(context);
      return;
    case "PARTITION_JOIN":
      return joinPartition(context, requirePartition(operation), requirePriority(operation), run);
    case "PARTITION_LEAVE":
      return leavePartition(context, requirePartition(operation), run);
    case "PARTITION_RECONFIGURE_PRIORITY":
      await untilDone(
        context,
        requirePartition(operation),
        { type: "setPriority", member: context.nodeId, priority: requirePriority(operation) },
        run,
      );
      return;
    case "PARTITION_FORCE_RECONFIGURE":
      return forceReconfigure(context, requirePartition(operation), operation.brokers ?? [], run);
    case "PARTITION_BOOTSTRAP":
      return bootstrapPartition(context, requirePartition(operation), requirePriority(operation), run);
    case "START_PARTITION_SCALE_UP":
      // Only the routing changes (the new partitions take no requests yet): recorded when the operation completes.
      return;
    case "AWAIT_REDISTRIBUTION":
      return redistribute(context, run);
    case "AWAIT_RELOCATION":
      return relocate(context, run);
  }
}

/** The partition counts of a running scale-up: before it (base) and after it (all partitions). */
function scaleUpCounts(configuration: ClusterConfiguration): { base: number; all: number } {
  const handling = configuration.routing.requestHandling;
  if (handling.strategy === "AllPartitions") {
    // Already routed to every partition (a relocation resumed after the routing switched).
    return { base: configuration.routing.messageCorrelation.partitionCount, all: handling.partitionCount };
  }
  const all =
    handling.basePartitionCount + handling.additionalActivePartitions.length + handling.inactivePartitions.length;
  return { base: handling.basePartitionCount, all };
}

/**
 * Asks every partition's leader to take `routing` (which correlation keys it owns, whether relocation runs) until
 * each has it applied. Repeating it is harmless, so an interrupted attempt simply starts over.
 */
async function routeEveryPartition(
  context: ChangeContext,
  partitionCount: number,
  routing: { readonly correlationCount: number; readonly basePartitionCount: number; readonly relocating: boolean },
  run: OperationRun,
): Promise<void> {
  for (let partitionId = 1; partitionId <= partitionCount; partitionId += 1) {
    const deadlineMs = monotonicNowMs() + STALL_TIMEOUT_MS;
    for (;;) {
      if (run.signal.aborted) throw new Error("the operation was abandoned");
      const answer = await askPartitionLeader(context, { type: "partition-route", partitionId, ...routing });
      if (answer?.outcome === "routed") break;
      if (monotonicNowMs() > deadlineMs)
        throw new Error(`partition ${partitionId} did not take the new routing in time`);
      await pause(context.heartbeatIntervalMs * 2, run.signal);
    }
  }
}

/**
 * AWAIT_REDISTRIBUTION: every partition, old and new, learns (in its log) that correlation keys are hashed over all
 * partitions now, and that messages are being relocated; then the operation completes and the gateways route by
 * the new count. From the first step on an old partition refuses keys it no longer owns, so no message can land
 * where it does not belong while the gateways switch.
 */
async function redistribute(context: ChangeContext, run: OperationRun): Promise<void> {
  const { base, all } = scaleUpCounts(context.configuration());
  await routeEveryPartition(context, all, { correlationCount: all, basePartitionCount: base, relocating: true }, run);
}

/**
 * AWAIT_RELOCATION: every partition's leader moves the messages whose key another partition owns now, batch by
 * batch, until a full pass finds none; then every partition learns that relocation is over (a message id of a key
 * that moved is accepted again where it lives now). Reports the bytes of the messages' records as its progress.
 */
async function relocate(context: ChangeContext, run: OperationRun): Promise<void> {
  const { all } = scaleUpCounts(context.configuration());
  let movedBytes = 0;
  let lastProgressMs = monotonicNowMs();
  // Bounded by progress: a pass that moves nothing while messages remain for longer than the stall timeout fails.
  for (;;) {
    let remaining = 0;
    let remainingBytes = 0;
    const unanswered: number[] = [];
    for (let partitionId = 1; partitionId <= all; partitionId += 1) {
      if (run.signal.aborted) throw new Error("the operation was abandoned");
      const answer = await askPartitionLeader(context, { type: "partition-relocate", partitionId });
      if (answer?.outcome !== "progress") {
        // A partition that did not answer may still hold messages: the pass is not clean.
        unanswered.push(partitionId);
        continue;
      }
      movedBytes += answer.movedBytes;
      if (answer.moved > 0) lastProgressMs = monotonicNowMs();
      remaining += answer.remaining;
      remainingBytes += answer.remainingBytes;
    }
    run.reportBytes(movedBytes, movedBytes + remainingBytes);
    if (remaining === 0 && unanswered.length === 0) break;
    if (monotonicNowMs() - lastProgressMs > STALL_TIMEOUT_MS) {
      const silent = unanswered.length === 0 ? "" : `, partitions ${unanswered.join(",")} did not answer`;
      throw new Error(
        `relocation made no progress for ${STALL_TIMEOUT_MS / 1000} s; ${remaining} messages remain${silent}`,
      );
    }
    await pause(context.heartbeatIntervalMs, run.signal);
  }
  await routeEveryPartition(context, all, { correlationCount: all, basePartitionCount: all, relocating: false }, run);
}

function requirePartition(operation: ClusterOperation): number {
  if (operation.partitionId === undefined) {
    throw new Error(`invariant violated: ${operation.operation} without a partition id`);
  }
  return operation.partitionId;
}

function requirePriority(operation: ClusterOperation): number {
  if (operation.priority === undefined)
    throw new Error(`invariant violated: ${operation.operation} without a priority`);
  return operation.priority;
}

function assertHostsNothing(context: ChangeContext): void {
  const hosted = context.replicas.partitionIds();
  if (hosted.length > 0) {
    throw new OperationRefusedError(
      `broker ${context.nodeId} still hosts partitions ${hosted.join(", ")}; it can leave only once they moved away`,
    );
  }
}

/**
 * PARTITION_JOIN: a replica without data (it neither votes nor campaigns until it knows the membership) asks the
 * leader to add it as a learner, catches up, and asks to be promoted until the leader agrees.
 */
async function joinPartition(
  context: ChangeContext,
  partitionId: number,
  priority: number,
  run: OperationRun,
): Promise<void> {
  // A replica that fails here (its disk full, say) is restarted by the replica host after a pause, which the leader
  // waiting for it cannot tell from a slow learner: the attempt fails at once with the reason, so operators see it in
  // the monitoring response rather than a stall, and the retry waits for the restarted replica.
  const failed = (reason: string): string =>
    `the replica of partition ${partitionId} on broker ${context.nodeId} failed: ${reason}`;
  await context.replicas.ensure(partitionId, null).catch((error: unknown) => {
    throw new Error(failed(error instanceof Error ? error.message : String(error)), { cause: error });
  });
  const localFailure = (): string | null =>
    context.replicas.isDead(partitionId) ? failed(context.replicas.deadReason(partitionId) ?? "unknown") : null;
  await untilDone(context, partitionId, { type: "addLearner", member: context.nodeId, priority }, run, {
    localFailure,
  });
  // Read from the replica running now: a restarted one is a new object that resumes what its storage holds.
  const receivedBytes = (): number => context.replicas.get(partitionId)?.membership().receivedBytes ?? 0;
  let bytesTotal = 0;
  const report = (): void => {
    const received = receivedBytes();
    bytesTotal = Math.max(bytesTotal, received);
    run.reportBytes(received, bytesTotal);
  };
  // The leader holds the promotion request while the learner catches up, so the bytes arriving here are reported
  // on a timer of their own rather than with each answer.
  const reporter = setInterval(report, BYTES_REPORT_INTERVAL_MS);
  try {
    await untilDone(context, partitionId, { type: "promote", member: context.nodeId }, run, {
      onCatchUp: (catchUp) => {
        const appliedIndex = context.replicas.get(partitionId)?.report().appliedIndex ?? 0;
        bytesTotal = Math.max(bytesTotal, estimatedBytesToMove(catchUp, appliedIndex));
        report();
      },
      // While a snapshot streams in, the leader's view of the learner (its match index) stands still for as long as
      // the transfer takes; the bytes arriving here are the progress that keeps the attempt alive.
      localProgress: receivedBytes,
      localFailure,
    });
  } finally {
    clearInterval(reporter);
  }
  const received = receivedBytes();
  run.reportBytes(received, received);
}

/** What a learner has to receive: the leader's snapshot when it is behind it, then the log up to the commit index. */
function estimatedBytesToMove(catchUp: CatchUpProgress, appliedIndex: number): number {
  const needsSnapshot = appliedIndex < catchUp.snapshotIndex;
  const fromIndex = needsSnapshot ? catchUp.snapshotIndex : appliedIndex;
  return (
    (needsSnapshot ? catchUp.snapshotSizeBytes : 0) + Math.max(0, catchUp.commitIndex - fromIndex) * ASSUMED_ENTRY_BYTES
  );
}

/**
 * PARTITION_LEAVE: refused while the partition would keep fewer voters than a quorum of its replicas in the
 * change's outcome; otherwise the leader removes this replica (handing leadership over first when it leads), and
 * the replica stops and deletes its data.
 */
async function leavePartition(context: ChangeContext, partitionId: number, run: OperationRun): Promise<void> {
  const replica = context.replicas.get(partitionId);
  if (replica !== undefined) {
    const committed = replica.committedConfiguration();
    const stillMember = committed.members.some((member) => member.id === context.nodeId);
    if (stillMember) {
      const votersAfter = votersOf(committed).filter((id) => id !== context.nodeId).length;
      const targetReplicas = replicasOf(expectedOutcome(context.configuration()), partitionId).length;
      if (votersAfter === 0 || votersAfter < majority(Math.max(1, targetReplicas))) {
        throw new OperationRefusedError(
          `broker ${context.nodeId} cannot leave partition ${partitionId}: ${votersAfter} voters would remain, fewer ` +
            `than a quorum of the ${targetReplicas} replicas it is to have`,
        );
      }
    }
  }
  await untilDone(context, partitionId, { type: "remove", member: context.nodeId }, run);
  await context.replicas.remove(partitionId);
}

/** The configuration once every pending operation after the one being applied has applied (for quorum checks). */
function expectedOutcome(configuration: ClusterConfiguration): ClusterConfiguration {
  const pendingChange = configuration.pendingChange;
  if (pendingChange === null) return configuration;
  const pending = pendingChange.pending;
  let expected = configuration;
  for (let index = 0; index < pending.length; index += 1) {
    const operation = pending[index] as ClusterOperation;
    expected = applyOperation(expected, operation, pendingChange.startedAt, pending.slice(index + 1));
  }
  return expected;
}

/**
 * PARTITION_FORCE_RECONFIGURE: every retained replica takes the retained replicas as its membership without the
 * old quorum (durably, so a restart resumes it), and the operation completes once the forced membership is
 * committed. The replicas left out are fenced by the retained ones from then on.
 */
async function forceReconfigure(
  context: ChangeContext,
  partitionId: number,
  retained: readonly number[],
  run: OperationRun,
): Promise<void> {
  const configuration = context.configuration();
  const priorities = new Map(
    replicasOf(configuration, partitionId).map((replica) => [replica.brokerId, replica.priority]),
  );
  const members: Member[] = retained.map((id) => ({ id, role: "voter", priority: priorities.get(id) ?? 1 }));
  for (const brokerId of retained) {
    if (run.signal.aborted) throw new Error("the operation was abandoned");
    if (brokerId === context.nodeId) {
      const replica = await context.replicas.ensure(partitionId, null);
      await replica.forceMembership(members);
      continue;
    }
    const answer = await context.requestPeer(
      brokerId,
      { type: "partition-force", partitionId, members },
      PEER_REQUEST_TIMEOUT_MS,
    );
    if (answer.outcome !== "forced") throw new Error(`broker ${brokerId} could not be forced: ${answer.detail}`);
  }
  const replica = await context.replicas.ensure(partitionId, null);
  const deadlineMs = monotonicNowMs() + STALL_TIMEOUT_MS;
  while (!run.signal.aborted) {
    const membership = replica.committedConfiguration();
    const voters = votersOf(membership);
    if (
      !replica.membership().forced &&
      voters.length === retained.length &&
      retained.every((id) => voters.includes(id))
    ) {
      return;
    }
    if (monotonicNowMs() > deadlineMs)
      throw new Error(`the forced membership of partition ${partitionId} was not committed in time`);
    await pause(context.heartbeatIntervalMs * 2, run.signal);
  }
  throw new Error("the operation was abandoned");
}

/** PARTITION_BOOTSTRAP: the first replica of a brand-new partition, a group of one that elects itself. */
async function bootstrapPartition(
  context: ChangeContext,
  partitionId: number,
  priority: number,
  run: OperationRun,
): Promise<void> {
  const replica = await context.replicas.ensure(partitionId, [{ id: context.nodeId, role: "voter", priority }]);
  const deadlineMs = monotonicNowMs() + STALL_TIMEOUT_MS;
  while (replica.report().role !== "leader") {
    if (run.signal.aborted) throw new Error("the operation was abandoned");
    if (monotonicNowMs() > deadlineMs)
      throw new Error(`partition ${partitionId} did not elect its first leader in time`);
    await pause(context.heartbeatIntervalMs, run.signal);
  }
}

/** What `untilDone` watches on this broker besides the leader's answers. */
interface LocalWatch {
  /** Sees the leader's view of a learner catching up. */
  readonly onCatchUp?: (catchUp: CatchUpProgress) => void;
  /** A counter of this broker's own that also shows progress when it moves. */
  readonly localProgress?: () => number;
  /** Why this broker cannot take part in the change now (its replica failed), or null; a reason fails the attempt. */
  readonly localFailure?: () => string | null;
}

/**
 * Asks the partition's leader for `change` until the committed configuration shows it. The leader holds each request
 * until the change took hold or `MEMBERSHIP_WAIT_MS` passed, so every step (proposed, committed, a learner ready for
 * its promotion) is acted on when it happens; an answer that comes back sooner without the change (no leader known
 * yet, a leader handing over, a leader of an earlier version that does not wait) is asked again after two
 * heartbeats. Fails the attempt when the leader refuses, when `watch` reports a local failure, or when nothing moved
 * for `STALL_TIMEOUT_MS`.
 */
async function untilDone(
  context: ChangeContext,
  partitionId: number,
  change: MembershipChange,
  run: OperationRun,
  watch: LocalWatch = {},
): Promise<readonly Member[]> {
  const { onCatchUp, localProgress, localFailure } = watch;
  let lastSign = "";
  let lastProgressMs = monotonicNowMs();
  const retryAfterMs = context.heartbeatIntervalMs * 2;
  const failIfLocalFailed = (): void => {
    const failure = localFailure?.() ?? null;
    if (failure !== null) throw new Error(failure);
  };
  while (!run.signal.aborted) {
    failIfLocalFailed();
    const askedAtMs = monotonicNowMs();
    const answer = await askLeader(context, partitionId, change, MEMBERSHIP_WAIT_MS);
    if (answer.outcome === "done") return answer.members;
    failIfLocalFailed();
    if (answer.outcome === "refused") throw new OperationRefusedError(answer.detail);
    const sign =
      answer.outcome === "in-progress"
        ? `${answer.detail}/${answer.catchUp?.matchIndex ?? ""}/${localProgress?.() ?? ""}`
        : `${answer.outcome}/${"leaderId" in answer ? answer.leaderId : ""}/${localProgress?.() ?? ""}`;
    if (answer.outcome === "in-progress" && answer.catchUp !== undefined) onCatchUp?.(answer.catchUp);
    if (sign !== lastSign) {
      lastSign = sign;
      lastProgressMs = monotonicNowMs();
    } else if (monotonicNowMs() - lastProgressMs > STALL_TIMEOUT_MS) {
      const why = answer.outcome === "in-progress" ? answer.detail : answer.outcome;
      throw new Error(`${change.type} of broker ${change.member} on partition ${partitionId} made no progress: ${why}`);
    }
    const answeredAfterMs = monotonicNowMs() - askedAtMs;
    if (answeredAfterMs < retryAfterMs) await pause(retryAfterMs - answeredAfterMs, run.signal);
  }
  throw new Error("the operation was abandoned");
}

/** Requests a partition's leader answers (or redirects). */
type LeaderRequest = Extract<PeerRequest, { readonly partitionId: number }>;

/**
 * Sends `request` to whoever leads its partition: the leader this broker's replica follows when it knows one, else
 * each broker the configuration lists for the partition, following `not-leader` hints (this broker itself answers
 * in process). Returns the first answer that is not a redirect, or null when no leader answered (an election, a
 * leader that is down), so the caller asks again. `attempts.uncertain` is set when a candidate asked before the one
 * answering may have proposed the request anyway (no answer, or `unavailable`).
 */
export async function askPartitionLeader<T extends LeaderRequest>(
  context: ChangeContext,
  request: T,
  attempts?: { uncertain: boolean },
): Promise<PeerResponses[T["type"]] | null> {
  const partitionId = request.partitionId;
  const local = context.replicas.get(partitionId);
  const candidates: number[] = [];
  const hint = local?.report().leaderId;
  if (hint !== null && hint !== undefined) candidates.push(hint);
  for (const replica of replicasOf(context.configuration(), partitionId)) {
    if (!candidates.includes(replica.brokerId)) candidates.push(replica.brokerId);
  }
  const asked = new Set<number>();
  // Bounded: each candidate is asked at most once per call.
  for (let position = 0; position < candidates.length; position += 1) {
    const candidate = candidates[position] as number;
    if (asked.has(candidate)) continue;
    asked.add(candidate);
    let answer: PeerResponses[T["type"]];
    // A leader may hold a membership request for its `waitMs` before it answers.
    const timeoutMs = PEER_REQUEST_TIMEOUT_MS + ("waitMs" in request ? (request.waitMs ?? 0) : 0);
    try {
      answer =
        candidate === context.nodeId
          ? await context.requestLocal(request)
          : await context.requestPeer(candidate, request, timeoutMs);
    } catch {
      // No answer: the candidate may still have proposed what it was asked.
      if (attempts !== undefined) attempts.uncertain = true;
      continue;
    }
    const outcome = (answer as { outcome: string }).outcome;
    if (outcome === "not-leader") {
      const leaderId = (answer as { leaderId: number | null }).leaderId;
      if (leaderId !== null && !asked.has(leaderId)) candidates.splice(position + 1, 0, leaderId);
      continue;
    }
    if (outcome === "unavailable") {
      // Among its reasons: a proposal whose fate the candidate lost track of (it was appended, then the leadership
      // changed), which may still commit.
      if (attempts !== undefined) attempts.uncertain = true;
      continue;
    }
    return answer;
  }
  return null;
}

/**
 * `askPartitionLeader` for a membership change; `in-progress` when no leader answered yet. With `waitMs`, the leader
 * holds the request until the change took hold or `waitMs` passed.
 */
export async function askLeader(
  context: ChangeContext,
  partitionId: number,
  change: MembershipChange,
  waitMs = 0,
): Promise<MembershipAnswer> {
  const request = { type: "partition-membership", partitionId, change, ...(waitMs > 0 ? { waitMs } : {}) } as const;
  const answer = await askPartitionLeader(context, request);
  return answer ?? { outcome: "in-progress", detail: `no leader of partition ${partitionId} answered yet` };
}

/** Waits `durationMs`, or less when `signal` aborts. */
export function pause(durationMs: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) {
      resolve();
      return;
    }
    const onAbort = (): void => {
      clearTimeout(timer);
      resolve();
    };
    const timer = setTimeout(() => {
      signal.removeEventListener("abort", onAbort);
      resolve();
    }, durationMs);
    signal.addEventListener("abort", onAbort, { once: true });
  });
}
