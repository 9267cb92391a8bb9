/**
 * Applying a change to the cluster configuration, as spec/cluster-management.md ("Versions and change ids") defines
 * it. Everything here is pure: configurations are immutable values, every function returns a new value (or its
 * argument when nothing changed), and time comes in as ISO text.
 *
 * A change is a list of operations. Starting it increments the configuration version, and that new version is the
 * change id. Each operation is applied by the broker it names in two phases:
 * - `beginOperation` records the operation's transitional state (a replica JOINING, LEAVING or BOOTSTRAPPING, a
 *   broker JOINING or LEAVING), so operators see it and a broker that restarts knows it was applying it. Beginning
 *   again is a no-op, which is what a restarted broker does.
 * - `completeOperation` records the operation's final effect and moves it from `pending` to `completed`. Completing
 *   the last one increments the version again, drops LEFT brokers and records `lastChange`.
 *
 * Member versions. While a change runs the cluster version does not move, and gossip merges two configurations of
 * the same version per member by member version (see merge.ts). So every phase that changes a member's entry
 * increments that member's version exactly once and sets its `lastUpdatedAt`; a phase that changes nothing in an
 * entry leaves its version alone. Operations of the coordinator that only change the routing state (partition
 * scale-up) increment `routing.version` instead, which merge.ts compares the same way.
 *
 * Internally each call works on a `ConfigurationDraft`: member entries are copied when first changed, a partition →
 * hosts index is kept only when many operations are applied at once (`applyChange`), and the immutable result is
 * built once at the end. That keeps one operation O(brokers) and a whole plan O(brokers + replicas + operations).
 */
import {
  type BrokerState,
  type ClusterConfiguration,
  type ClusterOperation,
  type CompletedOperation,
  INITIAL_MEMBER_VERSION,
  isIsoTimestamp,
  MAX_EARLIER_CHANGES,
  type MemberState,
  type OperationType,
  type PartitionConfiguration,
  type PartitionReplica,
  type PendingChange,
  type RoutingState,
} from "./configuration.js";

/** Names of the rules an operation or a change can break; `OperationError.rule` carries one. */
export type OperationRule =
  | "change-in-progress"
  | "no-pending-change"
  | "empty-plan"
  | "malformed-operation"
  | "invalid-time"
  | "broker-not-member"
  | "broker-not-active"
  | "broker-already-member"
  | "broker-hosts-partitions"
  | "partition-unknown"
  | "partition-already-hosted"
  | "partition-not-hosted"
  | "last-replica"
  | "replica-state"
  | "routing-state"
  | "new-partitions";

/** Thrown when a change or an operation cannot apply; `rule` names the rule, the message the broker and partition. */
export class OperationError extends Error {
  constructor(
    readonly rule: OperationRule,
    message: string,
    readonly operation: ClusterOperation | null = null,
  ) {
    super(message);
    this.name = "OperationError";
  }
}

const OPERATION_TYPES: ReadonlySet<OperationType> = new Set<OperationType>([
  "BROKER_ADD",
  "BROKER_REMOVE",
  "PARTITION_JOIN",
  "PARTITION_LEAVE",
  "PARTITION_RECONFIGURE_PRIORITY",
  "PARTITION_FORCE_RECONFIGURE",
  "START_PARTITION_SCALE_UP",
  "PARTITION_BOOTSTRAP",
  "AWAIT_REDISTRIBUTION",
  "AWAIT_RELOCATION",
]);

const NEEDS_PARTITION: ReadonlySet<OperationType> = new Set<OperationType>([
  "PARTITION_JOIN",
  "PARTITION_LEAVE",
  "PARTITION_RECONFIGURE_PRIORITY",
  "PARTITION_FORCE_RECONFIGURE",
  "PARTITION_BOOTSTRAP",
]);

const NEEDS_PRIORITY: ReadonlySet<OperationType> = new Set<OperationType>([
  "PARTITION_JOIN",
  "PARTITION_RECONFIGURE_PRIORITY",
  "PARTITION_BOOTSTRAP",
]);

const NO_EXPORTERS: PartitionConfiguration = { exporting: { exporters: [] } };

function isNonNegativeInteger(value: unknown): value is number {
  return Number.isSafeInteger(value) && (value as number) >= 0;
}

function isPositiveInteger(value: unknown): value is number {
  return Number.isSafeInteger(value) && (value as number) >= 1;
}

