/**
 * The planner of spec/cluster-management.md ("The planner"): turns a scaling request into the ordered operations of
 * a change, validates the request, translates the management API's bodies into requests, checks that the brokers
 * that must act are reachable, and simulates a plan against the configuration. Pure: no IO, clocks or randomness;
 * time comes in as ISO text and reachability as a set of broker ids.
 *
 * Every refusal is a `PlanningError` whose `problems` each name the rule that was broken; the management API
 * answers it with a 400 problem document. A pending change is not the planner's concern: the caller answers it with
 * a 409 before planning (and `startChange` refuses it anyway).
 */
import { applyChange, describeOperation, OperationError } from "./change.js";
import type { ClusterConfiguration, ClusterOperation } from "./configuration.js";
import {
  MAX_BROKER_ID,
  MAX_PARTITION_COUNT,
  type ReplicaAssignment,
  replicaCountProblem,
  roundRobinReplicas,
} from "./distribution.js";

/** Thrown for every request the planner refuses; each problem names the rule and becomes part of a 400 answer. */
export class PlanningError extends Error {
  constructor(readonly problems: readonly string[]) {
    super(`the request cannot be planned: ${problems.join("; ")}`);
    this.name = "PlanningError";
  }
}

/** A scaling request: all brokers of the final cluster, and optionally a new replication factor and partition count. */
export interface ScaleRequest {
  readonly brokers: readonly number[];
  readonly replicationFactor?: number;
  readonly partitionCount?: number;
}

/** A validated scaling request with its defaults resolved; the input of `computeScalePlan`. */
export interface ResolvedScaleRequest {
  /** Distinct, ascending. */
  readonly brokers: readonly number[];
  readonly replicationFactor: number;
  /** At least today's partition count. */
  readonly partitionCount: number;
}

/** What the management API asked for, once its body and query are translated. */
export type PlanRequest =
  | { readonly kind: "scale"; readonly request: ScaleRequest }
  | { readonly kind: "forcedRemoval"; readonly retainedBrokers: readonly number[] };

/** Options of `translatePatch` (the query of `PATCH /actuator/cluster` and the broker's configuration). */
export interface PatchOptions {
  readonly force: boolean;
  /** `service.broker.experimental.features.enablePartitionScaling`. */
  readonly partitionScalingEnabled: boolean;
}

/** Options of `translateBrokersRequest` (the query of `POST /actuator/cluster/brokers`). */
export interface BrokersRequestOptions {
  readonly force: boolean;
  readonly replicationFactor?: number;
}

/** Input of the reachability check. */
export interface ReachabilityOptions {
  /** Brokers that are running and answer (from the coordinator's view of the cluster). */
  readonly reachableBrokers: ReadonlySet<number>;
  readonly force: boolean;
}

/** One replica as the planner sees the current configuration. */
interface CurrentReplica {
  readonly brokerId: number;
  readonly priority: number;
}

/** The current configuration indexed for planning. */
interface PlanningView {
  /** Members that have not LEFT, ascending. */
  readonly memberIds: readonly number[];
  /** Their ids as a set. */
  readonly members: ReadonlySet<number>;
  /** Members in state ACTIVE. */
  readonly activeMembers: ReadonlySet<number>;
  /** Partition id → its replicas by ascending broker id. */
  readonly replicas: ReadonlyMap<number, readonly CurrentReplica[]>;
  /** Hosted partition ids, ascending. */
  readonly partitionIds: readonly number[];
}

function ascending(left: number, right: number): number {
  return left - right;
}

function isNonNegativeInteger(value: unknown): value is number {
  return Number.isSafeInteger(value) && (value as number) >= 0;
}

function isPositiveInteger(value: unknown): value is number {
  return Number.isSafeInteger(value) && (value as number) >= 1;
}

/** Longest text of a value a problem quotes: a request's value is echoed, so a long one is cut. */
const MAX_SHOWN_CHARACTERS = 40;

