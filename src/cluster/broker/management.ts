/**
 * The broker's management HTTP server: health (overall, liveness, readiness) and Prometheus metrics from a
 * registry of its own, so several brokers in one process (tests) do not share series.
 *
 * It starts first, before the broker learns the cluster's configuration and opens its replicas, which can take long
 * (replicas restore their engines from large snapshots): meanwhile the health says the broker is STARTING and at
 * which step, and neither the health nor the readiness is UP; liveness is, since the start is progressing and a
 * probe that restarted the process would only start it over.
 */
import type { Logger } from "pino";
import { Counter, Gauge, Histogram, Registry } from "prom-client";
import type { HttpServerLimits } from "../../http/limits.js";
import { createHttpServer, type HttpServer } from "../../http/server.js";
import type { BufferedMessages } from "./message-memory.js";
import type { ReceiptDamageReport } from "./partition-replica.js";
import type { ReplicaReport } from "./protocol.js";

/** What the management server and the metrics read from the broker. */
export interface ManagementSource {
  readonly nodeId: number;
  /** Reports of the hosted replicas. */
  replicas(): readonly ReplicaReport[];
  /** Why the replica of `partitionId` is dead (bounded), or null when it is not. */
  deadReason(partitionId: number): string | null;
  /** Log size of each hosted replica, by partition id. */
  logSizes(): ReadonlyMap<number, number>;
  /** What each running replica buffers, by partition id. */
  bufferedMessages(): ReadonlyMap<number, BufferedMessages>;
  /** The most bytes of buffered messages the broker's partitions hold together before publications are refused. */
  readonly maxBufferedMessageBytes: number;
  /** Whether each other known broker was heard from recently, by broker id. */
  peerReachability(): ReadonlyMap<number, boolean>;
  /** Whether the broker is stopping. */
  closing(): boolean;
  /** What the broker's start is doing (e.g. "opening partition replicas"), or null once it has started. */
  startingStep(): string | null;
}

/** Counters and histograms the request handler updates. */
export interface BrokerMetrics {
  readonly registry: Registry;
  /** Counts a handled request by type and outcome and records its duration. */
  observeRequest(type: string, outcome: string, durationSeconds: number): void;
  /** Records one durable commit of the replicas' storage: how long it took and how many writes it carried. */
  observeCommit(durationSeconds: number, writes: number): void;
  /** Records one snapshot of a partition replica: how long it took to encode and write, and its size. */
  observeSnapshot(partitionId: number, durationSeconds: number, sizeBytes: number): void;
  /** Records one operation of a cluster change this broker applied, by type, and how long it took. */
  observeOperation(operation: string, durationSeconds: number): void;
  /** Records one part of a backup a leader replica here wrote: how it ended and the bytes it wrote. */
  observeBackupPart(partitionId: number, state: string, writtenBytes: number): void;
  /** Counts snapshot data a replica here received damaged from its leader: chunks, and whole snapshots rejected. */
  observeReceiptDamage(damage: ReceiptDamageReport): void;
}

const ROLE_VALUES = { leader: 2, follower: 1, inactive: 0 } as const;

