/**
 * The gateway's Prometheus metrics: REST request counts and latencies per route and status, requests in progress,
 * requests the access policy refused and changes of the policy file, the fetches and age of the issuer's key set, and
 * per partition replica the role, term, commit index and applied index the brokers reported in the latest topology
 * round. Replica metrics are rebuilt at every scrape so that a replica that moved away disappears.
 */
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from "prom-client";
import type { TopologyView } from "./topology-view.js";

/** Options of GatewayMetrics. */
export interface GatewayMetricsOptions {
  /** The current topology view (read at every scrape). */
  topology: () => TopologyView | undefined;
  /** Requests in progress now (read at every scrape). */
  inFlightRequests: () => number;
  /** Age of the issuer's key set the gateway verifies tokens with; undefined before one was fetched. */
  tokenKeySetAgeMs?: () => number | undefined;
}

/** The gateway's metric registry; see the module comment. */
export class GatewayMetrics {
  readonly registry = new Registry();
  private readonly requests: Counter<"method" | "route" | "status">;
  private readonly latency: Histogram<"method" | "route" | "status">;
  private readonly accessRefusals: Counter<"reason">;
  private readonly accessPolicyUpdates: Counter<"outcome">;
  private readonly tokenKeySetFetches: Counter<"outcome">;

  constructor(options: GatewayMetricsOptions) {
    const registers = [this.registry];
    collectDefaultMetrics({ register: this.registry, prefix: "flowplane_gateway_process_" });
    this.requests = new Counter({
      name: "flowplane_gateway_requests_total",
      help: "REST requests answered by the gateway, by method, route and status.",
      labelNames: ["method", "route", "status"],
      registers,
    });
    this.latency = new Histogram({
      name: "flowplane_gateway_request_duration_seconds",
      help: "Time the gateway took to answer REST requests, by method, route and status.",
      labelNames: ["method", "route", "status"],
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
      registers,
    });
    this.accessRefusals = new Counter({
      name: "flowplane_gateway_access_refusals_total",
      help: "Requests the cluster's access policy refused, on both ports, by reason.",
      labelNames: ["reason"],
      registers,
    });
    this.accessPolicyUpdates = new Counter({
      name: "flowplane_gateway_access_policy_updates_total",
      help: "Changes of the access policy file: applied, or rejected (the last valid policy stayed in force).",
      labelNames: ["outcome"],
      registers,
    });
    this.tokenKeySetFetches = new Counter({
      name: "flowplane_gateway_token_key_set_fetches_total",
      help: "Fetches of the issuer's key set (JWKS) that verifies tokens, by outcome: succeeded or failed.",
      labelNames: ["outcome"],
      registers,
    });
    new Gauge({
      name: "flowplane_gateway_token_key_set_age_seconds",
      help:
        "Time since the issuer's key set the gateway verifies tokens with was fetched (NaN before the first fetch). " +
        "It is fetched again every 10 minutes; beyond that, fetching it fails and the last set is in use.",
      registers,
      collect() {
        // A gauge without labels always has a value (prom-client): NaN says that there is none yet, where 0 would
        // say that the set is fresh.
        const ageMs = options.tokenKeySetAgeMs?.();
        this.set(ageMs === undefined ? Number.NaN : ageMs / 1000);
      },
    });
    new Gauge({
      name: "flowplane_gateway_in_flight_requests",
      help: "Requests the gateway is routing to brokers right now.",
      registers,
      collect() {
        this.set(options.inFlightRequests());
      },
    });
    new Gauge({
      name: "flowplane_gateway_brokers_reachable",
      help: "Brokers that answered the gateway's latest topology round.",
      registers,
      collect() {
        this.set(options.topology()?.reachable.size ?? 0);
      },
    });
    const replicaGauge = (name: string, help: string, read: (report: ReplicaNumbers) => number | undefined) =>
      new Gauge({
        name,
        help,
        labelNames: ["partition", "broker"],
        registers,
        collect() {
          this.reset();
          for (const [brokerId, reports] of options.topology()?.replicas ?? []) {
            for (const report of reports) {
              const value = read(report);
              if (value !== undefined)
                this.set({ partition: String(report.partitionId), broker: String(brokerId) }, value);
            }
          }
        },
      });
    replicaGauge(
      "flowplane_partition_term",
      "Raft term of each partition replica, as its broker reports it.",
      (r) => r.term,
    );
    replicaGauge(
      "flowplane_partition_commit_index",
      "Raft commit index of each partition replica, as its broker reports it.",
      (report) => report.commitIndex,
    );
    replicaGauge(
      "flowplane_partition_applied_index",
      "Index of the last entry each partition replica applied to its state machine.",
      (report) => report.appliedIndex,
    );
    replicaGauge(
      "flowplane_partition_log_size_entries",
      "Entries each partition replica holds in its log after its latest snapshot, as its broker reports it.",
      (report) => report.logSizeEntries,
    );
    const changeGauge = (name: string, help: string, read: (view: TopologyView) => number | null) =>
      new Gauge({
        name,
        help,
        registers,
        collect() {
          this.reset();
          const view = options.topology();
          const value = view === undefined ? null : read(view);
          if (value !== null) this.set(value);
        },
      });
    const runningProgress = (view: TopologyView) => {
      const pending = view.configuration.pendingChange;
      if (pending === null) return undefined;
      return [...view.changeProgress.values()].find((progress) => progress.changeId === pending.id);
    };
    changeGauge(
      "flowplane_cluster_configuration_version",
      "Version of the cluster configuration the gateway knows (it increases when a change starts and ends).",
      (view) => view.configuration.version,
    );
    changeGauge(
      "flowplane_cluster_change_operations_pending",
      "Operations of the running cluster change still to apply (0 when no change runs).",
      (view) => view.configuration.pendingChange?.pending.length ?? 0,
    );
    changeGauge(
      "flowplane_cluster_change_operations_completed",
      "Operations of the running cluster change already applied (0 when no change runs).",
      (view) => view.configuration.pendingChange?.completed.length ?? 0,
    );
    changeGauge(
      "flowplane_cluster_change_bytes_total",
      "Bytes the running operation has to move (a replica catching up), as its broker estimates them.",
      (view) => runningProgress(view)?.bytesTotal ?? null,
    );
    changeGauge(
      "flowplane_cluster_change_bytes_moved",
      "Bytes the running operation has moved so far.",
      (view) => runningProgress(view)?.bytesMoved ?? null,
    );
    changeGauge(
      "flowplane_cluster_change_estimated_seconds_left",
      "Estimated time left of the running operation, from its bytes and its recent rate.",
      (view) => runningProgress(view)?.estimatedSecondsLeft ?? null,
    );
    changeGauge(
      "flowplane_cluster_change_operation_attempts",
      "Attempts at the running operation so far (more than 1: it failed and is retried with backoff).",
      (view) => runningProgress(view)?.attempts ?? null,
    );
    new Gauge({
      name: "flowplane_partition_role",
      help: "1 for the role each partition replica reports (leader, follower or inactive).",
      labelNames: ["partition", "broker", "role"],
      registers,
      collect() {
        this.reset();
        for (const [brokerId, reports] of options.topology()?.replicas ?? []) {
          for (const report of reports) {
            this.set({ partition: String(report.partitionId), broker: String(brokerId), role: report.role }, 1);
          }
        }
      },
    });
  }

  /** Records one answered REST request. */
  observeRequest(method: string, route: string, status: number, durationSeconds: number): void {
    const labels = { method, route, status: String(status) };
    this.requests.inc(labels);
    this.latency.observe(labels, durationSeconds);
  }

  /** Records one request the access policy refused. */
  observeAccessRefusal(reason: string): void {
    this.accessRefusals.inc({ reason });
  }

  /** Records one fetch of the issuer's key set. */
  observeTokenKeySetFetch(outcome: "succeeded" | "failed"): void {
    this.tokenKeySetFetches.inc({ outcome });
  }

  /** Records one change of the access policy file. */
  observeAccessPolicyUpdate(outcome: "applied" | "rejected"): void {
    this.accessPolicyUpdates.inc({ outcome });
  }
}

interface ReplicaNumbers {
  term: number;
  commitIndex: number;
  appliedIndex: number;
  logSizeEntries?: number;
}