function show(value: unknown): string {
  const text = typeof value === "string" ? JSON.stringify(value) : String(value);
  return text.length > MAX_SHOWN_CHARACTERS
    ? `${text.slice(0, MAX_SHOWN_CHARACTERS)}… (${text.length} characters)`
    : text;
}

/** The problem with a broker id, or null: not a non-negative integer, or over `MAX_BROKER_ID`. */
function brokerIdProblem(brokerId: unknown): string | null {
  // A JSON number too large to be exact (it arrives rounded) is still an integer over the maximum.
  if (typeof brokerId === "number" && Number.isInteger(brokerId) && brokerId > MAX_BROKER_ID) {
    return `broker id ${Number.isSafeInteger(brokerId) ? brokerId : show(brokerId)} is over the maximum ${MAX_BROKER_ID}`;
  }
  if (!isNonNegativeInteger(brokerId)) return `broker id ${show(brokerId)} is not a non-negative integer`;
  if (brokerId > MAX_BROKER_ID) return `broker id ${brokerId} is over the maximum ${MAX_BROKER_ID}`;
  return null;
}

function viewOf(configuration: ClusterConfiguration): PlanningView {
  const memberIds = [...configuration.members.keys()]
    .filter((brokerId) => configuration.members.get(brokerId)!.state !== "LEFT")
    .sort(ascending);
  const activeMembers = new Set<number>();
  const replicas = new Map<number, CurrentReplica[]>();
  for (const brokerId of memberIds) {
    const member = configuration.members.get(brokerId)!;
    if (member.state === "ACTIVE") activeMembers.add(brokerId);
    for (const [partitionId, replica] of member.partitions) {
      let list = replicas.get(partitionId);
      if (list === undefined) {
        list = [];
        replicas.set(partitionId, list);
      }
      list.push({ brokerId, priority: replica.priority });
    }
  }
  return {
    memberIds,
    members: new Set(memberIds),
    activeMembers,
    replicas,
    partitionIds: [...replicas.keys()].sort(ascending),
  };
}

/** The smallest replica count of any partition (the spec's default replication factor); 0 without partitions. */
function smallestReplicaCount(view: PlanningView): number {
  let smallest = Number.POSITIVE_INFINITY;
  for (const replicas of view.replicas.values()) smallest = Math.min(smallest, replicas.length);
  return Number.isFinite(smallest) ? smallest : 0;
}

function throwIfAny(problems: readonly string[]): void {
  if (problems.length > 0) throw new PlanningError(problems);
}

/** Problems with a list of broker ids: not an array, not non-negative integers, empty, or repeated. */
function brokerListProblems(brokers: unknown, what: string): string[] {
  if (!Array.isArray(brokers)) return [`${what} must be an array of broker ids`];
  const problems: string[] = [];
  for (const id of brokers) {
    const problem = brokerIdProblem(id);
    if (problem !== null) problems.push(problem);
  }
  if (brokers.length === 0) problems.push(`${what} is empty: a cluster needs at least one broker`);
  const seen = new Set<unknown>();
  const repeated = new Set<unknown>();
  for (const id of brokers) (seen.has(id) ? repeated : seen).add(id);
  if (repeated.size > 0) problems.push(`${what} lists broker ${[...repeated].join(", ")} more than once`);
  return problems;
}

function partitionIdProblems(partitionId: unknown): string[] {
  return isPositiveInteger(partitionId) ? [] : [`partition id ${show(partitionId)} is not a positive integer`];
}

/**
 * Validates a scaling request and resolves its defaults: the replication factor is the parameter, else the smallest
 * replica count of any partition today; the partition count is the parameter, else today's. Throws `PlanningError`
 * listing every broken rule.
 */
export function resolveScaleRequest(configuration: ClusterConfiguration, request: ScaleRequest): ResolvedScaleRequest {
  const view = viewOf(configuration);
  return resolveWithView(configuration, view, request);
}