/** Creates the broker's metrics; gauges read `source` when scraped. */
export function createBrokerMetrics(source: ManagementSource): BrokerMetrics {
  const registry = new Registry();
  registry.setDefaultLabels({ broker: String(source.nodeId) });
  const requests = new Counter({
    name: "flowplane_broker_requests_total",
    help: "Requests handled by the broker, by type and outcome.",
    labelNames: ["type", "outcome"],
    registers: [registry],
  });
  const latency = new Histogram({
    name: "flowplane_broker_request_duration_seconds",
    help: "Time from receiving a request to answering it.",
    labelNames: ["type"],
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
    registers: [registry],
  });
  const commitDuration = new Histogram({
    name: "flowplane_storage_commit_duration_seconds",
    help: "Time of one durable commit of the replicas' storage (its journal, and LMDB when snapshot chunks change), the disk sync included.",
    buckets: [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25],
    registers: [registry],
  });
  const commitWrites = new Histogram({
    name: "flowplane_storage_commit_writes",
    help: "Writes of all hosted replicas made durable by one commit (group commit).",
    buckets: [1, 2, 4, 8, 16, 32, 64, 128, 256],
    registers: [registry],
  });
  const snapshotDuration = new Histogram({
    name: "flowplane_partition_snapshot_duration_seconds",
    help: "Time to take one snapshot of a partition replica: encoding it (a slice per event-loop turn) and writing its chunks durably.",
    labelNames: ["partition"],
    buckets: [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers: [registry],
  });
  const snapshotSize = new Gauge({
    name: "flowplane_partition_snapshot_size_bytes",
    help: "Size of the latest snapshot the partition replica took.",
    labelNames: ["partition"],
    registers: [registry],
  });
  const operationDuration = new Histogram({
    name: "flowplane_cluster_change_operation_duration_seconds",
    help: "Time this broker took to apply one operation of a cluster change (retries included), by operation type.",
    labelNames: ["operation"],
    buckets: [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600],
    registers: [registry],
  });
  const backupParts = new Counter({
    name: "flowplane_backup_parts_total",
    help: "Parts of backups the partition leaders on this broker wrote, by partition and how they ended (COMPLETED or FAILED).",
    labelNames: ["partition", "state"],
    registers: [registry],
  });
  const backupPartBytes = new Gauge({
    name: "flowplane_backup_part_written_bytes",
    help: "Bytes the latest backup part of the partition written on this broker holds.",
    labelNames: ["partition"],
    registers: [registry],
  });
  const damagedChunks = new Counter({
    name: "flowplane_partition_snapshot_chunks_damaged_total",
    help: "Snapshot chunks a replica here received from its leader whose bytes failed the checksum sent with them (each is received again).",
    labelNames: ["partition"],
    registers: [registry],
  });
  const rejectedSnapshots = new Counter({
    name: "flowplane_partition_snapshots_rejected_total",
    help: "Snapshots a replica here received whose whole checksum failed after their last byte (each is received again from its start).",
    labelNames: ["partition"],
    registers: [registry],
  });
  // One gauge labelled by partition, its values read at each scrape from `entries` (partition id, value).
  const perPartitionGauge = (name: string, help: string, entries: () => Iterable<readonly [number, number]>) =>
    new Gauge({
      name,
      help,
      labelNames: ["partition"],
      registers: [registry],
      collect() {
        this.reset();
        for (const [partitionId, value] of entries()) this.set({ partition: String(partitionId) }, value);
      },
    });
  const partitionGauge = (name: string, help: string, read: (report: ReplicaReport) => number) =>
    perPartitionGauge(name, help, () => source.replicas().map((report) => [report.partitionId, read(report)] as const));
  const bufferedGauge = (name: string, help: string, read: (buffered: BufferedMessages) => number) =>
    perPartitionGauge(name, help, () =>
      [...source.bufferedMessages()].map(([partitionId, buffered]) => [partitionId, read(buffered)] as const),
    );
  partitionGauge(
    "flowplane_partition_role",
    "Role of the replica: 2 leader, 1 follower, 0 inactive.",
    (report) => ROLE_VALUES[report.role],
  );
  partitionGauge("flowplane_partition_term", "Raft term of the replica.", (report) => report.term);
  partitionGauge("flowplane_partition_commit_index", "Commit index the replica knows.", (report) => report.commitIndex);
  partitionGauge("flowplane_partition_applied_index", "Index the replica applied.", (report) => report.appliedIndex);
  partitionGauge("flowplane_partition_healthy", "1 when the replica is healthy.", (report) =>
    report.health === "healthy" ? 1 : 0,
  );
  perPartitionGauge(
    "flowplane_partition_log_size_entries",
    "Entries held in the replica's log after its latest snapshot.",
    () => source.logSizes(),
  );
  bufferedGauge(
    "flowplane_partition_buffered_messages",
    "Messages the replica buffers.",
    (buffered) => buffered.messages,
  );
  bufferedGauge(
    "flowplane_partition_buffered_message_bytes",
    "Bytes of the records of the messages the replica buffers.",
    (buffered) => buffered.bytes,
  );
  new Gauge({
    name: "flowplane_broker_buffered_message_bytes_limit",
    help: "Bytes of buffered messages the broker's partitions hold together before their leaders refuse publications.",
    registers: [registry],
    collect() {
      this.set(source.maxBufferedMessageBytes);
    },
  });
  new Gauge({
    name: "flowplane_broker_peer_reachable",
    help: "1 when the other broker was heard from recently.",
    labelNames: ["peer"],
    registers: [registry],
    collect() {
      this.reset();
      for (const [peer, reachable] of source.peerReachability()) this.set({ peer: String(peer) }, reachable ? 1 : 0);
    },
  });
  return {
    registry,
    observeRequest(type, outcome, durationSeconds) {
      requests.inc({ type, outcome });
      latency.observe({ type }, durationSeconds);
    },
    observeCommit(durationSeconds, writes) {
      commitDuration.observe(durationSeconds);
      commitWrites.observe(writes);
    },
    observeSnapshot(partitionId, durationSeconds, sizeBytes) {
      snapshotDuration.observe({ partition: String(partitionId) }, durationSeconds);
      snapshotSize.set({ partition: String(partitionId) }, sizeBytes);
    },
    observeOperation(operation, durationSeconds) {
      operationDuration.observe({ operation }, durationSeconds);
    },
    observeBackupPart(partitionId, state, writtenBytes) {
      backupParts.inc({ partition: String(partitionId), state });
      backupPartBytes.set({ partition: String(partitionId) }, writtenBytes);
    },
    observeReceiptDamage({ partitionId, chunks, snapshots }) {
      if (chunks > 0) damagedChunks.inc({ partition: String(partitionId) }, chunks);
      if (snapshots > 0) rejectedSnapshots.inc({ partition: String(partitionId) }, snapshots);
    },
  };
}

/** Starts the management server on `host:port` (0: any free port); resolves once it listens. */
export async function startManagementServer(options: {
  readonly host: string;
  readonly port: number;
  readonly source: ManagementSource;
  readonly metrics: BrokerMetrics;
  readonly logger: Logger;
  /** The request deadline and connection limits (`service.http`). */
  readonly limits: HttpServerLimits;
}): Promise<{ server: HttpServer; url: string }> {
  const { source, metrics } = options;
  const server = createHttpServer({
    logger: options.logger,
    bodyLimitBytes: 1024,
    trustProxy: false,
    limits: options.limits,
  });
  const partitionComponents = () =>
    Object.fromEntries(
      source.replicas().map((report) => [
        `partition-${report.partitionId}`,
        {
          status: report.health === "healthy" ? "UP" : "DOWN",
          details: {
            role: report.role,
            leaderId: report.leaderId,
            term: report.term,
            ...(report.health === "dead" ? { reason: source.deadReason(report.partitionId) } : {}),
          },
        },
      ]),
    );
  const brokerComponent = () => {
    const step = source.startingStep();
    if (source.closing()) return { status: "DOWN", details: { state: "STOPPING" } };
    if (step !== null) return { status: "DOWN", details: { state: "STARTING", step } };
    return { status: "UP", details: { state: "RUNNING" } };
  };
  const started = () => !source.closing() && source.startingStep() === null;
  const ready = () => started() && source.replicas().every((report) => report.leaderId !== null);
  server.get("/actuator/health", async (_request, reply) => {
    const replicas = source.replicas();
    const up = started() && replicas.every((report) => report.health === "healthy");
    return reply
      .code(up ? 200 : 503)
      .send({ status: up ? "UP" : "DOWN", components: { broker: brokerComponent(), ...partitionComponents() } });
  });
  server.get("/actuator/health/liveness", async (_request, reply) => {
    const alive = !source.closing();
    return reply.code(alive ? 200 : 503).send({ status: alive ? "UP" : "DOWN" });
  });
  server.get("/actuator/health/readiness", async (_request, reply) => {
    const isReady = ready();
    return reply.code(isReady ? 200 : 503).send({ status: isReady ? "UP" : "DOWN" });
  });
  server.get("/actuator/prometheus", async (_request, reply) => {
    const text = await metrics.registry.metrics();
    return reply.header("content-type", metrics.registry.contentType).send(text);
  });
  const url = await server.listen({ host: options.host, port: options.port });
  return { server, url };
}
