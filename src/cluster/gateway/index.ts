/** Public surface of the gateway: start it, and the pure pieces other modules and tests use. */
export { type GatewayOptions, type RunningGateway, startGateway } from "./gateway.js";
export { gatewayHealth, type HealthDocument, type HealthStatus } from "./health.js";
export { parseContactPoints } from "./topology-cache.js";
export {
  activePartitionIds,
  assembleTopologyView,
  type TopologyBroker,
  type TopologyDocument,
  type TopologyPartition,
  type TopologyView,
} from "./topology-view.js";
