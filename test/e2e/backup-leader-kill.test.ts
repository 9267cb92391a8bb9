/**
 * A backup whose partition leader is killed with SIGKILL right after the backup was taken, end to end with real
 * processes on loopback (a platform and the local cluster) while 16 publishers write: the backup ends (COMPLETED when
 * the new leader finishes the killed leader's part, else FAILED or INCOMPLETE with the reason, never IN_PROGRESS for
 * good), the next backup completes from the new leaders, the restarted broker marks the part it left FAILED, a backup
 * that did not complete is refused by restore, and the completed one restores. Every acknowledged message stays
 * readable.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FilesystemBackupStore } from "../../src/cluster/backup/filesystem-store.js";
import { RestoreRefusedError, restoreBroker } from "../../src/cluster/backup/restore.js";
import { roundRobinDistribution } from "../../src/cluster/topology/index.js";
import { type LocalCluster, startLocalCluster } from "../../src/platform/provisioner/index.js";
import { childCommand } from "../support/child-command.js";
import { eventually, type GatewayTopology, leaderOf } from "../support/cluster.js";
import { startTestPlatform, type TestPlatform } from "../support/platform.js";
import { startPublishers, unreadableMessages } from "../support/publishers.js";
import { requestToken } from "../support/tokens.js";

interface BackupView {
  backupId: number;
  state: string;
  failureReason: string | null;
  details: { partitionId: number; state: string; brokerId: number | null; failureReason: string | null }[];
}

let platform: TestPlatform;
let dataDirectory: string;
let backupDirectory: string;
let cluster: LocalCluster;
let token: string;

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

async function topology(): Promise<GatewayTopology> {
  const response = await fetch(`${cluster.gatewayUrl}/v2/topology`, {
    headers: { authorization: `Bearer ${token}` },
    signal: AbortSignal.timeout(15_000),
  });
  if (response.status !== 200) throw new Error(`topology answered ${response.status}`);
  return (await response.json()) as GatewayTopology;
}

async function take(backupId: number): Promise<void> {
  await eventually(`backup ${backupId} taken`, 60_000, async () => {
    const response = await manage("/actuator/backups", { method: "POST", body: JSON.stringify({ backupId }) });
    if (response.status === 202) return true;
    // While a killed broker's part still counts as being written, or the coordinator moves, ask again.
    if (response.status === 409 || response.status >= 500) return undefined;
    throw new Error(`POST /actuator/backups answered ${response.status}: ${await response.text()}`);
  });
}

async function ended(backupId: number): Promise<BackupView> {
  return eventually(`backup ${backupId} ended`, 120_000, async () => {
    const response = await manage(`/actuator/backups/${backupId}`);
    if (response.status !== 200) return undefined;
    const view = (await response.json()) as BackupView;
    return view.state === "IN_PROGRESS" ? undefined : view;
  });
}

beforeAll(async () => {
  platform = await startTestPlatform();
  dataDirectory = mkdtempSync(join(tmpdir(), "flowplane-backup-e2e-"));
  backupDirectory = join(dataDirectory, "backups");
  token = await requestToken(platform, platform.adminClient, "gateway-api");
  cluster = await startLocalCluster({
    dataDirectory,
    command: childCommand(),
    gatewayPort: 0,
    managementPort: 0,
    issuerUrl: platform.issuerUrl,
    logger: pino({ level: process.env.E2E_LOG_LEVEL ?? "warn" }),
    logLevel: "info",
    // The test kills a broker and starts it again itself.
    restart: false,
    environment: {
      ...process.env,
      SERVICE_BROKER_RAFT_SNAPSHOT_INTERVAL_ENTRIES: "300",
      SERVICE_BACKUP_FILESYSTEM_BASE_PATH: backupDirectory,
    },
  });
}, 120_000);

afterAll(async () => {
  await cluster?.close();
  await platform?.close();
  if (dataDirectory !== undefined && process.env.E2E_KEEP_DATA !== "1") {
    rmSync(dataDirectory, { recursive: true, force: true });
  }
}, 60_000);

describe("a partition leader killed during a backup", () => {
  it("fails or completes that backup, never hangs; the next backup completes; restore refuses the failed one", async () => {
    const load = startPublishers({
      gatewayUrl: cluster.gatewayUrl,
      token: () => token,
      clients: 16,
      pauseMs: 10,
      label: "b",
    });
    try {
      await eventually("writes before the backup", 60_000, async () =>
        load.acknowledgedCount() >= 800 ? true : undefined,
      );
      // Large messages make each partition's part megabytes long, so the kill lands while it is being written.
      const large = "x".repeat(200_000);
      for (let index = 0; index < 120; index += 1) {
        const response = await fetch(`${cluster.gatewayUrl}/v2/messages/publication`, {
          method: "POST",
          headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
          body: JSON.stringify({
            name: "large",
            correlationKey: `large-${index}`,
            timeToLive: 3_600_000,
            variables: { large },
          }),
          signal: AbortSignal.timeout(15_000),
        });
        expect(response.status).toBe(200);
      }
      const leader = leaderOf(await topology(), 1);
      if (leader === undefined) throw new Error("partition 1 has no single leader");
      const pid = cluster.brokers.find((broker) => broker.nodeId === leader)?.pid;
      if (pid === undefined) throw new Error(`broker ${leader} has no process`);
      await take(1);
      process.kill(pid, "SIGKILL");

      const first = await ended(1);
      expect(["FAILED", "INCOMPLETE", "COMPLETED"]).toContain(first.state);
      const killedPartition = first.details.find((detail) => detail.partitionId === 1);
      if (first.state !== "COMPLETED") {
        expect(first.failureReason).not.toBeNull();
        expect(killedPartition?.state).not.toBe("IN_PROGRESS");
      }

      // The next backup is taken by the partitions' new leaders while the killed broker is down.
      await take(2);
      const second = await ended(2);
      expect(second.state, JSON.stringify(second)).toBe("COMPLETED");

      await cluster.restartBroker(leader);
      await eventually("writes after the restart", 60_000, async () =>
        load.acknowledgedCount() >= 1_600 ? true : undefined,
      );
      const killedPartWasLeft = first.details.some(
        (detail) => detail.partitionId === 1 && detail.state === "FAILED" && detail.brokerId === leader,
      );
      // Restarted, the killed broker marks the part it left behind FAILED itself (it is reachable again).
      const firstAfterRestart = await eventually("the killed broker's part settled", 60_000, async () => {
        const view = await ended(1);
        const killedPart = view.details.find((detail) => detail.partitionId === 1);
        if (!killedPartWasLeft) return view;
        return killedPart?.failureReason === `broker ${leader} stopped while it wrote this part` ? view : undefined;
      });
      expect(firstAfterRestart.details.every((detail) => detail.state !== "IN_PROGRESS")).toBe(true);
      if (first.state === "COMPLETED") expect(firstAfterRestart.state).toBe("COMPLETED");

      const store = new FilesystemBackupStore(backupDirectory);
      const distribution = roundRobinDistribution([0, 1, 2], 3, 3);
      if (firstAfterRestart.state !== "COMPLETED") {
        await expect(
          restoreBroker({
            store,
            backupId: 1n,
            nodeId: 0,
            dataDirectory: join(dataDirectory, "restore-1"),
            distribution,
          }),
        ).rejects.toThrow(RestoreRefusedError);
      }
      for (const nodeId of [0, 1, 2]) {
        const report = await restoreBroker({
          store,
          backupId: 2n,
          nodeId,
          dataDirectory: join(dataDirectory, "restore-2", String(nodeId)),
          distribution,
        });
        expect(report.partitions).toHaveLength(3);
      }
    } finally {
      const report = await load.stop();
      expect(report.violations).toEqual([]);
      expect(await unreadableMessages(cluster.gatewayUrl, token, report.acknowledged)).toEqual([]);
    }
  }, 300_000);
});
