/**
 * Explicit options of a broker, how they are derived from flowplane's configuration (`service.broker.*`), and the
 * broker's first cluster configuration (round robin, or a validated FIXED scheme).
 */
import { resolve } from "node:path";
import type { Logger } from "pino";
import { clusterSecretFromConfiguration } from "../../config/cluster-secret.js";
import { ConfigurationError } from "../../config/load.js";
import { availableMemoryBytes, defaultMaxBufferedMessageBytes } from "../../config/memory.js";
import type { Configuration } from "../../config/schema.js";
import type { HttpServerLimits } from "../../http/limits.js";
import { FilesystemBackupStore } from "../backup/filesystem-store.js";
import type { BackupStore } from "../backup/store.js";
import {
  type ClusterConfiguration,
  DistributionError,
  fixedDistribution,
  initialConfiguration,
  type PartitionDistribution,
  roundRobinDistribution,
  sizeProblems,
} from "../topology/index.js";
import { ClusterCredentials, type PeerAddress } from "../transport/index.js";
import type { ReplicaClock } from "./partition-replica.js";

/** How partitions are distributed at the cluster's first start. */
export type PartitioningOptions =
  | { readonly scheme: "ROUND_ROBIN" }
  | {
      readonly scheme: "FIXED";
      readonly partitions: readonly {
        readonly partitionId: number;
        readonly nodes: readonly { readonly nodeId: number; readonly priority: number }[];
      }[];
    };

/** Everything a broker needs; nothing is read from the environment. */
export interface BrokerOptions {
  readonly nodeId: number;
  /** Interface the cluster transport listens on. */
  readonly host: string;
  /** Address other brokers and gateways reach this broker at. */
  readonly advertisedHost: string;
  /** Port of the cluster transport; 0 picks a free one. */
  readonly clusterPort: number;
  /** Interface of the management HTTP server (health, metrics). */
  readonly managementHost: string;
  /** Port of the management HTTP server; 0 picks a free one. */
  readonly managementPort: number;
  /** Request deadline and connection limits of the management HTTP server (`service.http`). */
  readonly managementLimits: HttpServerLimits;
  /** The broker's own data directory (it contains `broker.pid`). */
  readonly dataDirectory: string;
  /** Sizes of the cluster's first start. */
  readonly clusterSize: number;
  readonly partitionsCount: number;
  readonly replicationFactor: number;
  readonly partitioning: PartitioningOptions;
  /**
   * Cluster addresses of running brokers, asked for the cluster configuration at start (which broker listens where is
   * learned from their answers); more are learned by gossip. This broker's own address is skipped.
   */
  readonly contactPoints: readonly PeerAddress[];
  readonly heartbeatIntervalMs: number;
  readonly electionTimeoutMs: number;
  /** Commit partition writes on the broker's main thread rather than on the thread pool. */
  readonly synchronousCommit: boolean;
  /** Period of configuration gossip to every known broker. */
  readonly gossipIntervalMs: number;
  /** Applied entries between two snapshots of a partition. */
  readonly snapshotIntervalEntries: number;
  /** Most bytes of buffered messages this broker's partitions hold together before publications are refused. */
  readonly maxBufferedMessageBytes: number;
  /** Proposals waiting per partition; beyond it publish answers `unavailable`. */
  readonly maxPendingProposalsPerPartition: number;
  /** A replica whose applied index trails its known commit index by more than this is unhealthy. */
  readonly maxApplyLagEntries: number;
  /** How long a clean shutdown waits for in-flight proposals. */
  readonly shutdownTimeoutMs: number;
  /** Whether changes may add partitions to the running cluster (experimental). */
  readonly partitionScalingEnabled: boolean;
  /** The cluster's credentials: every connection to and from this broker's cluster port is authenticated with them. */
  readonly clusterCredentials: ClusterCredentials;
  /**
   * Where the partitions' leaders write their parts of backups, shared by every broker of the cluster
   * (`service.backup.*`); absent or null: the broker takes no backups.
   */
  readonly backupStore?: BackupStore | null;
  /** Version reported by `describe`. */
  readonly version: string;
  readonly logger: Logger;
  /**
   * The clock and timers the partition replicas run on, their turns between the slices of a snapshot included;
   * absent: the system's, as production runs. Tests pass one to hold a replica's opening back.
   */
  readonly replicaClock?: ReplicaClock;
  /** This broker's wall clock in epoch milliseconds; absent: the system's. Tests give a broker one that is wrong. */
  readonly wallClockMs?: () => number;
}

