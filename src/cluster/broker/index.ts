/**
 * Public surface of the broker: the Broker (start it in-process with explicit options or from flowplane's
 * configuration), its options, the partition replica, and the files it keeps. The gateway contract is protocol.ts.
 */
export { Broker } from "./broker.js";
export {
  type BrokerMessage,
  type GossipEnvelope,
  type GossipedAddress,
  parseBrokerMessage,
  parseBrokerRequest,
  type RaftEnvelope,
} from "./broker-messages.js";
export {
  CONFIGURATION_FILE_NAME,
  claimDataDirectory,
  DataDirectoryInUseError,
  PID_FILE_NAME,
  persistConfiguration,
  readPersistedConfiguration,
} from "./files.js";
export { type BrokerMetrics, createBrokerMetrics, type ManagementSource } from "./management.js";
export {
  BROKER_DEFAULTS,
  type BrokerOptions,
  brokerOptionsFromConfiguration,
  FIRST_CONFIGURATION_TIME,
  firstConfiguration,
  initialDistribution,
  type PartitioningOptions,
  parseContactPoints,
} from "./options.js";
export { PartitionReplica, type PartitionReplicaOptions } from "./partition-replica.js";
export type * from "./protocol.js";
