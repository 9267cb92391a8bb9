/**
 * A cluster's status from its gateway's management port, wherever a provisioner runs it: readiness (every
 * partition has a leader), the member brokers the gateway cannot reach, and whether a scaling change runs, all from
 * the gateway's health document.
 */
import type { ClusterEndpoints, ClusterProcessExit, ProvisionedState } from "./provisioner.js";

/** Cluster statuses of the Administration API. */
export const clusterStatuses = ["Creating", "Healthy", "Unhealthy", "Updating"] as const;

/** One cluster status. */
export type ClusterStatus = (typeof clusterStatuses)[number];

/** What one poll of a gateway found. */
export interface HealthProbe {
  /** The gateway's management port answered. */
  gatewayAnswering: boolean;
  /** Every partition has a leader. */
  ready: boolean;
  /** A scaling change has operations left. */
  changeRunning: boolean;
  /** Ids of member brokers the gateway cannot reach, ascending (at most `MAX_LISTED_BROKERS`). */
  unreachableBrokers: number[];
  /** Replicas of answering brokers that failed, at most `MAX_LISTED_BROKERS`. */
  deadReplicas: { brokerId: number; partitionId: number }[];
}

/** Most unreachable brokers a probe keeps: a reason names a few, and the health document is not trusted to be small. */
const MAX_LISTED_BROKERS = 64;

/** The longest a poll waits for one answer. */
const PROBE_TIMEOUT_MS = 2_000;

/** The largest health document read, in bytes: what a broken or hostile endpoint can make the platform hold. */
const MAX_HEALTH_BYTES = 256 * 1024;

/** What the probe reads of the gateway's health document. */
interface HealthDocumentView {
  status?: unknown;
  components?: {
    brokers?: { details?: { unreachable?: unknown; deadReplicas?: unknown } };
    clusterChange?: { details?: { changeRunning?: unknown } };
  };
}

/**
 * Polls the gateway's health document once: readiness is its status, and its `clusterChange` component says
 * whether a scaling change runs. The health routes answer every address without credentials (unlike the metrics,
 * which monitoring may protect), so the probe works whatever the cluster's access policy says.
 */
export async function probeClusterHealth(endpoints: ClusterEndpoints): Promise<HealthProbe> {
  let response: Response;
  try {
    response = await fetch(`${endpoints.managementUrl}/actuator/health`, {
      signal: AbortSignal.timeout(PROBE_TIMEOUT_MS),
    });
  } catch {
    return { gatewayAnswering: false, ready: false, changeRunning: false, unreachableBrokers: [], deadReplicas: [] };
  }
  const ready = response.status === 200;
  let changeRunning = false;
  let unreachableBrokers: number[] = [];
  let deadReplicas: HealthProbe["deadReplicas"] = [];
  try {
    const length = Number(response.headers.get("content-length") ?? "0");
    if (length > MAX_HEALTH_BYTES) {
      await response.body?.cancel();
    } else {
      const text = await response.text();
      const health = JSON.parse(text.slice(0, MAX_HEALTH_BYTES)) as HealthDocumentView;
      changeRunning = health.components?.clusterChange?.details?.changeRunning === true;
      const unreachable = health.components?.brokers?.details?.unreachable;
      if (Array.isArray(unreachable)) {
        unreachableBrokers = unreachable
          .filter((id): id is number => Number.isSafeInteger(id) && id >= 0)
          .slice(0, MAX_LISTED_BROKERS)
          .sort((left, right) => left - right);
      }
      const dead = health.components?.brokers?.details?.deadReplicas;
      if (Array.isArray(dead)) deadReplicas = dead.filter(isDeadReplica).slice(0, MAX_LISTED_BROKERS);
    }
  } catch {
    // A body that is not the health document says nothing of a change; the status decided readiness already.
  }
  return { gatewayAnswering: true, ready, changeRunning, unreachableBrokers, deadReplicas };
}