function resolveWithView(
  configuration: ClusterConfiguration,
  view: PlanningView,
  request: ScaleRequest,
): ResolvedScaleRequest {
  const problems = brokerListProblems(request.brokers, "the broker list");
  const currentPartitionCount = view.partitionIds.at(-1) ?? 0;

  let replicationFactor = request.replicationFactor;
  if (replicationFactor !== undefined) {
    if (!isPositiveInteger(replicationFactor)) {
      problems.push(`replicationFactor must be a positive integer, got ${show(replicationFactor)}`);
    }
  } else {
    replicationFactor = smallestReplicaCount(view);
    if (replicationFactor === 0) {
      problems.push("no partition has a replica, so the replication factor cannot be derived; pass replicationFactor");
    }
  }
  if (isPositiveInteger(replicationFactor) && Array.isArray(request.brokers) && request.brokers.length > 0) {
    if (request.brokers.length < replicationFactor) {
      problems.push(
        `${request.brokers.length} broker(s) are fewer than the replication factor ${replicationFactor}: every replica of a partition needs its own broker`,
      );
    }
  }

  const partitionCount = request.partitionCount ?? currentPartitionCount;
  if (request.partitionCount !== undefined && !isPositiveInteger(request.partitionCount)) {
    problems.push(`partition count must be a positive integer, got ${show(request.partitionCount)}`);
  } else if (partitionCount < currentPartitionCount) {
    problems.push(
      `partition count ${partitionCount} is lower than today's ${currentPartitionCount}: the partition count never shrinks`,
    );
  } else if (partitionCount > MAX_PARTITION_COUNT) {
    problems.push(`partition count ${partitionCount} is over the maximum ${MAX_PARTITION_COUNT}`);
  } else if (
    partitionCount > currentPartitionCount &&
    configuration.routing.requestHandling.strategy !== "AllPartitions"
  ) {
    problems.push(
      "partitions cannot be added while the routing has not finished moving to the last partition count (strategy ActivePartitions)",
    );
  }
  // Checked before any planning, so that a request too large to plan costs nothing (a partition count over its own
  // maximum is refused for that alone).
  const tooManyReplicas = replicaCountProblem(partitionCount, replicationFactor);
  if (tooManyReplicas !== undefined) problems.push(tooManyReplicas);
  throwIfAny(problems);
  return {
    brokers: [...request.brokers].sort(ascending),
    replicationFactor: replicationFactor!,
    partitionCount,
  };
}

/** Plans a scaling request (spec "Scale request → plan"); throws `PlanningError` when the request is invalid. */
export function planScale(configuration: ClusterConfiguration, request: ScaleRequest): ClusterOperation[] {
  const view = viewOf(configuration);
  return planWithView(view, resolveWithView(configuration, view, request));
}

/**
 * The plan of an already validated request (see `resolveScaleRequest`), without any check: it works for partition
 * counts over MAX_PARTITION_COUNT, which the benchmark uses. Everything else must call `planScale`.
 */
export function computeScalePlan(
  configuration: ClusterConfiguration,
  request: ResolvedScaleRequest,
): ClusterOperation[] {
  return planWithView(viewOf(configuration), request);
}

function byBrokerId(left: ReplicaAssignment, right: ReplicaAssignment): number {
  return left.brokerId - right.brokerId;
}