/** The operation in words, for messages: `PARTITION_JOIN by broker 1 (partition 2, priority 1)`. */
export function describeOperation(operation: ClusterOperation): string {
  const details: string[] = [];
  if (operation.partitionId !== undefined) details.push(`partition ${operation.partitionId}`);
  if (operation.priority !== undefined) details.push(`priority ${operation.priority}`);
  if (operation.brokers !== undefined) details.push(`brokers [${operation.brokers.join(", ")}]`);
  const suffix = details.length === 0 ? "" : ` (${details.join(", ")})`;
  return `${operation.operation} by broker ${operation.brokerId}${suffix}`;
}

function refuse(rule: OperationRule, operation: ClusterOperation, reason: string): OperationError {
  return new OperationError(rule, `${describeOperation(operation)} cannot apply: ${reason} [${rule}]`, operation);
}

/** Problems with an operation's fields (not with the configuration it applies to); empty when well-formed. */
export function operationShapeProblems(operation: ClusterOperation): string[] {
  const problems: string[] = [];
  const type = operation.operation;
  if (!OPERATION_TYPES.has(type)) return [`unknown operation type ${JSON.stringify(type)}`];
  if (!isNonNegativeInteger(operation.brokerId)) {
    problems.push(`${type}: brokerId ${operation.brokerId} is not a non-negative integer`);
  }
  if (NEEDS_PARTITION.has(type) && !isPositiveInteger(operation.partitionId)) {
    problems.push(`${type}: partitionId ${operation.partitionId} is not a positive integer`);
  }
  if (NEEDS_PRIORITY.has(type) && !isPositiveInteger(operation.priority)) {
    problems.push(`${type}: priority ${operation.priority} is not an integer ≥ 1`);
  }
  const brokers = operation.brokers;
  if (brokers?.some((id) => !isNonNegativeInteger(id))) {
    problems.push(`${type}: brokers [${brokers.join(", ")}] are not all non-negative integers`);
  }
  if (type === "PARTITION_FORCE_RECONFIGURE") {
    if (brokers === undefined || brokers.length === 0) {
      problems.push(`${type}: brokers must list the retained replicas`);
    } else {
      if (!brokers.includes(operation.brokerId)) {
        problems.push(
          `${type}: broker ${operation.brokerId} must be one of the retained brokers [${brokers.join(", ")}]`,
        );
      }
      if (new Set(brokers).size !== brokers.length) problems.push(`${type}: brokers [${brokers.join(", ")}] repeat`);
    }
  }
  if (type === "BROKER_REMOVE" && brokers !== undefined) {
    // The forced form names the coordinator as the applying broker and the removed broker in `brokers`.
    if (brokers.length !== 1) {
      problems.push(`BROKER_REMOVE: brokers must name exactly one removed broker, got [${brokers.join(", ")}]`);
    } else if (brokers[0] === operation.brokerId) {
      problems.push(`BROKER_REMOVE: broker ${operation.brokerId} cannot force its own removal`);
    }
  }
  if (type === "BROKER_ADD" && brokers !== undefined && brokers.length > 0) {
    problems.push(`BROKER_ADD: brokers must be empty, got [${brokers.join(", ")}]`);
  }
  return problems;
}

function requireWellFormed(operation: ClusterOperation): void {
  const problems = operationShapeProblems(operation);
  if (problems.length > 0) throw new OperationError("malformed-operation", problems.join("; "), operation);
}

function requireTime(nowIso: string): void {
  if (typeof nowIso !== "string" || !isIsoTimestamp(nowIso)) {
    throw new OperationError("invalid-time", `${JSON.stringify(nowIso)} is not an ISO 8601 time`);
  }
}

/** A member entry being changed; becomes an immutable `MemberState` when the draft is built. */
interface MemberDraft {
  state: BrokerState;
  version: number;
  lastUpdatedAt: string;
  readonly partitions: Map<number, PartitionReplica>;
  /** Whether a partition was added, so the map must be re-sorted by id when built. */
  partitionsAdded: boolean;
}

type MemberView = MemberState | MemberDraft;

const NO_HOSTS: ReadonlySet<number> = new Set();

/**
 * Mutable working copy of a configuration's members and routing. Member entries are copied on their first change;
 * `indexHosts` builds a partition → hosting brokers index for callers that apply many operations, while a single
 * operation looks hosts up by scanning the members (O(brokers)) rather than paying for the index.
 */