/** Defaults of the options that have no configuration setting. */
export const BROKER_DEFAULTS = {
  gossipIntervalMs: 1_000,
  maxPendingProposalsPerPartition: 1_024,
  maxApplyLagEntries: 1_000,
  shutdownTimeoutMs: 5_000,
} as const;

/**
 * Parses `service.broker.cluster.initialContactPoints`: "host:port,host:port,…", the cluster addresses of brokers in
 * any order. Throws ConfigurationError naming the bad entry.
 */
export function parseContactPoints(text: string): PeerAddress[] {
  if (text.trim() === "") return [];
  const problems: string[] = [];
  const addresses: PeerAddress[] = [];
  text.split(",").forEach((entry, position) => {
    const trimmed = entry.trim();
    const match = /^(.+):(\d{1,5})$/.exec(trimmed);
    const port = match === null ? Number.NaN : Number(match[2]);
    if (match === null || port < 1 || port > 65_535) {
      problems.push(
        `service.broker.cluster.initialContactPoints entry ${position + 1} is ${JSON.stringify(trimmed)}; allowed: host:port with a port in 1..65535`,
      );
      return;
    }
    addresses.push({ host: (match[1] as string).replace(/^\[(.*)\]$/, "$1"), port });
  });
  if (problems.length > 0) throw new ConfigurationError(problems);
  return addresses;
}

/**
 * Derives a broker's options from flowplane's configuration; the defaults of BROKER_DEFAULTS fill the rest. Throws
 * ConfigurationError when no valid cluster secret is configured.
 */
export function brokerOptionsFromConfiguration(
  configuration: Configuration,
  context: { readonly logger: Logger; readonly version: string },
): BrokerOptions {
  const broker = configuration.broker;
  const { cluster, raft, experimental } = broker;
  const problems: string[] = [];
  if (raft.electionTimeoutMs < 2 * raft.heartbeatIntervalMs) {
    problems.push(
      `service.broker.raft.electionTimeoutMs (${raft.electionTimeoutMs}) must be at least twice service.broker.raft.heartbeatIntervalMs (${raft.heartbeatIntervalMs})`,
    );
  }
  const advertisedHost = broker.advertisedHost === "" ? broker.host : broker.advertisedHost;
  if (advertisedHost === "0.0.0.0" || advertisedHost === "::" || advertisedHost === "[::]") {
    problems.push(
      `service.broker.advertisedHost must name an address other brokers and gateways can reach when service.broker.host is ${JSON.stringify(broker.host)}`,
    );
  }
  if (problems.length > 0) throw new ConfigurationError(problems);
  const { secret, clusterId } = clusterSecretFromConfiguration(configuration);
  const partitioning: PartitioningOptions =
    experimental.partitioning.scheme === "FIXED"
      ? { scheme: "FIXED", partitions: experimental.partitioning.fixed }
      : { scheme: "ROUND_ROBIN" };
  const dataDirectory =
    broker.dataDirectory === ""
      ? resolve(configuration.dataDirectory, "brokers", String(cluster.nodeId))
      : resolve(broker.dataDirectory);
  return {
    nodeId: cluster.nodeId,
    host: broker.host,
    advertisedHost,
    clusterPort: cluster.clusterPort,
    managementHost: broker.host,
    managementPort: broker.managementPort,
    managementLimits: configuration.http,
    dataDirectory,
    clusterSize: cluster.clusterSize,
    partitionsCount: cluster.partitionsCount,
    replicationFactor: cluster.replicationFactor,
    partitioning,
    contactPoints: parseContactPoints(cluster.initialContactPoints),
    heartbeatIntervalMs: raft.heartbeatIntervalMs,
    electionTimeoutMs: raft.electionTimeoutMs,
    synchronousCommit: raft.synchronousCommit,
    snapshotIntervalEntries: raft.snapshotIntervalEntries,
    maxBufferedMessageBytes:
      broker.memory.maxBufferedMessageBytes > 0
        ? broker.memory.maxBufferedMessageBytes
        : defaultMaxBufferedMessageBytes(availableMemoryBytes()),
    partitionScalingEnabled: experimental.features.enablePartitionScaling,
    ...BROKER_DEFAULTS,
    clusterCredentials: ClusterCredentials.fromSecret(secret, clusterId),
    backupStore: backupStoreFromConfiguration(configuration, context.logger),
    version: context.version,
    logger: context.logger,
  };
}

