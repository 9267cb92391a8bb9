/**
 * Benchmark `scaling`: what resizing a running cluster costs when its partitions hold a lot of state, side by side
 * with the physical limit of moving the same bytes on this machine, measured in the same run.
 *
 * A. A replica joining a partition that holds FLOWPLANE_BENCH_STATE_MB (default 1024) of buffered messages, most of
 *    it in a snapshot: a local cluster of 3 brokers with 1 partition (RF 3) is filled through the gateway with
 *    messages that live for a day, with the snapshot interval chosen so the replicas snapshot at 97% of the fill. Two
 *    new brokers are added (`POST /actuator/cluster/brokers/{b}`); then a replica joins on the first with no other
 *    load (`POST /actuator/cluster/brokers/{b}/partitions/1`, `{"priority":1}`), and one joins on the second while
 *    publishers write to the partition. For each join: the time until the replica has received and installed the
 *    snapshot, until it has caught up (its applied index reaches the commit index the leader reported just before,
 *    read from both brokers' Prometheus metrics every 250 ms), and until it is a voter (the change COMPLETED); the
 *    bytes it received (the change's progress in `GET /actuator/cluster`); the resident memory of the leader's and
 *    the joiner's processes (`/proc/<pid>/status`, sampled every 100 ms, peaks reset before the join); and the
 *    publishers' throughput before, during and after the second join.
 * B. Scale-up from 3 to 6 brokers (`POST /actuator/cluster/brokers` `[0,…,5]`) of a cluster with 3 partitions (RF 3)
 *    holding FLOWPLANE_BENCH_STATE_MB in all, while publishers write round robin: the time until COMPLETED, the bytes
 *    the joining replicas received, the publishers' throughput during the change against before it; then the
 *    scale-down back to 3 brokers (`[0,1,2]`) the same way, after which the removed brokers are stopped.
 *
 * The physical limits, measured before and after the joins of each part (the machine is shared, so every limit is
 * measured more than once and the faster run is the limit): `cp` of a file of the bytes the joins move between two
 * directories of the same disk followed by `sync`, and the same file sent over a loopback TCP socket from one Node.js
 * process to another, which writes it to a file and fsyncs it before it answers (`tcp-copy.ts`). The source file is
 * in the page cache in both, as a leader's recent snapshot mostly is. Beside them, the least a joiner must do besides
 * moving the bytes: rebuilding an engine of the same state from its snapshot, alone in a process (`engine-rebuild.ts`),
 * and allocating and touching for the first time as much new memory as the state, where the joiner keeps it (the TCP
 * copy's receiver reuses its read buffers and never does). A joiner receives and rebuilds on its one JavaScript
 * thread, so the receiver's CPU of the TCP copy plus the rebuild's CPU (and the first touch's) is a floor under its
 * time, printed against the TCP copy with the ratios. And the least a join can be end to end, measured: the TCP copy
 * of a real snapshot of that state whose receiver also keeps every byte where it read it (in the transport's regions)
 * and rebuilds the engine from them as they arrive, with no framing, checksums, window, Raft or LMDB (`tcp-copy.ts
 * restore`). A join's time beyond that copy's is what its protocol and storage cost. The TCP copy is measured once
 * more while the publishers of the loaded join, and of the changes, still write (after their last window): the same
 * limit under the conditions the loaded join and the changes ran in, which the publishers' writes take a share of the
 * processor from.
 *
 * Every measurement (each copy, each rebuild, each join and each change) starts right after a process of its own
 * allocated, touched and freed three times its bytes (`recycled-memory.ts`): on a virtual machine, writing into memory
 * the host must provide anew costs several times what writing into memory freed a moment before does, and which one a
 * measurement gets would otherwise depend on what ran before it. The limits table prints what that recycling took.
 *
 * Settings (environment): FLOWPLANE_BENCH_STATE_MB (state per part, default 1024), FLOWPLANE_BENCH_FILL_MESSAGES
 * (messages the state is made of, default 65,536: the message size follows; at most 240 KiB of variables each),
 * FLOWPLANE_BENCH_PARTS (`join,scale` by default), FLOWPLANE_BENCH_LOAD_CLIENTS (publishers during the changes,
 * default 8), FLOWPLANE_BENCH_LOAD_RATE (the writes per second they offer together, default 300; 0 makes them a closed
 * loop, which measures the cluster's capacity but also every neighbour's load on a shared machine, and writes enough
 * entries to make the replicas snapshot again during the changes), FLOWPLANE_BENCH_BROKER_HEAP_MB (`--max-old-space-size` for the brokers and the gateway),
 * FLOWPLANE_BENCH_NODE_ARGUMENTS (more Node.js arguments for the brokers and the gateway, space-separated, e.g.
 * `--cpu-prof --cpu-prof-dir=/tmp/profiles` or `--trace-gc`),
 * FLOWPLANE_BENCH_DEADLINE_MIN (the run stops itself after this, default 30 + 5 per 100 MB of state).
 * Everything runs on 127.0.0.1 in a temporary directory, which is deleted at the end.
 */
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { closeSync, fsyncSync, openSync, rmSync, writeSync } from "node:fs";
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { freemem, tmpdir } from "node:os";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { pino } from "pino";
import { Pool } from "undici";
import { DEFAULT_TENANT_ID, encodeRecord, parseKey } from "../../src/cluster/engine/index.js";
import { withMallocHugePages } from "../../src/platform/provisioner/child-environment.js";
import {
  addLocalBrokers,
  defaultCommand,
  type LocalBroker,
  type LocalCluster,
  removeLocalBrokers,
  startLocalCluster,
} from "../../src/platform/provisioner/index.js";
import { BenchmarkChildren } from "../support/children.js";
import { CpuRecorder, type CpuShares } from "../support/cpu.js";
import { type MemoryReading, MemorySampler, resetPeakMemory } from "../support/memory.js";
import { type BenchmarkPlatform, startPlatform, stopChild } from "../support/platform.js";
import { recycleMemory } from "../support/recycled-memory.js";
import { formatNumber, printTable } from "../support/report.js";
import { changeTimeline, TIMELINE_COLUMNS } from "./timeline.js";

const MiB = 1024 * 1024;
const repositoryRoot = fileURLToPath(new URL("../../", import.meta.url));
// Every process this benchmark starts (the floors' copies, the rebuild, the recycling) keeps its memory as the local
// cluster's brokers keep theirs (child-environment.ts), so that the floors and the joins pay alike for new memory.
process.env.GLIBC_TUNABLES = withMallocHugePages(process.env.GLIBC_TUNABLES);

const tcpCopyScript = fileURLToPath(new URL("./tcp-copy.ts", import.meta.url));
const engineRebuildScript = fileURLToPath(new URL("./engine-rebuild.ts", import.meta.url));

const stateBytes = environmentInteger("FLOWPLANE_BENCH_STATE_MB", 1024) * MiB;
const targetFillMessages = environmentInteger("FLOWPLANE_BENCH_FILL_MESSAGES", 65_536);
const loadClients = environmentInteger("FLOWPLANE_BENCH_LOAD_CLIENTS", 8);
/** Publications per second the load offers (0: as fast as the clients go, a closed loop). */
const loadRate = environmentInteger("FLOWPLANE_BENCH_LOAD_RATE", 300, 0);
const brokerHeapMb = process.env.FLOWPLANE_BENCH_BROKER_HEAP_MB;
const parts = new Set((process.env.FLOWPLANE_BENCH_PARTS ?? "join,scale").split(",").map((part) => part.trim()));
const runDeadlineMs =
  environmentInteger("FLOWPLANE_BENCH_DEADLINE_MIN", 30 + Math.ceil((5 * stateBytes) / (100 * MiB))) * 60_000;

/** Publishers filling a partition's state. */
const fillClients = 16;
/** Largest msgpack-encoded variables a message may have is 256 KiB; the fill stays below it. */
const maxPayloadBytes = 240 * 1024;
/** Messages of the fill live this long: they stay buffered for the whole run. */
const fillTimeToLiveMs = 24 * 3_600_000;
/** Payload of the publishers measuring throughput, and how long their messages live (longer than the run). */
const loadPayloadBytes = 256;
const loadTimeToLiveMs = 3_600_000;
/** Unmeasured load before the "before" window, and the length of the windows before and after a change. */
const loadWarmupMs = 3_000;
const windowMs = 10_000;
/** The replicas snapshot once this share of a partition's fill is applied; the rest of the fill stays in the log. */
const snapshotShare = 0.97;
const startTimeoutMs = 120_000;
/** Longest wait for one change, or one join, to complete. */
const changeTimeoutMs = 30 * 60_000;
const pollIntervalMs = 250;
const memoryIntervalMs = 100;

function environmentInteger(name: string, fallback: number, minimum = 1): number {
  const text = process.env[name];
  if (text === undefined || text === "") return fallback;
  const value = Number(text);
  if (!Number.isSafeInteger(value) || value < minimum) {
    throw new Error(`${name} must be an integer of at least ${minimum}, got "${text}"`);
  }
  return value;
}

/** "8 publishers offering 300 writes/s" or "8 closed-loop publishers". */
function loadDescription(): string {
  return loadRate > 0
    ? `${loadClients} publishers offering ${loadRate} writes/s`
    : `${loadClients} closed-loop publishers`;
}

const sleep = (milliseconds: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, milliseconds));
const seconds = (milliseconds: number): string => formatNumber(milliseconds / 1000, 1);
const mebibytes = (bytes: number): string => formatNumber(bytes / MiB, 0);
const megabytesPerSecond = (bytes: number, milliseconds: number): string =>
  formatNumber(bytes / MiB / (milliseconds / 1000), 0);
/** Signed growth in MiB. */
const growth = (after: number | undefined, before: number | undefined): string =>
  after === undefined || before === undefined ? "n/a" : `${after >= before ? "+" : ""}${mebibytes(after - before)}`;

/** The run's child processes and its stop-by-itself guard; set at the start of `run()`. */
let children: BenchmarkChildren;
/** The machine's processor time and this run's share of it, sampled every 500 ms; set at the start of `run()`. */
let cpuRecorder: CpuRecorder | undefined;
/** The cluster being measured (its processes count as this run's in `cpu`). */
let currentCluster: LocalCluster | undefined;
let platformPid: number | undefined;

/** This run's processes: this one, the platform, the brokers and the gateway of the cluster being measured. */
function ownPids(): number[] {
  const pids = [process.pid];
  if (platformPid !== undefined) pids.push(platformPid);
  if (currentCluster !== undefined) {
    if (currentCluster.gatewayPid !== undefined) pids.push(currentCluster.gatewayPid);
    for (const broker of currentCluster.brokers) if (broker.pid !== undefined) pids.push(broker.pid);
  }
  return pids;
}

/** "machine busy / of which others" in percent of all cores, for a window. */
function cpuText(shares: CpuShares | undefined): string {
  if (shares === undefined) return "n/a";
  return `${formatNumber(shares.machine * 100)} / ${formatNumber(shares.others * 100)}`;
}

