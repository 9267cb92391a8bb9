/**
 * The gateway's picture of the cluster, assembled from the brokers' `describe` answers. This module is pure: the
 * topology cache gathers the answers and hands them here, so the rules (which configuration wins, how an
 * unreachable broker is listed, who leads a partition) are tested without sockets.
 */
import type {
  BrokerAddress,
  BrokerDescription,
  OperationProgress,
  ReplicaHealth,
  ReplicaReport,
  ReplicaRole,
} from "../broker/protocol.js";
import {
  type ClusterConfiguration,
  clusterSizeOf,
  decodeConfiguration,
  lastCompletedChangeId,
  mergeConfigurations,
  partitionCountOf,
  partitionsOf,
  replicationFactorOf,
} from "../topology/index.js";

/** One partition replica as `GET /v2/topology` lists it. */
export interface TopologyPartition {
  partitionId: number;
  role: ReplicaRole;
  health: ReplicaHealth;
}

/** One broker as `GET /v2/topology` lists it. */
export interface TopologyBroker {
  nodeId: number;
  host: string;
  port: number;
  version: string;
  partitions: TopologyPartition[];
}

/** The body of `GET /v2/topology` (spec/gateway.md). */
export interface TopologyDocument {
  brokers: TopologyBroker[];
  clusterSize: number;
  partitionsCount: number;
  replicationFactor: number;
  gatewayVersion: string;
  lastCompletedChangeId: string;
}

/** The leader of one partition as the gateway routes to it. */
export interface PartitionLeader {
  nodeId: number;
  term: number;
}

/** Everything the gateway derives from one round of `describe` answers. */
export interface TopologyView {
  /** The configuration of the answers merged as gossip merges them (the highest version, then per member). */
  configuration: ClusterConfiguration;
  /** The topology document to serve. */
  document: TopologyDocument;
  /** Partition id → the broker that reports itself leader (the highest term wins if several do). */
  leaders: ReadonlyMap<number, PartitionLeader>;
  /** Broker id → where it listens, from every answer (so an unreachable broker keeps its last known address). */
  addresses: ReadonlyMap<number, BrokerAddress>;
  /** Broker id → its version, from its own answer (kept for brokers that stopped answering). */
  versions: ReadonlyMap<number, string>;
  /** Broker ids that answered this round. */
  reachable: ReadonlySet<number>;
  /**
   * Broker ids that this round asked at the address an earlier round learned for them and that did not answer, unless
   * an answer of this round gave them another address. A broker known only from other brokers' answers (one just
   * added to the cluster) or that moved (restarted on another port) is asked from the next round on, and is not
   * counted silent before. A broker that left the cluster stays known, is still asked, and so is listed here too.
   */
  silent: ReadonlySet<number>;
  /** Broker id → the replica reports it sent this round. */
  replicas: ReadonlyMap<number, readonly ReplicaReport[]>;
  /** Ids of the partitions that take requests (routing state), ascending. */
  activePartitions: readonly number[];
  /** Broker id → the operation of a cluster change it reported applying this round. */
  changeProgress: ReadonlyMap<number, OperationProgress>;
  /** Broker id → the configuration text of its latest answer and what merging it gave (see `AbsorbedText`). */
  configurationTexts: ReadonlyMap<number, AbsorbedText>;
}

/**
 * A broker's configuration text and the configuration merging it produced (undefined when the text could not be
 * decoded and was ignored). Merging is a pure function, so the same text merged into that same configuration object
 * again gives it back: a round skips such an answer. Identity is what makes the skip exact: a configuration that has
 * moved on since (absorbing other brokers' progress) may merge the text differently, as when two coordinators recorded
 * different changes at one version and the whole configuration whose encoding sorts first wins.
 */
export interface AbsorbedText {
  readonly text: string;
  readonly mergedInto: ClusterConfiguration | undefined;
}

/** Input of `assembleTopologyView`. */
export interface TopologyInputs {
  /** The answers of this round, one per broker that answered. */
  descriptions: readonly BrokerDescription[];
  /** Addresses known from earlier rounds. */
  previousAddresses: ReadonlyMap<number, BrokerAddress>;
  /** The brokers this round asked, by id, and the address each was asked at. */
  askedAddresses: ReadonlyMap<number, BrokerAddress>;
  /** Versions known from earlier rounds. */
  previousVersions: ReadonlyMap<number, string>;
  /** The configuration of the previous view, used when it is newer than every answer (or nobody answered). */
  previousConfiguration: ClusterConfiguration | undefined;
  /** The previous view's `configurationTexts`. */
  previousConfigurationTexts: ReadonlyMap<number, AbsorbedText>;
  gatewayVersion: string;
}

/** Ids of the partitions taking requests, from the routing state. */
export function activePartitionIds(configuration: ClusterConfiguration): number[] {
  const handling = configuration.routing.requestHandling;
  if (handling.strategy === "AllPartitions") {
    return Array.from({ length: handling.partitionCount }, (_, index) => index + 1);
  }
  const ids = new Set<number>();
  for (let partitionId = 1; partitionId <= handling.basePartitionCount; partitionId += 1) ids.add(partitionId);
  for (const partitionId of handling.additionalActivePartitions) ids.add(partitionId);
  return [...ids].sort((left, right) => left - right);
}

