/**
 * End to end on loopback: a real platform, and the local cluster the provisioner starts (3 broker processes, 3
 * partitions, replication factor 3, one gateway process). What a user would check: the topology, messages that
 * survive a leader's broker being killed with SIGKILL, the dead broker coming back and catching up, a cluster port
 * that admits only holders of the cluster's secret, and a second start resuming the same data.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ClusterCredentials, TransportClient } from "../../src/cluster/transport/index.js";
import { type LocalCluster, startLocalCluster } from "../../src/platform/provisioner/index.js";
import { RawConnection } from "../cluster/transport/support.js";
import { childCommand } from "../support/child-command.js";
import {
  eventually,
  everyPartitionLed,
  everyReplicaHealthy,
  type GatewayTopology,
  leaderOf,
  partitionIndexes,
} from "../support/cluster.js";
import { otherClusterCredentials } from "../support/cluster-secret.js";
import { startTestPlatform, type TestPlatform } from "../support/platform.js";
import { requestToken } from "../support/tokens.js";

let platform: TestPlatform;
let dataDirectory: string;
let cluster: LocalCluster | undefined;
let token: string;
const logger = pino({ level: process.env.E2E_LOG_LEVEL ?? "warn" });

function startCluster(): Promise<LocalCluster> {
  return startLocalCluster({
    dataDirectory,
    command: childCommand(),
    gatewayPort: 0,
    managementPort: 0,
    issuerUrl: platform.issuerUrl,
    logger,
    logLevel: "info",
    readyTimeoutMs: 90_000,
    // The tests kill brokers and start them again themselves.
    restart: false,
  });
}

async function call(path: string, init: RequestInit = {}): Promise<Response> {
  if (cluster === undefined) throw new Error("the cluster is not running");
  return fetch(`${cluster.gatewayUrl}${path}`, {
    ...init,
    headers: {
      authorization: `Bearer ${token}`,
      ...(init.body === undefined ? {} : { "content-type": "application/json" }),
    },
    signal: AbortSignal.timeout(15_000),
  });
}

function managementUrl(): string {
  if (cluster === undefined) throw new Error("the cluster is not running");
  return cluster.managementUrl;
}

async function topology(): Promise<GatewayTopology> {
  const response = await call("/v2/topology");
  if (response.status !== 200) throw new Error(`topology answered ${response.status}`);
  return (await response.json()) as GatewayTopology;
}

/** Publishes one message; a 503 during a leader change is retried (bounded), anything else fails the test. */
async function publish(correlationKey: string): Promise<string> {
  return eventually(`publication of ${correlationKey}`, 20_000, async () => {
    const response = await call("/v2/messages/publication", {
      method: "POST",
      body: JSON.stringify({ name: "e2e", correlationKey, timeToLive: 3_600_000, variables: { correlationKey } }),
    });
    if (response.status === 503) return undefined;
    if (response.status !== 200) throw new Error(`publication answered ${response.status}: ${await response.text()}`);
    return ((await response.json()) as { messageKey: string }).messageKey;
  });
}

/** Reads every message back (retrying 503 during a leader change) and checks its content. */
async function expectReadable(messages: ReadonlyMap<string, string>): Promise<void> {
  for (const [messageKey, correlationKey] of messages) {
    const body = await eventually(`read of ${messageKey}`, 20_000, async () => {
      const response = await call(`/v2/messages/${messageKey}`);
      if (response.status === 503) return undefined;
      if (response.status !== 200) throw new Error(`read of ${messageKey} answered ${response.status}`);
      return (await response.json()) as { key: string; correlationKey: string; variables: unknown };
    });
    expect(body.key).toBe(messageKey);
    expect(body.correlationKey).toBe(correlationKey);
    expect(body.variables).toEqual({ correlationKey });
  }
}

const acknowledged = new Map<string, string>();

beforeAll(async () => {
  platform = await startTestPlatform();
  dataDirectory = mkdtempSync(join(tmpdir(), "flowplane-e2e-"));
  token = await requestToken(platform, platform.adminClient, "gateway-api");
  cluster = await startCluster();
}, 120_000);

afterAll(async () => {
  await cluster?.close();
  await platform?.close();
  if (dataDirectory !== undefined) rmSync(dataDirectory, { recursive: true, force: true });
}, 60_000);