/** Whether a health document's entry is a dead replica as the gateway lists them (the document is not trusted). */
function isDeadReplica(value: unknown): value is HealthProbe["deadReplicas"][number] {
  if (typeof value !== "object" || value === null) return false;
  const { brokerId, partitionId } = value as Record<string, unknown>;
  return Number.isSafeInteger(brokerId) && Number.isSafeInteger(partitionId);
}

/** A cluster's status, the gateway's, and why the cluster is not Healthy (absent when it is). */
export interface DerivedStatus {
  status: ClusterStatus;
  gatewayStatus: ClusterStatus;
  reason?: string;
}

/**
 * The status of a cluster from what its provisioner says of its processes and what the poll found: Creating until
 * its first start ends, Updating while a scaling change runs, Healthy when ready, Unhealthy otherwise, with the
 * reason an operator needs first (a member broker the gateway cannot reach makes it Unhealthy too). `restarting`
 * describes a process that ended unexpectedly and is being restarted.
 */
export function deriveClusterStatus(
  previous: ClusterStatus,
  state: ProvisionedState,
  probe: HealthProbe | undefined,
  restarting?: ClusterProcessExit,
): DerivedStatus {
  if (state === "starting" && previous === "Creating") return { status: "Creating", gatewayStatus: "Creating" };
  if (state === "stopped") {
    return { status: "Unhealthy", gatewayStatus: "Unhealthy", reason: "the cluster's processes are not running" };
  }
  if (state === "failed") {
    return { status: "Unhealthy", gatewayStatus: "Unhealthy", reason: "the cluster's processes failed to start" };
  }
  if (probe === undefined) {
    return { status: "Unhealthy", gatewayStatus: "Unhealthy", reason: "the cluster has no management address yet" };
  }
  const gatewayStatus: ClusterStatus = probe.gatewayAnswering ? "Healthy" : "Unhealthy";
  if (state === "degraded" && restarting !== undefined) {
    return { status: "Unhealthy", gatewayStatus, reason: describeProcessExit(restarting) };
  }
  if (!probe.gatewayAnswering) {
    return { status: "Unhealthy", gatewayStatus, reason: "the gateway's management port does not answer" };
  }
  if (!probe.ready) return { status: "Unhealthy", gatewayStatus, reason: "a partition has no leader" };
  if (probe.changeRunning) return { status: "Updating", gatewayStatus };
  // Every partition still has a leader, but the partitions with a replica on an unreachable broker have one replica
  // fewer to lose: that is no healthy cluster.
  if (probe.unreachableBrokers.length > 0) {
    const ids = probe.unreachableBrokers;
    return {
      status: "Unhealthy",
      gatewayStatus,
      reason: `${ids.length === 1 ? "broker" : "brokers"} ${ids.join(", ")} cannot be reached (every partition still has a leader)`,
    };
  }
  // The same for replicas that failed on brokers that answer (a full disk, damaged storage).
  if (probe.deadReplicas.length > 0) {
    const listed = probe.deadReplicas
      .slice(0, 8)
      .map((replica) => `partition ${replica.partitionId} on broker ${replica.brokerId}`);
    const more =
      probe.deadReplicas.length > listed.length ? ` and ${probe.deadReplicas.length - listed.length} more` : "";
    return {
      status: "Unhealthy",
      gatewayStatus,
      reason: `replicas failed: ${listed.join(", ")}${more} (every partition still has a leader)`,
    };
  }
  return { status: "Healthy", gatewayStatus };
}

/** Says what ended a process and when it comes back, e.g. `broker 2 exited unexpectedly (SIGKILL); restart 1 in 0.5 s`. */
export function describeProcessExit(exit: ClusterProcessExit): string {
  const cause = exit.signal !== null ? exit.signal : `exit code ${exit.exitCode ?? "unknown"}`;
  const seconds = Math.round(exit.restartInMs / 100) / 10;
  return `${exit.process} exited unexpectedly (${cause}); restart ${exit.restarts} in ${seconds} s`;
}
