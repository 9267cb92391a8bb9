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
  childNodeArguments,
  defaultCommand,
  type LocalBroker,
  type LocalCluster,
  type LocalClusterChild,
  type LocalClusterChildEvent,
  type LocalClusterChildExit,
  type LocalClusterOptions,
  PORT_IN_USE_RETRIES,
  PortInUseError,
  startLocalCluster,
} from "./local-cluster.js";
export {
  DEFAULT_RESTART_POLICY,
  type RestartPolicy,
  restartDelayMs,
  restartPolicy,
  SUPERVISOR_VARIABLE,
  watchSupervisor,
} from "./supervision.js";
