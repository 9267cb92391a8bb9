/**
 * The filesystem backup store: its layout, owner-only modes, files verified on finish, manifests listed and checked,
 * deletion, and the partition writer's failure paths (leadership lost, snapshot replaced, log gone). Backup records:
 * their own directory beside the partitions', owner-only, listed and checked, removed first by a delete.
 */
import { createHash } from "node:crypto";
import { mkdir, mkdtemp, readdir, readFile, rename, rm, stat, truncate, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pino } from "pino";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { FilesystemBackupStore } from "../../../src/cluster/backup/filesystem-store.js";
import { type PartitionBackupSource, writePartitionBackup } from "../../../src/cluster/backup/partition-backup.js";
import {
  BackupPartDamagedError,
  readPartEntries,
  readPartSnapshot,
  verifyPart,
} from "../../../src/cluster/backup/read-part.js";
import { type BackupPartManifest, fileChecksum, parseManifest } from "../../../src/cluster/backup/store.js";
import { snapshotChecksum } from "../../../src/cluster/raft/core/snapshot-transfer.js";
import type { Entry, SnapshotMetadata } from "../../../src/cluster/raft/index.js";
import { entriesOpenToOthers } from "../../support/file-modes.js";
import { canMountSmallDisk, fillDisk, mountSmallDisk } from "../../support/small-disk.js";
import { waitFor } from "../broker/support.js";
import { storedLog } from "./support.js";

let base: string;
let store: FilesystemBackupStore;

beforeEach(async () => {
  base = await mkdtemp(join(tmpdir(), "flowplane-backups-"));
  store = new FilesystemBackupStore(join(base, "store"));
});

afterEach(async () => {
  await rm(base, { recursive: true, force: true });
});

function entry(index: number, term = 1): Entry {
  return { index, term, kind: "normal", data: new TextEncoder().encode(`entry-${index}`) };
}

/** A replica as the writer sees it: a snapshot at `snapshotIndex` and the log after it up to `lastIndex`. */
function fakeSource(options: {
  snapshot?: Uint8Array;
  snapshotIndex?: number;
  lastIndex: number;
  interruptAfterChunks?: number;
  /** The term of every log entry (1 unless given). */
  entryTerm?: number;
}): PartitionBackupSource & { metadata: SnapshotMetadata | null } {
  let chunks = 0;
  const data = options.snapshot;
  const metadata: SnapshotMetadata | null =
    data === undefined
      ? null
      : {
          index: options.snapshotIndex ?? 0,
          term: 1,
          configuration: { members: [] },
          sizeBytes: data.byteLength,
          checksum: snapshotChecksum(data),
        };
  const log = storedLog((index) => (index <= options.lastIndex ? entry(index, options.entryTerm) : undefined));
  const source = {
    metadata,
    snapshotMetadata: () => source.metadata,
    snapshotChunk: (requested: SnapshotMetadata, offset: number, maxBytes: number) => {
      if (source.metadata !== requested || data === undefined) return null;
      chunks += 1;
      return data.slice(offset, offset + maxBytes);
    },
    storedEntrySizes: (fromIndex: number, toIndex: number, maxBytes: number) => {
      if (fromIndex <= (source.metadata?.index ?? 0)) throw new Error("compacted");
      chunks += 1;
      return log.storedEntrySizes(fromIndex, toIndex, maxBytes);
    },
    readStoredEntries: log.readStoredEntries,
    interruption: () =>
      options.interruptAfterChunks !== undefined && chunks >= options.interruptAfterChunks
        ? "broker 1 lost the leadership of partition 2 during the backup"
        : null,
    running: () => true,
    yieldTurn: async () => {},
  };
  return source;
}

/** The record of backup `backupId` of a cluster of 3 partitions. */
function backupRecord(backupId: bigint) {
  return {
    formatVersion: 1 as const,
    backupId,
    partitionCount: 3,
    takenAt: "2026-01-01T00:00:00.000Z",
    flowplaneVersion: "1.2.3",
  };
}

