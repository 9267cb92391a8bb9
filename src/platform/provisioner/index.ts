/** Public surface of the provisioner: the local cluster that `flowplane start` runs beside the platform. */
export {
  CLUSTER_SECRET_DIRECTORY_NAME,
  CLUSTER_SECRET_FILE_NAME,
  ensureLocalClusterSecret,
  type LocalClusterSecret,
} from "./cluster-secret.js";
export {
  addLocalBrokers,
  BROKERS_FILE_NAME,
  brokerPorts,
  freePort,
  type LocalBrokerPorts,
  type PersistedPorts,
  readLocalBrokers,
  removeLocalBrokers,
} from "./local-brokers.js";
export {
  type LocalBroker,
  type LocalCluster,
  type LocalClusterChild,
  type LocalClusterChildEvent,
  type LocalClusterOptions,
  PORT_IN_USE_RETRIES,
  startLocalCluster,
} from "./local-cluster.js";
export { childNodeArguments, defaultCommand, type LocalClusterChildExit, PortInUseError } from "./managed-child.js";
export {
  DEFAULT_RESTART_POLICY,
  type RestartPolicy,
  restartDelayMs,
  restartPolicy,
  SUPERVISOR_VARIABLE,
  watchSupervisor,
} from "./supervision.js";
