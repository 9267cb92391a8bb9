/**
 * Public surface of the cluster configuration model: types, the first configuration, round-robin and FIXED
 * distributions, gossip merge, the JSON codec, and the views the gateway's topology needs. Everything is pure.
 */
export {
  ConfigurationDecodeError,
  type ConfigurationDocument,
  decodeConfiguration,
  encodeConfiguration,
  fromConfigurationDocument,
  toConfigurationDocument,
} from "./codec.js";
export {
  type BrokerState,
  brokerIdsOf,
  type ClusterConfiguration,
  type ClusterOperation,
  type CompletedChange,
  type CompletedOperation,
  clusterSizeOf,
  type ExporterConfiguration,
  type ExporterState,
  type HostedPartitionView,
  INITIAL_CONFIGURATION_VERSION,
  INITIAL_MEMBER_VERSION,
  type InitialConfigurationOptions,
  initialConfiguration,
  isIsoTimestamp,
  lastCompletedChangeId,
  type MemberState,
  type OperationType,
  type PartitionConfiguration,
  type PartitionReplica,
  type PartitionState,
  type PendingChange,
  partitionCountOf,
  partitionIdsOf,
  partitionsOf,
  type ReplicaView,
  type RequestHandling,
  type RoutingState,
  replicasOf,
  replicationFactorOf,
} from "./configuration.js";
export {
  DistributionError,
  type DistributionSizes,
  distributionProblems,
  type FixedPartitioningScheme,
  fixedDistribution,
  MAX_PARTITION_COUNT,
  type PartitionDistribution,
  type ReplicaAssignment,
  roundRobinDistribution,
  sizeProblems,
} from "./distribution.js";
export { type MergeResult, mergeConfigurations } from "./merge.js";