// ---------------------------------------------------------------------------------------------------------------
// The messages of the fill

/** What one message of the fill looks like, and how large its record is. */
interface FillShape {
  readonly messages: number;
  readonly body: string;
  /** Bytes of the record the engine buffers for one message (what its state is counted in). */
  readonly recordBytes: number;
  /** Characters of the one variable each message carries. */
  readonly payloadBytes: number;
}

function fillShape(): FillShape {
  const payloadBytes = Math.max(256, Math.min(maxPayloadBytes, Math.floor(stateBytes / targetFillMessages) - 128));
  const payload = "x".repeat(payloadBytes);
  const recordBytes = encodeRecord({
    kind: "publishMessage",
    name: "fill",
    correlationKey: "",
    timeToLiveMs: fillTimeToLiveMs,
    variables: { payload },
    tenantId: DEFAULT_TENANT_ID,
    publishedAtMs: Date.now(),
  }).byteLength;
  return {
    messages: Math.ceil(stateBytes / recordBytes),
    body: JSON.stringify({ name: "fill", timeToLive: fillTimeToLiveMs, variables: { payload } }),
    recordBytes,
    payloadBytes,
  };
}

/** What a fill took. */
interface FillResult {
  readonly ms: number;
  /** Longest time without any acknowledgement (a broker stopped: a snapshot of the state, or an election). */
  readonly longestPauseMs: number;
  /** Publications answered 502/504 (outcome unknown). */
  readonly unknown: number;
  readonly cpu: CpuShares | undefined;
}

/** Publishes `shape.messages` messages through the gateway with `fillClients` clients. */
async function fill(gatewayUrl: string, token: string, shape: FillShape, label: string): Promise<FillResult> {
  const pool = new Pool(gatewayUrl, { connections: fillClients, pipelining: 1 });
  const startedAtMs = performance.now();
  let next = 0;
  let acknowledged = 0;
  let unknown = 0;
  let lastReportMs = startedAtMs;
  let lastAcknowledgedAtMs = startedAtMs;
  let longestPauseMs = 0;
  const worker = async (): Promise<void> => {
    while (next < shape.messages) {
      next += 1;
      // Bounded: an unavailable partition (503) is retried after a pause, for at most 10 minutes in all.
      for (let attempt = 0; ; attempt += 1) {
        const response = await pool
          .request({
            method: "POST",
            path: "/v2/messages/publication",
            headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
            body: shape.body,
          })
          .catch(() => undefined);
        const status = response?.statusCode ?? 0;
        await response?.body.dump();
        if (status === 200) {
          const now = performance.now();
          longestPauseMs = Math.max(longestPauseMs, now - lastAcknowledgedAtMs);
          lastAcknowledgedAtMs = now;
          acknowledged += 1;
          break;
        }
        if (status === 502 || status === 504) {
          // The outcome is unknown: the message may be buffered. The count is what matters here, not each message.
          unknown += 1;
          break;
        }
        if (attempt >= 6_000) throw new Error(`${label}: a publication kept failing (last answer ${status})`);
        await sleep(100);
      }
      if (performance.now() - lastReportMs >= 30_000) {
        lastReportMs = performance.now();
        console.log(
          `  ${label}: ${acknowledged} of ${shape.messages} messages after ${seconds(lastReportMs - startedAtMs)} s`,
        );
      }
    }
  };
  try {
    await Promise.all(Array.from({ length: fillClients }, () => worker()));
  } finally {
    await pool.close();
  }
  const endedAtMs = performance.now();
  return { ms: endedAtMs - startedAtMs, longestPauseMs, unknown, cpu: cpuRecorder?.shares(startedAtMs, endedAtMs) };
}

// ---------------------------------------------------------------------------------------------------------------
// Publishers measuring throughput

/**
 * Publishers of small messages, each keeping one publication in flight; with a rate, each waits for its next slot
 * (`clients / rate` apart, starting staggered) and a late one sends at once without making up for the slots it missed,
 * so the load offers at most `rate` publications per second and less only when answers take longer than a slot.
 * Every acknowledgement's time, latency and partition are kept, to count any window afterwards.
 */
class PublisherLoad {
  private readonly pool: Pool;
  private readonly acknowledgedAtMs: number[] = [];
  private readonly latenciesMs: number[] = [];
  /** The partition of each acknowledged publication (from its message key), in the same order. */
  private readonly acknowledgedPartitions: number[] = [];
  private running = true;
  private readonly workers: Promise<void>[];
  unavailable = 0;
  failed = 0;

  constructor(gatewayUrl: string, token: string, clients: number, rate: number) {
    this.pool = new Pool(gatewayUrl, { connections: clients, pipelining: 1 });
    const body = JSON.stringify({
      name: "load",
      timeToLive: loadTimeToLiveMs,
      variables: { payload: "y".repeat(loadPayloadBytes) },
    });
    const slotMs = rate > 0 ? (clients * 1000) / rate : 0;
    const worker = async (client: number): Promise<void> => {
      let nextSlotMs = performance.now() + (slotMs * client) / clients;
      while (this.running) {
        if (slotMs > 0) {
          const waitMs = nextSlotMs - performance.now();
          if (waitMs > 0) await sleep(waitMs);
          nextSlotMs = Math.max(nextSlotMs + slotMs, performance.now());
        }
        const sentAtMs = performance.now();
        const response = await this.pool
          .request({
            method: "POST",
            path: "/v2/messages/publication",
            headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
            body,
          })
          .catch(() => undefined);
        const status = response?.statusCode ?? 0;
        if (status === 200) {
          const answer = (await response?.body.json().catch(() => ({}))) as { messageKey?: string };
          const now = performance.now();
          this.acknowledgedAtMs.push(now);
          this.latenciesMs.push(now - sentAtMs);
          this.acknowledgedPartitions.push(
            answer.messageKey === undefined ? 0 : (parseKey(answer.messageKey)?.partitionId ?? 0),
          );
          continue;
        }
        await response?.body.dump();
        if (status === 503 || status === 502 || status === 504) this.unavailable += 1;
        else this.failed += 1;
        await sleep(20);
      }
    };
    this.workers = Array.from({ length: clients }, (_, client) => worker(client));
  }

  /** Acknowledged publications per second in [`fromMs`, `toMs`), of one partition or all. */
  rate(fromMs: number, toMs: number, partitionId?: number): number {
    let count = 0;
    for (const [position, atMs] of this.acknowledgedAtMs.entries()) {
      if (atMs < fromMs || atMs >= toMs) continue;
      if (partitionId === undefined || this.acknowledgedPartitions[position] === partitionId) count += 1;
    }
    return count / ((toMs - fromMs) / 1000);
  }

  /** The lowest rate of any whole second in [`fromMs`, `toMs`), of one partition or all. */
  lowestSecond(fromMs: number, toMs: number, partitionId?: number): number {
    let lowest = Number.POSITIVE_INFINITY;
    for (let start = fromMs; start + 1000 <= toMs; start += 1000) {
      lowest = Math.min(lowest, this.rate(start, start + 1000, partitionId));
    }
    return lowest;
  }

  /** Latency percentile (0..1) of the publications acknowledged in [`fromMs`, `toMs`), in ms. */
  latency(fromMs: number, toMs: number, fraction: number): number {
    const latencies: number[] = [];
    for (const [position, atMs] of this.acknowledgedAtMs.entries()) {
      if (atMs >= fromMs && atMs < toMs) latencies.push(this.latenciesMs[position] as number);
    }
    latencies.sort((left, right) => left - right);
    return latencies[Math.min(latencies.length - 1, Math.ceil(fraction * latencies.length) - 1)] ?? Number.NaN;
  }

  async stop(): Promise<void> {
    this.running = false;
    await Promise.all(this.workers);
    await this.pool.close();
  }
}

/** A window of the publishers' run. */
interface Window {
  readonly name: string;
  readonly fromMs: number;
  readonly toMs: number;
}

/** The publishers' throughput in one window, and how busy the machine was meanwhile. */
interface MeasuredWindow {
  readonly window: Window;
  readonly rate: number;
  readonly lowestSecond: number;
  readonly cpu: CpuShares | undefined;
  readonly p50Ms: number;
  readonly p99Ms: number;
  /** Per partition (1, 2, …): writes/s and the lowest whole second. */
  readonly partitions: readonly { rate: number; lowestSecond: number }[];
}

/** The publishers' figures for `window`, for the whole cluster and for each of `partitionCount` partitions. */
function measureWindow(load: PublisherLoad, window: Window, partitionCount: number): MeasuredWindow {
  return {
    window,
    rate: load.rate(window.fromMs, window.toMs),
    lowestSecond: load.lowestSecond(window.fromMs, window.toMs),
    cpu: cpuRecorder?.shares(window.fromMs, window.toMs),
    p50Ms: load.latency(window.fromMs, window.toMs, 0.5),
    p99Ms: load.latency(window.fromMs, window.toMs, 0.99),
    partitions: Array.from({ length: partitionCount }, (_, index) => ({
      rate: load.rate(window.fromMs, window.toMs, index + 1),
      lowestSecond: load.lowestSecond(window.fromMs, window.toMs, index + 1),
    })),
  };
}

// ---------------------------------------------------------------------------------------------------------------
// The cluster, its metrics and its management API

/** Starts a local cluster under `directory` with the snapshot interval `snapshotIntervalEntries`. */
async function startCluster(
  directory: string,
  platform: BenchmarkPlatform,
  partitions: number,
  snapshotIntervalEntries: number,
): Promise<LocalCluster> {
  const command = defaultCommand();
  if (brokerHeapMb !== undefined) command.nodeArguments.push(`--max-old-space-size=${brokerHeapMb}`);
  const extraArguments = (process.env.FLOWPLANE_BENCH_NODE_ARGUMENTS ?? "").split(" ");
  command.nodeArguments.push(...extraArguments.filter((argument) => argument !== ""));
  currentCluster = await startLocalCluster({
    dataDirectory: directory,
    gatewayPort: 0,
    managementPort: 0,
    issuerUrl: platform.url,
    brokers: 3,
    partitions,
    replicationFactor: 3,
    logger: pino({ level: "warn" }),
    // Info: the brokers log the steps of each operation, which make the changes' timelines (timeline.ts).
    logLevel: "info",
    readyTimeoutMs: startTimeoutMs,
    command,
    environment: {
      ...process.env,
      SERVICE_BROKER_RAFT_SNAPSHOT_INTERVAL_ENTRIES: String(snapshotIntervalEntries),
    },
  });
  return currentCluster;
}

