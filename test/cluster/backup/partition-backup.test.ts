/**
 * The partition writer's building blocks: log frames encoded into a reused buffer exactly as `encodeEntry` encodes
 * each entry, the first and the progress manifests written in the background without ever replacing the final one
 * or holding the files back, and the pacing that makes a backup step back while the broker is busy.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { FilesystemBackupStore } from "../../../src/cluster/backup/filesystem-store.js";
import {
  BackupPacer,
  BUSY_PAUSE_MS,
  copyLogFrames,
  LOG_FRAME_HEADER_BYTES,
  MAX_BUSY_PAUSE_MS,
  MAX_CHUNK_WAIT_MS,
  type PacingClock,
  type PartitionBackupSource,
  PROGRESS_INTERVAL_BYTES,
  writePartitionBackup,
} from "../../../src/cluster/backup/partition-backup.js";
import type { BackupPartManifest, BackupStore } from "../../../src/cluster/backup/store.js";
import type { Entry } from "../../../src/cluster/raft/index.js";
import { encodeEntry } from "../../../src/cluster/raft/storage/codec.js";
import { delegatingStore } from "../../support/backup-store.js";
import { waitFor } from "../broker/support.js";
import { storedLog } from "./support.js";

describe("copyLogFrames", () => {
  it("copies each stored entry as a length and encodeEntry's bytes into the buffer it is given, whatever it held", () => {
    const entries: Entry[] = [
      { index: 7, term: 2, kind: "normal", data: new Uint8Array([1, 2, 3]) },
      { index: 8, term: 2, kind: "noop", data: new Uint8Array() },
      { index: 9, term: 3, kind: "configuration", data: new TextEncoder().encode("members") },
    ];
    const expected: number[] = [];
    for (const entry of entries) {
      const encoded = encodeEntry(entry);
      const length = new Uint8Array(LOG_FRAME_HEADER_BYTES);
      new DataView(length.buffer).setUint32(0, encoded.byteLength);
      expected.push(...length, ...encoded);
    }
    const log = storedLog((index) => entries[index - 7]);
    const sizes = log.storedEntrySizes(7, 10, 1_000);
    // A recycled buffer still holds an earlier chunk's bytes, and the frames start inside it.
    const recycled = new Uint8Array(4096).fill(0xff);
    let requested = -1;
    const frames = copyLogFrames(log, 7, sizes, (sizeBytes) => {
      requested = sizeBytes;
      return recycled.subarray(16, 16 + sizeBytes);
    });
    expect(requested).toBe(expected.length);
    expect(frames.buffer).toBe(recycled.buffer);
    expect([...frames]).toEqual(expected);
    expect([...copyLogFrames(log, 7, sizes)]).toEqual(expected);
  });
});

/** A clock whose turns take `turnMs()` each, and which records the pauses. */
function fakeClock(turnMs: () => number): PacingClock & { pauses: number[] } {
  let nowMs = 0;
  const pauses: number[] = [];
  return {
    pauses,
    now: () => nowMs,
    yieldTurn: async () => {
      nowMs += turnMs();
    },
    sleep: async (delayMs) => {
      pauses.push(delayMs);
      nowMs += delayMs;
    },
  };
}

