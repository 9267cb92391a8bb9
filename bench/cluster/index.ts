/**
 * Benchmark `cluster`: messages published per second, and p50/p99 latency, through the gateway of a local cluster
 * (3 broker processes, 3 partitions, replication factor 3, durable commits) at 1, 16 and 64 concurrent clients; side
 * by side in the same run with a 3-member etcd cluster (each member fsyncs its write-ahead log, the same durability)
 * doing puts of the same payload size at the same concurrency through its HTTP/JSON gateway. Everything runs on
 * 127.0.0.1 in a temporary directory; the load generator runs here. Prints tables, then the ratios last.
 *
 * etcd is measured twice: with its puts sent to its leader, and sent to a follower, which forwards them to the leader.
 * Every flowplane write crosses the gateway before it reaches a partition leader, so the follower path has as many
 * processes on the way and the leader path one fewer. At 1 client that hop decides the ratio (0.95–1.00 against etcd
 * via its leader, 1.12–1.16 via a follower, in the runs that led to this), so the benchmark no longer leaves it to
 * which member etcd happens to elect.
 *
 * Each cell is measured in several rounds, the systems alternating within every round, and the table shows each
 * figure's median over the rounds: on this shared two-core machine one 5 s measurement of either system varies by a
 * third from run to run, and the median of interleaved rounds keeps a slow drift from favouring one side. The
 * clients per cell can be chosen with FLOWPLANE_BENCH_CLIENTS (e.g. `FLOWPLANE_BENCH_CLIENTS=1,16`).
 *
 * Besides throughput and latency it prints, per acknowledged write, the disk work of each system (from the block
 * device's counters) and the processor time of each of its parts (load generator, gateway, servers; from `/proc`),
 * both on Linux only: on this two-core machine every process of both systems competes for the same cores, so the
 * processor time a write costs matters as much as its path.
 *
 * Before the first cell each system runs a longer unmeasured warm-up at 16 clients: the brokers and the gateway are
 * just-started Node.js processes whose hot paths V8 has not optimized yet (without it the first cell measured the
 * compiler: gateway round trips fell from 3.7 ms to 1.6 ms over its first 8 s), while etcd is compiled ahead of
 * time. Every system gets the same warm-up (etcd one for each of its two paths).
 */

import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { pino } from "pino";
import {
  freePort,
  type LocalBroker,
  type LocalCluster,
  startLocalCluster,
} from "../../src/platform/provisioner/index.js";
import { BenchmarkChildren } from "../support/children.js";
import { type CpuTime, cpuTimeBetween, cpuTimeOf, ownCpuTime } from "../support/cpu.js";
import { type DiskCounters, diskCountersBetween, diskCountersReader } from "../support/disk.js";
import { type LoadResult, type LoadTarget, measure, probe } from "../support/load.js";
import { startPlatform, stopChild, waitUntil } from "../support/platform.js";
import { formatNumber, printTable } from "../support/report.js";

const concurrencies = parseClients(process.env.FLOWPLANE_BENCH_CLIENTS ?? "1,16,64");
/** Measured rounds per cell; the table shows the median. */
const rounds = 5;
const warmupMs = 1_000;
/** The unmeasured run each system gets before its first cell. */
const initialWarmupMs = 5_000;
const durationMs = 3_000;
const startTimeoutMs = 60_000;
/** The whole run stops itself after this, whatever happens. */
const runDeadlineMs = 420_000;
/** Bytes of the payload each message (and each etcd value) carries. */
const payloadBytes = 256;

/** The run's child processes and its stop-by-itself guard; set at the start of `run()`. */
let children: BenchmarkChildren;
let cluster: LocalCluster | undefined;

function etcdInstalled(): boolean {
  return spawnSync("etcd", ["--version"], { stdio: "ignore" }).status === 0;
}

