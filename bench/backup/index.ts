/**
 * Benchmark `backup`: what a backup and a restore through the Administration API cost for a cluster holding a lot
 * of state, side by side with copying the same files with `cp` on the same disk, measured in the same run.
 *
 * `flowplane start` runs as a child process with its first cluster (3 brokers, 3 partitions, replication factor 3),
 * which is filled through the gateway with FLOWPLANE_BENCH_STATE_MB (default 1024) of buffered messages that live
 * for a day, spread over the partitions. Then:
 *
 * 1. Two backups with no other load (`POST /admin/clusters/{id}/backups`, the list polled every 100 ms until it is
 *    Complete): the first with every file of the brokers read into memory just before, the second with none of them
 *    in memory (dirty pages written and the files' pages dropped), so that neither depends on what the kernel happened
 *    to keep; each right after a scratch write of 1.5 times the state's bytes (at most 30 % of the memory available),
 *    deleted at once, so that neither writes into memory the page cache did not use lately (bench/support/page-cache.ts). For each: its
 *    time, the bytes its files hold on disk, MB/s, the bytes the disk read meanwhile and the brokers' processor
 *    time.
 * 2. `cp` of the first backup's files to another directory of the same disk followed by `sync`, twice in each of the
 *    same two states of the page cache, each after the same scratch write (the machine is shared: the faster run
 *    counts), for the ratio backup time / copy time in each state (target at most 1.5). The backup's time is the
 *    API's (from the request until the polled list shows it Complete); the cluster's own time (from the first
 *    partition's checkpoint to the last part written) leaves out the request, the coordinator and the polling, and is
 *    printed as a ratio to the copy as well.
 * 3. Closed-loop publishers (FLOWPLANE_BENCH_LOAD_CLIENTS, default 4, small messages) for 10 s without a backup, then
 *    while a second backup runs (its list polled every 500 ms): acknowledged writes per second during against
 *    without (target at least 0.8), and the acknowledgements per 100 ms during the backup (where the loss is).
 * 4. A restore from the first backup (`POST …/backups/{id}/restore`, polled every 250 ms until COMPLETED): its time,
 *    and the time until the platform's health polling shows the cluster Healthy again.
 *
 * Settings (environment): FLOWPLANE_BENCH_STATE_MB, FLOWPLANE_BENCH_LOAD_CLIENTS, FLOWPLANE_BENCH_DEADLINE_MIN (the
 * run stops itself after this, default 20 + 5 per 100 MB of state). Everything runs on 127.0.0.1 in a temporary
 * directory, which is deleted at the end. The brokers inherit the environment, so product settings apply too.
 *
 * Snapshots: the partitions take the same writes, so all nine replicas start a snapshot of the whole state at the
 * same entry, and at the default interval (10,000 entries) the run's two load windows together write more than one
 * interval: one of them would hold the nine snapshots, which stall the publishers on their own (DEVELOPERS.md, "What
 * a backup costs the broker that writes it"), and the ratio would measure them instead of the backup. The run
 * therefore sets `SERVICE_BROKER_RAFT_SNAPSHOT_INTERVAL_ENTRIES` to 10,000,000 unless the environment sets it, and
 * says which applies; `SERVICE_BROKER_RAFT_SNAPSHOT_INTERVAL_ENTRIES=10000` measures with the snapshots, and 2000
 * makes every run take several.
 */
