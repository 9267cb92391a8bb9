/** Public surface of the provisioner: the local cluster that `flowplane start` runs beside the platform. */
export {
  brokerPorts,
  childNodeArguments,
  defaultCommand,
  freePort,
  type LocalBroker,
  type LocalCluster,
  type LocalClusterOptions,
  startLocalCluster,
} from "./local-cluster.js";
