/**
 * The gateway's health, derived from its topology view (pure). Two components decide it: `brokers` (UP when at
 * least one broker answers; details list which answer and which do not) and `partitions` (UP when every partition
 * taking requests has a leader). A third, `clusterChange`, is always UP and tells whether a scaling change is
 * running and how many operations it has left, so that whoever runs the cluster (the platform's health polling) can
 * say "updating" without credentials for the protected metrics. A fourth, `writes`, also always UP, tells whether
 * the cluster's access policy pauses writes (a restore that is not committed yet); the reason is told only to
 * authenticated callers, in the 503 of a write, since anyone may read the health. Readiness means the gateway
 * can serve every partition: both deciding components UP. Liveness only says the process serves requests, so an
 * orchestrator does not restart a gateway because brokers are down.
 */
import type { TopologyView } from "./topology-view.js";

/** Most replicas the health document lists as dead (a cluster may host many partitions). */
const MAX_LISTED_REPLICAS = 64;

/** UP or DOWN, as health endpoints say it. */
export type HealthStatus = "UP" | "DOWN";

/** One component of the health document. */
export interface HealthComponent {
  status: HealthStatus;
  details: Record<string, unknown>;
}

/** The body of `GET /actuator/health`. */
export interface HealthDocument {
  status: HealthStatus;
  components: {
    brokers: HealthComponent;
    partitions: HealthComponent;
    clusterChange?: HealthComponent;
    writes: HealthComponent;
  };
}

/** The `writes` component: UP either way, since paused writes are a decision rather than a fault. */
function writesComponent(writesPaused: boolean): HealthComponent {
  return { status: "UP", details: { paused: writesPaused } };
}

/**
 * Computes the health document from the current view (undefined: no broker ever answered) and whether the access
 * policy pauses writes.
 */
export function gatewayHealth(view: TopologyView | undefined, writesPaused = false): HealthDocument {
  const writes = writesComponent(writesPaused);
  if (view === undefined) {
    const detail = { details: { reason: "no broker has answered the gateway yet" } };
    return {
      status: "DOWN",
      components: { brokers: { status: "DOWN", ...detail }, partitions: { status: "DOWN", ...detail }, writes },
    };
  }
  const members = [...view.configuration.members]
    .filter(([, member]) => member.state !== "LEFT")
    .map(([nodeId]) => nodeId)
    .sort((left, right) => left - right);
  const reachable = members.filter((nodeId) => view.reachable.has(nodeId));
  const unreachable = members.filter((nodeId) => !view.reachable.has(nodeId));
  const partitions = view.activePartitions.map((partitionId) => ({
    partitionId,
    leaderId: view.leaders.get(partitionId)?.nodeId ?? null,
  }));
  // Replicas of answering brokers that failed (a full disk, damaged storage): their partitions have a replica fewer
  // to lose, which whoever runs the cluster wants to know even while every partition has a leader. Replicas that are
  // only catching up or opening are not listed: they pass by themselves.
  const deadReplicas: { brokerId: number; partitionId: number }[] = [];
  for (const [brokerId, reports] of [...view.replicas].sort(([left], [right]) => left - right)) {
    for (const report of reports) {
      if (report.health !== "dead" || deadReplicas.length >= MAX_LISTED_REPLICAS) continue;
      deadReplicas.push({ brokerId, partitionId: report.partitionId });
    }
  }
  const brokers: HealthComponent = {
    status: reachable.length > 0 ? "UP" : "DOWN",
    details: { reachable, unreachable, deadReplicas },
  };
  const partitionComponent: HealthComponent = {
    status: partitions.length > 0 && partitions.every((partition) => partition.leaderId !== null) ? "UP" : "DOWN",
    details: { partitions },
  };
  const pendingChange = view.configuration.pendingChange;
  const clusterChange: HealthComponent = {
    status: "UP",
    details:
      pendingChange === null
        ? { changeRunning: false }
        : { changeRunning: true, changeId: pendingChange.id, pendingOperations: pendingChange.pending.length },
  };
  return {
    status: brokers.status === "UP" && partitionComponent.status === "UP" ? "UP" : "DOWN",
    components: { brokers, partitions: partitionComponent, clusterChange, writes },
  };
}