import { spawn, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { freemem, tmpdir } from "node:os";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import { Pool } from "undici";
import { DEFAULT_TENANT_ID, encodeRecord } from "../../src/cluster/engine/index.js";
import { freePort } from "../../src/platform/provisioner/index.js";
import { BenchmarkChildren } from "../support/children.js";
import { type CpuTime, cpuTimeBetween, cpuTimeOf } from "../support/cpu.js";
import { type DiskCounters, diskCountersBetween, diskCountersReader } from "../support/disk.js";
import { dropPageCache, filesUnder, recyclePageCache, residentBytes, warmPageCache } from "../support/page-cache.js";
import { stopChild, waitUntil } from "../support/platform.js";
import { formatNumber, printTable } from "../support/report.js";

const MiB = 1024 * 1024;
const repositoryRoot = fileURLToPath(new URL("../../", import.meta.url));

const stateBytes = environmentInteger("FLOWPLANE_BENCH_STATE_MB", 1024) * MiB;
const loadClients = environmentInteger("FLOWPLANE_BENCH_LOAD_CLIENTS", 4);
const runDeadlineMs =
  environmentInteger("FLOWPLANE_BENCH_DEADLINE_MIN", 20 + Math.ceil((5 * stateBytes) / (100 * MiB))) * 60_000;

/** Publishers filling the state, the payload of each message, and how long the messages live (longer than the run). */
const fillClients = 16;
const fillPayloadBytes = 64 * 1024;
const fillTimeToLiveMs = 24 * 3_600_000;
/** A scratch write before each measurement of a backup or a copy: this many times the state's bytes. */
const scratchFactor = 1.5;
/** At most this share of the memory available when the scratch size is set, so that it does not evict the files read in. */
const scratchMemoryShare = 0.3;
/** The brokers' snapshot interval setting, and the run's default for it (see the module comment). */
const snapshotIntervalName = "SERVICE_BROKER_RAFT_SNAPSHOT_INTERVAL_ENTRIES";
const snapshotIntervalEntries = process.env[snapshotIntervalName] ?? "10000000";
/** Payload of the publishers measuring throughput. */
const loadPayloadBytes = 256;
const loadWindowMs = 10_000;
const startTimeoutMs = 180_000;
const operationTimeoutMs = 30 * 60_000;

function environmentInteger(name: string, fallback: number): number {
  const text = process.env[name];
  if (text === undefined || text === "") return fallback;
  const value = Number(text);
  if (!Number.isSafeInteger(value) || value < 1) throw new Error(`${name} must be a positive integer, got "${text}"`);
  return value;
}

const sleep = (milliseconds: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, milliseconds));
const seconds = (milliseconds: number): string => formatNumber(milliseconds / 1000, 2);
const megabytesPerSecond = (bytes: number, milliseconds: number): string =>
  formatNumber(bytes / MiB / (milliseconds / 1000), 0);

/** The directories of backup `backupId` in the store: `<store>/<partition>/<backup id>`. */
function backupDirectories(store: string, backupId: string): string[] {
  return readdirSync(store)
    .map((partition) => join(store, partition, backupId))
    .filter((directory) => {
      try {
        return statSync(directory).isDirectory();
      } catch {
        return false;
      }
    });
}

/**
 * One measured copy: its milliseconds, the bytes the disk read meanwhile (NaN where the disk is not readable), and the
 * bytes of its files in memory when it started.
 */
interface MeasuredCopy {
  readonly ms: number;
  readonly bytesRead: number;
  readonly residentBytesBefore: number | undefined;
}

/**
 * `cp` of each of `files` into `target` (one file after another, as `cp -r` does) followed by `sync`, twice, each after
 * `prepareCache(files)`: the faster of the two (the machine is shared).
 */
function fasterCopy(
  files: readonly string[],
  target: string,
  readDisk: (() => DiskCounters) | undefined,
  prepareCache: (files: readonly string[]) => void,
): MeasuredCopy {
  const copies = [0, 1].map((): MeasuredCopy => {
    spawnSync("rm", ["-rf", target]);
    spawnSync("mkdir", ["-p", target]);
    prepareCache(files);
    const residentBytesBefore = residentBytes(files);
    const diskBefore = readDisk?.();
    const startedAtMs = performance.now();
    files.forEach((file, index) => {
      const result = spawnSync("cp", [file, join(target, String(index))]);
      if (result.status !== 0) throw new Error(`cp failed: ${result.error?.message ?? result.stderr?.toString()}`);
    });
    spawnSync("sync");
    const ms = performance.now() - startedAtMs;
    return { ms, bytesRead: bytesReadSince(diskBefore, readDisk), residentBytesBefore };
  });
  return copies.reduce((faster, copy) => (copy.ms < faster.ms ? copy : faster));
}