class ConfigurationDraft {
  private readonly drafts = new Map<number, MemberDraft>();
  private membersAdded = false;
  private hosts: Map<number, Set<number>> | null = null;
  /** Inactive partitions of `inactiveSetRouting` as a set, so bootstrapping thousands of partitions stays linear. */
  private inactiveSet: ReadonlySet<number> = NO_HOSTS;
  private inactiveSetRouting: RoutingState | null = null;
  private replicaConfigFallback: PartitionConfiguration | null = null;
  routing: RoutingState;
  changed = false;

  constructor(
    private readonly source: ClusterConfiguration,
    private readonly nowIso: string,
  ) {
    this.routing = source.routing;
  }

  /** Builds the partition → hosts index once; afterwards every operation keeps it up to date. */
  indexHosts(): void {
    const hosts = new Map<number, Set<number>>();
    for (const brokerId of this.memberIds()) {
      for (const partitionId of this.member(brokerId)!.partitions.keys()) {
        let set = hosts.get(partitionId);
        if (set === undefined) {
          set = new Set();
          hosts.set(partitionId, set);
        }
        set.add(brokerId);
      }
    }
    this.hosts = hosts;
  }

  private *memberIds(): Iterable<number> {
    yield* this.source.members.keys();
    if (this.membersAdded) {
      for (const brokerId of this.drafts.keys()) if (!this.source.members.has(brokerId)) yield brokerId;
    }
  }

  member(brokerId: number): MemberView | undefined {
    return this.drafts.get(brokerId) ?? this.source.members.get(brokerId);
  }

  /** Brokers hosting `partitionId` in any state. */
  hostsOf(partitionId: number): ReadonlySet<number> | readonly number[] {
    if (this.hosts !== null) return this.hosts.get(partitionId) ?? NO_HOSTS;
    const hosts: number[] = [];
    for (const brokerId of this.memberIds()) {
      if (this.member(brokerId)!.partitions.has(partitionId)) hosts.push(brokerId);
    }
    return hosts;
  }

  private hostCount(partitionId: number): number {
    const hosts = this.hostsOf(partitionId);
    return hosts instanceof Set ? hosts.size : (hosts as readonly number[]).length;
  }

  /** The member's entry for changing; `bump` must follow once the phase has changed it. */
  private edit(brokerId: number): MemberDraft {
    const existing = this.drafts.get(brokerId);
    if (existing !== undefined) return existing;
    const base = this.source.members.get(brokerId);
    const draft: MemberDraft =
      base === undefined
        ? {
            state: "JOINING",
            version: INITIAL_MEMBER_VERSION,
            lastUpdatedAt: this.nowIso,
            partitions: new Map(),
            partitionsAdded: false,
          }
        : {
            state: base.state,
            version: base.version,
            lastUpdatedAt: base.lastUpdatedAt,
            partitions: new Map(base.partitions),
            partitionsAdded: false,
          };
    if (base === undefined) this.membersAdded = true;
    this.drafts.set(brokerId, draft);
    return draft;
  }

  private bump(draft: MemberDraft): void {
    draft.version += 1;
    draft.lastUpdatedAt = this.nowIso;
    this.changed = true;
  }

  private addReplica(brokerId: number, partitionId: number, replica: PartitionReplica): void {
    const draft = this.edit(brokerId);
    draft.partitions.set(partitionId, replica);
    draft.partitionsAdded = true;
    this.bump(draft);
    if (this.hosts !== null) {
      let set = this.hosts.get(partitionId);
      if (set === undefined) {
        set = new Set();
        this.hosts.set(partitionId, set);
      }
      set.add(brokerId);
    }
  }

  private setReplica(brokerId: number, partitionId: number, replica: PartitionReplica): void {
    const draft = this.edit(brokerId);
    draft.partitions.set(partitionId, replica);
    this.bump(draft);
  }

  private removeReplica(brokerId: number, partitionId: number): void {
    const draft = this.edit(brokerId);
    draft.partitions.delete(partitionId);
    this.bump(draft);
    this.hosts?.get(partitionId)?.delete(brokerId);
  }

  private setState(brokerId: number, state: BrokerState): void {
    const draft = this.edit(brokerId);
    draft.state = state;
    this.bump(draft);
  }

  private setRouting(routing: RoutingState): void {
    this.routing = routing;
    this.changed = true;
  }