/** A broker's per-partition metrics, keyed `<metric name without flowplane_partition_>/<partition>`. */
async function partitionMetrics(broker: LocalBroker): Promise<Map<string, number>> {
  const values = new Map<string, number>();
  const response = await fetch(`${broker.managementUrl}/actuator/prometheus`, { signal: AbortSignal.timeout(10_000) });
  for (const line of (await response.text()).split("\n")) {
    const match = /^flowplane_partition_(\w+)\{([^}]*)\} (\S+)$/.exec(line);
    const partition = match === null ? null : /partition="(\d+)"/.exec(match[2] as string);
    if (match === null || partition === null) continue;
    values.set(`${match[1]}/${partition[1]}`, Number(match[3]));
  }
  return values;
}

function brokerOf(cluster: LocalCluster, nodeId: number): LocalBroker {
  const broker = cluster.brokers.find((candidate) => candidate.nodeId === nodeId);
  if (broker === undefined) throw new Error(`the local cluster has no broker ${nodeId}`);
  return broker;
}

function pidOf(cluster: LocalCluster, nodeId: number): number {
  const pid = brokerOf(cluster, nodeId).pid;
  if (pid === undefined) throw new Error(`broker ${nodeId} has no running process`);
  return pid;
}

/** The broker whose replica of `partitionId` reports itself leader (polled until one does). */
async function leaderOf(cluster: LocalCluster, partitionId: number): Promise<number> {
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline) {
    for (const broker of cluster.brokers) {
      const metrics = await partitionMetrics(broker).catch(() => undefined);
      if (metrics?.get(`role/${partitionId}`) === 2) return broker.nodeId;
    }
    await sleep(pollIntervalMs);
  }
  throw new Error(`partition ${partitionId} had no leader for 60 s`);
}

/** Waits until every replica of `partitionIds` on the first 3 brokers took a snapshot and compacted its log. */
async function waitForSnapshots(
  cluster: LocalCluster,
  partitionIds: readonly number[],
  logEntriesAtMost: number,
): Promise<void> {
  const deadline = Date.now() + 15 * 60_000;
  for (;;) {
    let ready = true;
    for (const broker of cluster.brokers) {
      const metrics = await partitionMetrics(broker).catch(() => new Map<string, number>());
      for (const partitionId of partitionIds) {
        const size = metrics.get(`snapshot_size_bytes/${partitionId}`) ?? 0;
        const logSize = metrics.get(`log_size_entries/${partitionId}`) ?? Number.POSITIVE_INFINITY;
        if (size === 0 || logSize > logEntriesAtMost) ready = false;
      }
    }
    if (ready) return;
    if (Date.now() > deadline) throw new Error("the replicas did not snapshot their partitions within 15 minutes");
    await sleep(1_000);
  }
}

/** Snapshots each replica took so far: broker → partition → count, seconds in all, size of the latest. */
interface SnapshotStats {
  readonly nodeId: number;
  readonly partitionId: number;
  readonly count: number;
  readonly seconds: number;
  readonly sizeBytes: number;
}

async function snapshotStats(cluster: LocalCluster, partitionIds: readonly number[]): Promise<SnapshotStats[]> {
  const stats: SnapshotStats[] = [];
  for (const broker of cluster.brokers) {
    const metrics = await partitionMetrics(broker).catch(() => new Map<string, number>());
    for (const partitionId of partitionIds) {
      const count = metrics.get(`snapshot_duration_seconds_count/${partitionId}`);
      if (count === undefined) continue;
      stats.push({
        nodeId: broker.nodeId,
        partitionId,
        count,
        seconds: metrics.get(`snapshot_duration_seconds_sum/${partitionId}`) ?? 0,
        sizeBytes: metrics.get(`snapshot_size_bytes/${partitionId}`) ?? 0,
      });
    }
  }
  return stats;
}

/** "2.1–7.4 s for 973 MiB": how long the replicas' only snapshots took. */
function snapshotSummary(stats: readonly SnapshotStats[]): string {
  if (stats.length === 0) return "no snapshot";
  const durations = stats.map((stat) => stat.seconds / Math.max(1, stat.count));
  const sizes = stats.map((stat) => stat.sizeBytes);
  return (
    `${formatNumber(Math.min(...durations), 1)}–${formatNumber(Math.max(...durations), 1)} s per snapshot of ` +
    `${mebibytes(Math.min(...sizes))}–${mebibytes(Math.max(...sizes))} MiB (${stats.length} replicas, encoding and ` +
    "durable chunks)"
  );
}

/** The change `GET /actuator/cluster` shows. */
interface Monitoring {
  lastChange?: { id: number; status: string };
  pendingChange?: {
    id: number;
    pending: { operation: string; brokerId: number; partitionId?: number }[];
    completed: unknown[];
    progress?: {
      operation: { operation: string; brokerId: number; partitionId?: number };
      attempts: number;
      lastError: string | null;
      bytesTotal: number | null;
      bytesMoved: number | null;
    };
  };
}

/** A planned operation as the management API answers it. */
interface PlannedOperation {
  operation: string;
  brokerId: number;
  partitionId?: number;
}

/** The cluster management API of the gateway, with a token. */
class Management {
  constructor(
    private readonly url: string,
    private readonly token: string,
  ) {}

  async request(method: string, path: string, body?: unknown): Promise<{ status: number; body: unknown }> {
    const response = await fetch(`${this.url}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${this.token}`,
        ...(body === undefined ? {} : { "content-type": "application/json" }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      signal: AbortSignal.timeout(30_000),
    });
    return { status: response.status, body: await response.json() };
  }

  async monitoring(): Promise<Monitoring> {
    const answer = await this.request("GET", "/actuator/cluster");
    if (answer.status !== 200) throw new Error(`GET /actuator/cluster answered ${answer.status}`);
    return answer.body as Monitoring;
  }

  /**
   * Sends a change (retrying while a broker just started is not reachable yet, or another change still ends);
   * returns its id and planned operations.
   */
  async change(
    method: string,
    path: string,
    body?: unknown,
  ): Promise<{ changeId: number; plannedChanges: PlannedOperation[] }> {
    const deadline = Date.now() + 120_000;
    for (;;) {
      const answer = await this.request(method, path, body).catch((error: unknown) => ({
        status: 0,
        body: { detail: String(error) },
      }));
      if (answer.status === 202) return answer.body as { changeId: number; plannedChanges: PlannedOperation[] };
      const detail = (answer.body as { detail?: string }).detail ?? "";
      const retryable =
        answer.status === 0 ||
        answer.status === 409 ||
        answer.status === 502 ||
        answer.status === 504 ||
        (answer.status === 400 && /not running and reachable|unreachable/.test(detail));
      if (!retryable || Date.now() > deadline)
        throw new Error(`${method} ${path} answered ${answer.status}: ${detail}`);
      await sleep(500);
    }
  }

  /**
   * Polls the change every 250 ms until it completed (throwing when it ended otherwise), calling `onPoll` with each
   * answer; returns when the completion was seen.
   */
  async completed(changeId: number, onPoll?: (monitoring: Monitoring) => Promise<void>): Promise<number> {
    const deadline = Date.now() + changeTimeoutMs;
    for (;;) {
      const current = await this.monitoring().catch(() => undefined);
      if (current !== undefined) {
        await onPoll?.(current);
        if (current.lastChange?.id === changeId && current.pendingChange?.id !== changeId) {
          if (current.lastChange.status !== "COMPLETED") {
            throw new Error(`change ${changeId} ended ${current.lastChange.status}`);
          }
          return performance.now();
        }
      }
      if (Date.now() > deadline) throw new Error(`change ${changeId} did not complete within ${changeTimeoutMs} ms`);
      await sleep(pollIntervalMs);
    }
  }
}

/** What the progress of a change showed of each of its operations that moved data. */
interface MovedBytes {
  /** `PARTITION_JOIN b→p` → the most bytes its progress showed moved. */
  readonly byOperation: Map<string, number>;
  /** Largest `attempts` any operation showed, and the last error shown (a retried operation). */
  attempts: number;
  lastError: string | null;
}

/** How the tables name an operation: `PARTITION_JOIN 3→2` (broker → partition). */
function operationName(operation: PlannedOperation): string {
  return `${operation.operation} ${operation.brokerId}${operation.partitionId === undefined ? "" : `→${operation.partitionId}`}`;
}

function recordProgress(monitoring: Monitoring, moved: MovedBytes): void {
  const progress = monitoring.pendingChange?.progress;
  if (progress === undefined) return;
  moved.attempts = Math.max(moved.attempts, progress.attempts);
  if (progress.lastError !== null) moved.lastError = progress.lastError;
  if (progress.bytesMoved === null) return;
  const operation = progress.operation;
  const key = operationName(operation);
  moved.byOperation.set(key, Math.max(moved.byOperation.get(key) ?? 0, progress.bytesMoved));
}

function totalMoved(moved: MovedBytes): number {
  let total = 0;
  for (const bytes of moved.byOperation.values()) total += bytes;
  return total;
}

/** Adds brokers to the local cluster's brokers file and waits until their processes run. */
async function startBrokers(cluster: LocalCluster, directory: string, nodeIds: readonly number[]): Promise<void> {
  await addLocalBrokers(join(directory, "cluster"), "127.0.0.1", nodeIds);
  const deadline = Date.now() + 60_000;
  while (!nodeIds.every((nodeId) => cluster.brokers.find((broker) => broker.nodeId === nodeId)?.pid !== undefined)) {
    if (Date.now() > deadline) throw new Error(`brokers ${nodeIds.join(", ")} did not start within 60 s`);
    await sleep(200);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// The physical limits

/** Writes `bytes` random bytes to `path` and syncs them. */
function makeSourceFile(path: string, bytes: number): void {
  const descriptor = openSync(path, "w");
  try {
    const block = randomBytes(8 * MiB);
    for (let written = 0; written < bytes; ) {
      const length = Math.min(block.byteLength, bytes - written);
      written += writeSync(descriptor, block, 0, length);
    }
    fsyncSync(descriptor);
  } finally {
    closeSync(descriptor);
  }
}

/** Runs a command to its end and returns what it printed; throws when it fails. */
function runToEnd(command: string, args: readonly string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = children.track(spawn(command, args, { stdio: ["ignore", "pipe", "inherit"] }));
    let output = "";
    child.stdout?.on("data", (chunk: Buffer) => {
      output += chunk.toString("utf8");
    });
    child.once("error", reject);
    child.once("close", (code) => (code === 0 ? resolve(output) : reject(new Error(`${command} exited with ${code}`))));
  });
}

/** Time of `cp` of `source` into `directory` and a `sync` of the copy, and the processor time of both commands. */
async function copyOnDisk(source: string, directory: string): Promise<CopyRun> {
  const target = join(directory, "cp-target");
  const startedAtMs = performance.now();
  // `times` prints the shell's own processor time, then its children's: user and system, as "0m1.234s 0m0.567s".
  const output = await runToEnd("sh", ["-c", 'cp -- "$1" "$2" && sync -- "$2" && times', "sh", source, target]);
  const elapsedMs = performance.now() - startedAtMs;
  await rm(target, { force: true });
  const childTimes = output.trim().split("\n").at(-1) ?? "";
  let cpuMs = 0;
  for (const match of childTimes.matchAll(/(\d+)m([\d.]+)s/g))
    cpuMs += (Number(match[1]) * 60 + Number(match[2])) * 1000;
  return { ms: elapsedMs, cpuMs };
}