/** Bytes the disk read since `before`; NaN where the disk's counters cannot be read. */
function bytesReadSince(before: DiskCounters | undefined, readDisk: (() => DiskCounters) | undefined): number {
  return before === undefined || readDisk === undefined
    ? Number.NaN
    : diskCountersBetween(before, readDisk()).bytesRead;
}

const mebibytes = (bytes: number): string => formatNumber(bytes / MiB, 0);

/** How many of `totalBytes` of `whose` files were in memory ("x of whose y MiB in memory"), or that it is unknown. */
function describeCache(residentBytes: number | undefined, totalBytes: number, whose: string): string {
  const of = `of ${whose} ${mebibytes(totalBytes)} MiB`;
  return residentBytes === undefined
    ? `how much ${of} was in memory is unknown`
    : `${mebibytes(residentBytes)} ${of} in memory`;
}

/** The Administration API as the run calls it, with the platform's bootstrap client. */
class Admin {
  constructor(
    private readonly url: string,
    private readonly token: string,
  ) {}

  async call<Result>(method: string, path: string): Promise<Result> {
    const response = await fetch(`${this.url}/admin${path}`, {
      method,
      headers: { authorization: `Bearer ${this.token}` },
    });
    const text = await response.text();
    if (response.status >= 300) throw new Error(`${method} ${path} answered ${response.status}: ${text}`);
    return JSON.parse(text) as Result;
  }
}

async function tokenFor(url: string, clientId: string, clientSecret: string, audience: string): Promise<string> {
  const response = await fetch(`${url}/oauth/token`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({
      grant_type: "client_credentials",
      audience,
      client_id: clientId,
      client_secret: clientSecret,
    }),
  });
  const body = (await response.json()) as { access_token?: string };
  if (body.access_token === undefined) throw new Error(`the platform refused a ${audience} token: ${response.status}`);
  return body.access_token;
}

/** Milliseconds of one bin of the publishes-per-interval line printed for the window during the backup. */
const rateBinMs = 100;

/**
 * Publishes `count` messages of `body` with `clients` connections; resolves with the acknowledged count. When
 * `acknowledgedAtMs` is given, each acknowledgement's time (`performance.now()`) is added to it.
 */
async function publish(
  pool: Pool,
  token: string,
  body: string,
  clients: number,
  keepGoing: (acknowledged: number) => boolean,
  acknowledgedAtMs?: number[],
): Promise<number> {
  let acknowledged = 0;
  const worker = async (): Promise<void> => {
    while (keepGoing(acknowledged)) {
      const response = await pool.request({
        method: "POST",
        path: "/v2/messages/publication",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
        body,
      });
      await response.body.text();
      if (response.statusCode === 200) {
        acknowledged += 1;
        acknowledgedAtMs?.push(performance.now());
      } else if (response.statusCode === 503) await sleep(50);
      else if (response.statusCode >= 400 && response.statusCode < 500) {
        throw new Error(`publication answered ${response.statusCode}`);
      }
    }
  };
  await Promise.all(Array.from({ length: clients }, worker));
  return acknowledged;
}