/** The brokers asked at the address still known for them that did not answer (see `TopologyView.silent`). */
function silentBrokers(
  asked: ReadonlyMap<number, BrokerAddress>,
  reachable: ReadonlySet<number>,
  addresses: ReadonlyMap<number, BrokerAddress>,
): Set<number> {
  const silent = new Set<number>();
  for (const [brokerId, address] of asked) {
    const known = addresses.get(brokerId);
    if (reachable.has(brokerId) || known === undefined) continue;
    if (known.host === address.host && known.port === address.port) silent.add(brokerId);
  }
  return silent;
}

/**
 * Builds the view from one round of answers, or returns undefined when no configuration is known at all (no broker
 * ever answered). A configuration an answer carries that cannot be decoded is ignored: one broker with a bug must
 * not take the gateway's view down.
 */
export function assembleTopologyView(inputs: TopologyInputs): TopologyView | undefined {
  let configuration = inputs.previousConfiguration;
  const addresses = new Map(inputs.previousAddresses);
  const versions = new Map(inputs.previousVersions);
  const reachable = new Set<number>();
  const replicas = new Map<number, readonly ReplicaReport[]>();
  const changeProgress = new Map<number, OperationProgress>();
  const configurationTexts = new Map<number, AbsorbedText>();
  for (const description of inputs.descriptions) {
    reachable.add(description.nodeId);
    if (description.changeProgress !== undefined && description.changeProgress !== null) {
      changeProgress.set(description.nodeId, description.changeProgress);
    }
    versions.set(description.nodeId, description.version);
    replicas.set(description.nodeId, description.replicas);
    for (const address of description.brokers) addresses.set(address.nodeId, address);
    // A broker's own answer is the freshest word on where it listens.
    addresses.set(description.nodeId, { nodeId: description.nodeId, host: description.host, port: description.port });
    // At the replica bound decoding and merging one answer takes tens of milliseconds, for every broker in every
    // round; an answer whose merge would give back the configuration as it is now is skipped (see `AbsorbedText`).
    const absorbed = inputs.previousConfigurationTexts.get(description.nodeId);
    if (
      absorbed !== undefined &&
      absorbed.text === description.configuration &&
      (absorbed.mergedInto === undefined || (configuration !== undefined && absorbed.mergedInto === configuration))
    ) {
      configurationTexts.set(description.nodeId, absorbed);
      continue;
    }
    let candidate: ClusterConfiguration;
    try {
      candidate = decodeConfiguration(description.configuration);
    } catch {
      configurationTexts.set(description.nodeId, { text: description.configuration, mergedInto: undefined });
      continue;
    }
    // Merged as brokers merge gossip: while a change runs the version stays the same and each broker's entry moves
    // on by its own version, so the freshest view combines the answers instead of taking the first of a version.
    configuration =
      configuration === undefined ? candidate : mergeConfigurations(configuration, candidate).configuration;
    configurationTexts.set(description.nodeId, { text: description.configuration, mergedInto: configuration });
  }
  if (configuration === undefined) return undefined;
  // What was merged into an earlier configuration can never be skipped again, and would keep that one alive.
  for (const [nodeId, absorbed] of configurationTexts) {
    if (absorbed.mergedInto !== undefined && absorbed.mergedInto !== configuration) configurationTexts.delete(nodeId);
  }

  const leaders = new Map<number, PartitionLeader>();
  for (const [nodeId, reports] of replicas) {
    for (const report of reports) {
      if (report.role !== "leader") continue;
      const known = leaders.get(report.partitionId);
      if (known === undefined || report.term > known.term)
        leaders.set(report.partitionId, { nodeId, term: report.term });
    }
  }

  const brokers: TopologyBroker[] = [];
  const memberIds = [...configuration.members.keys()].sort((left, right) => left - right);
  for (const nodeId of memberIds) {
    const member = configuration.members.get(nodeId);
    if (member === undefined || member.state === "LEFT") continue;
    const address = addresses.get(nodeId);
    const reports = replicas.get(nodeId);
    const partitions: TopologyPartition[] =
      reports === undefined
        ? // A broker that does not answer is still a member: list what the configuration gives it, as dead.
          partitionsOf(configuration, nodeId).map((partition) => ({
            partitionId: partition.partitionId,
            role: "inactive",
            health: "dead",
          }))
        : [...reports]
            .sort((left, right) => left.partitionId - right.partitionId)
            .map((report) => ({ partitionId: report.partitionId, role: report.role, health: report.health }));
    brokers.push({
      nodeId,
      host: address?.host ?? "",
      port: address?.port ?? 0,
      version: versions.get(nodeId) ?? "unknown",
      partitions,
    });
  }

  return {
    configuration,
    document: {
      brokers,
      clusterSize: clusterSizeOf(configuration),
      partitionsCount: partitionCountOf(configuration),
      replicationFactor: replicationFactorOf(configuration),
      gatewayVersion: inputs.gatewayVersion,
      lastCompletedChangeId: lastCompletedChangeId(configuration),
    },
    leaders,
    addresses,
    versions,
    reachable,
    silent: silentBrokers(inputs.askedAddresses, reachable, addresses),
    replicas,
    activePartitions: activePartitionIds(configuration),
    changeProgress,
    configurationTexts,
  };
}
