/**
 * Gossip merge of two cluster configurations. The higher `version` wins. At equal versions the two may still differ
 * legitimately: while a change runs, the cluster version stays the same and each broker applies its operation by
 * bumping its own member entry's version and moving the operation from `pending` to `completed`. So at equal
 * versions the merge takes, per member, the entry with the higher member version; the pending change that has
 * completed more operations; and the routing state with the higher routing version.
 *
 * What cannot differ at equal versions without a bug somewhere is reported as a conflict (the local value is kept):
 * one member entry with the same member version but different contents, pending changes whose completed operations
 * are not one a prefix of the other, different routing at the same routing version. One operation completed on both
 * sides at different instants is no conflict (two brokers applied a coordinator's operation): the earlier is kept,
 * and so is the earlier of two member entries that such an operation edited alike.
 * The same holds when that operation was the change's last one: the change then ended on both sides, and its end
 * differs only in its instant.
 *
 * One conflict is resolved rather than kept: two different changes (different last changes, or pending changes
 * with different plans) recorded at the same version by two brokers that both acted as coordinator. Every broker
 * then takes the whole configuration whose canonical encoding sorts first, so gossip converges on one change.
 */

import { isDeepStrictEqual } from "node:util";
import { encodeConfiguration } from "./codec.js";
import type {
  ClusterConfiguration,
  CompletedChange,
  MemberState,
  PendingChange,
  RoutingState,
} from "./configuration.js";

/** The outcome of a merge. */
export interface MergeResult {
  /** The merged configuration: `local` itself when nothing new came from `remote`. */
  readonly configuration: ClusterConfiguration;
  /** Whether the result differs from `local` (then persist it and gossip it on). */
  readonly changed: boolean;
  /** Descriptions of contradictions that indicate a bug; empty normally. The caller must log them as errors. */
  readonly conflicts: readonly string[];
}

/** Structural equality that ignores object key order and map insertion order. */
function sameValue(left: unknown, right: unknown): boolean {
  return left === right || isDeepStrictEqual(left, right);
}

function mergeMember(brokerId: number, local: MemberState, remote: MemberState, conflicts: string[]): MemberState {
  if (remote.version > local.version) return remote;
  if (remote.version < local.version || sameValue(local, remote)) return local;
  if (sameValue({ ...local, lastUpdatedAt: null }, { ...remote, lastUpdatedAt: null })) {
    // The same edit made by two brokers at different instants: a coordinator's forced BROKER_REMOVE applied both by
    // the coordinator, paused rather than gone, and by the broker that took over. The earlier instant is kept.
    return remote.lastUpdatedAt < local.lastUpdatedAt ? remote : local;
  }
  conflicts.push(`broker ${brokerId} has member version ${local.version} on both sides with different contents`);
  return local;
}

function mergePendingChange(
  local: PendingChange | null,
  remote: PendingChange | null,
  conflicts: string[],
): PendingChange | null {
  if (local === null && remote === null) return null;
  if (local === null || remote === null || local.id !== remote.id) {
    conflicts.push(
      `pending change differs at the same version: local ${local?.id ?? "none"}, remote ${remote?.id ?? "none"}`,
    );
    return local;
  }
  const [shorter, longer] = local.completed.length <= remote.completed.length ? [local, remote] : [remote, local];
  // Both sides must describe the same plan, and the side that has seen fewer operations applied must have seen the
  // same first ones.
  const samePlan =
    shorter.startedAt === longer.startedAt &&
    sameValue(
      [...shorter.completed.map(withoutCompletedAt), ...shorter.pending],
      [...longer.completed.map(withoutCompletedAt), ...longer.pending],
    );
  if (!samePlan) {
    conflicts.push(`pending change ${local.id} has diverging operations on the two sides`);
    return local;
  }
  // The same operation may have completed on both sides at different instants: a coordinator's operation taken over
  // by the next broker while the coordinator, paused rather than gone, went on with it too (each is repeatable). The
  // earlier instant is kept, which every broker computes alike whichever way it merges.
  const completed = longer.completed.map((operation, position) => {
    const other = shorter.completed[position];
    return other !== undefined && other.completedAt < operation.completedAt ? other : operation;
  });
  return { ...longer, completed };
}

function withoutCompletedAt(operation: PendingChange["completed"][number]): unknown {
  const { completedAt: _completedAt, ...rest } = operation;
  return rest;
}

function mergeRouting(local: RoutingState, remote: RoutingState, conflicts: string[]): RoutingState {
  if (remote.version > local.version) return remote;
  if (remote.version < local.version || sameValue(local, remote)) return local;
  conflicts.push(`routing has version ${local.version} on both sides with different contents`);
  return local;
}