/** Starts tcp-copy.ts with `args`. */
function tcpCopyProcess(args: readonly string[]) {
  return children.track(
    spawn(process.execPath, ["--import", "tsx", tcpCopyScript, ...args], {
      cwd: repositoryRoot,
      stdio: ["ignore", "pipe", "inherit"],
    }),
  );
}

/** The first line `child` prints that starts with `prefix`. */
function firstLine(child: ReturnType<typeof tcpCopyProcess>, prefix: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const lines = createInterface({ input: child.stdout! });
    lines.on("line", (line) => {
      if (line.startsWith(prefix)) resolve(line);
    });
    child.once("exit", () => reject(new Error(`tcp-copy.ts exited before printing "${prefix}"`)));
  });
}

/** Time to send `source` over loopback TCP to another process, which writes and syncs it (see tcp-copy.ts). */
async function copyOverTcp(source: string, directory: string): Promise<CopyRun> {
  const target = join(directory, "tcp-target");
  const receiver = tcpCopyProcess(["receive", target]);
  const port = (await firstLine(receiver, "listening ")).split(" ")[1] as string;
  const received = firstLine(receiver, "received ");
  const sender = tcpCopyProcess(["send", port, source]);
  const sent = (await firstLine(sender, "sent ")).split(" ");
  const receiverCpuMs = Number((await received).split(" ")[2]);
  await Promise.all([stopChild(receiver), stopChild(sender)]);
  await rm(target, { force: true });
  return { ms: Number(sent[2]), cpuMs: Number(sent[3]) + receiverCpuMs, receiverCpuMs };
}

/**
 * Time to send the engine snapshot `snapshotFile` over loopback TCP to another process that keeps its bytes, writes
 * and syncs them, and rebuilds an engine of `messages` messages from them as they arrive (tcp-copy.ts `restore`).
 */
async function copyOverTcpRestoring(snapshotFile: string, directory: string, messages: number): Promise<CopyRun> {
  const target = join(directory, "tcp-restore-target");
  const sender = tcpCopyProcess(["serve", snapshotFile]);
  const port = (await firstLine(sender, "listening ")).split(" ")[1] as string;
  const sent = firstLine(sender, "sent ");
  const receiver = tcpCopyProcess(["restore", port, target, String(messages)]);
  const receiverCpuMs = Number((await firstLine(receiver, "received ")).split(" ")[2]);
  const sentFields = (await sent).split(" ");
  await Promise.all([stopChild(receiver), stopChild(sender)]);
  await rm(target, { force: true });
  return { ms: Number(sentFields[2]), cpuMs: Number(sentFields[3]) + receiverCpuMs, receiverCpuMs };
}

/**
 * Time and processor time of rebuilding an engine that holds `messages` messages of `payloadBytes` from its snapshot,
 * alone in a process of its own (see engine-rebuild.ts), which also writes that snapshot to `snapshotFile`.
 */
async function rebuildEngine(
  messages: number,
  payloadBytes: number,
  snapshotFile: string,
): Promise<{ readonly touch: CopyRun; readonly rebuild: CopyRun }> {
  const output = await runToEnd(process.execPath, [
    "--import",
    "tsx",
    engineRebuildScript,
    String(messages),
    String(payloadBytes),
    snapshotFile,
  ]);
  const run = (prefix: string): CopyRun => {
    const fields = (output.split("\n").find((line) => line.startsWith(prefix)) ?? "").split(" ");
    if (fields.length !== 4) throw new Error(`engine-rebuild.ts printed no "${prefix}" line: ${output.slice(0, 200)}`);
    return { ms: Number(fields[2]), cpuMs: Number(fields[3]) };
  };
  return { touch: run("touched "), rebuild: run("rebuilt ") };
}

/** One copy: its time and the processor time of the processes doing it (of the receiving one alone, if known). */
interface CopyRun {
  readonly ms: number;
  readonly cpuMs: number;
  readonly receiverCpuMs?: number;
}

/** The physical limits measured in one run: each copy's times (the fastest is the limit). */
interface Limits {
  readonly bytes: number;
  readonly copyMs: number[];
  readonly tcpMs: number[];
  readonly copyCpuMs: number[];
  readonly tcpCpuMs: number[];
  /** Of `tcpCpuMs`, the receiving process's. */
  readonly tcpReceiverCpuMs: number[];
  /** The engine these bytes hold: its messages and their payload (the same shape as the fill's). */
  readonly messages: number;
  readonly payloadBytes: number;
  /** Rebuilding that engine from its snapshot alone: what a joiner must do besides moving the bytes. */
  readonly rebuildMs: number[];
  readonly rebuildCpuMs: number[];
  /** Allocating and first touching as much new memory as the snapshot, in 1 MiB pieces: where a joiner keeps it. */
  readonly touchMs: number[];
  readonly touchCpuMs: number[];
  /**
   * The least a join can be: the TCP copy of that engine's snapshot, whose receiver keeps the bytes, writes and syncs
   * them, and rebuilds the engine from them as they arrive (tcp-copy.ts `restore`).
   */
  readonly restoringTcpMs: number[];
  readonly restoringTcpCpuMs: number[];
  /**
   * The TCP copy again, while the same publishers write to the cluster as during the loaded join or the changes: the
   * limit under the conditions those were measured in, since the publishers' writes take processor time the copy
   * and the join then share.
   */
  readonly tcpUnderLoadMs: number[];
  readonly tcpUnderLoadCpuMs: number[];
  /**
   * Memory allocated, touched and freed by a process of its own right before each measurement (each copy, join and
   * change), so that every one of them starts with memory the machine used lately (`recycled-memory.ts`).
   */
  readonly recycleBytes: number;
  readonly recycleMs: number[];
  readonly recycleCpuMs: number[];
}

/** Limits for `bytes` of a state of `shape`, none measured yet. */
function emptyLimits(bytes: number, shape: FillShape): Limits {
  return {
    bytes,
    copyMs: [],
    tcpMs: [],
    copyCpuMs: [],
    tcpCpuMs: [],
    tcpReceiverCpuMs: [],
    messages: Math.max(1, Math.round(bytes / shape.recordBytes)),
    payloadBytes: shape.payloadBytes,
    rebuildMs: [],
    rebuildCpuMs: [],
    touchMs: [],
    touchCpuMs: [],
    restoringTcpMs: [],
    restoringTcpCpuMs: [],
    tcpUnderLoadMs: [],
    tcpUnderLoadCpuMs: [],
    recycleBytes: recycleBytesFor(bytes),
    recycleMs: [],
    recycleCpuMs: [],
  };
}

/**
 * Memory recycled before each measurement of `bytes`: a join keeps about as much new memory and writes as much into
 * the page cache, a copy writes as much; three times covers both with room, and leaves 2 GiB of the free memory alone.
 */
function recycleBytesFor(bytes: number): number {
  const mebibyte = 1024 * 1024;
  const room = freemem() - 2 * 1024 * mebibyte;
  return Math.max(64 * mebibyte, Math.min(3 * bytes, Math.floor(room / mebibyte) * mebibyte));
}

/** Recycles `limits.recycleBytes` of memory (see `Limits.recycleBytes`), right before a measurement. */
async function recycle(limits: Limits): Promise<void> {
  const run = await recycleMemory(children, limits.recycleBytes);
  limits.recycleMs.push(run.ms);
  limits.recycleCpuMs.push(run.cpuMs);
}

async function measureLimits(limits: Limits, source: string, directory: string): Promise<void> {
  await recycle(limits);
  const tcp = await copyOverTcp(source, directory);
  limits.tcpMs.push(tcp.ms);
  limits.tcpCpuMs.push(tcp.cpuMs);
  limits.tcpReceiverCpuMs.push(tcp.receiverCpuMs ?? Number.NaN);
  await recycle(limits);
  const copy = await copyOnDisk(source, directory);
  limits.copyMs.push(copy.ms);
  limits.copyCpuMs.push(copy.cpuMs);
  await recycle(limits);
  const snapshotFile = join(directory, "engine-snapshot");
  const { touch, rebuild } = await rebuildEngine(limits.messages, limits.payloadBytes, snapshotFile);
  limits.rebuildMs.push(rebuild.ms);
  limits.rebuildCpuMs.push(rebuild.cpuMs);
  limits.touchMs.push(touch.ms);
  limits.touchCpuMs.push(touch.cpuMs);
  await recycle(limits);
  const restoring = await copyOverTcpRestoring(snapshotFile, directory, limits.messages);
  limits.restoringTcpMs.push(restoring.ms);
  limits.restoringTcpCpuMs.push(restoring.cpuMs);
  await rm(snapshotFile, { force: true });
}

/** How many times the TCP copy is measured under the publishers' load (the faster run is the limit, as above). */
const copiesUnderLoad = 2;

/** The TCP copy measured `copiesUnderLoad` times; the caller keeps the publishers writing meanwhile. */
async function measureCopyUnderLoad(limits: Limits, source: string, directory: string): Promise<void> {
  for (let run = 0; run < copiesUnderLoad; run += 1) {
    await recycle(limits);
    const tcp = await copyOverTcp(source, directory);
    limits.tcpUnderLoadMs.push(tcp.ms);
    limits.tcpUnderLoadCpuMs.push(tcp.cpuMs);
  }
}

/** The fastest of `times`. */
const fastest = (times: readonly number[]): number => Math.min(...times);

// ---------------------------------------------------------------------------------------------------------------
// A. A replica joining a partition

/** One look at a join in progress. */
interface JoinPoll {
  /** When the poll started: the leader and the joiner were asked at once. */
  readonly atMs: number;
  /** How long the joiner took to answer (seconds while it restores its engine: its event loop is busy). */
  readonly joinerAnswerMs: number;
  /** Bytes the joining replica received so far, as the change's progress shows them. */
  readonly bytesMoved: number;
  readonly joinerApplied: number | undefined;
  readonly leaderCommit: number | undefined;
}

/** What one join measured. */
interface JoinResult {
  readonly name: string;
  readonly leader: number;
  readonly joiner: number;
  readonly snapshotBytes: number;
  readonly leaderSnapshotIndexBefore: number;
  /** Snapshots the leader took of the partition during the join (each one restarts the transfer from byte 0). */
  readonly leaderSnapshotsTaken: number;
  /**
   * From the join's request to: the joiner's last answer before it installed the snapshot (its event loop is busy
   * restoring the engine from then on, so the transfer ended about then), the snapshot installed and the engine
   * restored (its applied index reached the snapshot's), caught up, and the change completed (a voter).
   */
  readonly receivedMs: number;
  readonly installedMs: number;
  readonly caughtUpMs: number;
  readonly completedMs: number;
  /** Bytes the change's progress showed received (it can miss the last ones: it is sampled). */
  readonly bytesMoved: number;
  /** The leader's snapshot and its log after it when the join started: what the joiner had to receive at least. */
  readonly expectedBytes: number;
  readonly attempts: number;
  readonly lastError: string | null;
  readonly leaderPid: number;
  readonly joinerPid: number;
  readonly sampler: MemorySampler;
  readonly polls: readonly JoinPoll[];
  /** From `startedAtMs` to `endedAtMs`: the publishers' "during" window. */
  readonly startedAtMs: number;
  readonly endedAtMs: number;
  readonly cpu: CpuShares | undefined;
}

