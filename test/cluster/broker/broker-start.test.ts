import { access, mkdir, readdir, readFile, writeFile } from "node:fs/promises";
import { createServer, type Server } from "node:net";
import { join } from "node:path";
import { pino } from "pino";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { FilesystemBackupStore } from "../../../src/cluster/backup/filesystem-store.js";
import type { BackupPartManifest } from "../../../src/cluster/backup/store.js";
import { Broker } from "../../../src/cluster/broker/broker.js";
import { DataDirectoryInUseError, PID_FILE_NAME, STORAGE_DIRECTORY_NAME } from "../../../src/cluster/broker/files.js";
import { type ReplicaClock, systemClock } from "../../../src/cluster/broker/partition-replica.js";
import type { BrokerDescription, BrokerRequest } from "../../../src/cluster/broker/protocol.js";
import { DEFAULT_TENANT_ID } from "../../../src/cluster/engine/index.js";
import { JOURNAL_DIRECTORY_NAME } from "../../../src/cluster/raft/storage/environment.js";
import { TransportClient } from "../../../src/cluster/transport/index.js";
import { testClusterCredentials } from "../../support/cluster-secret.js";
import { removeDirectory, temporaryDirectory, testBrokerOptions, waitFor } from "./support.js";

const single = { clusterSize: 1, partitionsCount: 2, replicationFactor: 1 };

/** A port nothing listens on right now. */
async function freePort(): Promise<number> {
  const probe: Server = createServer();
  await new Promise<void>((resolve) => probe.listen(0, "127.0.0.1", resolve));
  const port = (probe.address() as { port: number }).port;
  await new Promise((resolve) => probe.close(resolve));
  return port;
}

