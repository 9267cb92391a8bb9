/**
 * Cluster creation benchmark: time from `POST /admin/clusters` to the cluster's status `Healthy` in `GET
 * /admin/clusters/{id}`, for the 1-broker development plan and the 3-broker standard plan, with a real platform and
 * the local provisioner starting real broker and gateway processes. The platform polls cluster health every
 * 100 ms here (the default is 2 s, which adds up to that much to what a user sees); the benchmark asks for the
 * status every 50 ms. Each plan is created, measured and deleted several times; the median and the slowest run are
 * printed, and the time the provisioner's start took (processes spawned until every partition had a leader) beside
 * them, so the rest is the platform's share. Delete times are printed too.
 *
 * Then, on one more 1-broker cluster, the delays of the access policy's delivery as a user sees them: from the
 * answer to `PUT …/ipallowlist` (an allowlist without this address) to the gateway's first 403, and from the answer
 * to `DELETE …/clients/{id}` to the gateway's first refusal of that client's token, each polled every 10 ms.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { pino } from "pino";
import { loadConfiguration } from "../../src/config/load.js";
import { clusterParameters, planTypes } from "../../src/platform/admin/clusters/parameters.js";
import { type BootstrapCredentials, startPlatform } from "../../src/platform/platform.js";
import { formatNumber, printTable } from "../support/report.js";

const ROUNDS = Number(process.env.BENCH_CLUSTER_ROUNDS ?? 3);
const POLL_INTERVAL_MS = 50;
const HEALTHY_TIMEOUT_MS = 180_000;
const ENFORCEMENT_POLL_MS = 10;
const ENFORCEMENT_ROUNDS = 5;
const ENFORCEMENT_TIMEOUT_MS = 30_000;

/** Milliseconds from now until `probe` answers true, polled every ENFORCEMENT_POLL_MS. */
async function millisecondsUntil(probe: () => Promise<boolean>): Promise<number> {
  const startedAt = performance.now();
  while (!(await probe())) {
    if (performance.now() - startedAt > ENFORCEMENT_TIMEOUT_MS) throw new Error("not enforced in time");
    await new Promise((resolveWait) => setTimeout(resolveWait, ENFORCEMENT_POLL_MS));
  }
  return performance.now() - startedAt;
}

function median(values: readonly number[]): number {
  const sorted = [...values].sort((left, right) => left - right);
  return sorted[Math.floor(sorted.length / 2)] ?? Number.NaN;
}