/** Takes a backup through the Administration API and waits until it is Complete; answers its id and duration. */
async function backup(admin: Admin, clusterId: string, pollIntervalMs: number): Promise<{ uuid: string; ms: number }> {
  const startedAtMs = performance.now();
  const taken = await admin.call<{ uuid: string }>("POST", `/clusters/${clusterId}/backups`);
  const deadline = Date.now() + operationTimeoutMs;
  for (;;) {
    let listed: { uuid: string; status: string }[];
    try {
      listed = await admin.call("GET", `/clusters/${clusterId}/backups`);
    } catch (error) {
      // A list that times out (the coordinator answers too late under load) is not the backup's end: it is reported
      // and polled again.
      console.log(`the backup list failed (${seconds(performance.now() - startedAtMs)} s into the backup): ${error}`);
      if (Date.now() > deadline) throw error;
      await sleep(pollIntervalMs);
      continue;
    }
    const status = listed.find((entry) => entry.uuid === taken.uuid)?.status;
    if (status === "Complete") return { uuid: taken.uuid, ms: performance.now() - startedAtMs };
    if (status !== "In progress") throw new Error(`backup ${taken.uuid} ended ${status}`);
    if (Date.now() > deadline) throw new Error(`backup ${taken.uuid} did not end in time`);
    await sleep(pollIntervalMs);
  }
}

/** One backup without load, with the state of the page cache it started from. */
interface QuietBackup {
  readonly uuid: string;
  /** From the request until the polled list shows it Complete. */
  readonly ms: number;
  /** The cluster's own account: from the first partition's checkpoint to the last part written. */
  readonly clusterSideMs: number;
  /** Bytes of the brokers' files, and of those in memory, when the backup was requested. */
  readonly sourceBytes: number;
  readonly residentBytesBefore: number | undefined;
  /** Bytes the disk read while the backup ran (NaN where the disk is not readable). */
  readonly bytesRead: number;
  /** Processor time the brokers' processes used while the backup ran. */
  readonly brokersCpuTime: CpuTime;
}

/** Puts the brokers' files in the state `prepareCache` makes, then takes a backup with no other load. */
async function quietBackup(
  admin: Admin,
  clusterId: string,
  brokersDirectory: string,
  readDisk: (() => DiskCounters) | undefined,
  prepareCache: (files: readonly string[]) => void,
): Promise<QuietBackup> {
  const files = filesUnder(brokersDirectory);
  prepareCache(files);
  // Sized when the cache is looked at: the journal's files grow and new ones appear as the brokers write.
  const sourceBytes = files.reduce((total, path) => total + statSync(path).size, 0);
  const residentBytesBefore = residentBytes(files);
  const brokers = brokerPids(brokersDirectory);
  const diskBefore = readDisk?.();
  const cpuBefore = cpuTimeOf(brokers);
  const taken = await backup(admin, clusterId, 100);
  const brokersCpuTime = cpuTimeBetween(cpuBefore, cpuTimeOf(brokers));
  const bytesRead = bytesReadSince(diskBefore, readDisk);
  const view = (
    await admin.call<{ uuid: string; created: string | null; completed: string | null }[]>(
      "GET",
      `/clusters/${clusterId}/backups`,
    )
  ).find((entry) => entry.uuid === taken.uuid);
  return {
    ...taken,
    clusterSideMs:
      view?.created == null || view.completed == null
        ? Number.NaN
        : Date.parse(view.completed) - Date.parse(view.created),
    sourceBytes,
    residentBytesBefore,
    bytesRead,
    brokersCpuTime,
  };
}

/** Bytes of memory available now (`/proc/meminfo`'s MemAvailable), or the Node.js estimate elsewhere. */
function availableMemoryBytes(): number {
  try {
    const line = readFileSync("/proc/meminfo", "utf8")
      .split("\n")
      .find((text) => text.startsWith("MemAvailable:"));
    const kibibytes = Number(line?.split(/\s+/)[1]);
    if (Number.isFinite(kibibytes) && kibibytes > 0) return kibibytes * 1024;
  } catch {
    // Not Linux: the estimate below.
  }
  return freemem();
}

/** The brokers' process ids, from the `broker.pid` file in each broker's data directory. */
function brokerPids(brokersDirectory: string): number[] {
  return readdirSync(brokersDirectory).flatMap((broker) => {
    try {
      const pid = Number(readFileSync(join(brokersDirectory, broker, "broker.pid"), "utf8").trim());
      return Number.isSafeInteger(pid) && pid > 0 ? [pid] : [];
    } catch {
      return [];
    }
  });
}

