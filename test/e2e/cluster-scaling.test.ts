/**
 * Resizing a running cluster end to end, with real processes on loopback: a platform, the local cluster of broker
 * and gateway processes, and 16 publishers writing through the gateway the whole time. The cluster grows from 3 to
 * 5 brokers and shrinks back to 3 through the management API, as an operator would do it (start the new brokers,
 * send the change, poll until COMPLETED; after a scale-down stop the removed brokers). Then the same cycle again
 * with faults in the middle: kill -9 of the coordinator, of a joining broker, and a restart of a leaving broker.
 * Last, partitions are added (3 → 6, experimental) under the same load. Every acknowledged message must read back,
 * no key may be acknowledged twice, and the topology must converge.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pino } from "pino";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import {
  addLocalBrokers,
  type LocalCluster,
  removeLocalBrokers,
  startLocalCluster,
} from "../../src/platform/provisioner/index.js";
import { childCommand } from "../support/child-command.js";
import { eventually, everyPartitionLed, everyReplicaHealthy, type GatewayTopology } from "../support/cluster.js";
import { startTestPlatform, type TestPlatform } from "../support/platform.js";
import { type PublisherReport, startPublishers, unreadableMessages } from "../support/publishers.js";
import { requestToken } from "../support/tokens.js";

let platform: TestPlatform;
let dataDirectory: string;
let cluster: LocalCluster;
let token: string;

interface Monitoring {
  version: number;
  brokers: { id: number; partitions: { id: number; state: string }[] }[];
  lastChange?: { id: number; status: string };
  pendingChange?: { id: number; pending: { operation: string; brokerId: number; partitionId?: number }[] };
}

async function manage(path: string, init: RequestInit = {}): Promise<Response> {
  return fetch(`${cluster.managementUrl}${path}`, {
    ...init,
    headers: {
      authorization: `Bearer ${token}`,
      ...(init.body === undefined ? {} : { "content-type": "application/json" }),
    },
    signal: AbortSignal.timeout(15_000),
  });
}

async function monitoring(): Promise<Monitoring> {
  const response = await manage("/actuator/cluster");
  if (response.status !== 200) throw new Error(`GET /actuator/cluster answered ${response.status}`);
  return (await response.json()) as Monitoring;
}

async function topology(): Promise<GatewayTopology> {
  const response = await fetch(`${cluster.gatewayUrl}/v2/topology`, {
    headers: { authorization: `Bearer ${token}` },
    signal: AbortSignal.timeout(15_000),
  });
  if (response.status !== 200) throw new Error(`topology answered ${response.status}`);
  return (await response.json()) as GatewayTopology;
}

/** Sends the broker list (retrying while a broker just started is not reachable yet); returns the change id. */
async function scaleTo(brokerIds: readonly number[]): Promise<number> {
  return eventually(`the change to brokers ${brokerIds.join(",")} accepted`, 60_000, async () => {
    const response = await manage("/actuator/cluster/brokers", { method: "POST", body: JSON.stringify(brokerIds) });
    if (response.status === 202) return ((await response.json()) as { changeId: number }).changeId;
    const problem = (await response.json()) as { detail: string };
    if (response.status === 400 && /not running and reachable|unreachable/.test(problem.detail)) return undefined;
    throw new Error(`the change answered ${response.status}: ${problem.detail}`);
  });
}

async function completed(changeId: number, timeoutMs = 120_000): Promise<Monitoring> {
  return eventually(`change ${changeId} completed`, timeoutMs, async () => {
    const current = await monitoring();
    if (current.lastChange?.id === changeId && current.pendingChange === undefined) {
      if (current.lastChange.status !== "COMPLETED")
        throw new Error(`change ${changeId} ended ${current.lastChange.status}`);
      return current;
    }
    return undefined;
  });
}

/** Waits for the topology to show exactly `brokerIds`, every partition led and every replica healthy. */
async function converged(
  brokerIds: readonly number[],
  changeId: number,
  partitionIds: readonly number[] = [1, 2, 3],
): Promise<GatewayTopology> {
  return eventually(`the topology converged on brokers ${brokerIds.join(",")}`, 60_000, async () => {
    const current = await topology();
    const listed = current.brokers.map((broker) => broker.nodeId);
    const ok =
      JSON.stringify(listed) === JSON.stringify(brokerIds) &&
      current.lastCompletedChangeId === String(changeId) &&
      everyPartitionLed(current, partitionIds) &&
      everyReplicaHealthy(current);
    // Thrown rather than returned, so that a topology that never converges is named in the failure.
    if (!ok) throw new Error(`not converged yet: ${JSON.stringify(current)}`);
    return current;
  });
}

/** Error and fatal lines the brokers and the gateway logged (the faults here are expected states, not errors). */
function errorLines(): string[] {
  const logDirectory = join(dataDirectory, "cluster", "logs");
  const lines: string[] = [];
  for (const file of readdirSync(logDirectory)) {
    for (const line of readFileSync(join(logDirectory, file), "utf8").split("\n")) {
      if (!line.startsWith("{")) continue;
      const entry = JSON.parse(line) as { level?: number; msg?: string };
      if ((entry.level ?? 0) >= 50) lines.push(`${file}: ${entry.msg}`);
    }
  }
  return lines;
}