/**
 * Adds replica `joiner` to partition `partitionId` (the broker is already a member) and follows it until the change
 * completed, sampling memory and indexes.
 */
async function joinReplica(
  name: string,
  cluster: LocalCluster,
  management: Management,
  partitionId: number,
  joiner: number,
  recordBytes: number,
): Promise<JoinResult> {
  const leader = await leaderOf(cluster, partitionId);
  const leaderBroker = brokerOf(cluster, leader);
  const joinerBroker = brokerOf(cluster, joiner);
  const leaderMetrics = await partitionMetrics(leaderBroker);
  const snapshotBytes = leaderMetrics.get(`snapshot_size_bytes/${partitionId}`) ?? 0;
  const expectedBytes = snapshotBytes + (leaderMetrics.get(`log_size_entries/${partitionId}`) ?? 0) * recordBytes;
  const leaderSnapshotIndexBefore = await leaderSnapshotIndex(cluster, leader, partitionId);
  const leaderSnapshotsBefore = leaderMetrics.get(`snapshot_duration_seconds_count/${partitionId}`) ?? 0;
  const leaderPid = pidOf(cluster, leader);
  const joinerPid = pidOf(cluster, joiner);
  resetPeakMemory(leaderPid);
  resetPeakMemory(joinerPid);
  const sampler = new MemorySampler([leaderPid, joinerPid], memoryIntervalMs);
  const moved: MovedBytes = { byOperation: new Map(), attempts: 0, lastError: null };
  const polls: JoinPoll[] = [];
  const startedAtMs = performance.now();
  const { changeId } = await management.change(
    "POST",
    `/actuator/cluster/brokers/${joiner}/partitions/${partitionId}`,
    { priority: 1 },
  );
  let installedAtMs = Number.NaN;
  let caughtUpAtMs = Number.NaN;
  /** The last time the joiner answered with its snapshot not installed yet: its memory up to then is the transfer's. */
  let lastAnswerBeforeInstallMs = startedAtMs;
  const completedAtMs = await management.completed(changeId, async (monitoring) => {
    recordProgress(monitoring, moved);
    // The leader first: a joiner that applied what the leader had committed a moment before has caught up.
    const askedAtMs = performance.now();
    let joinerAnsweredAtMs = askedAtMs;
    const [leaderCommit, joinerApplied] = await Promise.all([
      partitionMetrics(leaderBroker).then(
        (metrics) => metrics.get(`commit_index/${partitionId}`),
        () => undefined,
      ),
      partitionMetrics(joinerBroker).then(
        (metrics) => {
          joinerAnsweredAtMs = performance.now();
          return metrics.get(`applied_index/${partitionId}`);
        },
        () => undefined,
      ),
    ]);
    const now = performance.now();
    polls.push({
      atMs: askedAtMs,
      joinerAnswerMs: joinerAnsweredAtMs - askedAtMs,
      bytesMoved: totalMoved(moved),
      joinerApplied,
      leaderCommit,
    });
    if (leaderCommit === undefined || joinerApplied === undefined) return;
    if (joinerApplied < leaderSnapshotIndexBefore) lastAnswerBeforeInstallMs = now;
    else if (Number.isNaN(installedAtMs)) installedAtMs = now;
    if (Number.isNaN(caughtUpAtMs) && joinerApplied >= leaderCommit) caughtUpAtMs = now;
  });
  sampler.stop();
  if (Number.isNaN(caughtUpAtMs)) caughtUpAtMs = completedAtMs;
  if (Number.isNaN(installedAtMs)) installedAtMs = caughtUpAtMs;
  const leaderSnapshotsAfter =
    (await partitionMetrics(leaderBroker)).get(`snapshot_duration_seconds_count/${partitionId}`) ?? 0;
  return {
    name,
    leader,
    joiner,
    snapshotBytes,
    leaderSnapshotIndexBefore,
    leaderSnapshotsTaken: leaderSnapshotsAfter - leaderSnapshotsBefore,
    receivedMs: lastAnswerBeforeInstallMs - startedAtMs,
    installedMs: installedAtMs - startedAtMs,
    caughtUpMs: caughtUpAtMs - startedAtMs,
    completedMs: completedAtMs - startedAtMs,
    bytesMoved: totalMoved(moved),
    expectedBytes,
    attempts: moved.attempts,
    lastError: moved.lastError,
    leaderPid,
    joinerPid,
    sampler,
    polls,
    startedAtMs,
    endedAtMs: completedAtMs,
    cpu: cpuRecorder?.shares(startedAtMs, completedAtMs),
  };
}

/**
 * Index of the leader's latest snapshot: the start of its log (commit index minus the entries after the snapshot is
 * only an estimate under load, so it is read while the partition is idle or nearly so).
 */
async function leaderSnapshotIndex(cluster: LocalCluster, leader: number, partitionId: number): Promise<number> {
  const metrics = await partitionMetrics(brokerOf(cluster, leader));
  return (metrics.get(`applied_index/${partitionId}`) ?? 0) - (metrics.get(`log_size_entries/${partitionId}`) ?? 0);
}

/** What part A measured. */
interface JoinPart {
  readonly shape: FillShape;
  readonly fillSnapshots: readonly SnapshotStats[];
  readonly snapshotIntervalEntries: number;
  readonly fill: FillResult;
  readonly limits: Limits;
  readonly idle: JoinResult;
  readonly loaded: JoinResult;
  readonly idleTimeline: string[][];
  readonly loadedTimeline: string[][];
  readonly windows: readonly MeasuredWindow[];
  readonly unavailable: number;
  readonly failed: number;
}

async function measureJoin(dataDirectory: string, platform: BenchmarkPlatform): Promise<JoinPart> {
  const shape = fillShape();
  const snapshotIntervalEntries = Math.max(100, Math.floor(shape.messages * snapshotShare));
  const directory = join(dataDirectory, "join");
  console.log(
    `\nA. A replica joining a partition of ${mebibytes(shape.messages * shape.recordBytes)} MiB: 3 brokers, 1 ` +
      `partition, RF 3, ${shape.messages} messages of ${shape.recordBytes} bytes, snapshot every ` +
      `${snapshotIntervalEntries} entries`,
  );
  const cluster = await startCluster(directory, platform, 1, snapshotIntervalEntries);
  try {
    const management = new Management(cluster.managementUrl, platform.token);
    const filled = await fill(cluster.gatewayUrl, platform.token, shape, "fill");
    console.log(`  filled in ${seconds(filled.ms)} s; waiting for the replicas' snapshots`);
    await waitForSnapshots(cluster, [1], shape.messages - snapshotIntervalEntries + 1_000);
    const fillSnapshots = await snapshotStats(cluster, [1]);
    const leader = await leaderOf(cluster, 1);
    const leaderMetrics = await partitionMetrics(brokerOf(cluster, leader));
    const expectedBytes =
      (leaderMetrics.get("snapshot_size_bytes/1") ?? 0) +
      (leaderMetrics.get("log_size_entries/1") ?? 0) * shape.recordBytes;
    const source = join(dataDirectory, "copy-source");
    makeSourceFile(source, expectedBytes);
    const limits = emptyLimits(expectedBytes, shape);
    await measureLimits(limits, source, dataDirectory);

    await startBrokers(cluster, directory, [3, 4]);
    for (const nodeId of [3, 4]) {
      const { changeId } = await management.change("POST", `/actuator/cluster/brokers/${nodeId}`);
      await management.completed(changeId);
    }
    console.log("  brokers 3 and 4 added; replica 3 joins partition 1 with no other load");
    await recycle(limits);
    const idle = await joinReplica("no load", cluster, management, 1, 3, shape.recordBytes);
    await measureLimits(limits, source, dataDirectory);

    console.log(`  replica 4 joins partition 1 while ${loadDescription()} write to it`);
    const load = new PublisherLoad(cluster.gatewayUrl, platform.token, loadClients, loadRate);
    let loaded: JoinResult;
    const windows: Window[] = [];
    try {
      await sleep(loadWarmupMs);
      const beforeFromMs = performance.now();
      await sleep(windowMs);
      windows.push({ name: "before", fromMs: beforeFromMs, toMs: performance.now() });
      await recycle(limits);
      loaded = await joinReplica(
        loadRate > 0 ? `${loadRate} writes/s` : `${loadClients} publishers`,
        cluster,
        management,
        1,
        4,
        shape.recordBytes,
      );
      windows.push({ name: "during the join", fromMs: loaded.startedAtMs, toMs: loaded.endedAtMs });
      const afterFromMs = performance.now();
      await sleep(windowMs);
      windows.push({ name: "after", fromMs: afterFromMs, toMs: performance.now() });
      // After the windows, so that the copies take nothing from the writes measured in them.
      await measureCopyUnderLoad(limits, source, dataDirectory);
    } finally {
      await load.stop();
    }
    await measureLimits(limits, source, dataDirectory);
    await rm(source, { force: true });
    return {
      shape,
      fillSnapshots,
      snapshotIntervalEntries,
      fill: filled,
      limits,
      idle,
      loaded,
      idleTimeline: joinTimeline(idle, undefined),
      loadedTimeline: joinTimeline(loaded, load),
      windows: windows.map((window) => measureWindow(load, window, 1)),
      unavailable: load.unavailable,
      failed: load.failed,
    };
  } finally {
    await cluster.close();
    await rm(directory, { recursive: true, force: true });
  }
}

// ---------------------------------------------------------------------------------------------------------------
// B. Scale-up 3 → 6 and back

/** What one change of part B measured. */
interface ScaleChange {
  readonly name: string;
  readonly operations: number;
  readonly joins: number;
  readonly completedMs: number;
  readonly bytesMoved: number;
  readonly expectedBytes: number;
  readonly attempts: number;
  readonly lastError: string | null;
  readonly window: Window;
  /** Each operation as `GET /actuator/cluster` showed it running: from its first to its last sighting. */
  readonly steps: readonly { operation: string; fromMs: number; toMs: number }[];
  /** Operation name → the most bytes its progress showed moved. */
  readonly bytesByStep: ReadonlyMap<string, number>;
  readonly cpu: CpuShares | undefined;
  /** "p1: 0, p2: 1, …": the leader of each partition when the change started. */
  readonly leadersBefore: string;
  /** The operations' steps as the brokers logged them (timeline.ts). */
  readonly timeline: readonly string[][];
}