function request(backupId: bigint) {
  return {
    backupId,
    partitionId: 2,
    brokerId: 1,
    checkpointPosition: 9,
    partitionCount: 3,
    flowplaneVersion: "1.2.3",
    now: () => "2026-01-01T00:00:00.000Z",
    sleep: (delayMs: number) => new Promise<void>((resolve) => setTimeout(resolve, delayMs)),
  };
}

describe("FilesystemBackupStore with the partition writer", () => {
  it("writes a part as <base>/<partition>/<backup>/<broker>, owner-only, with a manifest of verified files", async () => {
    const snapshot = new Uint8Array(3 * 1024 * 1024 + 5).map((_, index) => index % 251);
    const source = fakeSource({ snapshot, snapshotIndex: 4, lastIndex: 12 });
    const manifest = await writePartitionBackup(source, store, request(7n));
    expect(manifest).toMatchObject({
      state: "COMPLETED",
      failureReason: null,
      backupId: 7n,
      partitionId: 2,
      brokerId: 1,
      partitionCount: 3,
      flowplaneVersion: "1.2.3",
      checkpointPosition: 9,
      snapshot: { index: 4, term: 1 },
      log: { firstIndex: 5, lastIndex: 9 },
    });
    const directory = join(base, "store", "2", "7", "1");
    const stored = await readFile(join(directory, "snapshot.bin"));
    expect(Buffer.compare(stored, Buffer.from(snapshot))).toBe(0);
    // The snapshot file's checksum is the one its storage recorded for the snapshot.
    expect(manifest.files).toContainEqual({
      name: "snapshot.bin",
      sizeBytes: snapshot.byteLength,
      crc32c: fileChecksum(snapshotChecksum(snapshot)),
    });
    // Written as earlier versions wrote it: an id up to 2^53 − 1 is a plain JSON number.
    expect(JSON.parse(await readFile(join(directory, "manifest.json"), "utf8"))).toEqual({ ...manifest, backupId: 7 });
    expect(entriesOpenToOthers(join(base, "store"))).toEqual({});
    // The log holds exactly the entries after the snapshot up to the checkpoint position.
    const indexes: number[] = [];
    for await (const read of readPartEntries(store, manifest)) indexes.push(read.index);
    expect(indexes).toEqual([5, 6, 7, 8, 9]);
    await verifyPart(store, manifest);
    expect(await store.manifests()).toEqual([manifest]);
    expect(await store.manifests(8n)).toEqual([]);
  });

  it("refuses to finish a file whose synced size differs from the bytes written, and leaves nothing behind", async () => {
    const part = { backupId: 3n, partitionId: 2, brokerId: 1 };
    const file = await store.createFile(part, "log.bin");
    await file.write(new Uint8Array(4096).fill(7));
    const directory = join(base, "store", "2", "3", "1");
    const [temporary] = (await readdir(directory)).filter((name) => name.endsWith(".tmp"));
    if (temporary === undefined) throw new Error("no temporary file");
    // The writer thread writes after `write` resolved: the damage must come after it.
    await waitFor(async () => (await stat(join(directory, temporary))).size === 4096, "the bytes are written");
    await truncate(join(directory, temporary), 100);
    await expect(file.finish()).rejects.toThrow(/log\.bin holds 100 bytes in the backup store, not the 4096 written/);
    expect(await readdir(directory)).toEqual([]);
  });

  it("records the bytes written in the IN_PROGRESS manifest while a long part is written", async () => {
    const snapshot = new Uint8Array(34 * 1024 * 1024).fill(7);
    const progress: [string, number][] = [];
    const watched = Object.create(store) as FilesystemBackupStore;
    watched.writeManifest = async (manifest) => {
      progress.push([manifest.state, manifest.writtenBytes]);
      await store.writeManifest(manifest);
    };
    const manifest = await writePartitionBackup(
      fakeSource({ snapshot, snapshotIndex: 4, lastIndex: 9 }),
      watched,
      request(8n),
    );
    const logBytes = (manifest.files.find((file) => file.name === "log.bin")?.sizeBytes ?? 0) as number;
    expect(progress[0]).toEqual(["IN_PROGRESS", 0]);
    expect(progress.at(-1)).toEqual(["COMPLETED", snapshot.byteLength + logBytes]);
    // Every 16 MiB at most; one that comes due while the previous one is still being written waits for the next add.
    const reported = progress.slice(1, -1);
    expect(reported[0]).toEqual(["IN_PROGRESS", 16 * 1024 * 1024]);
    for (const [position, [state, writtenBytes]] of reported.entries()) {
      expect(state).toBe("IN_PROGRESS");
      if (position > 0)
        expect(writtenBytes - (reported[position - 1]?.[1] ?? 0)).toBeGreaterThanOrEqual(16 * 1024 * 1024);
    }
  });

  it("a corrupted byte in a stored file makes verification fail naming that file", async () => {
    const manifest = await writePartitionBackup(fakeSource({ lastIndex: 9 }), store, request(3n));
    expect(manifest.snapshot).toBeNull();
    const path = join(base, "store", "2", "3", "1", "log.bin");
    const bytes = await readFile(path);
    bytes[10] = (bytes[10] as number) ^ 0xff;
    await writeFile(path, bytes);
    await expect(verifyPart(store, manifest)).rejects.toThrow(BackupPartDamagedError);
    await expect(verifyPart(store, manifest)).rejects.toThrow(/log\.bin does not match its CRC-32C checksum/);
  });

  it("verifies parts of earlier builds by the SHA-256 their manifests record, and names a corrupted file", async () => {
    const snapshot = new Uint8Array(2 * 1024 * 1024 + 3).map((_, index) => index % 249);
    const written = await writePartitionBackup(
      fakeSource({ snapshot, snapshotIndex: 4, lastIndex: 9 }),
      store,
      request(8n),
    );
    const directory = join(base, "store", "2", "8", "1");
    const files = await Promise.all(
      written.files.map(async ({ name, sizeBytes }) => ({
        name,
        sizeBytes,
        sha256: createHash("sha256")
          .update(await readFile(join(directory, name)))
          .digest("hex"),
      })),
    );
    // What an earlier build wrote: the same manifest with SHA-256 checksums.
    await writeFile(join(directory, "manifest.json"), JSON.stringify({ ...written, backupId: 8, files }));
    const [earlier] = await store.manifests(8n);
    expect(earlier?.files).toEqual(files);
    await verifyPart(store, earlier as BackupPartManifest);
    const path = join(directory, "snapshot.bin");
    const bytes = await readFile(path);
    bytes[1_000_000] = (bytes[1_000_000] as number) ^ 0x01;
    await writeFile(path, bytes);
    await expect(verifyPart(store, earlier as BackupPartManifest)).rejects.toThrow(
      /partition 2 \(written by broker 1\): snapshot\.bin does not match its SHA-256 checksum/,
    );
  });

  it("refuses a manifest whose file names no checksum, both, or a malformed one", async () => {
    const written = await writePartitionBackup(fakeSource({ lastIndex: 9 }), store, request(9n));
    const [log] = written.files;
    const withFile = (file: Record<string, unknown>) =>
      parseManifest({ ...written, backupId: 9, files: [file] }, written);
    expect(withFile({ ...log })).toMatchObject({ files: [log] });
    expect(withFile({ name: "log.bin", sizeBytes: 1 })).toBe("the file list is malformed");
    expect(withFile({ ...log, sha256: "0".repeat(64) })).toBe("the file list is malformed");
    for (const crc32c of ["e306928", "E3069283", "e30692830", 3808858755]) {
      expect(withFile({ ...log, crc32c })).toBe("the file list is malformed");
    }
    expect(withFile({ name: "log.bin", sizeBytes: 1, sha256: "a".repeat(63) })).toBe("the file list is malformed");
    const earlier = { name: "snapshot.bin", sizeBytes: 1, sha256: "a".repeat(64) };
    expect(parseManifest({ ...written, backupId: 9, files: [earlier, log] }, written)).toBe(
      "the file list mixes checksums",
    );
    expect(parseManifest({ ...written, backupId: 9, files: [earlier] }, written)).toMatchObject({ files: [earlier] });
  });

  it("fails a part whose snapshot was written with another checksum than its storage recorded, keeping no file", async () => {
    const snapshot = new Uint8Array(1024 * 1024 + 9).fill(7);
    const source = fakeSource({ snapshot, snapshotIndex: 4, lastIndex: 9 });
    const original = source.snapshotChunk;
    // One byte differs between what the storage recorded and what the writer is given.
    source.snapshotChunk = (metadata, offset, maxBytes) => {
      const chunk = original(metadata, offset, maxBytes);
      if (chunk !== null && offset === 0) chunk[5] = 8;
      return chunk;
    };
    const manifest = await writePartitionBackup(source, store, request(10n));
    expect(manifest).toMatchObject({ state: "FAILED", files: [] });
    const stored = fileChecksum(snapshotChecksum(snapshot));
    expect(manifest.failureReason).toMatch(
      new RegExp(`snapshot\\.bin was written with CRC-32C [0-9a-f]{8}, not the expected ${stored}`),
    );
    // Neither the snapshot file nor its temporary file is kept: only the FAILED manifest.
    expect(await readdir(store.partDirectory(manifest))).toEqual(["manifest.json"]);
  });

  it("checks the snapshot again as restore reads it, after verification", async () => {
    const snapshot = new Uint8Array(1024 * 1024 + 9).map((_, index) => index % 241);
    const manifest = await writePartitionBackup(
      fakeSource({ snapshot, snapshotIndex: 4, lastIndex: 9 }),
      store,
      request(13n),
    );
    await verifyPart(store, manifest);
    expect(
      Buffer.compare(Buffer.from((await readPartSnapshot(store, manifest)) as Uint8Array), Buffer.from(snapshot)),
    ).toBe(0);
    const path = join(store.partDirectory(manifest), "snapshot.bin");
    const bytes = await readFile(path);
    bytes[17] = (bytes[17] as number) ^ 0x80;
    await writeFile(path, bytes);
    await expect(readPartSnapshot(store, manifest)).rejects.toThrow(/snapshot\.bin changed after it was verified/);
  });

  it("checks the log again as restore reads it: other well-formed entries put there after verification are refused", async () => {
    const manifest = await writePartitionBackup(fakeSource({ lastIndex: 9 }), store, request(13n));
    const other = await writePartitionBackup(fakeSource({ lastIndex: 9, entryTerm: 7 }), store, request(14n));
    await verifyPart(store, manifest);
    const replacement = await readFile(join(store.partDirectory(other), "log.bin"));
    await writeFile(join(store.partDirectory(manifest), "log.bin"), replacement);
    const terms: number[] = [];
    await expect(
      (async () => {
        for await (const read of readPartEntries(store, manifest)) terms.push(read.term);
      })(),
    ).rejects.toThrow(/log\.bin changed after it was verified/);
    // Each entry verifies alone: only the file's checksum tells them apart.
    expect(terms).toEqual([7, 7, 7, 7, 7, 7, 7, 7, 7]);
  });

  it("refuses a manifest whose log range does not join its snapshot or does not reach its checkpoint position", async () => {
    const written = await writePartitionBackup(
      fakeSource({ snapshot: new Uint8Array(10), snapshotIndex: 4, lastIndex: 9 }),
      store,
      request(15n),
    );
    expect(written.log).toEqual({ firstIndex: 5, lastIndex: 9 });
    const withLog = (log: { firstIndex: number; lastIndex: number }) =>
      parseManifest({ ...written, backupId: 15, log }, written);
    expect(withLog({ firstIndex: 5, lastIndex: 9 })).toMatchObject({ log: { firstIndex: 5, lastIndex: 9 } });
    expect(withLog({ firstIndex: 6, lastIndex: 9 })).toMatch(/does not start right after the snapshot \(entry 4\)/);
    expect(withLog({ firstIndex: 5, lastIndex: 8 })).toMatch(/end at the checkpoint position 9/);
    expect(parseManifest({ ...written, backupId: 15, snapshot: null }, written)).toMatch(/log range 5\.\.9/);
  });

  it("a part whose leader lost its leadership ends FAILED with the reason, never COMPLETED", async () => {
    const snapshot = new Uint8Array(3 * 1024 * 1024);
    const manifest = await writePartitionBackup(
      fakeSource({ snapshot, snapshotIndex: 2, lastIndex: 9, interruptAfterChunks: 1 }),
      store,
      request(4n),
    );
    expect(manifest).toMatchObject({
      state: "FAILED",
      failureReason: "broker 1 lost the leadership of partition 2 during the backup",
      files: [],
    });
    expect((await store.manifests(4n))[0]).toEqual(manifest);
    await expect(verifyPart(store, manifest)).rejects.toThrow(/FAILED: broker 1 lost the leadership/);
  });

  it("starts over from a snapshot installed while the part was written, if it is at or before the checkpoint", async () => {
    const first = new Uint8Array(2 * 1024 * 1024 + 1);
    const source = fakeSource({ snapshot: first, snapshotIndex: 2, lastIndex: 9 });
    const original = source.snapshotChunk;
    let replaced = false;
    source.snapshotChunk = (metadata, offset, maxBytes) => {
      const chunk = original(metadata, offset, maxBytes);
      if (!replaced && offset > 0) {
        replaced = true;
        source.metadata = { ...(metadata as SnapshotMetadata), index: 5 };
        return null;
      }
      return chunk;
    };
    const manifest = await writePartitionBackup(source, store, request(5n));
    expect(manifest).toMatchObject({
      state: "COMPLETED",
      snapshot: { index: 5 },
      log: { firstIndex: 6, lastIndex: 9 },
    });
  });

  it("fails a part whose snapshot is past the checkpoint position", async () => {
    const manifest = await writePartitionBackup(
      fakeSource({ snapshot: new Uint8Array(10), snapshotIndex: 10, lastIndex: 12 }),
      store,
      request(6n),
    );
    expect(manifest).toMatchObject({ state: "FAILED" });
    expect(manifest.failureReason).toMatch(/past the checkpoint position 9/);
  });

  it("reports a damaged manifest as a FAILED part naming it, and deletes every part of a backup", async () => {
    await writePartitionBackup(fakeSource({ lastIndex: 9 }), store, request(11n));
    await writePartitionBackup(fakeSource({ lastIndex: 9 }), store, { ...request(11n), partitionId: 1 });
    await writePartitionBackup(fakeSource({ lastIndex: 9 }), store, request(12n));
    await writeFile(join(base, "store", "1", "11", "1", "manifest.json"), "{not json");
    const parts: BackupPartManifest[] = await store.manifests(11n);
    expect(parts.map((part) => [part.partitionId, part.state])).toEqual([
      [1, "FAILED"],
      [2, "COMPLETED"],
    ]);
    expect(parts[0]?.failureReason).toMatch(/manifest\.json: manifest\.json is not JSON/);
    expect(await store.backupIds()).toEqual([11n, 12n]);
    expect(await store.deleteBackup(11n)).toBe(true);
    expect(await store.deleteBackup(11n)).toBe(false);
    expect((await store.manifests()).map((part) => part.backupId)).toEqual([12n]);
  });

  it("passes over stray entries of the wrong kind at every level, so lists, backups and ids keep working", async () => {
    await store.writeBackupRecord(backupRecord(11n));
    await writePartitionBackup(fakeSource({ lastIndex: 9 }), store, request(11n));
    // Files where directories belong (a partition, a backup, a broker), and a directory where records are files.
    await writeFile(join(base, "store", "7"), "a copy someone left");
    await writeFile(join(base, "store", "2", "9"), "");
    await writeFile(join(base, "store", "2", "11", "5"), "");
    await mkdir(join(base, "store", "backups", "12.json"));
    expect((await store.manifests()).map((part) => [part.partitionId, part.backupId, part.brokerId])).toEqual([
      [2, 11n, 1],
    ]);
    expect(await store.backupIds()).toEqual([11n]);
    expect(await store.deleteBackup(11n)).toBe(true);
    expect(await store.manifests()).toEqual([]);
  });
});

