/**
 * A cluster's status from its gateway's management port, wherever a provisioner runs it: readiness (every
 * partition has a leader) and whether a scaling change runs (the gateway's metric of pending change operations).
 */
import type { ClusterEndpoints, ProvisionedState } from "./provisioner.js";

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
}

/** The longest a poll waits for one answer. */
const PROBE_TIMEOUT_MS = 2_000;

/** The largest metrics document read, in bytes: what a broken or hostile endpoint can make the platform hold. */
const MAX_METRICS_BYTES = 4 * 1024 * 1024;

const pendingOperationsPattern = /^flowplane_cluster_change_operations_pending(?:\{[^}]*\})? (\d+(?:\.\d+)?)$/m;

/** Polls the gateway's readiness and metrics once. */
export async function probeClusterHealth(endpoints: ClusterEndpoints): Promise<HealthProbe> {
  let gatewayAnswering = false;
  let ready = false;
  try {
    const response = await fetch(`${endpoints.managementUrl}/actuator/health/readiness`, {
      signal: AbortSignal.timeout(PROBE_TIMEOUT_MS),
    });
    gatewayAnswering = true;
    ready = response.status === 200;
    await response.body?.cancel();
  } catch {
    return { gatewayAnswering: false, ready: false, changeRunning: false };
  }
  let changeRunning = false;
  try {
    const response = await fetch(`${endpoints.managementUrl}/actuator/prometheus`, {
      signal: AbortSignal.timeout(PROBE_TIMEOUT_MS),
    });
    // Protected metrics (monitoring active) answer 401: the status then says nothing about a running change.
    const length = Number(response.headers.get("content-length") ?? "0");
    if (response.status === 200 && length <= MAX_METRICS_BYTES) {
      const text = await response.text();
      const pending = pendingOperationsPattern.exec(text.slice(0, MAX_METRICS_BYTES));
      changeRunning = pending !== null && Number(pending[1]) > 0;
    } else {
      await response.body?.cancel();
    }
  } catch {
    // Metrics are a detail of the status; readiness decided it already.
  }
  return { gatewayAnswering, ready, changeRunning };
}

/**
 * The status of a cluster from what its provisioner says of its processes and what the poll found: Creating until
 * its first start ends, Updating while a scaling change runs, Healthy when ready, Unhealthy otherwise.
 */
export function deriveClusterStatus(
  previous: ClusterStatus,
  state: ProvisionedState,
  probe: HealthProbe | undefined,
): { status: ClusterStatus; gatewayStatus: ClusterStatus } {
  if (state === "starting" && previous === "Creating") return { status: "Creating", gatewayStatus: "Creating" };
  if (probe === undefined || state === "stopped" || state === "failed") {
    return { status: "Unhealthy", gatewayStatus: "Unhealthy" };
  }
  const gatewayStatus: ClusterStatus = probe.gatewayAnswering ? "Healthy" : "Unhealthy";
  if (!probe.ready) return { status: "Unhealthy", gatewayStatus };
  return { status: probe.changeRunning ? "Updating" : "Healthy", gatewayStatus };
}