interface ScalePart {
  readonly shape: FillShape;
  readonly fillSnapshots: readonly SnapshotStats[];
  /** Snapshots the replicas took during the scale-up and the scale-down (each change's leaders and joiners). */
  readonly changeSnapshots: readonly SnapshotStats[];
  readonly snapshotIntervalEntries: number;
  readonly fill: FillResult;
  readonly limits: Limits;
  readonly up: ScaleChange;
  readonly down: ScaleChange;
  readonly windows: readonly MeasuredWindow[];
  readonly unavailable: number;
  readonly failed: number;
  /** Per broker: anonymous memory before the scale-up, its peak during the scale-up, peak resident set. */
  readonly memory: readonly { nodeId: number; before: MemoryReading | undefined; peak: MemoryReading | undefined }[];
}

/** Bytes a join of each partition is expected to move: the leader's snapshot and its log after it. */
async function bytesPerJoin(cluster: LocalCluster, partitionIds: readonly number[], recordBytes: number) {
  const bytes = new Map<number, number>();
  for (const partitionId of partitionIds) {
    const metrics = await partitionMetrics(brokerOf(cluster, await leaderOf(cluster, partitionId)));
    bytes.set(
      partitionId,
      (metrics.get(`snapshot_size_bytes/${partitionId}`) ?? 0) +
        (metrics.get(`log_size_entries/${partitionId}`) ?? 0) * recordBytes,
    );
  }
  return bytes;
}

function joinsOf(plan: readonly PlannedOperation[]): PlannedOperation[] {
  return plan.filter((operation) => operation.operation === "PARTITION_JOIN");
}

async function scaleChange(
  name: string,
  cluster: LocalCluster,
  management: Management,
  brokers: readonly number[],
  joinBytes: ReadonlyMap<number, number>,
): Promise<ScaleChange> {
  const leaders: string[] = [];
  for (const partitionId of joinBytes.keys()) leaders.push(`p${partitionId}: ${await leaderOf(cluster, partitionId)}`);
  const moved: MovedBytes = { byOperation: new Map(), attempts: 0, lastError: null };
  const startedAtMs = performance.now();
  const startedAtEpochMs = Date.now();
  const { changeId, plannedChanges } = await management.change("POST", "/actuator/cluster/brokers", brokers);
  const steps: { operation: string; fromMs: number; toMs: number }[] = [];
  const completedAtMs = await management.completed(changeId, async (monitoring) => {
    recordProgress(monitoring, moved);
    const running = monitoring.pendingChange?.id === changeId ? monitoring.pendingChange.pending[0] : undefined;
    if (running === undefined) return;
    const operation = operationName(running);
    const now = performance.now();
    const current = steps.at(-1);
    if (current?.operation === operation) current.toMs = now;
    else steps.push({ operation, fromMs: now, toMs: now });
  });
  const joins = joinsOf(plannedChanges);
  // The brokers write their logs as they go; a moment lets the last lines reach the files.
  await sleep(500);
  const timeline = await changeTimeline(
    cluster.brokers.map((broker) => broker.logFile),
    changeId,
    startedAtEpochMs,
  );
  return {
    name,
    operations: plannedChanges.length,
    joins: joins.length,
    completedMs: completedAtMs - startedAtMs,
    bytesMoved: totalMoved(moved),
    expectedBytes: joins.reduce((total, operation) => total + (joinBytes.get(operation.partitionId ?? 0) ?? 0), 0),
    attempts: moved.attempts,
    lastError: moved.lastError,
    window: { name: `during ${name}`, fromMs: startedAtMs, toMs: completedAtMs },
    steps: steps.map((step) => ({ ...step, fromMs: step.fromMs - startedAtMs, toMs: step.toMs - startedAtMs })),
    bytesByStep: moved.byOperation,
    cpu: cpuRecorder?.shares(startedAtMs, completedAtMs),
    leadersBefore: leaders.join(", "),
    timeline,
  };
}