describe("FilesystemBackupStore's backup records", () => {
  const record = {
    formatVersion: 1 as const,
    backupId: 4n,
    partitionCount: 3,
    takenAt: "2026-01-01T00:00:00.000Z",
    flowplaneVersion: "1.2.3",
  };

  it("keeps a record as <base>/backups/<id>.json, owner-only, beside the parts, and lists its id", async () => {
    await store.writeBackupRecord(record);
    await writePartitionBackup(fakeSource({ lastIndex: 9 }), store, request(4n));
    expect(JSON.parse(await readFile(join(base, "store", "backups", "4.json"), "utf8"))).toEqual({
      ...record,
      backupId: 4,
    });
    expect(entriesOpenToOthers(join(base, "store"))).toEqual({});
    expect(await store.backupRecords()).toEqual([{ backupId: 4n, record, problem: null }]);
    expect(await store.backupRecords(4n)).toEqual([{ backupId: 4n, record, problem: null }]);
    expect(await store.backupRecords(5n)).toEqual([]);
    // The records' directory is no partition: the parts are listed as before.
    expect((await store.manifests()).map((part) => [part.backupId, part.partitionId, part.backupRecorded])).toEqual([
      [4n, 2, true],
    ]);
    await store.writeBackupRecord({ ...record, backupId: 6n });
    expect(await store.backupIds()).toEqual([4n, 6n]);
  });

  it("keeps the configuration a backup was taken in beside its record, owner-only, and deletes it with the backup", async () => {
    await store.writeBackupConfiguration(4n, '{"version":3}');
    await store.writeBackupRecord(record);
    expect(await readFile(join(base, "store", "backups", "4.configuration.json"), "utf8")).toBe('{"version":3}');
    expect(entriesOpenToOthers(join(base, "store"))).toEqual({});
    expect(await store.backupConfiguration(4n)).toBe('{"version":3}');
    expect(await store.backupConfiguration(5n)).toBeNull();
    // Not a record: listings of records, and older versions' (which only read <id>.json), skip it.
    expect(await store.backupIds()).toEqual([4n]);
    await expect(store.writeBackupConfiguration(5n, "x".repeat(8 * 1024 * 1024 + 1))).rejects.toThrow(/larger than/);
    expect(await store.deleteBackup(4n)).toBe(true);
    expect(await store.backupConfiguration(4n)).toBeNull();
  });

  it.runIf(canMountSmallDisk)(
    "leaves no temporary file behind when the disk is full, and says why the write failed",
    async () => {
      const disk = join(base, "store");
      const unmount = mountSmallDisk(disk, 1);
      try {
        await store.writeBackupRecord(record);
        fillDisk(join(disk, "ballast"));
        const recordsDirectory = join(disk, "backups");
        const before = await readdir(recordsDirectory);
        await expect(store.writeBackupConfiguration(6n, '{"version":3}')).rejects.toMatchObject({ code: "ENOSPC" });
        await expect(store.writeBackupRecord({ ...record, backupId: 6n })).rejects.toThrow(/no space left/);
        // The taken mark is an empty file, which a full disk still holds; the record's temporary file is gone.
        expect((await readdir(recordsDirectory)).sort()).toEqual(before.sort());
        expect(await readdir(join(recordsDirectory, "taken"))).toEqual(["6"]);
        await rm(join(disk, "ballast"));
        await store.writeBackupRecord({ ...record, backupId: 6n });
        expect(await store.backupIds()).toEqual([4n, 6n]);
      } finally {
        unmount();
      }
    },
  );

  it("names a damaged record, and a delete removes the record with the parts", async () => {
    await store.writeBackupRecord(record);
    await writeFile(
      join(base, "store", "backups", "5.json"),
      JSON.stringify({ ...record, backupId: 5, partitionCount: 0 }),
    );
    expect(await store.backupRecords(5n)).toEqual([
      {
        backupId: 5n,
        record: null,
        problem: `${join(base, "store", "backups", "5.json")}: the record's partition count is malformed`,
      },
    ]);
    await writePartitionBackup(fakeSource({ lastIndex: 9 }), store, request(4n));
    expect(await store.deleteBackup(4n)).toBe(true);
    expect(await store.backupRecords(4n)).toEqual([]);
    expect(await store.manifests(4n)).toEqual([]);
    expect(await store.deleteBackup(4n)).toBe(false);
    // A backup that has only its record (no partition wrote a part yet) is deleted too.
    expect(await store.deleteBackup(5n)).toBe(true);
    expect(await store.backupIds()).toEqual([]);
  });

  it("removes a part whose leader read the record just before the delete and created its directory meanwhile", async () => {
    await store.writeBackupRecord(record);
    await writePartitionBackup(fakeSource({ lastIndex: 9 }), store, request(4n));
    /** A store on the same directory in which a leader of partition 3 writes its first manifest mid-delete. */
    class RacedStore extends FilesystemBackupStore {
      raced = false;
      override async highestTakenBackupId(): Promise<bigint | null> {
        // Asked after the delete looked for the backup's parts, before it removes the record.
        if (!this.raced) {
          this.raced = true;
          await writePartitionBackup(fakeSource({ lastIndex: 9 }), store, { ...request(4n), partitionId: 3 });
        }
        return super.highestTakenBackupId();
      }
    }
    const raced = new RacedStore(join(base, "store"));
    expect(await raced.deleteBackup(4n)).toBe(true);
    expect(raced.raced).toBe(true);
    expect(await store.manifests(4n)).toEqual([]);
    expect(await readdir(join(base, "store", "3"))).toEqual([]);
    expect(await store.backupIds()).toEqual([]);
  });
});