/** Starts a 3-member etcd cluster on loopback ports; returns the members' client URLs (in order) and pids. */
async function startEtcd(dataDirectory: string): Promise<{ urls: string[]; pids: number[] }> {
  const members = [];
  const pids: number[] = [];
  for (let index = 0; index < 3; index += 1) {
    members.push({ name: `member${index}`, client: await freePort("127.0.0.1"), peer: await freePort("127.0.0.1") });
  }
  const initialCluster = members.map((member) => `${member.name}=http://127.0.0.1:${member.peer}`).join(",");
  for (const member of members) {
    const child = children.track(
      spawn(
        "etcd",
        [
          "--name",
          member.name,
          "--data-dir",
          join(dataDirectory, "etcd", member.name),
          "--listen-client-urls",
          `http://127.0.0.1:${member.client}`,
          "--advertise-client-urls",
          `http://127.0.0.1:${member.client}`,
          "--listen-peer-urls",
          `http://127.0.0.1:${member.peer}`,
          "--initial-advertise-peer-urls",
          `http://127.0.0.1:${member.peer}`,
          "--initial-cluster",
          initialCluster,
          "--initial-cluster-state",
          "new",
          "--initial-cluster-token",
          "flowplane-bench",
          "--log-level",
          "error",
        ],
        { stdio: ["ignore", "ignore", "pipe"] },
      ),
    );
    createInterface({ input: child.stderr! }).on("line", () => undefined);
    if (child.pid !== undefined) pids.push(child.pid);
  }
  const urls = members.map((member) => `http://127.0.0.1:${member.client}`);
  await waitUntil("etcd", startTimeoutMs, async () => {
    const response = await fetch(`${urls[0]}/health`);
    return ((await response.json()) as { health?: string }).health === "true";
  });
  return { urls, pids };
}

/** The client URL of etcd's current leader among `urls`, or undefined when none of them says it leads. */
async function etcdLeaderUrl(urls: readonly string[]): Promise<string | undefined> {
  for (const url of urls) {
    const response = await fetch(`${url}/v3/maintenance/status`, { method: "POST", body: "{}" });
    const status = (await response.json()) as { header?: { member_id?: string }; leader?: string };
    if (status.header?.member_id !== undefined && status.header.member_id === status.leader) return url;
  }
  return undefined;
}

/** The brokers' storage commits so far, summed over every broker (from their Prometheus metrics). */
interface CommitTotals {
  commits: number;
  seconds: number;
  writes: number;
}

/** Reads and sums the storage commit metrics of every broker of the local cluster. */
async function readCommitTotals(brokers: readonly LocalBroker[]): Promise<CommitTotals> {
  const totals: CommitTotals = { commits: 0, seconds: 0, writes: 0 };
  const series: Record<string, keyof CommitTotals> = {
    flowplane_storage_commit_duration_seconds_count: "commits",
    flowplane_storage_commit_duration_seconds_sum: "seconds",
    flowplane_storage_commit_writes_sum: "writes",
  };
  for (const broker of brokers) {
    const text = await (await fetch(`${broker.managementUrl}/actuator/prometheus`)).text();
    for (const line of text.split("\n")) {
      const match = /^(\w+)\{[^}]*\} ([0-9.e+-]+)$/.exec(line);
      const field = match === null ? undefined : series[match[1] as string];
      if (match !== null && field !== undefined) totals[field] += Number(match[2]);
    }
  }
  return totals;
}

/**
 * The parts of a system whose processor time is reported: the load generator (this process), the gateway (flowplane
 * only) and the servers (the brokers, or etcd's members). Each reads its processes' time so far.
 */
interface SystemParts {
  readonly gateway: (() => CpuTime) | undefined;
  readonly servers: () => CpuTime;
}

/**
 * The work done while one system was measured in one cell: the disk's, each part's processor time, and the writes
 * it acknowledged meanwhile.
 */
interface CellWork {
  writes: number;
  bytesWritten: number;
  flushes: number;
  loadGeneratorCpuMs: number;
  gatewayCpuMs: number;
  serversCpuMs: number;
  serversSystemCpuMs: number;
  acknowledgedWrites: number;
}

function noWork(): CellWork {
  return {
    writes: 0,
    bytesWritten: 0,
    flushes: 0,
    loadGeneratorCpuMs: 0,
    gatewayCpuMs: 0,
    serversCpuMs: 0,
    serversSystemCpuMs: 0,
    acknowledgedWrites: 0,
  };
}

function totalMs(time: CpuTime): number {
  return time.userMs + time.systemMs;
}

/** Runs `measure` and adds the disk work (when the device's counters can be read) and processor time to `work`. */
async function measureWork(
  target: LoadTarget,
  options: { connections: number; warmupMs: number; durationMs: number },
  readDisk: (() => DiskCounters) | undefined,
  parts: SystemParts,
  work: CellWork,
): Promise<LoadResult> {
  const diskBefore = readDisk?.();
  const loadGeneratorBefore = ownCpuTime();
  const gatewayBefore = parts.gateway?.();
  const serversBefore = parts.servers();
  const result = await measure(target, options);
  const servers = cpuTimeBetween(serversBefore, parts.servers());
  work.serversCpuMs += totalMs(servers);
  work.serversSystemCpuMs += servers.systemMs;
  if (parts.gateway !== undefined && gatewayBefore !== undefined) {
    work.gatewayCpuMs += totalMs(cpuTimeBetween(gatewayBefore, parts.gateway()));
  }
  work.loadGeneratorCpuMs += totalMs(cpuTimeBetween(loadGeneratorBefore, ownCpuTime()));
  if (readDisk !== undefined && diskBefore !== undefined) {
    const done = diskCountersBetween(diskBefore, readDisk());
    work.writes += done.writes;
    work.bytesWritten += done.bytesWritten;
    work.flushes += done.flushes;
  }
  work.acknowledgedWrites += result.answeredRequests;
  return result;
}