  /**
   * The exporters a new replica starts with: those of another replica of the partition, else those of any replica
   * the cluster has (a brand-new partition), else none. Exporters are configured cluster-wide, so any replica's
   * configuration is the right one; the object is shared, as configurations are immutable.
   */
  private replicaConfigFor(partitionId: number): PartitionConfiguration {
    for (const brokerId of this.hostsOf(partitionId)) {
      const replica = this.member(brokerId)?.partitions.get(partitionId);
      if (replica !== undefined) return replica.config;
    }
    if (this.replicaConfigFallback === null) {
      this.replicaConfigFallback = NO_EXPORTERS;
      for (const brokerId of this.memberIds()) {
        const first = this.member(brokerId)!.partitions.values().next();
        if (!first.done) {
          this.replicaConfigFallback = first.value.config;
          break;
        }
      }
    }
    return this.replicaConfigFallback;
  }

  private inactivePartitions(): ReadonlySet<number> {
    if (this.inactiveSetRouting !== this.routing) {
      const handling = this.routing.requestHandling;
      this.inactiveSet = handling.strategy === "ActivePartitions" ? new Set(handling.inactivePartitions) : NO_HOSTS;
      this.inactiveSetRouting = this.routing;
    }
    return this.inactiveSet;
  }

  /** The member applying `operation`; refuses when it is not a member (or has LEFT). */
  private requireMember(operation: ClusterOperation, brokerId: number): MemberView {
    const member = this.member(brokerId);
    if (member === undefined || member.state === "LEFT") {
      throw refuse("broker-not-member", operation, `broker ${brokerId} is not a member of the cluster`);
    }
    return member;
  }

  private requireActive(operation: ClusterOperation, brokerId: number): MemberView {
    const member = this.requireMember(operation, brokerId);
    if (member.state !== "ACTIVE") {
      throw refuse("broker-not-active", operation, `broker ${brokerId} is ${member.state}, not ACTIVE`);
    }
    return member;
  }

  private requireHosted(operation: ClusterOperation, member: MemberView, brokerId: number): PartitionReplica {
    const partitionId = operation.partitionId!;
    const replica = member.partitions.get(partitionId);
    if (replica === undefined) {
      throw refuse("partition-not-hosted", operation, `broker ${brokerId} does not host partition ${partitionId}`);
    }
    return replica;
  }

  private requireReplicaState(
    operation: ClusterOperation,
    brokerId: number,
    expected: PartitionReplica["state"],
  ): PartitionReplica {
    const replica = this.requireHosted(operation, this.requireMember(operation, brokerId), brokerId);
    if (replica.state !== expected) {
      throw refuse(
        "replica-state",
        operation,
        `the replica of partition ${operation.partitionId} on broker ${brokerId} is ${replica.state}, not ${expected}`,
      );
    }
    return replica;
  }