/** Runs the benchmark and prints one row per plan. */
export async function run(): Promise<void> {
  const dataDirectory = mkdtempSync(join(tmpdir(), "flowplane-bench-clusters-"));
  const configuration = loadConfiguration({
    environment: {},
    flags: {
      "service.dataDirectory": dataDirectory,
      "service.platform.port": 0,
      "service.log.level": "warn",
      "service.provisioner.healthCheckIntervalMs": 100,
    },
  });
  let credentials: BootstrapCredentials | undefined;
  const platform = await startPlatform(configuration, {
    logger: pino({ level: "warn" }),
    onBootstrapCredentials: (created) => {
      credentials = created;
    },
    localClusters: { createPrimaryCluster: false },
  });
  try {
    if (credentials === undefined) throw new Error("the platform created no administration client");
    const tokenResponse = await fetch(`${platform.url}/oauth/token`, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({
        grant_type: "client_credentials",
        audience: "admin-api",
        client_id: credentials.clientId,
        client_secret: credentials.clientSecret,
      }),
    });
    const token = ((await tokenResponse.json()) as { access_token: string }).access_token;
    const headers = { authorization: `Bearer ${token}`, "content-type": "application/json" };
    const parameters = clusterParameters();
    const channel = parameters.channels[0];
    const region = parameters.regions[0];
    if (channel === undefined || region === undefined) throw new Error("no channel or region");
    const rows: string[][] = [];
    for (const brokers of [1, 3]) {
      const plan = planTypes.find((candidate) => candidate.shape.brokers === brokers);
      if (plan === undefined) throw new Error(`no plan of ${brokers} brokers`);
      const healthyMs: number[] = [];
      const startedMs: number[] = [];
      const deleteMs: number[] = [];
      for (let round = 0; round < ROUNDS; round += 1) {
        const createdAt = performance.now();
        const created = await fetch(`${platform.url}/admin/clusters`, {
          method: "POST",
          headers,
          body: JSON.stringify({
            name: `bench-${brokers}-${round}`,
            planTypeId: plan.uuid,
            channelId: channel.uuid,
            generationId: channel.defaultGeneration.uuid,
            regionId: region.uuid,
          }),
        });
        if (created.status !== 200) throw new Error(`POST /clusters answered ${created.status}`);
        const { clusterId } = (await created.json()) as { clusterId: string };
        const started = platform.provisioner
          ?.whenStarted(clusterId)
          .then(() => startedMs.push(performance.now() - createdAt));
        for (;;) {
          const answer = await fetch(`${platform.url}/admin/clusters/${clusterId}`, { headers });
          const status = ((await answer.json()) as { status: { ready: string } }).status.ready;
          if (status === "Healthy") break;
          if (performance.now() - createdAt > HEALTHY_TIMEOUT_MS) throw new Error(`cluster still ${status}`);
          await new Promise((resolveWait) => setTimeout(resolveWait, POLL_INTERVAL_MS));
        }
        healthyMs.push(performance.now() - createdAt);
        await started;
        const deletedAt = performance.now();
        const deleted = await fetch(`${platform.url}/admin/clusters/${clusterId}`, { method: "DELETE", headers });
        if (deleted.status !== 204) throw new Error(`DELETE answered ${deleted.status}`);
        deleteMs.push(performance.now() - deletedAt);
      }
      rows.push([
        String(brokers),
        String(ROUNDS),
        formatNumber(median(healthyMs)),
        formatNumber(Math.max(...healthyMs)),
        formatNumber(median(startedMs)),
        formatNumber(median(deleteMs)),
      ]);
    }
    printTable(
      ["brokers", "runs", "POST→Healthy median ms", "slowest ms", "provisioner start median ms", "DELETE median ms"],
      rows,
    );

    const plan = planTypes.find((candidate) => candidate.shape.brokers === 1) as (typeof planTypes)[number];
    const created = await fetch(`${platform.url}/admin/clusters`, {
      method: "POST",
      headers,
      body: JSON.stringify({
        name: "bench-enforcement",
        planTypeId: plan.uuid,
        channelId: channel.uuid,
        generationId: channel.defaultGeneration.uuid,
        regionId: region.uuid,
      }),
    });
    const { clusterId } = (await created.json()) as { clusterId: string };
    await platform.provisioner?.whenStarted(clusterId);
    const cluster = (await (await fetch(`${platform.url}/admin/clusters/${clusterId}`, { headers })).json()) as {
      links: { gateway: string };
    };
    const gatewayToken = async (clientId: string, clientSecret: string): Promise<string> => {
      const answer = await fetch(`${platform.url}/oauth/token`, {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded" },
        body: new URLSearchParams({
          grant_type: "client_credentials",
          audience: "gateway-api",
          client_id: clientId,
          client_secret: clientSecret,
        }),
      });
      return ((await answer.json()) as { access_token: string }).access_token;
    };
    const adminGatewayToken = await gatewayToken(credentials.clientId, credentials.clientSecret);
    const topologyStatus = async (bearer: string): Promise<number> =>
      (await fetch(`${cluster.links.gateway}/v2/topology`, { headers: { authorization: `Bearer ${bearer}` } })).status;
    const allowlistMs: number[] = [];
    const revocationMs: number[] = [];
    for (let round = 0; round < ENFORCEMENT_ROUNDS; round += 1) {
      await millisecondsUntil(async () => (await topologyStatus(adminGatewayToken)) === 200);
      const put = await fetch(`${platform.url}/admin/clusters/${clusterId}/ipallowlist`, {
        method: "PUT",
        headers,
        body: JSON.stringify({ ipallowlist: [{ ip: "192.0.2.0/24", description: "elsewhere" }] }),
      });
      if (put.status !== 204) throw new Error(`PUT ipallowlist answered ${put.status}`);
      allowlistMs.push(await millisecondsUntil(async () => (await topologyStatus(adminGatewayToken)) === 403));
      await fetch(`${platform.url}/admin/clusters/${clusterId}/ipallowlist`, {
        method: "PUT",
        headers,
        body: JSON.stringify({ ipallowlist: [] }),
      });

      const client = (await (
        await fetch(`${platform.url}/admin/clusters/${clusterId}/clients`, {
          method: "POST",
          headers,
          body: JSON.stringify({ clientName: `bench-${round}` }),
        })
      ).json()) as { clientId: string; clientSecret: string };
      const clientToken = await gatewayToken(client.clientId, client.clientSecret);
      await millisecondsUntil(async () => (await topologyStatus(clientToken)) === 200);
      const deleted = await fetch(`${platform.url}/admin/clusters/${clusterId}/clients/${client.clientId}`, {
        method: "DELETE",
        headers,
      });
      if (deleted.status !== 204) throw new Error(`DELETE client answered ${deleted.status}`);
      revocationMs.push(await millisecondsUntil(async () => (await topologyStatus(clientToken)) !== 200));
    }
    await fetch(`${platform.url}/admin/clusters/${clusterId}`, { method: "DELETE", headers });
    console.log("");
    printTable(
      ["change reaching the gateway", "runs", "median ms", "slowest ms"],
      [
        [
          "allowlist PUT → 403",
          String(ENFORCEMENT_ROUNDS),
          formatNumber(median(allowlistMs)),
          formatNumber(Math.max(...allowlistMs)),
        ],
        [
          "client DELETE → token refused",
          String(ENFORCEMENT_ROUNDS),
          formatNumber(median(revocationMs)),
          formatNumber(Math.max(...revocationMs)),
        ],
      ],
    );
  } finally {
    await platform.close();
    rmSync(dataDirectory, { recursive: true, force: true });
  }
}