/** Runs the benchmark; see the module comment. */
export async function run(): Promise<void> {
  const children = new BenchmarkChildren("backup", runDeadlineMs);
  const directory = await mkdtemp(join(tmpdir(), "flowplane-bench-backup-"));
  const dataDirectory = join(directory, "data");
  const port = await freePort("127.0.0.1");
  const url = `http://127.0.0.1:${port}`;
  const clientId = "bench-backup-client";
  const clientSecret = randomBytes(32).toString("base64url");
  console.log(
    `bench backup: ${formatNumber(stateBytes / MiB)} MiB of state in a 3-broker, 3-partition cluster (RF 3); ${loadClients} closed-loop publishers for the throughput; a snapshot every ${snapshotIntervalEntries} entries (${process.env[snapshotIntervalName] === undefined ? "the run's default, which keeps the replicas' snapshots out of the load windows" : "from the environment"})`,
  );
  const platform = children.track(
    spawn(
      process.execPath,
      [
        "--import",
        "tsx",
        "src/cli/main.ts",
        "start",
        "--port",
        String(port),
        "--data-directory",
        dataDirectory,
        "--set",
        `service.platform.publicUrl=${url}`,
        "--set",
        `service.gateway.port=${await freePort("127.0.0.1")}`,
        "--set",
        `service.management.port=${await freePort("127.0.0.1")}`,
        "--set",
        "service.log.level=warn",
        "--set",
        `service.bootstrap.clientId=${clientId}`,
        "--set",
        `service.bootstrap.clientSecret=${clientSecret}`,
      ],
      {
        cwd: repositoryRoot,
        stdio: ["ignore", "ignore", "inherit"],
        env: { ...process.env, [snapshotIntervalName]: snapshotIntervalEntries },
      },
    ),
  );
  let pool: Pool | undefined;
  try {
    await waitUntil("the platform", startTimeoutMs, async () => (await fetch(`${url}/health`)).status === 200);
    const admin = new Admin(url, await tokenFor(url, clientId, clientSecret, "admin-api"));
    const gatewayToken = await tokenFor(url, clientId, clientSecret, "gateway-api");
    let cluster: { uuid: string; status: { ready: string } } | undefined;
    await waitUntil("the cluster Healthy", startTimeoutMs, async () => {
      const clusters = await admin.call<NonNullable<typeof cluster>[]>("GET", "/clusters");
      cluster = clusters[0];
      return cluster?.status.ready === "Healthy";
    });
    if (cluster === undefined) throw new Error("the platform runs no cluster");
    const clusterId = cluster.uuid;
    const gatewayUrl = (await admin.call<{ links: { gateway: string } }>("GET", `/clusters/${clusterId}`)).links
      .gateway;
    pool = new Pool(gatewayUrl, { connections: fillClients, pipelining: 1 });

    const recordBytes = encodeRecord({
      kind: "publishMessage",
      name: "fill",
      correlationKey: "",
      timeToLiveMs: fillTimeToLiveMs,
      variables: { payload: "x".repeat(fillPayloadBytes) },
      tenantId: DEFAULT_TENANT_ID,
      publishedAtMs: Date.now(),
    }).byteLength;
    const fillMessages = Math.ceil(stateBytes / recordBytes);
    const fillBody = JSON.stringify({
      name: "fill",
      timeToLive: fillTimeToLiveMs,
      variables: { payload: "x".repeat(fillPayloadBytes) },
    });
    const fillStartedAtMs = performance.now();
    let claimed = 0;
    await publish(pool, gatewayToken, fillBody, fillClients, () => {
      claimed += 1;
      return claimed <= fillMessages;
    });
    console.log(`filled ${fillMessages} messages in ${seconds(performance.now() - fillStartedAtMs)} s`);

    // Two backups without load, each measured against `cp` in the same state of the page cache: first with every
    // file of the brokers in memory, then with none of them (see bench/support/page-cache.ts for why).
    const brokersDirectory = join(dataDirectory, "cluster", "brokers");
    const store = join(dataDirectory, "cluster", "backups");
    const readDisk = diskCountersReader(dataDirectory);
    // Each measurement starts right after a scratch write of more than it writes (bench/support/page-cache.ts); the
    // scratch writes' times show what writing into memory not used lately costs on this machine.
    const scratchBytes = Math.ceil(Math.min(scratchFactor * stateBytes, scratchMemoryShare * availableMemoryBytes()));
    const scratchMs: number[] = [];
    const inMemory = (files: readonly string[]): void => {
      warmPageCache(files);
      scratchMs.push(recyclePageCache(directory, scratchBytes));
    };
    const onDiskOnly = (files: readonly string[]): void => {
      dropPageCache(files);
      scratchMs.push(recyclePageCache(directory, scratchBytes));
    };
    const cached = await quietBackup(admin, clusterId, brokersDirectory, readDisk, inMemory);
    const uncached = await quietBackup(admin, clusterId, brokersDirectory, readDisk, onDiskOnly);
    const backupFiles = backupDirectories(store, cached.uuid).flatMap((directory) => filesUnder(directory));
    const backupBytes = backupFiles.reduce((total, path) => total + statSync(path).size, 0);
    const copyTarget = join(directory, "copy");
    const cachedCopy = fasterCopy(backupFiles, copyTarget, readDisk, inMemory);
    const uncachedCopy = fasterCopy(backupFiles, copyTarget, readDisk, onDiskOnly);
    await rm(copyTarget, { recursive: true, force: true });
    // Printed now as well, so that a failure later in the run does not lose them.
    console.log(
      `scratch writes of ${mebibytes(scratchBytes)} MiB before each measurement, in order: ${scratchMs.map((ms) => seconds(ms)).join(", ")} s (the first after the fill writes into memory the page cache did not use lately)`,
    );
    for (const [label, taken, copy] of [
      ["files in memory", cached, cachedCopy],
      ["files on disk only", uncached, uncachedCopy],
    ] as const) {
      console.log(
        `quiet backup, ${label} (${describeCache(taken.residentBytesBefore, taken.sourceBytes, "the brokers'")}): ${formatNumber(backupBytes / MiB, 0)} MiB in ${seconds(taken.ms)} s (cluster side ${seconds(taken.clusterSideMs)} s, ${mebibytes(taken.bytesRead)} MiB read from disk, brokers' processor time ${seconds(taken.brokersCpuTime.userMs)} s user + ${seconds(taken.brokersCpuTime.systemMs)} s system); cp + sync ${seconds(copy.ms)} s (${describeCache(copy.residentBytesBefore, backupBytes, "its")}, ${mebibytes(copy.bytesRead)} MiB read from disk); ratio ${formatNumber(taken.ms / copy.ms, 2)}`,
      );
    }

    const loadBody = JSON.stringify({
      name: "load",
      timeToLive: 3_600_000,
      variables: { payload: "y".repeat(loadPayloadBytes) },
    });
    let loadUntilMs = performance.now() + loadWindowMs;
    const withoutStartedAtMs = performance.now();
    const withoutCount = await publish(
      pool,
      gatewayToken,
      loadBody,
      loadClients,
      () => performance.now() < loadUntilMs,
    );
    const withoutRate = withoutCount / ((performance.now() - withoutStartedAtMs) / 1000);
    loadUntilMs = Number.POSITIVE_INFINITY;
    const duringStartedAtMs = performance.now();
    const duringAcknowledgedAtMs: number[] = [];
    const during = publish(
      pool,
      gatewayToken,
      loadBody,
      loadClients,
      () => performance.now() < loadUntilMs,
      duringAcknowledgedAtMs,
    );
    // When the backup fails, closing the pool ends these publishers with an error of their own: the backup's is the
    // one to report.
    during.catch(() => undefined);
    // Polled less often, so that the polling itself takes little from the publishers.
    const loaded = await backup(admin, clusterId, 500);
    loadUntilMs = 0;
    const duringCount = await during;
    const duringRate = duringCount / ((performance.now() - duringStartedAtMs) / 1000);
    // Where in the backup the publishers lose their throughput: acknowledgements per bin from the backup's start.
    const bins: number[] = [];
    for (const atMs of duringAcknowledgedAtMs) {
      const bin = Math.floor((atMs - duringStartedAtMs) / rateBinMs);
      bins[bin] = (bins[bin] ?? 0) + 1;
    }
    const withoutPerBin = formatNumber((withoutRate * rateBinMs) / 1000, 0);
    console.log(
      `publishes per ${rateBinMs} ms during the backup (without: ${withoutPerBin}): ${Array.from(bins, (count) => count ?? 0).join(" ")}`,
    );

    const restoreStartedAtMs = performance.now();
    await admin.call("POST", `/clusters/${clusterId}/backups/${cached.uuid}/restore`);
    let restoreState = "PENDING";
    while (restoreState !== "COMPLETED") {
      await sleep(250);
      const restore = await admin.call<{ state: string; failureReason: string | null }>(
        "GET",
        `/clusters/${clusterId}/backups/${cached.uuid}/restore`,
      );
      restoreState = restore.state;
      if (restoreState === "FAILED") throw new Error(`the restore failed: ${restore.failureReason}`);
      if (performance.now() - restoreStartedAtMs > operationTimeoutMs) throw new Error("the restore did not end");
    }
    const restoreMs = performance.now() - restoreStartedAtMs;
    await waitUntil("the restored cluster Healthy", startTimeoutMs, async () => {
      const restored = await admin.call<{ status: { ready: string } }>("GET", `/clusters/${clusterId}`);
      return restored.status.ready === "Healthy";
    });
    const healthyMs = performance.now() - restoreStartedAtMs;

    console.log();
    printTable(
      ["measurement", "value"],
      [
        ["backup files on disk (MiB)", formatNumber(backupBytes / MiB, 0)],
        ["backup without load, files in memory (s)", seconds(cached.ms)],
        ["backup without load, files in memory (MB/s)", megabytesPerSecond(backupBytes, cached.ms)],
        ["of which the cluster's checkpoint to last part (s)", seconds(cached.clusterSideMs)],
        ["cp + sync of its files, in memory (s)", seconds(cachedCopy.ms)],
        ["backup without load, files on disk only (s)", seconds(uncached.ms)],
        ["backup without load, files on disk only (MB/s)", megabytesPerSecond(backupBytes, uncached.ms)],
        ["of which the cluster's checkpoint to last part (s)", seconds(uncached.clusterSideMs)],
        ["cp + sync of its files, on disk only (s)", seconds(uncachedCopy.ms)],
        ["backup under load (s)", seconds(loaded.ms)],
        ["publishes/s without a backup", formatNumber(withoutRate, 0)],
        ["publishes/s during the backup", formatNumber(duringRate, 0)],
        ["restore through the API (s)", seconds(restoreMs)],
        ["restore until the cluster is Healthy (s)", seconds(healthyMs)],
      ],
    );
    console.log(
      `ratio: backup/cp ${formatNumber(cached.ms / cachedCopy.ms, 2)} with the files in memory (target <= 1.5), ${formatNumber(uncached.ms / uncachedCopy.ms, 2)} with the files on disk only (the journal's interleaved partitions read along; DEVELOPERS.md); the cluster's own time/cp ${formatNumber(cached.clusterSideMs / cachedCopy.ms, 2)} and ${formatNumber(uncached.clusterSideMs / uncachedCopy.ms, 2)}; publishers during/without ${formatNumber(duringRate / withoutRate, 2)} (target >= 0.8)`,
    );
  } finally {
    await pool?.close();
    await stopChild(platform);
    children.release();
    await rm(directory, { recursive: true, force: true });
  }
}