/**
 * The backup store `service.backup.*` names: a directory (`filesystem`, by default `<dataDirectory>/backups`, which
 * the brokers of the local cluster share), or none; it logs to `logger`.
 */
export function backupStoreFromConfiguration(configuration: Configuration, logger: Logger): BackupStore | null {
  const backup = configuration.backup;
  if (backup.store === "none") return null;
  const basePath =
    backup.filesystem.basePath === ""
      ? resolve(configuration.dataDirectory, "backups")
      : resolve(backup.filesystem.basePath);
  return new FilesystemBackupStore(basePath, { logger });
}

/** The distribution of the first start; throws ConfigurationError listing every problem of the sizes or scheme. */
export function initialDistribution(options: BrokerOptions): PartitionDistribution {
  const sizes = {
    clusterSize: options.clusterSize,
    partitionCount: options.partitionsCount,
    replicationFactor: options.replicationFactor,
  };
  try {
    if (options.partitioning.scheme === "ROUND_ROBIN") {
      const problems = sizeProblems(sizes);
      if (problems.length > 0) throw new DistributionError(problems);
      const ids = Array.from({ length: options.clusterSize }, (_, id) => id);
      return roundRobinDistribution(ids, options.partitionsCount, options.replicationFactor);
    }
    if (options.partitioning.partitions.length === 0) {
      throw new DistributionError([
        "scheme FIXED needs service.broker.experimental.partitioning.fixed to list every partition",
      ]);
    }
    return fixedDistribution({
      ...sizes,
      partitions: options.partitioning.partitions.map(({ partitionId, nodes }) => ({
        partitionId,
        brokers: nodes.map(({ nodeId, priority }) => ({ brokerId: nodeId, priority })),
      })),
    });
  } catch (error) {
    if (error instanceof DistributionError) {
      throw new ConfigurationError(
        error.problems.map(
          (problem) => `service.broker.experimental.partitioning (${options.partitioning.scheme}): ${problem}`,
        ),
      );
    }
    throw error;
  }
}

/**
 * Update time recorded in the first configuration. Every broker computes the first configuration on its own, and
 * gossip treats two version-1 configurations that differ in any byte as a conflict, so the time must be the same
 * everywhere: it is a fixed instant rather than each broker's clock.
 */
export const FIRST_CONFIGURATION_TIME = "1970-01-01T00:00:00.000Z";

/** The cluster configuration of the first start, built from the validated distribution; identical on every broker. */
export function firstConfiguration(options: BrokerOptions, distribution: PartitionDistribution): ClusterConfiguration {
  return initialConfiguration({
    clusterSize: options.clusterSize,
    partitionCount: options.partitionsCount,
    replicationFactor: options.replicationFactor,
    distribution,
    nowIso: FIRST_CONFIGURATION_TIME,
  });
}