  /**
   * The first phase of `operations[index]`: checks every precondition and records the transitional state. A no-op
   * when that state is already recorded (a restarted broker begins again) or the operation has no such state.
   */
  begin(operations: readonly ClusterOperation[], index: number): void {
    const operation = operations[index]!;
    const brokerId = operation.brokerId;
    const partitionId = operation.partitionId!;
    switch (operation.operation) {
      case "BROKER_ADD": {
        const member = this.member(brokerId);
        if (member?.state === "ACTIVE") {
          throw refuse("broker-already-member", operation, `broker ${brokerId} is already an ACTIVE member`);
        }
        // Absent, LEFT, or LEAVING/JOINING left behind by a cancelled change: (re)join. JOINING is already begun.
        if (member?.state !== "JOINING") this.setState(brokerId, "JOINING");
        return;
      }
      case "BROKER_REMOVE": {
        if (operation.brokers === undefined) {
          const member = this.requireMember(operation, brokerId);
          this.requireHostsNothing(operation, brokerId, member);
          if (member.state !== "LEAVING") this.setState(brokerId, "LEAVING");
        } else {
          this.requireMember(operation, brokerId);
          const removedId = operation.brokers[0]!;
          this.requireHostsNothing(operation, removedId, this.requireMember(operation, removedId));
        }
        return;
      }
      case "PARTITION_JOIN":
      case "PARTITION_BOOTSTRAP": {
        const bootstrap = operation.operation === "PARTITION_BOOTSTRAP";
        const transitional = bootstrap ? "BOOTSTRAPPING" : "JOINING";
        const member = this.requireActive(operation, brokerId);
        const existing = member.partitions.get(partitionId);
        if (existing !== undefined) {
          if (existing.state === transitional && existing.priority === operation.priority) return;
          throw refuse(
            "partition-already-hosted",
            operation,
            `broker ${brokerId} already hosts partition ${partitionId} (${existing.state}, priority ${existing.priority})`,
          );
        }
        const hostCount = this.hostCount(partitionId);
        if (bootstrap) {
          if (!this.inactivePartitions().has(partitionId)) {
            throw refuse(
              "routing-state",
              operation,
              `partition ${partitionId} is not one of the new, inactive partitions of a started scale-up`,
            );
          }
          if (hostCount > 0) {
            throw refuse("partition-already-hosted", operation, `partition ${partitionId} already has replicas`);
          }
        } else if (hostCount === 0) {
          throw refuse("partition-unknown", operation, `partition ${partitionId} has no replica to join`);
        }
        this.addReplica(brokerId, partitionId, {
          state: transitional,
          priority: operation.priority!,
          config: this.replicaConfigFor(partitionId),
        });
        return;
      }
      case "PARTITION_LEAVE": {
        const replica = this.requireHosted(operation, this.requireMember(operation, brokerId), brokerId);
        if (this.hostCount(partitionId) <= 1) {
          throw refuse("last-replica", operation, `partition ${partitionId} would be left with no replica`);
        }
        if (replica.state !== "LEAVING") this.setReplica(brokerId, partitionId, { ...replica, state: "LEAVING" });
        return;
      }
      case "PARTITION_RECONFIGURE_PRIORITY":
        this.requireHosted(operation, this.requireMember(operation, brokerId), brokerId);
        return;
      case "PARTITION_FORCE_RECONFIGURE":
        this.requireMember(operation, brokerId);
        for (const retainedId of operation.brokers!) {
          const retained = this.member(retainedId);
          if (retained === undefined || !retained.partitions.has(partitionId)) {
            throw refuse(
              "partition-not-hosted",
              operation,
              `retained broker ${retainedId} does not host partition ${partitionId}`,
            );
          }
        }
        return;
      case "START_PARTITION_SCALE_UP":
        this.requireMember(operation, brokerId);
        this.newPartitionIds(operations, index);
        return;
      case "AWAIT_REDISTRIBUTION":
      case "AWAIT_RELOCATION":
        this.requireMember(operation, brokerId);
        this.requireScaleUpStage(operation);
        return;
    }
  }