describe("local cluster end to end", () => {
  it("shows 3 brokers, each partition with exactly one leader and two followers, all healthy", async () => {
    const settled = await eventually("a settled topology", 30_000, async () => {
      const current = await topology();
      return everyReplicaHealthy(current) && everyPartitionLed(current, [1, 2, 3]) ? current : undefined;
    });
    expect(settled.brokers.map((broker) => broker.nodeId)).toEqual([0, 1, 2]);
    expect(settled).toMatchObject({
      clusterSize: 3,
      partitionsCount: 3,
      replicationFactor: 3,
      lastCompletedChangeId: "-1",
    });
    for (const partitionId of [1, 2, 3]) {
      const roles = settled.brokers.flatMap((broker) =>
        broker.partitions
          .filter((partition) => partition.partitionId === partitionId)
          .map((partition) => partition.role),
      );
      expect(roles.sort()).toEqual(["follower", "follower", "leader"]);
    }
    for (const broker of settled.brokers) {
      expect(`${broker.host}:${broker.port}`).toBe(cluster?.brokers[broker.nodeId]?.clusterAddress);
    }
  }, 60_000);

  it("acknowledges published messages and reads every one back by key", async () => {
    for (let index = 0; index < 30; index += 1) {
      const correlationKey = `before-${index}`;
      acknowledged.set(await publish(correlationKey), correlationKey);
    }
    await expectReadable(acknowledged);
  }, 90_000);

  it("admits only holders of the cluster's secret to a broker's cluster port, and logs no secret", async () => {
    if (cluster === undefined) throw new Error("the cluster is not running");
    const secretText = readFileSync(cluster.clusterSecretFile, "utf8").trim();
    const secret = Buffer.from(secretText, "base64");
    const credentials = ClusterCredentials.fromSecret(secret);
    const [host, port] = (cluster.brokers[0]?.clusterAddress ?? "").split(":");
    const address = { host: host as string, port: Number(port) };

    const member = new TransportClient({ credentials });
    try {
      const description = (await member.request(address, { type: "describe" }, { timeoutMs: 10_000 })) as {
        nodeId: number;
      };
      expect(description.nodeId).toBe(0);
    } finally {
      await member.close();
    }

    const intruder = await RawConnection.open(address);
    try {
      const answer = await intruder.authenticate(otherClusterCredentials(credentials.clusterId), { role: "client" });
      expect(answer).toEqual({ kind: "refused", reason: "authentication-failed" });
    } finally {
      intruder.destroy();
    }
    const logDirectory = join(dataDirectory, "cluster", "logs");
    await eventually("the broker logging the refusal", 10_000, async () =>
      readFileSync(join(logDirectory, "broker-0.log"), "utf8").includes("its proof does not match") ? true : undefined,
    );
    for (const file of readdirSync(logDirectory)) {
      const text = readFileSync(join(logDirectory, file), "utf8");
      expect(text, file).not.toContain(secretText);
      expect(text, file).not.toContain(secret.toString("hex"));
    }
  }, 60_000);

  it("elects a new leader after SIGKILL of a leader's broker, losing no acknowledged message", async () => {
    if (cluster === undefined) throw new Error("the cluster is not running");
    const before = await topology();
    const victim = leaderOf(before, 1);
    if (victim === undefined) throw new Error("partition 1 has no single leader");
    const pid = cluster.brokers[victim]?.pid;
    if (pid === undefined) throw new Error(`broker ${victim} has no running process`);
    process.kill(pid, "SIGKILL");

    const after = await eventually("a new leader of partition 1", 20_000, async () => {
      const current = await topology();
      const leader = leaderOf(current, 1);
      return leader !== undefined && leader !== victim ? current : undefined;
    });
    expect(leaderOf(after, 1)).not.toBe(victim);
    const dead = await eventually("the killed broker listed as dead", 20_000, async () => {
      const current = await topology();
      const broker = current.brokers.find((candidate) => candidate.nodeId === victim);
      return broker?.partitions.every((partition) => partition.role === "inactive" && partition.health === "dead")
        ? broker
        : undefined;
    });
    expect(dead.partitions.map((partition) => partition.partitionId)).toEqual([1, 2, 3]);

    await expectReadable(acknowledged);
    // The two remaining brokers are a quorum of every partition: the cluster keeps taking writes.
    for (let index = 0; index < 10; index += 1) {
      const correlationKey = `during-${index}`;
      acknowledged.set(await publish(correlationKey), correlationKey);
    }
    await expectReadable(acknowledged);

    await cluster.restartBroker(victim);
    const recovered = await eventually("the restarted broker healthy again", 60_000, async () => {
      const current = await topology();
      const broker = current.brokers.find((candidate) => candidate.nodeId === victim);
      return everyReplicaHealthy(current) && everyPartitionLed(current, [1, 2, 3]) ? broker : undefined;
    });
    expect(recovered.partitions.map((partition) => partition.partitionId)).toEqual([1, 2, 3]);
    // Caught up: for every partition the restarted replica applied at least what its leader had committed.
    const target = await partitionIndexes(managementUrl(), "commit_index");
    await eventually("the restarted broker applying what its leaders committed", 30_000, async () => {
      const applied = await partitionIndexes(managementUrl(), "applied_index");
      const current = await topology();
      return [1, 2, 3].every((partitionId) => {
        const leader = leaderOf(current, partitionId);
        const committed = target.get(`${partitionId}/${leader}`) ?? Number.POSITIVE_INFINITY;
        return (applied.get(`${partitionId}/${victim}`) ?? -1) >= committed;
      })
        ? true
        : undefined;
    });
    await expectReadable(acknowledged);
  }, 150_000);

  it("resumes the same data on a second start", async () => {
    const addresses = cluster?.brokers.map((broker) => broker.clusterAddress);
    await cluster?.close();
    cluster = undefined;
    cluster = await startCluster();
    // The ports chosen at the first start were kept, so the brokers find each other at the same addresses.
    expect(cluster.brokers.map((broker) => broker.clusterAddress)).toEqual(addresses);
    await expectReadable(acknowledged);
  }, 150_000);
});