describe("Broker.start", () => {
  let directory: string;

  beforeEach(async () => {
    directory = await temporaryDirectory("start");
  });

  afterEach(async () => {
    await removeDirectory(directory);
  });

  it("refuses a data directory another running broker holds", async () => {
    const first = await Broker.start(testBrokerOptions(directory, 0, single));
    try {
      await expect(Broker.start(testBrokerOptions(directory, 0, single))).rejects.toBeInstanceOf(
        DataDirectoryInUseError,
      );
      await access(join(first.dataDirectory, PID_FILE_NAME));
    } finally {
      await first.close();
    }
    await expect(access(join(first.dataDirectory, PID_FILE_NAME))).rejects.toThrow(/ENOENT/);
  });

  it("fails cleanly when its management port is taken: nothing left listening, broker.pid removed", async () => {
    const blocker: Server = createServer();
    await new Promise<void>((resolve) => blocker.listen(0, "127.0.0.1", resolve));
    const port = (blocker.address() as { port: number }).port;
    try {
      const options = testBrokerOptions(directory, 0, { ...single, managementPort: port });
      await expect(Broker.start(options)).rejects.toThrow(/EADDRINUSE/);
      await expect(access(join(options.dataDirectory, PID_FILE_NAME))).rejects.toThrow(/ENOENT/);
      // The same directory starts fine afterwards, so the failed start released everything it held.
      const broker = await Broker.start(testBrokerOptions(directory, 0, single));
      await waitFor(() => broker.replicaReports().every((report) => report.role === "leader"), "single broker leads");
      await broker.close();
    } finally {
      await new Promise((resolve) => blocker.close(resolve));
    }
  });

  it("fails cleanly when a step after its management server listens fails: the start rejects, the port is free", async () => {
    // A data directory of the earlier per-partition layout fails the start when the storage opens, after the
    // management server listens.
    const port = await freePort();
    const options = testBrokerOptions(directory, 0, { ...single, managementPort: port });
    await mkdir(join(options.dataDirectory, "partitions"), { recursive: true });
    await expect(Broker.start(options)).rejects.toThrow(/partitions/);
    await expect(access(join(options.dataDirectory, PID_FILE_NAME))).rejects.toThrow(/ENOENT/);
    // The management port is released: something else can listen on it.
    const again: Server = createServer();
    await new Promise<void>((resolve, reject) => {
      again.once("error", reject);
      again.listen(port, "127.0.0.1", resolve);
    });
    await new Promise((resolve) => again.close(resolve));
  });

  it("starts although its backup store cannot be read, and says that its abandoned parts wait", async () => {
    class UnreadableStore extends FilesystemBackupStore {
      listings = 0;
      override async manifests(): Promise<BackupPartManifest[]> {
        this.listings += 1;
        throw new Error("EIO: i/o error, scandir");
      }
    }
    const store = new UnreadableStore(join(directory, "backups"));
    const logged: { msg: string; reason?: string }[] = [];
    const broker = await Broker.start(
      testBrokerOptions(directory, 0, {
        ...single,
        backupStore: store,
        logger: pino({ level: "warn" }, { write: (line: string) => logged.push(JSON.parse(line)) }),
      }),
    );
    try {
      await waitFor(() => broker.replicaReports().every((report) => report.role === "leader"), "single broker leads");
      expect(store.listings).toBe(1);
      expect(logged).toContainEqual(
        expect.objectContaining({
          msg: expect.stringMatching(/could not be read or written to mark the parts the previous start left/),
          reason: expect.stringMatching(/EIO/),
        }),
      );
    } finally {
      await broker.close();
    }
  });

  it("says so when it cuts a torn last write from its journal, and starts", async () => {
    const options = testBrokerOptions(directory, 0, single);
    const first = await Broker.start(options);
    await waitFor(() => first.replicaReports().every((report) => report.role === "leader"), "single broker leads");
    await first.close();
    // What a crash in the middle of a commit leaves: bytes after the last record that make no intact record.
    const journal = join(options.dataDirectory, STORAGE_DIRECTORY_NAME, JOURNAL_DIRECTORY_NAME);
    const segment = join(
      journal,
      (await readdir(journal))
        .filter((name) => name.endsWith(".journal"))
        .sort()
        .at(-1)!,
    );
    const contents = await readFile(segment);
    const tornAt = contents.findLastIndex((value) => value !== 0) + 64;
    contents.set([40, 0, 0, 0, 0xde, 0xad, 0xbe, 0xef, 1, 2, 3], tornAt);
    await writeFile(segment, contents);

    const logged: { msg: string; tornTail?: string }[] = [];
    const broker = await Broker.start(
      testBrokerOptions(directory, 0, {
        ...single,
        logger: pino({ level: "warn" }, { write: (line: string) => logged.push(JSON.parse(line)) }),
      }),
    );
    try {
      await waitFor(
        () => broker.replicaReports().every((report) => report.role === "leader"),
        "the broker leads again",
      );
      const cuts = logged.filter((line) => line.msg.startsWith("cut the torn last write of the storage's journal"));
      expect(cuts).toHaveLength(1);
      // The cut starts where the intact records end and reaches the last byte written.
      const pattern = /byte (\d+): a torn write reaching byte (\d+), (\d+) of its/;
      const [, from, end, nonZero] = pattern.exec(cuts[0]?.tornTail ?? "") ?? [];
      expect(Number(from)).toBeLessThan(tornAt);
      expect(Number(end)).toBe(tornAt + 11);
      // The gap before the torn record holds zeros: only its own 8 bytes that are not zero count.
      expect(Number(nonZero)).toBe(8);
    } finally {
      await broker.close();
    }
  });

  it("answers health while its replicas open: STARTING and not ready, then UP once they are open", async () => {
    // A first run leaves a snapshot of partition 1, which the next start restores a chunk per turn of the clock.
    const first = await Broker.start(testBrokerOptions(directory, 0, { ...single, snapshotIntervalEntries: 5 }));
    const managementPort = Number(new URL(first.managementUrl).port);
    const clusterPort = first.clusterAddress.port;
    try {
      await waitFor(() => first.replicaReports().every((report) => report.role === "leader"), "single broker leads");
      for (let index = 0; index < 8; index += 1) {
        const answer = await first.replica(1)?.publish({
          name: "order-placed",
          correlationKey: `order-${index}`,
          timeToLiveMs: 600_000,
          variables: {},
          tenantId: DEFAULT_TENANT_ID,
        });
        expect(answer).toMatchObject({ outcome: "published" });
      }
      await waitFor(() => (first.replica(1)?.latestSnapshotIndex ?? 0) > 0, "partition 1 snapshotted");
    } finally {
      await first.close();
    }

    // The replicas' clock holds every turn between snapshot chunks until the test lets them go.
    let release: () => void = () => {};
    const released = new Promise<void>((resolve) => {
      release = resolve;
    });
    let restoring = false;
    const heldClock: ReplicaClock = {
      ...systemClock,
      yieldTurn: async () => {
        restoring = true;
        await released;
        await systemClock.yieldTurn();
      },
    };
    const starting = Broker.start(
      testBrokerOptions(directory, 0, { ...single, managementPort, clusterPort, replicaClock: heldClock }),
    );
    const client = new TransportClient({
      maxConnections: 4,
      credentials: testClusterCredentials(),
      logger: testBrokerOptions(directory, 0).logger,
    });
    let broker: Broker | undefined;
    try {
      await waitFor(() => restoring, "the restore of partition 1 waits for its turn");
      const managementUrl = `http://127.0.0.1:${managementPort}`;
      const health = await fetch(`${managementUrl}/actuator/health`);
      expect(health.status).toBe(503);
      expect(await health.json()).toEqual({
        status: "DOWN",
        components: {
          broker: { status: "DOWN", details: { state: "STARTING", step: "opening partition replicas" } },
          // Neither replica is open: the one being restored nor the one after it.
          "partition-1": { status: "DOWN", details: { role: "inactive", leaderId: null, term: 0 } },
          "partition-2": { status: "DOWN", details: { role: "inactive", leaderId: null, term: 0 } },
        },
      });
      expect((await fetch(`${managementUrl}/actuator/health/readiness`)).status).toBe(503);
      expect((await fetch(`${managementUrl}/actuator/health/liveness`)).status).toBe(200);
      expect((await fetch(`${managementUrl}/actuator/prometheus`)).status).toBe(200);
      // The cluster port describes it the same way: its partitions are not served yet.
      const describe: BrokerRequest = { type: "describe" };
      const description = (await client.request({ host: "127.0.0.1", port: clusterPort }, describe, {
        timeoutMs: 5_000,
      })) as BrokerDescription;
      expect(description.replicas.map((report) => [report.partitionId, report.role, report.health])).toEqual([
        [1, "inactive", "unhealthy"],
        [2, "inactive", "unhealthy"],
      ]);
      // A request for a partition it hosts but has not opened says so, not that the partition lives elsewhere.
      const getMessage = async (partitionId: number) => {
        const request: BrokerRequest = { type: "get-message", partitionId, key: "2251799813685249" };
        return await client.request({ host: "127.0.0.1", port: clusterPort }, request, { timeoutMs: 5_000 });
      };
      expect(await getMessage(2)).toEqual({
        outcome: "unavailable",
        detail: "partition 2 is not open yet on broker 0; the broker is still starting",
      });
      expect(await getMessage(7)).toEqual({ outcome: "unavailable", detail: "partition 7 is not hosted on broker 0" });

      release();
      broker = await starting;
      await waitFor(() => broker?.replicaReports().every((report) => report.role === "leader") ?? false, "leads");
      const started = await fetch(`${broker.managementUrl}/actuator/health`);
      expect(started.status).toBe(200);
      expect(await started.json()).toMatchObject({
        status: "UP",
        components: { broker: { status: "UP", details: { state: "RUNNING" } } },
      });
      expect((await fetch(`${broker.managementUrl}/actuator/health/readiness`)).status).toBe(200);
      expect(broker.replica(1)?.latestSnapshotIndex).toBeGreaterThan(0);
    } finally {
      release();
      await client.close();
      await (broker ?? (await starting.catch(() => undefined)))?.close();
    }
  });
});