  /** The second phase of `operations[index]`: records its final effect. `begin` must have run (it is idempotent). */
  complete(operations: readonly ClusterOperation[], index: number): void {
    const operation = operations[index]!;
    const brokerId = operation.brokerId;
    const partitionId = operation.partitionId!;
    switch (operation.operation) {
      case "BROKER_ADD": {
        const member = this.member(brokerId);
        if (member?.state !== "JOINING") {
          throw refuse("broker-already-member", operation, `broker ${brokerId} is ${member?.state ?? "absent"}`);
        }
        this.setState(brokerId, "ACTIVE");
        return;
      }
      case "BROKER_REMOVE": {
        const removedId = operation.brokers === undefined ? brokerId : operation.brokers[0]!;
        const member = this.requireMember(operation, removedId);
        this.requireHostsNothing(operation, removedId, member);
        this.setState(removedId, "LEFT");
        return;
      }
      case "PARTITION_JOIN":
      case "PARTITION_BOOTSTRAP": {
        const transitional = operation.operation === "PARTITION_BOOTSTRAP" ? "BOOTSTRAPPING" : "JOINING";
        const replica = this.requireReplicaState(operation, brokerId, transitional);
        this.setReplica(brokerId, partitionId, { ...replica, state: "ACTIVE" });
        return;
      }
      case "PARTITION_LEAVE":
        this.requireReplicaState(operation, brokerId, "LEAVING");
        this.removeReplica(brokerId, partitionId);
        return;
      case "PARTITION_RECONFIGURE_PRIORITY": {
        const replica = this.requireHosted(operation, this.requireMember(operation, brokerId), brokerId);
        if (replica.priority !== operation.priority) {
          this.setReplica(brokerId, partitionId, { ...replica, priority: operation.priority! });
        }
        return;
      }
      case "PARTITION_FORCE_RECONFIGURE": {
        const retained = new Set(operation.brokers);
        // Copied first: removing a replica updates the index being iterated.
        for (const hostId of [...this.hostsOf(partitionId)]) {
          if (!retained.has(hostId)) this.removeReplica(hostId, partitionId);
        }
        return;
      }
      case "START_PARTITION_SCALE_UP": {
        const newPartitionIds = this.newPartitionIds(operations, index);
        this.setRouting({
          version: this.routing.version + 1,
          requestHandling: {
            strategy: "ActivePartitions",
            basePartitionCount: newPartitionIds[0]! - 1,
            additionalActivePartitions: [],
            inactivePartitions: newPartitionIds,
          },
          messageCorrelation: this.routing.messageCorrelation,
        });
        return;
      }
      case "AWAIT_REDISTRIBUTION": {
        const handling = this.requireScaleUpStage(operation);
        // Checking thousands of new partitions by scanning the members each time would be O(partitions × brokers).
        if (this.hosts === null) this.indexHosts();
        for (const newPartitionId of handling.inactivePartitions) {
          if (this.hostCount(newPartitionId) === 0) {
            throw refuse("partition-unknown", operation, `new partition ${newPartitionId} has no replica yet`);
          }
        }
        const additional = [...handling.additionalActivePartitions, ...handling.inactivePartitions];
        this.setRouting({
          version: this.routing.version + 1,
          requestHandling: { ...handling, additionalActivePartitions: additional, inactivePartitions: [] },
          messageCorrelation: {
            strategy: "HashMod",
            partitionCount: handling.basePartitionCount + additional.length,
          },
        });
        return;
      }
      case "AWAIT_RELOCATION": {
        const handling = this.requireScaleUpStage(operation);
        const partitionCount = handling.basePartitionCount + handling.additionalActivePartitions.length;
        this.setRouting({
          version: this.routing.version + 1,
          requestHandling: { strategy: "AllPartitions", partitionCount },
          messageCorrelation: { strategy: "HashMod", partitionCount },
        });
        return;
      }
    }
  }

  private requireHostsNothing(operation: ClusterOperation, brokerId: number, member: MemberView): void {
    if (member.partitions.size > 0) {
      throw refuse(
        "broker-hosts-partitions",
        operation,
        `broker ${brokerId} still hosts partitions ${[...member.partitions.keys()].sort((a, b) => a - b).join(", ")}`,
      );
    }
  }

  /**
   * The ids of the partitions a START_PARTITION_SCALE_UP adds. The operation entry has no field for them (the spec's
   * table gives it none), so they are read from the plan itself: the PARTITION_BOOTSTRAP operations that follow it,
   * up to its AWAIT_REDISTRIBUTION. They must be the ids right after today's partition count, contiguous.
   */
  private newPartitionIds(operations: readonly ClusterOperation[], index: number): number[] {
    const operation = operations[index]!;
    const handling = this.routing.requestHandling;
    if (handling.strategy !== "AllPartitions") {
      throw refuse(
        "routing-state",
        operation,
        "a partition scale-up is already under way (routing is ActivePartitions)",
      );
    }
    const ids: number[] = [];
    for (let position = index + 1; position < operations.length; position += 1) {
      const following = operations[position]!;
      if (following.operation === "AWAIT_REDISTRIBUTION") break;
      if (following.operation === "PARTITION_BOOTSTRAP") ids.push(following.partitionId!);
    }
    if (ids.length === 0) {
      throw refuse("new-partitions", operation, "no PARTITION_BOOTSTRAP follows it before AWAIT_REDISTRIBUTION");
    }
    for (const [offset, partitionId] of ids.entries()) {
      const expected = handling.partitionCount + 1 + offset;
      if (partitionId !== expected) {
        throw refuse(
          "new-partitions",
          operation,
          `the bootstrapped partitions must be ${handling.partitionCount + 1}.. in order; found ${partitionId} where ${expected} belongs`,
        );
      }
    }
    return ids;
  }

  private requireScaleUpStage(operation: ClusterOperation) {
    const handling = this.routing.requestHandling;
    const redistributing = operation.operation === "AWAIT_REDISTRIBUTION";
    if (
      handling.strategy !== "ActivePartitions" ||
      (redistributing ? handling.inactivePartitions.length === 0 : handling.inactivePartitions.length > 0)
    ) {
      throw refuse(
        "routing-state",
        operation,
        redistributing
          ? "no started scale-up has inactive partitions to activate"
          : "no scale-up has activated its new partitions yet",
      );
    }
    return handling;
  }