function pidOf(nodeId: number): number {
  const pid = cluster.brokers.find((broker) => broker.nodeId === nodeId)?.pid;
  if (pid === undefined) throw new Error(`broker ${nodeId} has no running process`);
  return pid;
}

/** Broker processes a test paused with SIGSTOP and has not resumed yet. */
const pausedProcesses = new Set<number>();

/** Pauses broker `nodeId` with SIGSTOP; it is resumed after the test at the latest. */
function pauseBroker(nodeId: number): void {
  const pid = pidOf(nodeId);
  process.kill(pid, "SIGSTOP");
  pausedProcesses.add(pid);
}

/** Resumes a process `pauseBroker` paused. */
function resumeProcess(pid: number): void {
  process.kill(pid, "SIGCONT");
  pausedProcesses.delete(pid);
}

/** Adds brokers to the local cluster and waits until their processes run (the local cluster starts them). */
async function startBrokers(clusterDirectory: string, nodeIds: readonly number[]): Promise<void> {
  await addLocalBrokers(clusterDirectory, "127.0.0.1", nodeIds);
  for (const nodeId of nodeIds) {
    await eventually(`broker ${nodeId} started`, 20_000, async () =>
      cluster.brokers.find((broker) => broker.nodeId === nodeId)?.pid !== undefined ? true : undefined,
    );
  }
}

async function waitForExit(nodeId: number): Promise<void> {
  await eventually(`broker ${nodeId} stopped`, 20_000, async () =>
    cluster.brokers.find((broker) => broker.nodeId === nodeId)?.pid === undefined ? true : undefined,
  );
}

beforeAll(async () => {
  platform = await startTestPlatform();
  dataDirectory = mkdtempSync(join(tmpdir(), "flowplane-scaling-"));
  token = await requestToken(platform, platform.adminClient, "gateway-api");
  cluster = await startLocalCluster({
    dataDirectory,
    command: childCommand(),
    gatewayPort: 0,
    managementPort: 0,
    issuerUrl: platform.issuerUrl,
    logger: pino({ level: process.env.E2E_LOG_LEVEL ?? "warn" }),
    logLevel: "info",
    // The tests kill brokers and start them again themselves.
    restart: false,
    // Snapshots every few hundred entries, so joining replicas catch up through a snapshot and then the log; adding
    // partitions is experimental and enabled here for the last test.
    environment: {
      ...process.env,
      SERVICE_BROKER_RAFT_SNAPSHOT_INTERVAL_ENTRIES: "300",
      SERVICE_BROKER_EXPERIMENTAL_FEATURES_ENABLEPARTITIONSCALING: "true",
    },
  });
}, 120_000);

afterAll(async () => {
  await cluster?.close();
  await platform?.close();
  // E2E_KEEP_DATA=1 keeps the brokers' data and logs for a look afterwards.
  if (dataDirectory !== undefined && process.env.E2E_KEEP_DATA !== "1") {
    rmSync(dataDirectory, { recursive: true, force: true });
  }
}, 60_000);

afterEach(() => {
  // A test that fails while it holds a broker paused must not leave it stopped: the next tests would fail on an
  // unreachable broker, which hides what made the first one fail.
  for (const pid of [...pausedProcesses]) {
    try {
      resumeProcess(pid);
    } catch {
      // It exited meanwhile (the test killed it).
      pausedProcesses.delete(pid);
    }
  }
});

/**
 * Runs `change` while 16 publishers write through the gateway, once `writesBefore` publications were acknowledged;
 * then checks what every test of this file promises: no violation seen by the publishers, every acknowledged
 * message readable by its key, and no error in any log.
 */
async function underLoad(
  label: string,
  writesBefore: number,
  change: (load: ReturnType<typeof startPublishers>) => Promise<void>,
): Promise<PublisherReport> {
  const load = startPublishers({ gatewayUrl: cluster.gatewayUrl, token: () => token, clients: 16, pauseMs: 10, label });
  let report: PublisherReport | undefined;
  try {
    await eventually("writes before the change", 30_000, async () =>
      load.acknowledgedCount() >= writesBefore ? true : undefined,
    );
    await change(load);
  } finally {
    report = await load.stop();
    expect(report.violations).toEqual([]);
    expect(await unreadableMessages(cluster.gatewayUrl, token, report.acknowledged)).toEqual([]);
    expect(errorLines()).toEqual([]);
  }
  return report;
}

/** Waits until the publishers had `count` more publications acknowledged: writes go on after a change. */
async function writesGoOn(load: ReturnType<typeof startPublishers>, count: number): Promise<void> {
  const before = load.acknowledgedCount();
  await eventually("writes after the change", 30_000, async () =>
    load.acknowledgedCount() >= before + count ? true : undefined,
  );
}