describe("FilesystemBackupStore's highest taken backup id", () => {
  const record = backupRecord;
  const takenDirectory = () => join(base, "store", "backups", "taken");

  it("raises it before the record, keeps it when the backup is deleted, and keeps only the highest mark", async () => {
    expect(await store.highestTakenBackupId()).toBeNull();
    await store.writeBackupRecord(record(4n));
    await store.writeBackupRecord(record(9n));
    expect(await store.highestTakenBackupId()).toBe(9n);
    expect(await readdir(takenDirectory())).toEqual(["9"]);
    expect(await store.deleteBackup(9n)).toBe(true);
    expect(await store.backupIds()).toEqual([4n]);
    expect(await store.highestTakenBackupId()).toBe(9n);
    // A store opened again on the directory (a restarted broker, another coordinator, a restored cluster) sees it.
    expect(await new FilesystemBackupStore(join(base, "store")).highestTakenBackupId()).toBe(9n);
    expect(entriesOpenToOthers(join(base, "store"))).toEqual({});
    // The marks' directory is neither a record nor a partition to the listings.
    expect(await store.backupRecords()).toHaveLength(1);
    expect(await store.manifests()).toEqual([]);
  });

  it("never lowers it when two coordinators record at once, in either order", async () => {
    await Promise.all([store.markTaken(11n), store.markTaken(10n)]);
    expect(await store.highestTakenBackupId()).toBe(11n);
    await store.markTaken(10n);
    expect(await store.highestTakenBackupId()).toBe(11n);
    expect(await readdir(takenDirectory())).toContain("11");
  });

  it("takes the id though a lower mark cannot be removed, logs it, and removes it once it can", async () => {
    const logged: { msg: string; path?: string }[] = [];
    const logging = new FilesystemBackupStore(join(base, "store"), {
      logger: pino({ level: "warn" }, { write: (line: string) => logged.push(JSON.parse(line)) }),
    });
    // A directory where a mark's file should be: removing it as a file fails.
    await mkdir(join(takenDirectory(), "3"), { recursive: true });
    await logging.writeBackupRecord(record(5n));
    expect(await logging.backupRecords(5n)).toHaveLength(1);
    expect(await logging.highestTakenBackupId()).toBe(5n);
    expect(logged).toMatchObject([
      {
        msg: "a lower taken backup id's mark could not be removed; it is kept",
        path: join(takenDirectory(), "3"),
      },
    ]);
    // Every later take records as well, and the next writer removes the entry once it is a file again.
    await logging.writeBackupRecord(record(6n));
    expect(await logging.backupRecords(6n)).toHaveLength(1);
    await rm(join(takenDirectory(), "3"), { recursive: true });
    await writeFile(join(takenDirectory(), "3"), "");
    await logging.writeBackupRecord(record(7n));
    expect((await readdir(takenDirectory())).sort()).toEqual(["7"]);
  });

  it("raises it to a deleted backup that an older version took without a mark", async () => {
    await writePartitionBackup(fakeSource({ lastIndex: 9 }), store, request(6n));
    expect(await store.highestTakenBackupId()).toBeNull();
    expect(await store.deleteBackup(6n)).toBe(true);
    expect(await store.highestTakenBackupId()).toBe(6n);
    // Deleting what the store does not hold marks nothing.
    expect(await store.deleteBackup(8n)).toBe(false);
    expect(await store.highestTakenBackupId()).toBe(6n);
  });
});