  /** The immutable members and routing; LEFT members are dropped when `dropLeft` (the end of a change). */
  build(dropLeft: boolean): Pick<ClusterConfiguration, "members" | "routing"> {
    let members: Map<number, MemberState> | ReadonlyMap<number, MemberState> = this.source.members;
    if (this.drafts.size > 0 || dropLeft) {
      const next = new Map(this.source.members);
      for (const [brokerId, draft] of this.drafts) {
        next.set(brokerId, {
          state: draft.state,
          version: draft.version,
          lastUpdatedAt: draft.lastUpdatedAt,
          partitions: draft.partitionsAdded
            ? new Map([...draft.partitions].sort(([left], [right]) => left - right))
            : draft.partitions,
        });
      }
      if (dropLeft) {
        for (const [brokerId, member] of next) {
          if (member.state !== "LEFT") continue;
          if (member.partitions.size > 0) {
            throw new OperationError(
              "broker-hosts-partitions",
              `broker ${brokerId} has LEFT but still hosts partitions; the configuration is inconsistent`,
            );
          }
          next.delete(brokerId);
        }
      }
      members = this.membersAdded ? new Map([...next].sort(([left], [right]) => left - right)) : next;
    }
    return { members, routing: this.routing };
  }
}

function requirePendingChange(configuration: ClusterConfiguration): PendingChange {
  const pendingChange = configuration.pendingChange;
  if (pendingChange === null) throw new OperationError("no-pending-change", "no configuration change is in progress");
  if (pendingChange.pending.length === 0) {
    // A change is finished by completing its last operation, so an empty pending list means a bug somewhere.
    throw new OperationError("no-pending-change", `change ${pendingChange.id} has no pending operation left`);
  }
  return pendingChange;
}

function requireNoPendingChange(configuration: ClusterConfiguration): void {
  if (configuration.pendingChange !== null) {
    throw new OperationError(
      "change-in-progress",
      `Another configuration change [${configuration.pendingChange.id}] is in progress`,
    );
  }
}

/** The version a change started on `configuration` gets; that is also its id. Asserts ids only grow. */
function nextChangeId(configuration: ClusterConfiguration): number {
  const changeId = configuration.version + 1;
  if (configuration.lastChange !== null && changeId <= configuration.lastChange.id) {
    throw new OperationError(
      "change-in-progress",
      `change id ${changeId} would not be higher than the last change id ${configuration.lastChange.id}`,
    );
  }
  return changeId;
}

/** The pending operation the cluster is applying (`pending[0]` of the running change), or null when none runs. */
export function operationInProgress(configuration: ClusterConfiguration): ClusterOperation | null {
  return configuration.pendingChange?.pending[0] ?? null;
}

/**
 * Starts a change: version + 1, which is also the change id, with every operation pending. Refuses while another
 * change is pending (rule `change-in-progress`, the 409 of the API) and refuses an empty plan (the caller answers
 * an empty plan itself, without starting a change).
 */
export function startChange(
  configuration: ClusterConfiguration,
  operations: readonly ClusterOperation[],
  startedAtIso: string,
): ClusterConfiguration {
  requireTime(startedAtIso);
  requireNoPendingChange(configuration);
  if (operations.length === 0) throw new OperationError("empty-plan", "a change needs at least one operation");
  for (const operation of operations) requireWellFormed(operation);
  const changeId = nextChangeId(configuration);
  return {
    ...configuration,
    version: changeId,
    pendingChange: {
      id: changeId,
      status: "IN_PROGRESS",
      startedAt: startedAtIso,
      completed: [],
      pending: [...operations],
    },
  };
}

/**
 * Records the transitional state of the pending operation (`pending[0]`), checking its preconditions first; returns
 * `configuration` itself when there is nothing to record (already begun, or an operation without such a state).
 */
export function beginOperation(configuration: ClusterConfiguration, nowIso: string): ClusterConfiguration {
  requireTime(nowIso);
  const pendingChange = requirePendingChange(configuration);
  const draft = new ConfigurationDraft(configuration, nowIso);
  draft.begin(pendingChange.pending, 0);
  if (!draft.changed) return configuration;
  return { ...configuration, ...draft.build(false) };
}