describe("scaling a running cluster end to end", () => {
  it("grows from 3 to 5 brokers and shrinks back to 3 while 16 publishers write", async () => {
    const clusterDirectory = join(dataDirectory, "cluster");
    const report = await underLoad("scale", 500, async (load) => {
      await startBrokers(clusterDirectory, [3, 4]);
      const up = await scaleTo([0, 1, 2, 3, 4]);
      await completed(up);
      const grown = await converged([0, 1, 2, 3, 4], up);
      expect(grown).toMatchObject({ clusterSize: 5, partitionsCount: 3, replicationFactor: 3 });
      // Round robin of 3 partitions over 5 brokers with RF 3 gives broker 3 partitions 2 and 3, broker 4 partition 3.
      const hosted = (nodeId: number) =>
        grown.brokers.find((broker) => broker.nodeId === nodeId)?.partitions.map((partition) => partition.partitionId);
      expect(hosted(3)).toEqual([2, 3]);
      expect(hosted(4)).toEqual([3]);
      await writesGoOn(load, 500);

      const down = await scaleTo([0, 1, 2]);
      await completed(down);
      // The removed brokers host nothing now: the operator (here the test) stops them and deletes their data.
      removeLocalBrokers(clusterDirectory, [3, 4]);
      await waitForExit(3);
      await waitForExit(4);
      expect(await converged([0, 1, 2], down)).toMatchObject({ clusterSize: 3, replicationFactor: 3 });
    });
    expect(report.acknowledged.size).toBeGreaterThan(1_000);
  }, 300_000);

  it("completes a scale-up and a scale-down through kill -9 of the coordinator and of a joining broker, and a restart of a leaving broker", async () => {
    const clusterDirectory = join(dataDirectory, "cluster");
    await underLoad("faults", 300, async () => {
      await startBrokers(clusterDirectory, [3, 4]);
      const up = await scaleTo([0, 1, 2, 3, 4]);
      // Broker 3 is paused at once, so the change stops at the first operation it must apply (its own addition or
      // its first join): that operation is in progress when broker 3 is killed below.
      pauseBroker(3);
      const waitingFor3 = await eventually("the change waiting for broker 3", 30_000, async () => {
        const running = (await monitoring()).pendingChange?.pending[0];
        return running?.brokerId === 3 ? running : undefined;
      });
      expect(["BROKER_ADD", "PARTITION_JOIN"]).toContain(waitingFor3.operation);

      // The coordinator (broker 0) dies while the change runs: the next broker answers the management API.
      process.kill(pidOf(0), "SIGKILL");
      await waitForExit(0);
      const meanwhile = await eventually("the management API answered without broker 0", 30_000, async () =>
        monitoring().catch(() => undefined),
      );
      expect(meanwhile.pendingChange?.id).toBe(up);

      // Broker 3 dies in the middle of its operation and comes back: it resumes it.
      process.kill(pidOf(3), "SIGKILL");
      await waitForExit(3);
      await cluster.restartBroker(3);
      // Broker 0 has leaves to apply in this plan: the change waits for it until it is back.
      await eventually("the change waiting for broker 0", 60_000, async () => {
        const running = (await monitoring()).pendingChange?.pending[0];
        return running?.brokerId === 0 ? true : undefined;
      });
      await cluster.restartBroker(0);
      await completed(up, 180_000);
      await converged([0, 1, 2, 3, 4], up);

      const down = await scaleTo([0, 1, 2]);
      // Broker 3 is paused again, so the change stops at its leave; it is then stopped cleanly and started again.
      pauseBroker(3);
      const leaving = await eventually("the change waiting for broker 3 to leave", 60_000, async () => {
        const running = (await monitoring()).pendingChange?.pending[0];
        return running?.brokerId === 3 ? running : undefined;
      });
      expect(leaving.operation).toBe("PARTITION_LEAVE");
      const paused = pidOf(3);
      process.kill(paused, "SIGTERM");
      resumeProcess(paused);
      await waitForExit(3);
      await cluster.restartBroker(3);
      await completed(down, 180_000);
      removeLocalBrokers(clusterDirectory, [3, 4]);
      await waitForExit(3);
      await waitForExit(4);
      await converged([0, 1, 2], down);
    });
  }, 420_000);

  it("adds partitions (3 → 6, experimental) while 16 publishers write; every message stays readable by its key", async () => {
    await underLoad("partitions", 500, async (load) => {
      const response = await manage("/actuator/cluster", {
        method: "PATCH",
        body: JSON.stringify({ partitions: { count: 6, replicationFactor: 3 } }),
      });
      expect(response.status, await response.clone().text()).toBe(202);
      const { changeId } = (await response.json()) as { changeId: number };
      await completed(changeId, 180_000);
      const grown = await converged([0, 1, 2], changeId, [1, 2, 3, 4, 5, 6]);
      expect(grown).toMatchObject({ clusterSize: 3, partitionsCount: 6, replicationFactor: 3 });
      await writesGoOn(load, 500);
    });
  }, 300_000);
});