function planWithView(view: PlanningView, request: ResolvedScaleRequest): ClusterOperation[] {
  const { brokers, replicationFactor, partitionCount } = request;
  const operations: ClusterOperation[] = [];

  // 1. Brokers to add. A member that is not ACTIVE (JOINING or LEAVING, left so by a cancelled change) is added
  // again: its BROKER_ADD completes what the cancelled change began, and a partition can only join ACTIVE brokers.
  for (const brokerId of brokers) {
    if (!view.activeMembers.has(brokerId)) operations.push({ operation: "BROKER_ADD", brokerId });
  }

  // 2. Existing partitions move to their round-robin target: joins first, so none drops below its replica count.
  for (const partitionId of view.partitionIds) {
    const current = view.replicas.get(partitionId)!;
    const target = roundRobinReplicas(brokers, partitionId, replicationFactor).sort(byBrokerId);
    for (const replica of target) {
      if (!current.some((existing) => existing.brokerId === replica.brokerId)) {
        operations.push({
          operation: "PARTITION_JOIN",
          brokerId: replica.brokerId,
          partitionId,
          priority: replica.priority,
        });
      }
    }
    for (const existing of current) {
      if (!target.some((replica) => replica.brokerId === existing.brokerId)) {
        operations.push({ operation: "PARTITION_LEAVE", brokerId: existing.brokerId, partitionId });
      }
    }
    for (const existing of current) {
      const replica = target.find((candidate) => candidate.brokerId === existing.brokerId);
      if (replica !== undefined && replica.priority !== existing.priority) {
        operations.push({
          operation: "PARTITION_RECONFIGURE_PRIORITY",
          brokerId: existing.brokerId,
          partitionId,
          priority: replica.priority,
        });
      }
    }
  }

  // 3. New partitions, contiguous after the highest existing one, in routing stages run by the coordinator.
  const highestPartitionId = view.partitionIds.at(-1) ?? 0;
  if (partitionCount > highestPartitionId) {
    const coordinator = view.memberIds[0];
    if (coordinator === undefined) throw new PlanningError(["the cluster has no member to coordinate the change"]);
    operations.push({ operation: "START_PARTITION_SCALE_UP", brokerId: coordinator });
    for (let partitionId = highestPartitionId + 1; partitionId <= partitionCount; partitionId += 1) {
      const [primary, ...others] = roundRobinReplicas(brokers, partitionId, replicationFactor);
      operations.push({
        operation: "PARTITION_BOOTSTRAP",
        brokerId: primary!.brokerId,
        partitionId,
        priority: primary!.priority,
      });
      for (const replica of others.sort(byBrokerId)) {
        operations.push({
          operation: "PARTITION_JOIN",
          brokerId: replica.brokerId,
          partitionId,
          priority: replica.priority,
        });
      }
    }
    operations.push({ operation: "AWAIT_REDISTRIBUTION", brokerId: coordinator });
    operations.push({ operation: "AWAIT_RELOCATION", brokerId: coordinator });
  }

  // 4. Brokers that leave; by now they host nothing.
  const target = new Set(brokers);
  for (const brokerId of view.memberIds) {
    if (!target.has(brokerId)) operations.push({ operation: "BROKER_REMOVE", brokerId });
  }
  return operations;
}

/**
 * Plans a forced removal (spec "Forced removal"): every broker not in `retainedBrokers` is removed without moving
 * its replicas, which are dropped from their partitions by PARTITION_FORCE_RECONFIGURE.
 */
export function planForcedRemoval(
  configuration: ClusterConfiguration,
  retainedBrokers: readonly number[],
): ClusterOperation[] {
  const problems = brokerListProblems(retainedBrokers, "the list of retained brokers");
  throwIfAny(problems);
  const view = viewOf(configuration);
  for (const brokerId of retainedBrokers) {
    if (!view.members.has(brokerId)) {
      problems.push(`broker ${brokerId} to retain is not a member: a forced removal cannot add brokers`);
    }
  }
  throwIfAny(problems);

  const retained = new Set(retainedBrokers);
  const operations: ClusterOperation[] = [];
  for (const partitionId of view.partitionIds) {
    const current = view.replicas.get(partitionId)!;
    const kept = current.filter((replica) => retained.has(replica.brokerId)).map((replica) => replica.brokerId);
    if (kept.length === 0) {
      problems.push(
        `a forced removal would leave partition ${partitionId} with no replica: its replicas are on brokers ${current.map((replica) => replica.brokerId).join(", ")}, none of them retained`,
      );
    } else if (kept.length < current.length) {
      operations.push({ operation: "PARTITION_FORCE_RECONFIGURE", brokerId: kept[0]!, partitionId, brokers: kept });
    }
  }
  throwIfAny(problems);
  const coordinator = Math.min(...retainedBrokers);
  for (const brokerId of view.memberIds) {
    if (!retained.has(brokerId))
      operations.push({ operation: "BROKER_REMOVE", brokerId: coordinator, brokers: [brokerId] });
  }
  return operations;
}

