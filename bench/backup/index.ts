/**
 * Benchmark `backup`: what a backup and a restore through the Administration API cost for a cluster holding a lot
 * of state, side by side with copying the same files with `cp` on the same disk, measured in the same run.
 *
 * `flowplane start` runs as a child process with its first cluster (3 brokers, 3 partitions, replication factor 3),
 * which is filled through the gateway with FLOWPLANE_BENCH_STATE_MB (default 1024) of buffered messages that live
 * for a day, spread over the partitions. Then:
 *
 * 1. A backup with no other load (`POST /admin/clusters/{id}/backups`, the list polled every 100 ms until it is
 *    Complete): its time, the bytes its files hold on disk, and MB/s.
 * 2. `cp -r` of that backup's files to another directory of the same disk followed by `sync`, twice (the machine is
 *    shared: the faster run counts), for the ratio backup time / copy time (target at most 1.5). The backup's time is
 *    the API's (from the request until the polled list shows it Complete); the cluster's own time (from the first
 *    partition's checkpoint to the last part written) leaves out the request, the coordinator and the polling, and
 *    is printed as a ratio to the copy as well.
 * 3. Closed-loop publishers (FLOWPLANE_BENCH_LOAD_CLIENTS, default 4, small messages) for 10 s without a backup, then
 *    while a second backup runs (its list polled every 500 ms): acknowledged writes per second during against
 *    without (target at least 0.8), and the acknowledgements per 100 ms during the backup (where the loss is).
 * 4. A restore from the first backup (`POST …/backups/{id}/restore`, polled every 250 ms until COMPLETED): its time,
 *    and the time until the platform's health polling shows the cluster Healthy again.
 *
 * Settings (environment): FLOWPLANE_BENCH_STATE_MB, FLOWPLANE_BENCH_LOAD_CLIENTS, FLOWPLANE_BENCH_DEADLINE_MIN (the
 * run stops itself after this, default 20 + 5 per 100 MB of state). Everything runs on 127.0.0.1 in a temporary
 * directory, which is deleted at the end. The brokers inherit the environment, so product settings apply too: with
 * the default snapshot interval (10,000 entries) whether a snapshot of the whole state falls into the loaded backup
 * depends on the run's rates; `SERVICE_BROKER_RAFT_SNAPSHOT_INTERVAL_ENTRIES=2000` makes every run take several.
 */
import { spawn, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { readdirSync, statSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import { Pool } from "undici";
import { DEFAULT_TENANT_ID, encodeRecord } from "../../src/cluster/engine/index.js";
import { freePort } from "../../src/platform/provisioner/index.js";
import { BenchmarkChildren } from "../support/children.js";
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

/** Total size of the regular files under `directory`. */
function sizeOf(directory: string): number {
  let total = 0;
  for (const entry of readdirSync(directory, { withFileTypes: true })) {
    const path = join(directory, entry.name);
    total += entry.isDirectory() ? sizeOf(path) : statSync(path).size;
  }
  return total;
}

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

/** Milliseconds `cp -r` of `directories` into `target` and a `sync` take. */
function timedCopy(directories: readonly string[], target: string): number {
  spawnSync("rm", ["-rf", target]);
  spawnSync("mkdir", ["-p", target]);
  const startedAtMs = performance.now();
  directories.forEach((directory, index) => {
    const result = spawnSync("cp", ["-r", directory, join(target, String(index))]);
    if (result.status !== 0) throw new Error(`cp failed: ${result.stderr.toString()}`);
  });
  spawnSync("sync");
  return performance.now() - startedAtMs;
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
    `bench backup: ${formatNumber(stateBytes / MiB)} MiB of state in a 3-broker, 3-partition cluster (RF 3); ${loadClients} closed-loop publishers for the throughput`,
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
      { cwd: repositoryRoot, stdio: ["ignore", "ignore", "inherit"] },
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

    const quiet = await backup(admin, clusterId, 100);
    const quietView = (
      await admin.call<{ uuid: string; created: string | null; completed: string | null }[]>(
        "GET",
        `/clusters/${clusterId}/backups`,
      )
    ).find((entry) => entry.uuid === quiet.uuid);
    // The cluster's own account: from the first partition's checkpoint to the last part written.
    const clusterSideMs =
      quietView?.created == null || quietView.completed == null
        ? Number.NaN
        : Date.parse(quietView.completed) - Date.parse(quietView.created);
    const store = join(dataDirectory, "cluster", "backups");
    const directories = backupDirectories(store, quiet.uuid);
    const backupBytes = directories.reduce((total, path) => total + sizeOf(path), 0);
    const copyTarget = join(directory, "copy");
    const copyMs = Math.min(timedCopy(directories, copyTarget), timedCopy(directories, copyTarget));
    await rm(copyTarget, { recursive: true, force: true });
    // Printed now as well, so that a failure later in the run does not lose it.
    console.log(
      `quiet backup: ${formatNumber(backupBytes / MiB, 0)} MiB in ${seconds(quiet.ms)} s (cluster side ${seconds(clusterSideMs)} s); cp -r + sync ${seconds(copyMs)} s; ratio ${formatNumber(quiet.ms / copyMs, 2)}`,
    );

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
    await admin.call("POST", `/clusters/${clusterId}/backups/${quiet.uuid}/restore`);
    let restoreState = "PENDING";
    while (restoreState !== "COMPLETED") {
      await sleep(250);
      const restore = await admin.call<{ state: string; failureReason: string | null }>(
        "GET",
        `/clusters/${clusterId}/backups/${quiet.uuid}/restore`,
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
        ["backup without load (s)", seconds(quiet.ms)],
        ["backup without load (MB/s)", megabytesPerSecond(backupBytes, quiet.ms)],
        ["of which the cluster's checkpoint to last part (s)", seconds(clusterSideMs)],
        ["cp -r + sync of its files (s)", seconds(copyMs)],
        ["cp -r + sync (MB/s)", megabytesPerSecond(backupBytes, copyMs)],
        ["backup under load (s)", seconds(loaded.ms)],
        ["publishes/s without a backup", formatNumber(withoutRate, 0)],
        ["publishes/s during the backup", formatNumber(duringRate, 0)],
        ["restore through the API (s)", seconds(restoreMs)],
        ["restore until the cluster is Healthy (s)", seconds(healthyMs)],
      ],
    );
    console.log(
      `ratio: backup/cp ${formatNumber(quiet.ms / copyMs, 2)} (target <= 1.5; the cluster's own time/cp ${formatNumber(clusterSideMs / copyMs, 2)}); publishers during/without ${formatNumber(duringRate / withoutRate, 2)} (target >= 0.8)`,
    );
  } finally {
    await pool?.close();
    await stopChild(platform);
    children.release();
    await rm(directory, { recursive: true, force: true });
  }
}