function finishedChange(
  configuration: ClusterConfiguration,
  pendingChange: PendingChange,
  status: "COMPLETED" | "CANCELLED",
  nowIso: string,
): ClusterConfiguration {
  const { lastChange, earlierChanges } = configuration;
  return {
    ...configuration,
    version: configuration.version + 1,
    lastChange: { id: pendingChange.id, status, startedAt: pendingChange.startedAt, completedAt: nowIso },
    earlierChanges:
      lastChange === null ? earlierChanges : [lastChange, ...earlierChanges].slice(0, MAX_EARLIER_CHANGES),
    pendingChange: null,
  };
}

/**
 * Applies the pending operation's final effect (beginning it first if that was not recorded) and moves it to
 * `completed` with `completedAt`. After the last one: version + 1, LEFT brokers dropped, `lastChange` COMPLETED,
 * no pending change.
 */
export function completeOperation(configuration: ClusterConfiguration, nowIso: string): ClusterConfiguration {
  requireTime(nowIso);
  const pendingChange = requirePendingChange(configuration);
  const draft = new ConfigurationDraft(configuration, nowIso);
  draft.begin(pendingChange.pending, 0);
  draft.complete(pendingChange.pending, 0);
  const operation = pendingChange.pending[0]!;
  const completed: CompletedOperation = { ...operation, completedAt: nowIso };
  const last = pendingChange.pending.length === 1;
  const applied: ClusterConfiguration = {
    ...configuration,
    ...draft.build(last),
    pendingChange: {
      ...pendingChange,
      completed: [...pendingChange.completed, completed],
      pending: pendingChange.pending.slice(1),
    },
  };
  return last ? finishedChange(applied, pendingChange, "COMPLETED", nowIso) : applied;
}

/**
 * Cancels the pending change: version + 1 and `lastChange` CANCELLED. Operations already applied stay applied, and
 * so does the transitional state of an operation that was begun; brokers that have LEFT are dropped, as at the end
 * of a completed change, since nothing can bring a LEFT entry back to life.
 */
export function cancelChange(configuration: ClusterConfiguration, nowIso: string): ClusterConfiguration {
  requireTime(nowIso);
  const pendingChange = configuration.pendingChange;
  if (pendingChange === null) throw new OperationError("no-pending-change", "no configuration change is in progress");
  const draft = new ConfigurationDraft(configuration, nowIso);
  return finishedChange({ ...configuration, ...draft.build(true) }, pendingChange, "CANCELLED", nowIso);
}

/**
 * The pure effect of one operation (its begin and complete phases) on members and routing, without any change
 * bookkeeping (versions of the configuration, pending and completed lists). A START_PARTITION_SCALE_UP reads the ids
 * of the partitions it adds from `followingOperations`, the rest of its plan (see `newPartitionIds`).
 */
export function applyOperation(
  configuration: ClusterConfiguration,
  operation: ClusterOperation,
  nowIso: string,
  followingOperations: readonly ClusterOperation[] = [],
): ClusterConfiguration {
  requireTime(nowIso);
  requireWellFormed(operation);
  // Only a scale-up looks at what follows, so only it pays for the combined list.
  const operations =
    operation.operation === "START_PARTITION_SCALE_UP" ? [operation, ...followingOperations] : [operation];
  const draft = new ConfigurationDraft(configuration, nowIso);
  draft.begin(operations, 0);
  draft.complete(operations, 0);
  if (!draft.changed) return configuration;
  return { ...configuration, ...draft.build(false) };
}

/**
 * The configuration after the whole change: started, every operation begun and completed at `nowIso`, finished.
 * The result equals stepping through `startChange`, `beginOperation` and `completeOperation` with the same time,
 * but is computed in one pass over one working copy, in O(brokers + replicas + operations). Refuses what those
 * refuse, with the same `OperationError`.
 */
export function applyChange(
  configuration: ClusterConfiguration,
  operations: readonly ClusterOperation[],
  nowIso: string,
): ClusterConfiguration {
  const started = startChange(configuration, operations, nowIso);
  const pendingChange = started.pendingChange!;
  const draft = new ConfigurationDraft(started, nowIso);
  draft.indexHosts();
  for (let index = 0; index < operations.length; index += 1) {
    draft.begin(operations, index);
    draft.complete(operations, index);
  }
  return finishedChange({ ...started, ...draft.build(true) }, pendingChange, "COMPLETED", nowIso);
}