describe("FilesystemBackupStore with backup ids beyond 2^53 − 1", () => {
  const largest = 2n ** 63n - 1n;

  it("writes and reads them exactly: directories, records, manifests and the taken mark", async () => {
    await store.writeBackupRecord({
      formatVersion: 1,
      backupId: largest,
      partitionCount: 3,
      takenAt: "2026-01-01T00:00:00.000Z",
      flowplaneVersion: "1.2.3",
    });
    const manifest = await writePartitionBackup(fakeSource({ lastIndex: 9 }), store, request(largest));
    expect(manifest).toMatchObject({ state: "COMPLETED", backupId: largest });
    const recordText = await readFile(join(base, "store", "backups", "9223372036854775807.json"), "utf8");
    expect(recordText).toContain('"backupId": 9223372036854775807,');
    const manifestText = await readFile(join(base, "store", "2", "9223372036854775807", "1", "manifest.json"), "utf8");
    expect(manifestText).toContain('"backupId": 9223372036854775807,');
    expect(await store.backupIds()).toEqual([largest]);
    expect(await store.manifests(largest)).toEqual([manifest]);
    // One below 2^63 − 1 is another backup, though JavaScript numbers would round both to 2^63.
    expect(await store.manifests(largest - 1n)).toEqual([]);
    expect((await store.backupRecords(largest))[0]?.record?.backupId).toBe(largest);
    expect(await store.highestTakenBackupId()).toBe(largest);
    expect(await verifyPart(store, manifest)).toBeUndefined();
  });

  it("refuses a record whose id differs from its location's, however close, and ids from 2^63 on", async () => {
    await mkdir(join(base, "store", "backups"), { recursive: true });
    await writeFile(
      join(base, "store", "backups", "9223372036854775807.json"),
      '{"formatVersion": 1, "backupId": 9223372036854775806, "partitionCount": 3, "takenAt": "x", "flowplaneVersion": "1"}',
    );
    expect(await store.backupRecords(largest)).toEqual([
      {
        backupId: largest,
        record: null,
        problem: `${join(base, "store", "backups", "9223372036854775807.json")}: the record names another backup than its location`,
      },
    ]);
    // Ids beyond 2^63 − 1 are no backups' directories.
    await writePartitionBackup(fakeSource({ lastIndex: 9 }), store, request(5n));
    await rename(join(base, "store", "2", "5"), join(base, "store", "2", "9223372036854775808"));
    expect(await store.backupIds()).toEqual([largest]);
  });
});