/** The plan of `POST /actuator/cluster/brokers/{id}`: one BROKER_ADD; refused when the broker is already a member. */
export function planAddBroker(configuration: ClusterConfiguration, brokerId: number): ClusterOperation[] {
  const problem = brokerIdProblem(brokerId);
  if (problem !== null) throw new PlanningError([problem]);
  // A JOINING or LEAVING entry left by a cancelled change may be added again; an ACTIVE member may not.
  if (configuration.members.get(brokerId)?.state === "ACTIVE") {
    throw new PlanningError([`broker ${brokerId} is already a member of the cluster`]);
  }
  return [{ operation: "BROKER_ADD", brokerId }];
}

/** The plan of `DELETE /actuator/cluster/brokers/{id}`: one BROKER_REMOVE; refused while the broker hosts partitions. */
export function planRemoveBroker(configuration: ClusterConfiguration, brokerId: number): ClusterOperation[] {
  const problem = brokerIdProblem(brokerId);
  if (problem !== null) throw new PlanningError([problem]);
  const member = configuration.members.get(brokerId);
  if (member === undefined || member.state === "LEFT") {
    throw new PlanningError([`broker ${brokerId} is not a member of the cluster`]);
  }
  if (member.partitions.size > 0) {
    const hosted = [...member.partitions.keys()].sort(ascending).join(", ");
    throw new PlanningError([
      `broker ${brokerId} still hosts partitions ${hosted}: move them away first (scale to the brokers without it)`,
    ]);
  }
  return [{ operation: "BROKER_REMOVE", brokerId }];
}

function replicaCount(configuration: ClusterConfiguration, partitionId: number): number {
  let count = 0;
  for (const member of configuration.members.values()) if (member.partitions.has(partitionId)) count += 1;
  return count;
}

/** The plan of `POST …/brokers/{b}/partitions/{p}`: one PARTITION_JOIN, validated against the configuration. */
export function planJoinPartition(
  configuration: ClusterConfiguration,
  brokerId: number,
  partitionId: number,
  priority: number,
): ClusterOperation[] {
  const problems: string[] = [];
  const brokerProblem = brokerIdProblem(brokerId);
  if (brokerProblem !== null) problems.push(brokerProblem);
  problems.push(...partitionIdProblems(partitionId));
  if (!isPositiveInteger(priority)) problems.push(`priority must be an integer ≥ 1, got ${show(priority)}`);
  throwIfAny(problems);
  const member = configuration.members.get(brokerId);
  if (member?.state !== "ACTIVE") {
    problems.push(`broker ${brokerId} is not an ACTIVE member (${member?.state ?? "not a member"})`);
  }
  if (replicaCount(configuration, partitionId) === 0) problems.push(`partition ${partitionId} does not exist`);
  else if (member?.partitions.has(partitionId))
    problems.push(`broker ${brokerId} already hosts partition ${partitionId}`);
  throwIfAny(problems);
  return [{ operation: "PARTITION_JOIN", brokerId, partitionId, priority }];
}

/** The plan of `DELETE …/brokers/{b}/partitions/{p}`: one PARTITION_LEAVE, refused for a partition's last replica. */
export function planLeavePartition(
  configuration: ClusterConfiguration,
  brokerId: number,
  partitionId: number,
): ClusterOperation[] {
  const problems: string[] = [];
  const brokerProblem = brokerIdProblem(brokerId);
  if (brokerProblem !== null) problems.push(brokerProblem);
  problems.push(...partitionIdProblems(partitionId));
  throwIfAny(problems);
  if (!configuration.members.get(brokerId)?.partitions.has(partitionId)) {
    throw new PlanningError([`broker ${brokerId} does not host partition ${partitionId}`]);
  }
  if (replicaCount(configuration, partitionId) <= 1) {
    throw new PlanningError([
      `partition ${partitionId} would be left with no replica: broker ${brokerId} hosts its only one`,
    ]);
  }
  return [{ operation: "PARTITION_LEAVE", brokerId, partitionId }];
}