/** Parses a comma-separated list of client counts (positive integers). */
function parseClients(text: string): number[] {
  const clients = text.split(",").map((part) => Number(part.trim()));
  if (clients.length === 0 || clients.some((count) => !Number.isSafeInteger(count) || count < 1)) {
    throw new Error(`FLOWPLANE_BENCH_CLIENTS must list positive integers separated by commas, got "${text}"`);
  }
  return clients;
}

/** The median of each figure over the rounds of one cell (each figure on its own). */
function medianResult(results: readonly LoadResult[]): LoadResult {
  const median = (values: number[]): number => {
    const sorted = [...values].sort((left, right) => left - right);
    return sorted[Math.floor(sorted.length / 2)] ?? Number.NaN;
  };
  const first = results[0];
  if (first === undefined) throw new Error("invariant violated: a cell was measured in no round");
  return {
    connections: first.connections,
    requestsPerSecond: median(results.map((result) => result.requestsPerSecond)),
    p50Ms: median(results.map((result) => result.p50Ms)),
    p99Ms: median(results.map((result) => result.p99Ms)),
    errors: results.reduce((total, result) => total + result.errors, 0),
    answeredRequests: results.reduce((total, result) => total + result.answeredRequests, 0),
  };
}

/** The time one round spends on one cell: every system's warm-up and measurement, flowplane and etcd's two paths. */
function rotationMs(withEtcd: boolean): number {
  return (withEtcd ? 3 : 1) * (warmupMs + durationMs);
}

/** One system under measurement, as the tables name it, with its load target and the parts whose time is read. */
interface MeasuredSystem {
  readonly name: string;
  readonly target: LoadTarget;
  readonly parts: SystemParts;
  /** Per cell, the result of every round. */
  readonly rounds: LoadResult[][];
  /** Per cell, the disk work and processor time of its measurements (warm-ups included). */
  readonly work: CellWork[];
}

function measuredSystem(name: string, target: LoadTarget, parts: SystemParts): MeasuredSystem {
  return { name, target, parts, rounds: concurrencies.map(() => []), work: concurrencies.map(noWork) };
}

/** Prints the ratios of flowplane's medians to one peer's, with the throughput ratio of every round. */
function printRatios(title: string, flowplane: MeasuredSystem, peer: MeasuredSystem): void {
  console.log(`\n${title}`);
  printTable(
    ["clients", "throughput", "p50 latency", "p99 latency", "throughput by round"],
    concurrencies.map((connections, cell) => {
      const ours = medianResult(flowplane.rounds[cell] ?? []);
      const theirs = medianResult(peer.rounds[cell] ?? []);
      const byRound = (flowplane.rounds[cell] ?? []).map(
        (result, round) => result.requestsPerSecond / (peer.rounds[cell]?.[round]?.requestsPerSecond ?? 0),
      );
      return [
        String(connections),
        formatNumber(ours.requestsPerSecond / theirs.requestsPerSecond, 2),
        formatNumber(ours.p50Ms / theirs.p50Ms, 2),
        formatNumber(ours.p99Ms / theirs.p99Ms, 2),
        byRound.map((ratio) => formatNumber(ratio, 2)).join(" "),
      ];
    }),
  );
}

