/**
 * Edits a broker makes to its own member entry outside the operations of a change: settling a transitional state a
 * cancelled change left behind (a replica still JOINING when its join was cancelled, a broker still LEAVING). Each
 * edit increments the member's version, so gossip merges it at the same cluster version like an operation's (see
 * merge.ts); an edit that changes nothing returns the configuration itself. Pure.
 */
import type { BrokerState, ClusterConfiguration, MemberState, PartitionState } from "./configuration.js";

function withMember(
  configuration: ClusterConfiguration,
  brokerId: number,
  member: MemberState,
  nowIso: string,
): ClusterConfiguration {
  const previous = configuration.members.get(brokerId);
  if (previous === undefined) throw new Error(`invariant violated: broker ${brokerId} is not a member`);
  const members = new Map(configuration.members);
  members.set(brokerId, { ...member, version: previous.version + 1, lastUpdatedAt: nowIso });
  return { ...configuration, members };
}

/** The configuration with replica `partitionId` of `brokerId` in `state`. */
export function withReplicaState(
  configuration: ClusterConfiguration,
  brokerId: number,
  partitionId: number,
  state: PartitionState,
  nowIso: string,
): ClusterConfiguration {
  const member = configuration.members.get(brokerId);
  const replica = member?.partitions.get(partitionId);
  if (member === undefined || replica === undefined) {
    throw new Error(`invariant violated: broker ${brokerId} hosts no replica of partition ${partitionId}`);
  }
  if (replica.state === state) return configuration;
  const partitions = new Map(member.partitions);
  partitions.set(partitionId, { ...replica, state });
  return withMember(configuration, brokerId, { ...member, partitions }, nowIso);
}

/** The configuration without replica `partitionId` on `brokerId`. */
export function withoutReplica(
  configuration: ClusterConfiguration,
  brokerId: number,
  partitionId: number,
  nowIso: string,
): ClusterConfiguration {
  const member = configuration.members.get(brokerId);
  if (member === undefined || !member.partitions.has(partitionId)) return configuration;
  const partitions = new Map(member.partitions);
  partitions.delete(partitionId);
  return withMember(configuration, brokerId, { ...member, partitions }, nowIso);
}

/** The configuration with broker `brokerId` in `state`. */
export function withBrokerState(
  configuration: ClusterConfiguration,
  brokerId: number,
  state: BrokerState,
  nowIso: string,
): ClusterConfiguration {
  const member = configuration.members.get(brokerId);
  if (member === undefined) throw new Error(`invariant violated: broker ${brokerId} is not a member`);
  if (member.state === state) return configuration;
  return withMember(configuration, brokerId, { ...member, state }, nowIso);
}