async function measureScale(dataDirectory: string, platform: BenchmarkPlatform): Promise<ScalePart> {
  const shape = fillShape();
  const partitions = [1, 2, 3];
  const snapshotIntervalEntries = Math.max(100, Math.floor((shape.messages / partitions.length) * snapshotShare));
  const directory = join(dataDirectory, "scale");
  console.log(
    `\nB. Scale-up 3 → 6 brokers and back with ${mebibytes(shape.messages * shape.recordBytes)} MiB of state: 3 ` +
      `partitions, RF 3, ${shape.messages} messages of ${shape.recordBytes} bytes round robin, snapshot every ` +
      `${snapshotIntervalEntries} entries`,
  );
  const cluster = await startCluster(directory, platform, partitions.length, snapshotIntervalEntries);
  try {
    const management = new Management(cluster.managementUrl, platform.token);
    const filled = await fill(cluster.gatewayUrl, platform.token, shape, "fill");
    console.log(`  filled in ${seconds(filled.ms)} s; waiting for the replicas' snapshots`);
    const perPartition = Math.ceil(shape.messages / partitions.length);
    await waitForSnapshots(cluster, partitions, perPartition - snapshotIntervalEntries + 1_000);
    const fillSnapshots = await snapshotStats(cluster, partitions);
    const joinBytes = await bytesPerJoin(cluster, partitions, shape.recordBytes);

    await startBrokers(cluster, directory, [3, 4, 5]);
    const plan = await management.change("POST", "/actuator/cluster/brokers?dryRun=true", [0, 1, 2, 3, 4, 5]);
    const expectedBytes = joinsOf(plan.plannedChanges).reduce(
      (total, operation) => total + (joinBytes.get(operation.partitionId ?? 0) ?? 0),
      0,
    );
    const source = join(dataDirectory, "copy-source");
    makeSourceFile(source, expectedBytes);
    const limits = emptyLimits(expectedBytes, shape);
    await measureLimits(limits, source, dataDirectory);

    const pids = [0, 1, 2, 3, 4, 5].map((nodeId) => pidOf(cluster, nodeId));
    for (const pid of pids) resetPeakMemory(pid);
    console.log(`  scaling up to 6 brokers and back while ${loadDescription()} write round robin`);
    const load = new PublisherLoad(cluster.gatewayUrl, platform.token, loadClients, loadRate);
    const windows: Window[] = [];
    let up: ScaleChange;
    let down: ScaleChange;
    let sampler: MemorySampler | undefined;
    try {
      await sleep(loadWarmupMs);
      const beforeFromMs = performance.now();
      await sleep(windowMs);
      windows.push({ name: "before", fromMs: beforeFromMs, toMs: performance.now() });
      await recycle(limits);
      sampler = new MemorySampler(pids, memoryIntervalMs);
      up = await scaleChange("scale-up", cluster, management, [0, 1, 2, 3, 4, 5], joinBytes);
      sampler.stop();
      windows.push(up.window);
      const afterUpFromMs = performance.now();
      await sleep(windowMs);
      windows.push({ name: "after scale-up", fromMs: afterUpFromMs, toMs: performance.now() });
      await recycle(limits);
      down = await scaleChange("scale-down", cluster, management, [0, 1, 2], joinBytes);
      windows.push(down.window);
      const afterDownFromMs = performance.now();
      await sleep(windowMs);
      windows.push({ name: "after scale-down", fromMs: afterDownFromMs, toMs: performance.now() });
      // With 3 brokers again, where the scale-up had 6; the publishers' writes are the same.
      await measureCopyUnderLoad(limits, source, dataDirectory);
    } finally {
      sampler?.stop();
      await load.stop();
    }
    const afterChanges = await snapshotStats(cluster, partitions);
    const changeSnapshots = afterChanges
      .map((stat) => {
        const before = fillSnapshots.find(
          (candidate) => candidate.nodeId === stat.nodeId && candidate.partitionId === stat.partitionId,
        );
        return {
          ...stat,
          count: stat.count - (before?.count ?? 0),
          seconds: stat.seconds - (before?.seconds ?? 0),
        };
      })
      .filter((stat) => stat.count > 0);
    // The removed brokers host nothing now: the operator stops them and deletes their data.
    removeLocalBrokers(join(directory, "cluster"), [3, 4, 5]);
    await measureLimits(limits, source, dataDirectory);
    await rm(source, { force: true });
    return {
      shape,
      fillSnapshots,
      changeSnapshots,
      snapshotIntervalEntries,
      fill: filled,
      limits,
      up,
      down,
      windows: windows.map((window) => measureWindow(load, window, partitions.length)),
      unavailable: load.unavailable,
      failed: load.failed,
      memory: pids.map((pid, nodeId) => ({ nodeId, before: sampler?.first(pid), peak: sampler?.peak(pid) })),
    };
  } finally {
    await cluster.close();
    await rm(directory, { recursive: true, force: true });
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Report

function printLimits(title: string, limits: Limits): void {
  console.log(`\n${title}: the same ${mebibytes(limits.bytes)} MiB (runs in the order measured)`);
  const median = (values: readonly number[]): number =>
    [...values].sort((left, right) => left - right)[Math.floor(values.length / 2)] ?? Number.NaN;
  printTable(
    ["work", "seconds by run", "fastest s", "MiB/s", "CPU s by run", "CPU s per GiB (median)"],
    [
      ["cp + sync, same disk", limits.copyMs, limits.copyCpuMs, limits.bytes] as const,
      ["loopback TCP + fsync", limits.tcpMs, limits.tcpCpuMs, limits.bytes] as const,
      [
        `engine rebuild alone (${limits.messages} messages)`,
        limits.rebuildMs,
        limits.rebuildCpuMs,
        limits.bytes,
      ] as const,
      ["first touch of as much new memory", limits.touchMs, limits.touchCpuMs, limits.bytes] as const,
      [
        "loopback TCP + fsync of its snapshot, keeping and restoring",
        limits.restoringTcpMs,
        limits.restoringTcpCpuMs,
        limits.bytes,
      ] as const,
      ...(limits.tcpUnderLoadMs.length === 0
        ? []
        : [
            [
              "loopback TCP + fsync, publishers writing",
              limits.tcpUnderLoadMs,
              limits.tcpUnderLoadCpuMs,
              limits.bytes,
            ] as const,
          ]),
      [
        `recycling ${mebibytes(limits.recycleBytes)} MiB before each`,
        limits.recycleMs,
        limits.recycleCpuMs,
        limits.recycleBytes,
      ] as const,
    ].map(([name, times, cpuTimes, bytes]) => [
      name,
      times.map(seconds).join(" "),
      seconds(fastest(times)),
      megabytesPerSecond(bytes, fastest(times)),
      cpuTimes.map((cpuMs) => formatNumber(cpuMs / 1000, 2)).join(" "),
      formatNumber(median(cpuTimes) / 1000 / (bytes / 1024 ** 3), 2),
    ]),
  );
}

/** Processor time `pid` used between `fromMs` and `toMs`, in ms, from the sampler's readings (NaN without them). */
function cpuMsOf(sampler: MemorySampler, pid: number, fromMs: number, toMs: number): number {
  const from = sampler.at(pid, fromMs);
  const to = sampler.at(pid, toMs);
  return from === undefined || to === undefined ? Number.NaN : to.cpuMs - from.cpuMs;
}

/** Processor time of the leader and the joiner while the snapshot was received, in ms. */
function transferCpuMs(join: JoinResult): number {
  const toMs = join.startedAtMs + join.receivedMs;
  return (
    cpuMsOf(join.sampler, join.leaderPid, join.startedAtMs, toMs) +
    cpuMsOf(join.sampler, join.joinerPid, join.startedAtMs, toMs)
  );
}

/** The bytes a join or change moved: what its progress showed, at least what it had to move. */
const movedBytes = (result: { bytesMoved: number; expectedBytes: number }): number =>
  Math.max(result.bytesMoved, result.expectedBytes);

/** The fastest TCP copy's time for `bytes`, scaled from the measured copy's rate. */
function tcpTimeFor(limits: Limits, bytes: number): number {
  return (fastest(limits.tcpMs) * bytes) / limits.bytes;
}

/** The same for the restoring TCP copy: the least a join of `bytes` can take. */
function restoringTcpTimeFor(limits: Limits, bytes: number): number {
  return (fastest(limits.restoringTcpMs) * bytes) / limits.bytes;
}

/** The same for the copies under the publishers' load (NaN when none was measured). */
function tcpUnderLoadTimeFor(limits: Limits, bytes: number): number {
  return limits.tcpUnderLoadMs.length === 0 ? Number.NaN : (fastest(limits.tcpUnderLoadMs) * bytes) / limits.bytes;
}

function printThroughput(windows: readonly MeasuredWindow[], unavailable: number, failed: number): void {
  const partitionCount = windows[0]?.partitions.length ?? 0;
  const perPartition = partitionCount > 1;
  printTable(
    [
      "window",
      "seconds",
      "writes/s",
      "lowest 1 s",
      "p50 ms",
      "p99 ms",
      ...(perPartition ? ["writes/s by partition", "lowest 1 s by partition"] : []),
      "CPU % machine / others",
    ],
    windows.map(({ window, rate, lowestSecond, cpu, partitions, p50Ms, p99Ms }) => [
      window.name,
      seconds(window.toMs - window.fromMs),
      formatNumber(rate),
      formatNumber(lowestSecond),
      formatNumber(p50Ms, 1),
      formatNumber(p99Ms, 1),
      ...(perPartition
        ? [
            partitions.map((partition) => formatNumber(partition.rate)).join(" "),
            partitions.map((partition) => formatNumber(partition.lowestSecond)).join(" "),
          ]
        : []),
      cpuText(cpu),
    ]),
  );
  console.log(
    `(answers 502/503/504: ${unavailable}; other failures: ${failed}; CPU: the share of both cores busy, and of it ` +
      "what processes outside this benchmark used)",
  );
}

/** How the fill went, after "filled in". */
function fillSummary(shape: FillShape, filled: FillResult): string {
  return (
    `${seconds(filled.ms)} s = ${megabytesPerSecond(shape.messages * shape.recordBytes, filled.ms)} MiB/s ` +
    `through the gateway by ${fillClients} publishers, longest pause without an acknowledgement ` +
    `${seconds(filled.longestPauseMs)} s, ${filled.unknown} answers 502/504, CPU % machine / others ` +
    cpuText(filled.cpu)
  );
}

function printJoinPart(part: JoinPart): void {
  console.log(
    `\nA. Replica joining partition 1 (${part.shape.messages} messages of ${part.shape.recordBytes} bytes, filled ` +
      `${fillSummary(part.shape, part.fill)}; the fill's snapshots: ${snapshotSummary(part.fillSnapshots)}; ` +
      `snapshot every ${part.snapshotIntervalEntries} entries)`,
  );
  printTable(
    [
      "join",
      "leader→joiner",
      "snapshot MiB",
      "to move MiB",
      "progress MiB",
      "received s",
      "installed s",
      "caught up s",
      "voter s",
      "MiB/s received",
      "attempts",
      "leader snapshots",
      "CPU s leader/joiner: receiving",
      "whole join",
      "CPU % machine / others",
    ],
    [part.idle, part.loaded].map((join) => [
      join.name,
      `${join.leader}→${join.joiner}`,
      mebibytes(join.snapshotBytes),
      mebibytes(join.expectedBytes),
      mebibytes(join.bytesMoved),
      seconds(join.receivedMs),
      seconds(join.installedMs),
      seconds(join.caughtUpMs),
      seconds(join.completedMs),
      megabytesPerSecond(join.snapshotBytes, join.receivedMs),
      String(join.attempts),
      String(join.leaderSnapshotsTaken),
      `${formatNumber(cpuMsOf(join.sampler, join.leaderPid, join.startedAtMs, join.startedAtMs + join.receivedMs) / 1000, 1)}/${formatNumber(cpuMsOf(join.sampler, join.joinerPid, join.startedAtMs, join.startedAtMs + join.receivedMs) / 1000, 1)}`,
      `${formatNumber(cpuMsOf(join.sampler, join.leaderPid, join.startedAtMs, join.endedAtMs) / 1000, 1)}/${formatNumber(cpuMsOf(join.sampler, join.joinerPid, join.startedAtMs, join.endedAtMs) / 1000, 1)}`,
      cpuText(join.cpu),
    ]),
  );
  console.log(
    "(to move: the leader's snapshot and log after it; progress: the most bytes GET /actuator/cluster showed moved; " +
      "received: the joiner's last answer before its engine was restored from the installed snapshot, within " +
      `${pollIntervalMs} ms of the transfer's end; installed: its applied index reached the snapshot's; caught up: ` +
      "it reached the commit index the leader reported just before; voter: the change COMPLETED)",
  );
  for (const join of [part.idle, part.loaded]) {
    if (join.lastError !== null) console.log(`(${join.name}: last error shown: ${join.lastError})`);
  }
  console.log(
    "\nMemory during the joins, MiB (anon: RssAnon, heap and buffers; file: RssFile, mapped file pages such as " +
      "LMDB's; transfer: from the join's request to the joiner's last answer before the install; peak RSS: VmHWM, " +
      "reset before the join)",
  );
  printTable(
    [
      "join",
      "process",
      "anon before",
      "anon growth, transfer",
      "anon growth, whole join",
      "file growth, whole join",
      "peak RSS",
    ],
    [part.idle, part.loaded].flatMap((join) => [
      memoryRow(join, `leader ${join.leader}`, join.leaderPid),
      memoryRow(join, `joiner ${join.joiner}`, join.joinerPid),
    ]),
  );
  for (const [join, timeline] of [
    [part.idle, part.idleTimeline],
    [part.loaded, part.loadedTimeline],
  ] as const) {
    console.log(`\nA. Timeline of the join with ${join.name} (memory in MiB)`);
    printTable(
      [
        "s",
        "MiB received",
        "joiner applied",
        "joiner answered in s",
        "leader commit",
        "joiner anon",
        "joiner file",
        "leader anon",
        "leader file",
        "joiner CPU %",
        "leader CPU %",
        "CPU % machine / others",
        "writes/s",
      ],
      timeline,
    );
  }
  printLimits("A. Physical limits", part.limits);
  console.log(`\nA. Writes to partition 1 by ${loadDescription()} around the loaded join`);
  printThroughput(part.windows, part.unavailable, part.failed);
}

function memoryRow(join: JoinResult, process: string, pid: number): string[] {
  const before = join.sampler.first(pid);
  const transfer = join.sampler.peak(pid, join.startedAtMs, join.startedAtMs + join.receivedMs);
  const peak = join.sampler.peak(pid);
  return [
    join.name,
    process,
    before === undefined ? "n/a" : mebibytes(before.rssAnon),
    growth(transfer?.rssAnon, before?.rssAnon),
    growth(peak?.rssAnon, before?.rssAnon),
    growth(peak?.rssFile, before?.rssFile),
    peak === undefined ? "n/a" : mebibytes(peak.peakRss),
  ];
}

/**
 * About a dozen rows describing a join as it went: at each, what the last poll saw, and over the time since the row
 * before, the processor time of the joiner and the leader (in % of one core), how busy the machine was, and the
 * publishers' rate when there was a load.
 */
function joinTimeline(join: JoinResult, load: PublisherLoad | undefined): string[][] {
  const stepMs = Math.max(1_000, join.completedMs / 12);
  const rows: string[][] = [];
  let previousMs = join.startedAtMs;
  const polls = join.polls;
  const percentOfCore = (pid: number, fromMs: number, toMs: number): string => {
    const from = join.sampler.at(pid, fromMs);
    const to = join.sampler.at(pid, toMs);
    if (from === undefined || to === undefined || to.atMs <= from.atMs) return "n/a";
    return formatNumber(((to.cpuMs - from.cpuMs) / (to.atMs - from.atMs)) * 100);
  };
  for (const [position, poll] of polls.entries()) {
    const last = position === polls.length - 1;
    // Every poll the joiner took over a second to answer is shown: its event loop was busy (restoring its engine).
    if (!last && poll.atMs - previousMs < stepMs && poll.joinerAnswerMs < 1_000) continue;
    const joinerMemory = join.sampler.at(join.joinerPid, poll.atMs);
    const leaderMemory = join.sampler.at(join.leaderPid, poll.atMs);
    rows.push([
      seconds(poll.atMs - join.startedAtMs),
      mebibytes(poll.bytesMoved),
      poll.joinerApplied === undefined ? "-" : String(poll.joinerApplied),
      formatNumber(poll.joinerAnswerMs / 1000, 2),
      poll.leaderCommit === undefined ? "-" : String(poll.leaderCommit),
      joinerMemory === undefined ? "n/a" : mebibytes(joinerMemory.rssAnon),
      joinerMemory === undefined ? "n/a" : mebibytes(joinerMemory.rssFile),
      leaderMemory === undefined ? "n/a" : mebibytes(leaderMemory.rssAnon),
      leaderMemory === undefined ? "n/a" : mebibytes(leaderMemory.rssFile),
      percentOfCore(join.joinerPid, previousMs, poll.atMs),
      percentOfCore(join.leaderPid, previousMs, poll.atMs),
      cpuText(cpuRecorder?.shares(previousMs, poll.atMs)),
      load === undefined ? "-" : formatNumber(load.rate(previousMs, poll.atMs)),
    ]);
    previousMs = poll.atMs;
  }
  return rows;
}

function printScalePart(part: ScalePart): void {
  console.log(
    `\nB. Scaling 3 → 6 → 3 brokers (3 partitions, RF 3, ${part.shape.messages} messages of ${part.shape.recordBytes} ` +
      `bytes ${fillSummary(part.shape, part.fill)}; the fill's snapshots: ${snapshotSummary(part.fillSnapshots)}; ` +
      `snapshot every ${part.snapshotIntervalEntries} entries)`,
  );
  printTable(
    [
      "change",
      "operations",
      "joins",
      "completed s",
      "progress MiB",
      "to move MiB",
      "MiB/s",
      "attempts",
      "CPU % machine / others",
    ],
    [part.up, part.down].map((change) => [
      change.name,
      String(change.operations),
      String(change.joins),
      seconds(change.completedMs),
      mebibytes(change.bytesMoved),
      mebibytes(change.expectedBytes),
      megabytesPerSecond(movedBytes(change), change.completedMs),
      String(change.attempts),
      cpuText(change.cpu),
    ]),
  );
  for (const change of [part.up, part.down]) {
    if (change.lastError !== null) console.log(`(${change.name}: last error shown: ${change.lastError})`);
  }
  for (const change of [part.up, part.down]) {
    console.log(
      `\nB. Operations of the ${change.name} as GET /actuator/cluster showed them running (polled every ${pollIntervalMs} ms; ` +
        `moved: the most bytes its progress showed; leaders when it started: ${change.leadersBefore})`,
    );
    printTable(
      ["operation", "first seen s", "last seen s", "moved MiB"],
      change.steps.map((step) => [
        step.operation,
        seconds(step.fromMs),
        seconds(step.toMs),
        mebibytes(change.bytesByStep.get(step.operation) ?? 0),
      ]),
    );
  }
  for (const change of [part.up, part.down]) {
    console.log(
      `\nB. Timeline of the ${change.name} from the brokers' logs (seconds since the request; learner and voter: ` +
        "the leader committed the membership; next starts after: from this operation's completion to the next " +
        "one's start on its broker)",
    );
    printTable(
      TIMELINE_COLUMNS,
      change.timeline.map((row) => [...row]),
    );
  }
  console.log(
    `\nB. Snapshots taken during the changes: ${
      part.changeSnapshots.length === 0
        ? "none"
        : part.changeSnapshots
            .map(
              (stat) =>
                `broker ${stat.nodeId} partition ${stat.partitionId}: ${stat.count} (${formatNumber(stat.seconds, 1)} s)`,
            )
            .join(", ")
    }`,
  );
  console.log("\nB. Memory of each broker during the scale-up, MiB");
  printTable(
    ["broker", "anon before", "anon peak", "anon growth", "file growth", "peak RSS"],
    part.memory.map(({ nodeId, before, peak }) => [
      String(nodeId),
      before === undefined ? "n/a" : mebibytes(before.rssAnon),
      peak === undefined ? "n/a" : mebibytes(peak.rssAnon),
      growth(peak?.rssAnon, before?.rssAnon),
      growth(peak?.rssFile, before?.rssFile),
      peak === undefined ? "n/a" : mebibytes(peak.peakRss),
    ]),
  );
  printLimits("B. Physical limits", part.limits);
  console.log(`\nB. Writes by ${loadDescription()} (round robin over the partitions) around the changes`);
  printThroughput(part.windows, part.unavailable, part.failed);
}

function rateOf(windows: readonly MeasuredWindow[], name: string): number {
  return windows.find((entry) => entry.window.name === name)?.rate ?? Number.NaN;
}

function printRatios(join: JoinPart | undefined, scale: ScalePart | undefined): void {
  console.log(
    "\nRatios (targets: join ≤ 1.5× the TCP copy, change ≤ 2× the TCP copy, throughput ≥ 0.7× before; the copies' " +
      "times are scaled to the larger of the bytes to move and the bytes the progress showed, from the fastest copy)",
  );
  const rows: string[][] = [];
  if (join !== undefined) {
    for (const result of [join.idle, join.loaded]) {
      const tcpMs = tcpTimeFor(join.limits, movedBytes(result));
      rows.push([
        `A. join (${result.name}): caught up / TCP copy`,
        formatNumber(result.caughtUpMs / tcpMs, 2),
        "≤ 1.5",
      ]);
      rows.push([`A. join (${result.name}): voter / TCP copy`, formatNumber(result.completedMs / tcpMs, 2), "≤ 1.5"]);
      rows.push([
        `A. join (${result.name}): caught up / TCP copy keeping and restoring`,
        formatNumber(result.caughtUpMs / restoringTcpTimeFor(join.limits, movedBytes(result)), 2),
        "",
      ]);
      if (result === join.loaded && join.limits.tcpUnderLoadMs.length > 0) {
        rows.push([
          `A. join (${result.name}): caught up / TCP copy while the same publishers write`,
          formatNumber(result.caughtUpMs / tcpUnderLoadTimeFor(join.limits, movedBytes(result)), 2),
          "",
        ]);
      }
      const tcpCpuMs = [...join.limits.tcpCpuMs].sort((left, right) => left - right)[
        Math.floor(join.limits.tcpCpuMs.length / 2)
      ] as number;
      rows.push([
        `A. join (${result.name}): CPU of leader + joiner while receiving / TCP copy's, per byte`,
        formatNumber(transferCpuMs(result) / result.snapshotBytes / (tcpCpuMs / join.limits.bytes), 1),
        "",
      ]);
      rows.push([
        `A. join (${result.name}): caught up / cp`,
        formatNumber(result.caughtUpMs / ((fastest(join.limits.copyMs) * movedBytes(result)) / join.limits.bytes), 2),
        "",
      ]);
    }
    rows.push([
      "A. TCP copy keeping and restoring (the least a join can take) / TCP copy",
      formatNumber(fastest(join.limits.restoringTcpMs) / fastest(join.limits.tcpMs), 2),
      "",
    ]);
    rows.push([
      "A. engine rebuild alone / TCP copy",
      formatNumber(fastest(join.limits.rebuildMs) / fastest(join.limits.tcpMs), 2),
      "",
    ]);
    rows.push([
      "A. a joiner's floor on one thread: (CPU of the TCP copy's receiver + of the engine rebuild) / TCP copy",
      formatNumber(
        (fastest(join.limits.tcpReceiverCpuMs) + fastest(join.limits.rebuildCpuMs)) / fastest(join.limits.tcpMs),
        2,
      ),
      "",
    ]);
    rows.push([
      "A. the same floor with the first touch of the memory that keeps the state (CPU) / TCP copy",
      formatNumber(
        (fastest(join.limits.tcpReceiverCpuMs) + fastest(join.limits.rebuildCpuMs) + fastest(join.limits.touchCpuMs)) /
          fastest(join.limits.tcpMs),
        2,
      ),
      "",
    ]);
    const before = rateOf(join.windows, "before");
    rows.push([
      "A. writes during the join / before",
      formatNumber(rateOf(join.windows, "during the join") / before, 2),
      "≥ 0.7",
    ]);
    rows.push([
      "A. writes during the join / mean of before and after",
      formatNumber((2 * rateOf(join.windows, "during the join")) / (before + rateOf(join.windows, "after")), 2),
      "",
    ]);
  }
  if (scale !== undefined) {
    for (const change of [scale.up, scale.down]) {
      rows.push([
        `B. ${change.name}: completed / TCP copy`,
        formatNumber(change.completedMs / tcpTimeFor(scale.limits, movedBytes(change)), 2),
        change === scale.up ? "≤ 2" : "",
      ]);
      rows.push([
        `B. ${change.name}: completed / TCP copy keeping and restoring`,
        formatNumber(change.completedMs / restoringTcpTimeFor(scale.limits, movedBytes(change)), 2),
        "",
      ]);
      if (scale.limits.tcpUnderLoadMs.length > 0) {
        rows.push([
          `B. ${change.name}: completed / TCP copy while the same publishers write`,
          formatNumber(change.completedMs / tcpUnderLoadTimeFor(scale.limits, movedBytes(change)), 2),
          "",
        ]);
      }
    }
    rows.push([
      "B. TCP copy keeping and restoring / TCP copy",
      formatNumber(fastest(scale.limits.restoringTcpMs) / fastest(scale.limits.tcpMs), 2),
      "",
    ]);
    rows.push([
      "B. engine rebuild alone / TCP copy (of the state the joins move)",
      formatNumber(fastest(scale.limits.rebuildMs) / fastest(scale.limits.tcpMs), 2),
      "",
    ]);
    const before = rateOf(scale.windows, "before");
    rows.push([
      "B. writes during the scale-up / before",
      formatNumber(rateOf(scale.windows, "during scale-up") / before, 2),
      "≥ 0.7",
    ]);
    rows.push([
      "B. writes during the scale-up / mean of before and after it",
      formatNumber(
        (2 * rateOf(scale.windows, "during scale-up")) / (before + rateOf(scale.windows, "after scale-up")),
        2,
      ),
      "",
    ]);
    rows.push([
      "B. writes during the scale-down / mean of before and after it",
      formatNumber(
        (2 * rateOf(scale.windows, "during scale-down")) /
          (rateOf(scale.windows, "after scale-up") + rateOf(scale.windows, "after scale-down")),
        2,
      ),
      "",
    ]);
  }
  printTable(["ratio", "value", "target"], rows);
}

/** Runs the scaling benchmark and prints its tables and ratios; stops every child whatever happens. */
export async function run(): Promise<void> {
  children = new BenchmarkChildren("scaling", runDeadlineMs);
  cpuRecorder = new CpuRecorder(ownPids, 500);
  const dataDirectory = await mkdtemp(join(tmpdir(), "flowplane-bench-scaling-"));
  // When the run stops itself (its deadline, Ctrl-C) the children are signalled on the way out; the data goes too,
  // as far as a child still writing lets it.
  const removeData = (): void => {
    try {
      rmSync(dataDirectory, { recursive: true, force: true });
    } catch {
      // A child was still writing there; what is left is in the temporary directory named at the start.
    }
  };
  process.once("exit", removeData);
  let platform: BenchmarkPlatform | undefined;
  let joinPart: JoinPart | undefined;
  let scalePart: ScalePart | undefined;
  try {
    console.log(
      `bench scaling: ${mebibytes(stateBytes)} MiB of state per part, parts ${[...parts].join(", ")}, ` +
        `${loadDescription()} during the changes, broker heap ` +
        `${brokerHeapMb === undefined ? "Node.js default" : `${brokerHeapMb} MB`}, in ${dataDirectory}, ` +
        `stopping itself after ${runDeadlineMs / 60_000} min`,
    );
    await mkdir(dataDirectory, { recursive: true });
    platform = await startPlatform(children, dataDirectory, startTimeoutMs);
    platformPid = platform.child.pid;
    if (parts.has("join")) {
      joinPart = await measureJoin(dataDirectory, platform);
      printJoinPart(joinPart);
    }
    if (parts.has("scale")) {
      scalePart = await measureScale(dataDirectory, platform);
      printScalePart(scalePart);
    }
  } finally {
    if (platform !== undefined) await stopChild(platform.child);
    children.release();
    cpuRecorder.stop();
    await rm(dataDirectory, { recursive: true, force: true });
    process.off("exit", removeData);
  }
  printRatios(joinPart, scalePart);
}