/** Runs the cluster benchmark and prints its tables and ratios; stops every child whatever happens. */
export async function run(): Promise<void> {
  children = new BenchmarkChildren("cluster", runDeadlineMs);

  const payload = "x".repeat(payloadBytes);
  const dataDirectory = await mkdtemp(join(tmpdir(), "flowplane-bench-cluster-"));
  /** flowplane first, then etcd reached through its leader and through a follower (when etcd is installed). */
  const systems: MeasuredSystem[] = [];
  /** Per cell, the brokers' storage commits during its flowplane measurements (warm-ups included). */
  const commitsByCell: CommitTotals[] = concurrencies.map(() => ({ commits: 0, seconds: 0, writes: 0 }));
  const readDisk = diskCountersReader(dataDirectory);
  let brokerCount = 0;
  /** Whether etcd's leader was the same member after the measurements as before them. */
  let etcdLeaderKept = true;
  const withEtcd = etcdInstalled();
  let platformChild: ChildProcess | undefined;
  try {
    console.log(
      `bench cluster: POST /v2/messages/publication (${payloadBytes}-byte payload, no correlation key: round robin) through the gateway of ` +
        `3 brokers, 3 partitions, RF 3; etcd: 3 members, PUT /v3/kv/put of a ${payloadBytes}-byte value, sent to its ` +
        `leader and, separately, to a follower; ${initialWarmupMs / 1000} s warm-up for each, then ${rounds} rounds of ` +
        `${warmupMs / 1000} s warm-up + ${durationMs / 1000} s per cell (medians shown), everything on 127.0.0.1`,
    );
    if (!withEtcd) {
      console.log("etcd is not installed (Debian: apt-get install etcd-server): the peer is skipped, no ratios");
    }
    const platform = await startPlatform(children, dataDirectory, startTimeoutMs);
    platformChild = platform.child;
    const runningCluster = await startLocalCluster({
      dataDirectory: join(dataDirectory, "flowplane"),
      gatewayPort: 0,
      managementPort: 0,
      issuerUrl: platform.url,
      logger: pino({ level: "warn" }),
      logLevel: "warn",
      readyTimeoutMs: startTimeoutMs,
    });
    cluster = runningCluster;
    brokerCount = runningCluster.brokers.length;
    const flowplane = measuredSystem(
      "flowplane",
      {
        origin: runningCluster.gatewayUrl,
        method: "POST",
        path: "/v2/messages/publication",
        headers: { authorization: `Bearer ${platform.token}`, "content-type": "application/json" },
        // Buffered for one rotation through the systems, so the brokers' memory stays flat during the run, and the
        // messages of a flowplane window expire during flowplane's next window: expired messages are removed by the
        // publications then, instead of by expiry records written while a peer is being measured.
        body: JSON.stringify({ name: "bench", timeToLive: rotationMs(withEtcd), variables: { payload } }),
      },
      {
        gateway: () => cpuTimeOf(runningCluster.gatewayPid === undefined ? [] : [runningCluster.gatewayPid]),
        servers: () =>
          cpuTimeOf(runningCluster.brokers.flatMap((broker) => (broker.pid === undefined ? [] : [broker.pid]))),
      },
    );
    const check = await probe(flowplane.target);
    if (check.status !== 200) throw new Error(`the gateway answered ${check.status}: ${check.body}`);
    systems.push(flowplane);
    let etcdLeader: string | undefined;
    let etcdUrls: readonly string[] = [];
    if (withEtcd) {
      const etcd = await startEtcd(dataDirectory);
      etcdUrls = etcd.urls;
      const parts: SystemParts = { gateway: undefined, servers: () => cpuTimeOf(etcd.pids) };
      const target = (origin: string): LoadTarget => ({
        origin,
        method: "POST",
        path: "/v3/kv/put",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({
          key: Buffer.from("bench/key").toString("base64"),
          value: Buffer.from(payload).toString("base64"),
        }),
      });
      // The first put also makes sure a leader is elected before it is looked up.
      const etcdCheck = await probe(target(etcd.urls[0] as string));
      if (etcdCheck.status !== 200) throw new Error(`etcd answered ${etcdCheck.status}: ${etcdCheck.body}`);
      etcdLeader = await etcdLeaderUrl(etcd.urls);
      const follower = etcd.urls.find((url) => url !== etcdLeader);
      if (etcdLeader === undefined || follower === undefined) throw new Error("etcd has no leader to measure against");
      // A put sent to the leader takes the shortest path etcd has; one sent to a follower is forwarded to the leader,
      // one process more, as every flowplane write crosses the gateway before it reaches a partition leader.
      systems.push(measuredSystem("etcd via leader", target(etcdLeader), parts));
      systems.push(measuredSystem("etcd via follower", target(follower), parts));
    }
    const initialWarmup = { connections: 16, warmupMs: initialWarmupMs, durationMs: 1 };
    for (const system of systems) await measure(system.target, initialWarmup);
    for (let round = 0; round < rounds; round += 1) {
      for (const [cell, connections] of concurrencies.entries()) {
        // Alternating the systems at each step exposes all of them to the same machine conditions.
        const options = { connections, warmupMs, durationMs };
        for (const system of systems) {
          const before = system === flowplane ? await readCommitTotals(runningCluster.brokers) : undefined;
          system.rounds[cell]?.push(
            await measureWork(system.target, options, readDisk, system.parts, system.work[cell] as CellWork),
          );
          if (before === undefined) continue;
          const after = await readCommitTotals(runningCluster.brokers);
          const totals = commitsByCell[cell] as CommitTotals;
          totals.commits += after.commits - before.commits;
          totals.seconds += after.seconds - before.seconds;
          totals.writes += after.writes - before.writes;
        }
      }
    }
    if (etcdLeader !== undefined) etcdLeaderKept = (await etcdLeaderUrl(etcdUrls)) === etcdLeader;
  } finally {
    await cluster?.close();
    cluster = undefined;
    if (platformChild !== undefined) await stopChild(platformChild);
    children.release();
    await rm(dataDirectory, { recursive: true, force: true });
  }

  console.log(`\nWrites acknowledged by a quorum (median of ${rounds} rounds)`);
  printTable(
    ["system", "clients", "writes/s", "p50 ms", "p99 ms", "errors"],
    concurrencies.flatMap((connections, cell) =>
      systems.map((system) => {
        const result = medianResult(system.rounds[cell] ?? []);
        return [
          system.name,
          String(connections),
          formatNumber(result.requestsPerSecond),
          formatNumber(result.p50Ms, 2),
          formatNumber(result.p99Ms, 2),
          String(result.errors),
        ];
      }),
    ),
  );
  console.log("\nflowplane brokers' storage during those cells (every round, warm-ups included)");
  const cellSeconds = (rounds * (warmupMs + durationMs)) / 1000;
  printTable(
    ["clients", "commits/s per broker", "ms per commit", "writes per commit"],
    concurrencies.map((connections, cell) => {
      const totals = commitsByCell[cell] as CommitTotals;
      return [
        String(connections),
        formatNumber(totals.commits / brokerCount / cellSeconds),
        formatNumber((totals.seconds / totals.commits) * 1000, 2),
        formatNumber(totals.writes / totals.commits, 1),
      ];
    }),
  );
  if (readDisk !== undefined) {
    console.log(
      "\nDisk work per acknowledged write (the device under the data directory, every round, warm-ups included; " +
        "a flush is what each fsync ends with)",
    );
    printTable(
      ["system", "clients", "device writes", "KiB written", "flushes"],
      concurrencies.flatMap((connections, cell) =>
        systems.map((system) => {
          const work = system.work[cell] as CellWork;
          return [
            system.name,
            String(connections),
            formatNumber(work.writes / work.acknowledgedWrites, 1),
            formatNumber(work.bytesWritten / 1024 / work.acknowledgedWrites, 1),
            formatNumber(work.flushes / work.acknowledgedWrites, 2),
          ];
        }),
      ),
    );
  }
  console.log(
    "\nProcessor time per acknowledged write, in µs (user + system, every round, warm-ups included; servers: the " +
      "3 brokers or the 3 etcd members; this machine has 2 cores for all of them)",
  );
  printTable(
    ["system", "clients", "load generator", "gateway", "servers", "of which system", "in all"],
    concurrencies.flatMap((connections, cell) =>
      systems.map((system) => {
        const work = system.work[cell] as CellWork;
        const perWrite = (milliseconds: number): string =>
          formatNumber((milliseconds * 1000) / work.acknowledgedWrites);
        return [
          system.name,
          String(connections),
          perWrite(work.loadGeneratorCpuMs),
          system.parts.gateway === undefined ? "-" : perWrite(work.gatewayCpuMs),
          perWrite(work.serversCpuMs),
          perWrite(work.serversSystemCpuMs),
          perWrite(work.loadGeneratorCpuMs + work.gatewayCpuMs + work.serversCpuMs),
        ];
      }),
    ),
  );
  const [flowplane, etcdViaLeader, etcdViaFollower] = systems;
  if (flowplane === undefined || etcdViaLeader === undefined || etcdViaFollower === undefined) return;
  if (!etcdLeaderKept) {
    console.log("\netcd's leader changed during the run: the two etcd rows may have swapped roles part of the time.");
  }
  console.log("\nRatios, flowplane / etcd (throughput above 1 and latency below 1 favour flowplane)");
  printRatios(
    "Against etcd via a follower (forwarded to the leader: one process on the way, like flowplane's gateway)",
    flowplane,
    etcdViaFollower,
  );
  printRatios(
    "Against etcd via its leader (etcd's shortest path: one process fewer than any flowplane write takes)",
    flowplane,
    etcdViaLeader,
  );
}
