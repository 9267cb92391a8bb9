/**
 * The backup API on the management port, with real in-process brokers, a real gateway and a filesystem backup
 * store: a backup taken while writes flow is one consistent cut (every partition's part holds exactly the messages
 * acknowledged before the backup was answered, none after), ids only go up and are never reused, deletion, the
 * aggregate states, bad input answered 400, and the mutual exclusion of backups and cluster changes.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FilesystemBackupStore } from "../../../src/cluster/backup/filesystem-store.js";
import { rebuildEngine } from "../../../src/cluster/backup/read-part.js";
import type { BackupPartManifest } from "../../../src/cluster/backup/store.js";
import type { Broker } from "../../../src/cluster/broker/broker.js";
import type { BackupView } from "../../../src/cluster/broker/protocol.js";
import { parseKey } from "../../../src/cluster/engine/index.js";
import { type RunningGateway, startGateway } from "../../../src/cluster/gateway/index.js";
import { loadConfiguration } from "../../../src/config/load.js";
import { TEST_CLUSTER_SECRET } from "../../support/cluster-secret.js";
import { startTestPlatform, type TestPlatform } from "../../support/platform.js";
import { requestToken } from "../../support/tokens.js";
import { partitionSettled, removeDirectory, startBrokers, temporaryDirectory, waitFor } from "../broker/support.js";

let platform: TestPlatform;
let root: string;
let storeDirectory: string;
let store: FilesystemBackupStore;
let brokers: Broker[];
let gateway: RunningGateway;
let token: string;

async function call(base: string, path: string, init: RequestInit = {}): Promise<Response> {
  return fetch(`${base}${path}`, {
    ...init,
    headers: {
      authorization: `Bearer ${token}`,
      ...(init.body === undefined ? {} : { "content-type": "application/json" }),
    },
    signal: AbortSignal.timeout(15_000),
  });
}

async function publish(index: number, prefix: string): Promise<string> {
  for (let attempt = 0; attempt < 200; attempt += 1) {
    const response = await call(gateway.url, "/v2/messages/publication", {
      method: "POST",
      body: JSON.stringify({
        name: prefix,
        correlationKey: `${prefix}-${index}`,
        messageId: `${prefix}-${index}`,
        timeToLive: 600_000,
      }),
    });
    if (response.status === 200) return ((await response.json()) as { messageKey: string }).messageKey;
    if (response.status !== 503) throw new Error(`publication answered ${response.status}: ${await response.text()}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error("publication kept being refused");
}

async function takeBackup(backupId: number): Promise<Response> {
  return call(gateway.managementUrl, "/actuator/backups", { method: "POST", body: JSON.stringify({ backupId }) });
}

async function backup(backupId: number): Promise<BackupView> {
  const response = await call(gateway.managementUrl, `/actuator/backups/${backupId}`);
  expect(response.status, await response.clone().text()).toBe(200);
  return (await response.json()) as BackupView;
}

async function ended(backupId: number): Promise<BackupView> {
  let view: BackupView | undefined;
  await waitFor(async () => {
    view = await backup(backupId);
    return view.state !== "IN_PROGRESS";
  }, `backup ${backupId} ends`);
  return view as BackupView;
}

beforeAll(async () => {
  platform = await startTestPlatform();
  token = await requestToken(platform, platform.adminClient, "gateway-api");
  root = await temporaryDirectory("backups");
  storeDirectory = await mkdtemp(join(tmpdir(), "flowplane-backup-store-"));
  store = new FilesystemBackupStore(storeDirectory);
  brokers = await startBrokers(root, 3, () => ({ backupStore: store, snapshotIntervalEntries: 20 }));
  for (const partitionId of [1, 2, 3]) {
    await waitFor(() => partitionSettled(brokers, partitionId, 3), `partition ${partitionId} settled`, 2_000);
  }
  gateway = await startGateway(
    loadConfiguration({
      environment: {},
      flags: {
        "service.gateway.port": 0,
        "service.management.port": 0,
        "service.cluster.secret": TEST_CLUSTER_SECRET,
        "service.gateway.issuerUrl": platform.issuerUrl,
        "service.gateway.contactPoints": brokers.map((broker) => `127.0.0.1:${broker.clusterAddress.port}`).join(","),
      },
    }),
    { logger: pino({ level: "silent" }), topologyRefreshIntervalMs: 100 },
  );
});

afterAll(async () => {
  await gateway?.close();
  await Promise.all((brokers ?? []).map((broker) => broker.close()));
  if (root !== undefined) await removeDirectory(root);
  if (storeDirectory !== undefined) await rm(storeDirectory, { recursive: true, force: true });
  await platform?.close();
});

describe("the backup API", () => {
  it("takes a consistent backup while writes flow: every part holds exactly what was acknowledged before it", async () => {
    const before: string[] = [];
    for (let index = 0; index < 45; index += 1) before.push(await publish(index, "before"));
    // Writers keep going while the backup is taken; what they had acknowledged before it was asked for is in it.
    let writing = true;
    const during: string[] = [];
    const writers = Array.from({ length: 4 }, async (_, writer) => {
      for (let index = 0; writing; index += 1) during.push(await publish(writer * 100_000 + index, "during"));
    });
    await new Promise((resolve) => setTimeout(resolve, 100));
    const acknowledgedBefore = [...during];
    const response = await takeBackup(1);
    expect(response.status, await response.clone().text()).toBe(202);
    expect(((await response.json()) as BackupView).backupId).toBe(1);
    writing = false;
    await Promise.all(writers);
    const after: string[] = [];
    for (let index = 0; index < 15; index += 1) after.push(await publish(index, "after"));

    const view = await ended(1);
    expect(view.state).toBe("COMPLETED");
    expect(view.partitionCount).toBe(3);
    expect(view.details.map((detail) => [detail.partitionId, detail.state])).toEqual([
      [1, "COMPLETED"],
      [2, "COMPLETED"],
      [3, "COMPLETED"],
    ]);
    const parts = (await store.manifests(1n)).filter((part) => part.state === "COMPLETED");
    const engines = new Map(
      await Promise.all(
        parts.map(async (part: BackupPartManifest) => [part.partitionId, await rebuildEngine(store, part)] as const),
      ),
    );
    const held = (key: string): boolean => {
      const engine = engines.get(parseKey(key)?.partitionId as number);
      return engine?.getMessage(key) !== undefined;
    };
    for (const key of [...before, ...acknowledgedBefore]) expect(held(key), key).toBe(true);
    for (const key of after) expect(held(key), key).toBe(false);
    // Each part counts on the broker whose leader wrote it.
    let completedParts = 0;
    for (const broker of brokers) {
      const metrics = await (await fetch(`${broker.managementUrl}/actuator/prometheus`)).text();
      for (const match of metrics.matchAll(/^flowplane_backup_parts_total\{[^}]*state="COMPLETED"[^}]*\} (\d+)$/gm)) {
        completedParts += Number(match[1]);
      }
    }
    expect(completedParts).toBe(3);
  });

  it("refuses ids that are not above every earlier id, deleted ones included, and lists newest first", async () => {
    for (const backupId of [1, 0]) {
      const response = await takeBackup(backupId);
      expect(response.status).toBe(409);
      const problem = (await response.json()) as { detail: string; highestUsedBackupId?: string };
      expect(problem.detail).toMatch(/above every earlier id/);
      // The highest id used, for a caller that chooses ids to step over.
      expect(problem.highestUsedBackupId).toBe("1");
    }
    expect((await takeBackup(2)).status).toBe(202);
    expect((await ended(2)).state).toBe("COMPLETED");
    const list = await call(gateway.managementUrl, "/actuator/backups");
    const listed = (await list.json()) as BackupView[];
    expect(listed.map((entry) => entry.backupId)).toEqual([2, 1]);
    // In summary: the same backups and states, each with at most the two parts that carry its times.
    const summary = (await (
      await call(gateway.managementUrl, "/actuator/backups?summary=true")
    ).json()) as BackupView[];
    expect(summary.map((entry) => [entry.backupId, entry.state])).toEqual(
      listed.map((entry) => [entry.backupId, entry.state]),
    );
    expect(summary.every((entry) => entry.details.length <= 2)).toBe(true);
    expect((await call(gateway.managementUrl, "/actuator/backups?summary=perhaps")).status).toBe(400);

    const deleted = await call(gateway.managementUrl, "/actuator/backups/2", { method: "DELETE" });
    expect(deleted.status).toBe(200);
    expect((await call(gateway.managementUrl, "/actuator/backups/2")).status).toBe(404);
    expect((await call(gateway.managementUrl, "/actuator/backups/2", { method: "DELETE" })).status).toBe(404);
    // The store no longer holds 2, but it keeps the highest id taken (and every partition took checkpoint 2): the id
    // is not reused.
    const reused = await takeBackup(2);
    expect(reused.status).toBe(409);
    const reusedProblem = (await reused.json()) as { detail: string; highestUsedBackupId?: string };
    expect(reusedProblem.detail).toMatch(/id 2 is used \(a backup of it was taken or attempted\)/);
    expect(reusedProblem.highestUsedBackupId).toBe("2");
    expect((await call(gateway.managementUrl, "/actuator/backups/2")).status).toBe(404);
  });

  it("answers 400 naming the field for bad input", async () => {
    for (const body of [{ backupId: -1 }, { backupId: "x" }, {}, { backupId: 3, extra: true }]) {
      const response = await call(gateway.managementUrl, "/actuator/backups", {
        method: "POST",
        body: JSON.stringify(body),
      });
      expect(response.status, JSON.stringify(body)).toBe(400);
    }
    expect((await call(gateway.managementUrl, "/actuator/backups/abc")).status).toBe(400);
  });

  it("documents the id as a 64-bit integer", async () => {
    const document = (await (await call(gateway.managementUrl, "/actuator/cluster/openapi.json")).json()) as {
      paths: Record<
        string,
        { post?: { requestBody: { content: Record<string, { schema: { properties: object } }> } } }
      >;
    };
    const body = document.paths["/actuator/backups"]?.post?.requestBody.content["application/json"]?.schema;
    expect(body?.properties).toEqual({
      backupId: expect.objectContaining({ type: "integer", format: "int64", minimum: 0 }),
    });
  });

  it("refuses ids beyond 2^63 − 1, inexact numbers and duplicate fields, naming them", async () => {
    const bodies: [string, string][] = [
      ['{"backupId": 9223372036854775808}', "body/backupId must be an integer from 0 to 9223372036854775807"],
      ['{"backupId": 9.2e18}', "body/backupId must be an integer from 0 to 9223372036854775807"],
      ['{"backupId": "9223372036854775807"}', "body/backupId must be an integer from 0 to 9223372036854775807"],
      ['{"backupId": 1, "backupId": 2}', "The body repeats the key 'backupId' within one object"],
    ];
    for (const [body, detail] of bodies) {
      const response = await call(gateway.managementUrl, "/actuator/backups", { method: "POST", body });
      expect(response.status, body).toBe(400);
      expect(((await response.json()) as { detail: string }).detail, body).toContain(detail);
    }
    for (const path of ["/actuator/backups/9223372036854775808", "/actuator/backups/-1", "/actuator/backups/1e3"]) {
      const response = await call(gateway.managementUrl, path);
      expect(response.status, path).toBe(400);
      expect(((await response.json()) as { detail: string }).detail, path).toBe(
        "params/backupId must be an integer from 0 to 9223372036854775807",
      );
    }
  });

  it("refuses a cluster change while a backup is in progress, and a backup while another is in progress", async () => {
    // A part broker 1 is writing (as far as the store shows).
    const inProgress: BackupPartManifest = {
      formatVersion: 1,
      backupId: 99n,
      partitionId: 1,
      brokerId: 1,
      state: "IN_PROGRESS",
      failureReason: null,
      flowplaneVersion: "0.0.0-test",
      partitionCount: 3,
      checkpointPosition: 10,
      snapshot: null,
      log: { firstIndex: 1, lastIndex: 10 },
      files: [],
      writtenBytes: 0,
      startedAt: new Date().toISOString(),
      finishedAt: null,
    };
    await store.writeManifest(inProgress);
    const change = await call(gateway.managementUrl, "/actuator/cluster/brokers/2/partitions/1", {
      method: "DELETE",
    });
    expect(change.status, await change.clone().text()).toBe(409);
    expect(((await change.json()) as { detail: string }).detail).toMatch(/backup 99 is in progress/);
    const monitoring = await call(gateway.managementUrl, "/actuator/cluster");
    expect(((await monitoring.json()) as { changesBlockedBy?: string }).changesBlockedBy).toBe(
      "backup 99 is in progress; no cluster change starts during a backup",
    );
    const another = await takeBackup(100);
    expect(another.status).toBe(409);
    expect(((await another.json()) as { detail: string }).detail).toMatch(/backup 99 is in progress/);
    expect((await call(gateway.managementUrl, "/actuator/backups/99", { method: "DELETE" })).status).toBe(409);
    // Partitions 2 and 3 have no part: once 99 fails, it is FAILED (not INCOMPLETE, a failure comes first).
    await store.writeManifest({
      ...inProgress,
      state: "FAILED",
      failureReason: "test",
      finishedAt: inProgress.startedAt,
    });
    const view = await backup(99);
    expect(view.state).toBe("FAILED");
    expect(view.details.map((detail) => detail.state)).toEqual(["FAILED", "MISSING", "MISSING"]);
    expect((await call(gateway.managementUrl, "/actuator/backups/99", { method: "DELETE" })).status).toBe(200);
    const unblocked = await call(gateway.managementUrl, "/actuator/cluster");
    expect((await unblocked.json()) as object).not.toHaveProperty("changesBlockedBy");
  });

  it("takes, shows and deletes backup 2^63 − 1, answering its id as the exact digits", async () => {
    const largest = "9223372036854775807";
    const taken = await call(gateway.managementUrl, "/actuator/backups", {
      method: "POST",
      body: `{"backupId": ${largest}}`,
    });
    const takenText = await taken.text();
    expect(taken.status, takenText).toBe(202);
    expect(takenText).toContain(`{"backupId":${largest},`);
    await waitFor(
      async () =>
        !(await (await call(gateway.managementUrl, `/actuator/backups/${largest}`)).text()).includes("IN_PROGRESS"),
      "backup 2^63 − 1 ends",
    );
    const shown = await (await call(gateway.managementUrl, `/actuator/backups/${largest}`)).text();
    expect(shown).toContain(`{"backupId":${largest},"state":"COMPLETED"`);
    const listed = await (await call(gateway.managementUrl, "/actuator/backups")).text();
    expect(listed.startsWith(`[{"backupId":${largest},`)).toBe(true);
    expect((await store.manifests(2n ** 63n - 1n)).map((part) => part.state)).toEqual([
      "COMPLETED",
      "COMPLETED",
      "COMPLETED",
    ]);
    const deleted = await call(gateway.managementUrl, `/actuator/backups/${largest}`, { method: "DELETE" });
    expect(deleted.status).toBe(200);
    // Nothing is above it: every id is refused from now on.
    expect((await takeBackup(Number.MAX_SAFE_INTEGER)).status).toBe(409);
  });
});