describe("BackupPacer", () => {
  it("takes one turn and no pause while the event loop is idle and the partition applies nothing", async () => {
    const clock = fakeClock(() => 0.05);
    const pacer = new BackupPacer(clock, () => 7);
    await pacer.pause();
    await pacer.pause();
    expect(clock.pauses).toEqual([]);
  });

  it("steps back for twice each busy turn (within bounds) until a turn is short again", async () => {
    const turns = [4, 0.4 * BUSY_PAUSE_MS, 0.75 * MAX_BUSY_PAUSE_MS, 0.1];
    const clock = fakeClock(() => turns.shift() ?? 0.1);
    await new BackupPacer(clock, () => 7).pause();
    expect(clock.pauses).toEqual([Math.max(BUSY_PAUSE_MS, 8), BUSY_PAUSE_MS, MAX_BUSY_PAUSE_MS]);
  });

  it("steps back while the partition applies entries, even when every turn is short", async () => {
    const clock = fakeClock(() => 0.05);
    let applied = 10;
    const pacer = new BackupPacer(clock, () => applied);
    applied = 12;
    await pacer.pause();
    expect(clock.pauses).toEqual([BUSY_PAUSE_MS]);
  });

  it("stops stepping back once the backup is overdue (the log grew too long while it waited)", async () => {
    const clock = fakeClock(() => 5);
    let applied = 0;
    let overdue = false;
    const pacer = new BackupPacer(
      clock,
      () => applied++,
      () => overdue,
    );
    await pacer.pause();
    const paused = clock.pauses.length;
    expect(paused).toBeGreaterThan(0);
    overdue = true;
    await pacer.pause();
    await pacer.pause();
    expect(clock.pauses.length).toBe(paused);
  });

  it("moves on once a chunk waited its longest under constant load", async () => {
    const clock = fakeClock(() => 5);
    let applied = 0;
    await new BackupPacer(clock, () => applied++).pause();
    expect(clock.pauses.length).toBeGreaterThan(1);
    const waitedMs = clock.pauses.reduce((total, pause) => total + pause + 5, 0);
    expect(waitedMs).toBeGreaterThanOrEqual(MAX_CHUNK_WAIT_MS);
    expect(waitedMs).toBeLessThan(MAX_CHUNK_WAIT_MS + MAX_BUSY_PAUSE_MS + 10);
  });
});