/** Plans a translated request: a scale or a forced removal. */
export function planRequest(configuration: ClusterConfiguration, request: PlanRequest): ClusterOperation[] {
  return request.kind === "scale"
    ? planScale(configuration, request.request)
    : planForcedRemoval(configuration, request.retainedBrokers);
}

/**
 * The configuration once the plan has run (spec: the plan is applied to a copy before it is accepted). An empty
 * plan gives `configuration` itself. An operation that cannot apply makes the request a `PlanningError`; a pending
 * change stays an `OperationError` with rule `change-in-progress`, the 409 the caller answers before planning.
 */
export function simulatePlan(
  configuration: ClusterConfiguration,
  operations: readonly ClusterOperation[],
  nowIso: string,
): ClusterConfiguration {
  if (operations.length === 0) return configuration;
  try {
    return applyChange(configuration, operations, nowIso);
  } catch (error) {
    if (error instanceof OperationError && error.rule !== "change-in-progress" && error.rule !== "invalid-time") {
      throw new PlanningError([`the plan fails its simulation: ${error.message}`]);
    }
    throw error;
  }
}

/**
 * Problems with who must act: a broker to be added that is not running and reachable, and (unless `force`) any
 * other broker that must apply an operation but is unreachable. A forced removal acts on the brokers that are gone.
 */
export function reachabilityProblems(operations: readonly ClusterOperation[], options: ReachabilityOptions): string[] {
  const problems: string[] = [];
  const reported = new Set<number>();
  const added = new Set<number>();
  for (const operation of operations) {
    if (operation.operation !== "BROKER_ADD") continue;
    added.add(operation.brokerId);
    if (!options.reachableBrokers.has(operation.brokerId) && !reported.has(operation.brokerId)) {
      reported.add(operation.brokerId);
      problems.push(`broker ${operation.brokerId} is to be added but is not running and reachable; start it first`);
    }
  }
  if (options.force) return problems;
  for (const operation of operations) {
    const brokerId = operation.brokerId;
    if (added.has(brokerId) || reported.has(brokerId) || options.reachableBrokers.has(brokerId)) continue;
    reported.add(brokerId);
    problems.push(`broker ${brokerId} is unreachable but must apply ${describeOperation(operation)}`);
  }
  return problems;
}

/** Throws `PlanningError` when `reachabilityProblems` finds any. */
export function checkReachability(operations: readonly ClusterOperation[], options: ReachabilityOptions): void {
  throwIfAny(reachabilityProblems(operations, options));
}

/**
 * The broker ids of `POST /actuator/cluster/brokers`: a JSON array whose items are integers or strings of digits
 * ("3"). Returns them as numbers; throws `PlanningError` naming each item that is not a non-negative integer.
 */
export function normalizeBrokerIds(body: unknown): number[] {
  if (!Array.isArray(body)) throw new PlanningError(["the body must be a JSON array of broker ids"]);
  const problems: string[] = [];
  const ids: number[] = [];
  for (const [index, item] of body.entries()) {
    const id = typeof item === "string" && /^\d+$/.test(item) ? Number(item) : item;
    const problem = brokerIdProblem(id);
    if (problem === null) ids.push(id);
    // A digit string too long for an exact number is quoted as sent.
    else
      problems.push(
        `/${index}: ${typeof item === "string" && !isNonNegativeInteger(id) ? `broker id ${show(item)} is not a non-negative integer` : problem}`,
      );
  }
  throwIfAny(problems);
  problems.push(...brokerListProblems(ids, "the broker list"));
  throwIfAny(problems);
  return ids;
}