/**
 * The history of changes before the same last change. It follows from the changes that ran, so the only legitimate
 * difference is a broker whose version kept none (it decodes the field as absent) or a shorter one: the longer
 * history, of which the other must be a prefix, is taken.
 */
function mergeEarlierChanges(
  local: readonly CompletedChange[],
  remote: readonly CompletedChange[],
  conflicts: string[],
): readonly CompletedChange[] {
  const [shorter, longer] = local.length <= remote.length ? [local, remote] : [remote, local];
  if (!sameValue(shorter, longer.slice(0, shorter.length))) {
    conflicts.push("the histories of earlier changes differ before the same last change");
    return local;
  }
  return longer.length === local.length ? local : longer;
}

/** Whether two last changes are the same change, ended the same way, perhaps at different instants. */
function sameEndedChange(local: CompletedChange | null, remote: CompletedChange | null): boolean {
  if (local === null || remote === null) return local === remote;
  return local.id === remote.id && local.status === remote.status && local.startedAt === remote.startedAt;
}

/**
 * The last change of two configurations that hold the same one: the earlier end is kept. Two brokers that both
 * completed the change's last operation (a coordinator's operation taken over, see `mergePendingChange`) each ended
 * the change at their own instant; every broker computes the same result whichever way it merges.
 */
function mergeLastChange(local: CompletedChange | null, remote: CompletedChange | null): CompletedChange | null {
  if (local === null || remote === null) return local;
  return remote.completedAt < local.completedAt ? remote : local;
}

/**
 * Whether two configurations of the same version describe different changes: different last changes, or pending
 * changes that are not the same plan. Only two brokers that both believed they coordinate, each recording its own
 * change at the same version, can produce that.
 */
function differentChanges(local: ClusterConfiguration, remote: ClusterConfiguration): boolean {
  if (!sameEndedChange(local.lastChange, remote.lastChange)) return true;
  const left = local.pendingChange;
  const right = remote.pendingChange;
  if (left === null || right === null) return left !== right;
  const plan = (change: PendingChange): unknown => [
    change.id,
    change.startedAt,
    ...change.completed.map(withoutCompletedAt),
    ...change.pending,
  ];
  return !sameValue(plan(left), plan(right));
}

/** Merges a configuration received by gossip into the local one (see the module comment for the rules). */
export function mergeConfigurations(local: ClusterConfiguration, remote: ClusterConfiguration): MergeResult {
  if (remote.version > local.version) return { configuration: remote, changed: true, conflicts: [] };
  if (remote.version < local.version || local === remote) {
    return { configuration: local, changed: false, conflicts: [] };
  }
  if (differentChanges(local, remote)) {
    // Two coordinators recorded different changes at the same version (a coordinator hand-over while both were
    // reachable to different brokers). Mixing their entries would leave every broker with a different mix forever,
    // so one whole configuration wins, by a rule every broker computes alike: the smaller encoding. The loser's
    // change never runs; its operations in flight stop when their broker sees the change is gone.
    const localText = encodeConfiguration(local);
    const remoteText = encodeConfiguration(remote);
    const conflicts = [
      `two different changes were recorded at version ${local.version}; the configuration whose encoding sorts first wins`,
    ];
    if (remoteText < localText) return { configuration: remote, changed: true, conflicts };
    return { configuration: local, changed: false, conflicts };
  }
  const conflicts: string[] = [];
  const members = new Map(local.members);
  for (const [brokerId, remoteMember] of remote.members) {
    const localMember = local.members.get(brokerId);
    members.set(
      brokerId,
      localMember === undefined ? remoteMember : mergeMember(brokerId, localMember, remoteMember, conflicts),
    );
  }
  const lastChange = mergeLastChange(local.lastChange, remote.lastChange);
  const earlierChanges = mergeEarlierChanges(local.earlierChanges, remote.earlierChanges, conflicts);
  const pendingChange = mergePendingChange(local.pendingChange, remote.pendingChange, conflicts);
  const routing = mergeRouting(local.routing, remote.routing, conflicts);
  // Every part kept from `local` (the usual gossip round, between changes): nothing to encode to know it.
  const keptLocal =
    lastChange === local.lastChange &&
    earlierChanges === local.earlierChanges &&
    pendingChange === local.pendingChange &&
    routing === local.routing &&
    members.size === local.members.size &&
    [...members].every(([brokerId, member]) => local.members.get(brokerId) === member);
  if (keptLocal) return { configuration: local, changed: false, conflicts };
  const merged: ClusterConfiguration = {
    version: local.version,
    members: new Map([...members.entries()].sort(([left], [right]) => left - right)),
    lastChange,
    earlierChanges,
    pendingChange,
    routing,
  };
  const changed = encodeConfiguration(merged) !== encodeConfiguration(local);
  return { configuration: changed ? merged : local, changed, conflicts };
}