describe("progress manifests", () => {
  let base: string;
  let store: FilesystemBackupStore;

  beforeEach(async () => {
    base = await mkdtemp(join(tmpdir(), "flowplane-backup-progress-"));
    store = new FilesystemBackupStore(base);
  });

  afterEach(async () => {
    await store.fileWriter.terminate();
    await rm(base, { recursive: true, force: true });
  });

  const entryBytes = 1024 * 1024;
  const lastIndex = Math.ceil((2 * PROGRESS_INTERVAL_BYTES) / entryBytes);
  /** A replica without a snapshot whose log holds `lastIndex` entries of about 1 MiB. */
  const source: PartitionBackupSource = {
    snapshotMetadata: () => null,
    snapshotChunk: () => null,
    ...storedLog((index) =>
      index <= lastIndex ? { index, term: 1, kind: "normal", data: new Uint8Array(entryBytes) } : undefined,
    ),
    interruption: () => null,
    running: () => true,
    yieldTurn: async () => {},
  };
  const request = {
    backupId: 6n,
    partitionId: 1,
    brokerId: 1,
    checkpointPosition: lastIndex,
    partitionCount: 1,
    flowplaneVersion: "1.0.0",
    now: () => "2026-01-01T00:00:00.000Z",
    sleep: (delayMs: number) => new Promise<void>((resolve) => setTimeout(resolve, delayMs)),
  };
  /** `store`, with progress manifests (IN_PROGRESS with bytes written) going through `progress`. */
  function storeWith(progress: (manifest: BackupPartManifest) => Promise<void>): BackupStore {
    return delegatingStore(store, {
      writeManifest: (manifest) =>
        manifest.state === "IN_PROGRESS" && manifest.writtenBytes > 0
          ? progress(manifest)
          : store.writeManifest(manifest),
    });
  }

  it("never lets a slow progress manifest replace the final one", async () => {
    const progressed: number[] = [];
    const slow = storeWith(async (manifest) => {
      await new Promise((resolve) => setTimeout(resolve, 50));
      await store.writeManifest(manifest);
      progressed.push(manifest.writtenBytes);
    });
    const manifest = await writePartitionBackup(source, slow, request);
    expect(manifest.state).toBe("COMPLETED");
    expect(progressed.length).toBeGreaterThan(0);
    expect(await store.manifests(6n)).toEqual([manifest]);
  });

  it("writes the part's files while its first manifest is on its way, and the final manifest only after it", async () => {
    let releaseFirst = (): void => undefined;
    const firstHeld = new Promise<void>((resolve) => {
      releaseFirst = resolve;
    });
    const events: string[] = [];
    const held: BackupStore = {
      ...storeWith((manifest) => store.writeManifest(manifest)),
      writeManifest: async (manifest) => {
        if (manifest.state === "IN_PROGRESS" && manifest.writtenBytes === 0) {
          events.push("first manifest started");
          await firstHeld;
          await store.writeManifest(manifest);
          events.push("first manifest written");
          return;
        }
        await store.writeManifest(manifest);
        events.push(`${manifest.state} manifest written`);
      },
      createFile: async (part, name) => {
        const file = await store.createFile(part, name);
        return {
          ...file,
          finish: async () => {
            events.push(`${name} finished`);
            return file.finish();
          },
        };
      },
    };
    const writing = writePartitionBackup(source, held, request);
    await waitFor(() => events.includes("log.bin finished"), "the log written while the first manifest is held");
    expect(events).not.toContain("first manifest written");
    releaseFirst();
    const manifest = await writing;
    expect(manifest.state).toBe("COMPLETED");
    expect(events).toEqual([
      "first manifest started",
      "log.bin finished",
      "first manifest written",
      "COMPLETED manifest written",
    ]);
    expect(await store.manifests(6n)).toEqual([manifest]);
  });

  it("fails the part when its first manifest cannot be written, with the store's reason", async () => {
    const failing: BackupStore = {
      ...storeWith((manifest) => store.writeManifest(manifest)),
      writeManifest: async (manifest) => {
        if (manifest.state === "IN_PROGRESS") throw new Error("the store is read-only");
        await store.writeManifest(manifest);
      },
    };
    const manifest = await writePartitionBackup(source, failing, request);
    expect(manifest).toMatchObject({ state: "FAILED", failureReason: "the store is read-only" });
    expect(await store.manifests(6n)).toEqual([manifest]);
  });

  it("writes the final manifest again after a transient store error, so the part does not stay IN_PROGRESS", async () => {
    let finalAttempts = 0;
    const flaky: BackupStore = delegatingStore(store, {
      writeManifest: async (manifest) => {
        if (manifest.state !== "IN_PROGRESS") {
          finalAttempts += 1;
          if (finalAttempts <= 2) throw new Error("EIO: i/o error");
        }
        await store.writeManifest(manifest);
      },
    });
    const manifest = await writePartitionBackup(source, flaky, request);
    expect(manifest.state).toBe("COMPLETED");
    expect(finalAttempts).toBe(3);
    expect(await store.manifests(6n)).toEqual([manifest]);
  });

  it("reports the part FAILED when the store stays broken, and writes its final manifest once the store is back", async () => {
    const recordOf = (backupId: bigint) => ({
      formatVersion: 1 as const,
      backupId,
      partitionCount: 1,
      takenAt: "2026-01-01T00:00:00.000Z",
      flowplaneVersion: "1.0.0",
    });
    await store.writeBackupRecord(recordOf(6n));
    let finalAttempts = 0;
    let brokenUntilAttempt = 8;
    // Whether a failed write lands all the same (the rename worked, the directory's sync failed).
    let landsWhenFailing = false;
    const broken: BackupStore = delegatingStore(store, {
      writeManifest: async (manifest) => {
        if (manifest.state !== "IN_PROGRESS") {
          finalAttempts += 1;
          if (finalAttempts <= brokenUntilAttempt) {
            if (landsWhenFailing) await store.writeManifest(manifest);
            throw new Error("EIO: i/o error");
          }
        }
        await store.writeManifest(manifest);
      },
    });
    const pausesMs: number[] = [];
    const instant = { ...request, sleep: async (delayMs: number) => void pausesMs.push(delayMs) };
    const waitUntil = async (condition: () => boolean): Promise<void> => {
      for (let turn = 0; turn < 1_000 && !condition(); turn++) await new Promise((resolve) => setTimeout(resolve, 1));
    };
    const manifest = await writePartitionBackup(source, broken, instant);
    expect(manifest).toMatchObject({
      state: "FAILED",
      failureReason: "the final manifest could not be written: EIO: i/o error",
    });
    // Six attempts in line (the COMPLETED manifest), then the part is reported FAILED, and its COMPLETED manifest is
    // written in the background until the store takes it: the ninth attempt, the third in the background.
    expect(pausesMs.slice(0, 5)).toEqual([200, 400, 800, 1_600, 3_200]);
    await waitUntil(() => finalAttempts === 9);
    expect(pausesMs.slice(5)).toEqual([30_000, 30_000, 30_000]);
    for (let turn = 0; turn < 1_000 && (await store.manifests(6n))[0]?.state !== "COMPLETED"; turn++) {
      await new Promise((resolve) => setTimeout(resolve, 1));
    }
    expect(await store.manifests(6n)).toEqual([{ ...manifest, state: "COMPLETED", failureReason: null }]);

    // A store away for longer than an hour: the manifest is written every 30 s for an hour, then every 5 minutes,
    // until the store takes it.
    finalAttempts = 0;
    brokenUntilAttempt = 6 + 125;
    pausesMs.length = 0;
    await store.writeBackupRecord(recordOf(8n));
    const longOutage = await writePartitionBackup(source, broken, { ...instant, backupId: 8n });
    expect(longOutage.state).toBe("FAILED");
    await waitUntil(() => finalAttempts === 6 + 126);
    for (let turn = 0; turn < 1_000 && (await store.manifests(8n))[0]?.state !== "COMPLETED"; turn++) {
      await new Promise((resolve) => setTimeout(resolve, 1));
    }
    expect((await store.manifests(8n)).map((part) => part.state)).toEqual(["COMPLETED"]);
    expect(pausesMs.slice(5)).toEqual([...Array(120).fill(30_000), ...Array(6).fill(300_000)]);

    // A final manifest the store reported failed although it landed is left as it is, not written over.
    finalAttempts = 0;
    brokenUntilAttempt = 100;
    landsWhenFailing = true;
    await store.writeBackupRecord(recordOf(9n));
    const landed = await writePartitionBackup(source, broken, { ...request, backupId: 9n, sleep: async () => {} });
    expect(landed.state).toBe("FAILED");
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(finalAttempts).toBe(6);
    expect((await store.manifests(9n)).map((part) => part.state)).toEqual(["COMPLETED"]);
    landsWhenFailing = false;

    // A broker that no longer runs stops trying: its next start settles the part instead.
    finalAttempts = 0;
    brokenUntilAttempt = 100;
    await store.writeBackupRecord(recordOf(7n));
    const stopped: PartitionBackupSource = { ...source, running: () => false };
    const gaveUp = await writePartitionBackup(stopped, broken, { ...request, backupId: 7n, sleep: async () => {} });
    expect(gaveUp.state).toBe("FAILED");
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(finalAttempts).toBe(6);

    // A backup deleted while the store was broken does not get the part back when the store returns.
    finalAttempts = 0;
    brokenUntilAttempt = 6;
    await store.writeBackupRecord(recordOf(8n));
    let releaseBackground = (): void => undefined;
    const held = new Promise<void>((resolve) => {
      releaseBackground = resolve;
    });
    const deleted = await writePartitionBackup(source, broken, {
      ...request,
      backupId: 8n,
      sleep: (delayMs: number) => (delayMs === 30_000 ? held : Promise.resolve()),
    });
    expect(deleted.state).toBe("FAILED");
    expect(await store.deleteBackup(8n)).toBe(true);
    releaseBackground();
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(finalAttempts).toBe(6);
    expect(await store.manifests(8n)).toEqual([]);
  });

  it("fails the part when a progress manifest cannot be written", async () => {
    const failing = storeWith(async () => {
      throw new Error("the disk is full");
    });
    const manifest = await writePartitionBackup(source, failing, request);
    expect(manifest).toMatchObject({ state: "FAILED", failureReason: "the disk is full" });
    expect(await store.manifests(6n)).toEqual([manifest]);
  });
});