/**
 * Translates `POST /actuator/cluster/brokers` (the ids of all brokers of the final cluster) into a request. With
 * `force`, the ids are the brokers to keep: no replication factor, and no id that is not a member.
 */
export function translateBrokersRequest(
  configuration: ClusterConfiguration,
  body: unknown,
  options: BrokersRequestOptions,
): PlanRequest {
  const brokers = normalizeBrokerIds(body);
  if (!options.force) {
    return {
      kind: "scale",
      request:
        options.replicationFactor === undefined
          ? { brokers }
          : { brokers, replicationFactor: options.replicationFactor },
    };
  }
  const problems: string[] = [];
  if (options.replicationFactor !== undefined) {
    problems.push("force=true cannot be combined with replicationFactor: a forced removal does not redistribute");
  }
  const added = brokers.filter((brokerId) => !isMember(configuration, brokerId));
  if (added.length > 0) {
    problems.push(
      `force=true cannot add brokers: ${added.join(", ")} ${added.length === 1 ? "is" : "are"} not a member`,
    );
  }
  throwIfAny(problems);
  return { kind: "forcedRemoval", retainedBrokers: brokers };
}

function isMember(configuration: ClusterConfiguration, brokerId: number): boolean {
  const member = configuration.members.get(brokerId);
  return member !== undefined && member.state !== "LEFT";
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function unknownFields(value: Record<string, unknown>, allowed: readonly string[], path: string): string[] {
  return Object.keys(value)
    .filter((key) => !allowed.includes(key))
    .map((key) => `${path}/${key} is not a known field (expected ${allowed.join(", ")})`);
}

function readIds(value: unknown, path: string, problems: string[]): number[] | undefined {
  if (value === undefined) return undefined;
  if (!Array.isArray(value)) {
    problems.push(`${path} must be an array of broker ids`);
    return undefined;
  }
  const ids: number[] = [];
  for (const [index, id] of value.entries()) {
    const problem = brokerIdProblem(id);
    if (problem === null) ids.push(id);
    else problems.push(`${path}/${index}: ${problem}`);
  }
  return ids;
}

function readInteger(value: unknown, path: string, problems: string[], required: boolean): number | undefined {
  if (value === undefined) {
    if (required) problems.push(`${path} is required`);
    return undefined;
  }
  if (!Number.isSafeInteger(value)) {
    problems.push(`${path} must be an integer, got ${show(value)}`);
    return undefined;
  }
  return value as number;
}

/** The PATCH body once its shape is checked. */
interface PatchBody {
  readonly add?: readonly number[];
  readonly remove?: readonly number[];
  readonly count?: number;
  readonly partitions?: { readonly count?: number; readonly replicationFactor?: number };
}

function readPatchBody(body: unknown): PatchBody {
  if (!isObject(body)) {
    throw new PlanningError(['the body must be a JSON object { "brokers"?: {…}, "partitions"?: {…} }']);
  }
  const problems = unknownFields(body, ["brokers", "partitions"], "");
  let brokers: Pick<PatchBody, "add" | "remove" | "count"> = {};
  if (body.brokers !== undefined) {
    if (!isObject(body.brokers)) {
      problems.push('/brokers must be an object { "add"?: [int], "remove"?: [int], "count"?: int }');
    } else {
      problems.push(...unknownFields(body.brokers, ["add", "remove", "count"], "/brokers"));
      const count = readInteger(body.brokers.count, "/brokers/count", problems, false);
      if (count !== undefined && count < 0) problems.push(`/brokers/count must not be negative, got ${count}`);
      // Checked before anything is planned: the count becomes a list of that many broker ids.
      if (count !== undefined && count > MAX_BROKER_ID + 1) {
        problems.push(
          `/brokers/count ${count} is over the maximum ${MAX_BROKER_ID + 1} (broker ids 0..${MAX_BROKER_ID})`,
        );
      }
      brokers = {
        add: readIds(body.brokers.add, "/brokers/add", problems),
        remove: readIds(body.brokers.remove, "/brokers/remove", problems),
        count,
      };
    }
  }
  let partitions: PatchBody["partitions"];
  if (body.partitions !== undefined) {
    if (!isObject(body.partitions)) {
      problems.push('/partitions must be an object { "count": int, "replicationFactor": int }');
    } else {
      problems.push(...unknownFields(body.partitions, ["count", "replicationFactor"], "/partitions"));
      partitions = {
        count: readInteger(body.partitions.count, "/partitions/count", problems, true),
        replicationFactor: readInteger(
          body.partitions.replicationFactor,
          "/partitions/replicationFactor",
          problems,
          true,
        ),
      };
    }
  }
  throwIfAny(problems);
  return { ...brokers, partitions };
}

/**
 * Translates `PATCH /actuator/cluster` into a request. `brokers.count = n` means brokers 0..n-1; otherwise the
 * target is today's members plus `add` minus `remove` (adding a member again is harmless; removing a broker that is
 * not a member is refused as a likely mistake). With `force` only `brokers.remove` may be given: it becomes a
 * forced removal of those brokers.
 */
export function translatePatch(configuration: ClusterConfiguration, body: unknown, options: PatchOptions): PlanRequest {
  const patch = readPatchBody(body);
  const problems: string[] = [];
  if (patch.count !== undefined && (patch.add !== undefined || patch.remove !== undefined)) {
    problems.push("brokers.count cannot be combined with brokers.add or brokers.remove");
  }
  const removed = new Set(patch.remove ?? []);
  const both = [...new Set(patch.add ?? [])].filter((brokerId) => removed.has(brokerId)).sort(ascending);
  if (both.length > 0) problems.push(`broker ${both.join(", ")} is both in brokers.add and brokers.remove`);
  for (const brokerId of [...removed].sort(ascending)) {
    if (!isMember(configuration, brokerId)) problems.push(`broker ${brokerId} cannot be removed: it is not a member`);
  }
  if (options.force) {
    if (patch.partitions !== undefined) {
      problems.push(
        "force=true cannot be combined with partitions (replicationFactor or count): a forced removal only removes brokers",
      );
    }
    if ((patch.add ?? []).length > 0) problems.push("force=true cannot be combined with adding brokers");
    if (patch.count !== undefined) problems.push("force=true cannot be combined with brokers.count");
    throwIfAny(problems);
    const members = viewOf(configuration).memberIds;
    return { kind: "forcedRemoval", retainedBrokers: members.filter((brokerId) => !removed.has(brokerId)) };
  }

  const partitions = patch.partitions;
  if (partitions?.count !== undefined && !options.partitionScalingEnabled) {
    const currentPartitionCount = viewOf(configuration).partitionIds.at(-1) ?? 0;
    if (partitions.count > currentPartitionCount) {
      problems.push(
        "partition scaling is experimental and turned off; set SERVICE_BROKER_EXPERIMENTAL_FEATURES_ENABLE_PARTITION_SCALING=true " +
          "(or SERVICE_BROKER_EXPERIMENTAL_FEATURES_ENABLEPARTITIONSCALING=true) on every broker to enable it",
      );
    }
  }
  throwIfAny(problems);
  let brokers: number[];
  if (patch.count !== undefined) {
    brokers = Array.from({ length: patch.count }, (_, index) => index);
  } else {
    const target = new Set(viewOf(configuration).memberIds);
    for (const brokerId of patch.add ?? []) target.add(brokerId);
    for (const brokerId of removed) target.delete(brokerId);
    brokers = [...target].sort(ascending);
  }
  return {
    kind: "scale",
    request: {
      brokers,
      ...(partitions?.replicationFactor === undefined ? {} : { replicationFactor: partitions.replicationFactor }),
      ...(partitions?.count === undefined ? {} : { partitionCount: partitions.count }),
    },
  };
}
