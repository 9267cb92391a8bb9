/**
 * Reading a partition's part of a backup back: verifying every file against the manifest (size and checksum), reading
 * the snapshot and the log entries (each entry verified against its own checksum), and rebuilding the partition's
 * engine at the checkpoint position from them. Restore and the tests use it; a damaged file is named in the error.
 */
import { createHash } from "node:crypto";
import { crc32c } from "@node-rs/crc32";
import { PartitionEngine } from "../engine/index.js";
import type { Entry } from "../raft/index.js";
import { decodeEntry } from "../raft/storage/codec.js";
import { BACKUP_CHUNK_BYTES, LOG_FRAME_HEADER_BYTES } from "./partition-backup.js";
import {
  BACKUP_FILE_NAMES,
  type BackupFileEntry,
  type BackupPartManifest,
  type BackupStore,
  fileChecksum,
} from "./store.js";

/** Thrown when a part cannot be used: `fileName` names the file (or the manifest) that is missing or damaged. */
export class BackupPartDamagedError extends Error {
  constructor(
    readonly part: { readonly backupId: bigint; readonly partitionId: number; readonly brokerId: number },
    readonly fileName: string,
    detail: string,
  ) {
    super(
      `backup ${part.backupId}, partition ${part.partitionId} (written by broker ${part.brokerId}): ${fileName} ${detail}`,
    );
    this.name = "BackupPartDamagedError";
  }
}

/** Largest entry a log frame may announce: an entry holds at most one record plus its header. */
const MAX_FRAME_BYTES = 16 * 1024 * 1024;

/** The checksum a manifest records for a file, computed a chunk at a time, and the name it has in messages. */
interface FileChecksum {
  readonly name: string;
  readonly expected: string;
  update(chunk: Uint8Array): void;
  digest(): string;
}

/** The checksum `file`'s entry records: a CRC-32C, or the SHA-256 that parts of earlier builds carry. */
function checksumOf(file: BackupFileEntry): FileChecksum {
  if ("crc32c" in file) {
    let checksum = 0;
    return {
      name: "CRC-32C",
      expected: file.crc32c,
      update: (chunk) => {
        checksum = crc32c(chunk, checksum);
      },
      digest: () => fileChecksum(checksum),
    };
  }
  const hash = createHash("sha256");
  return {
    name: "SHA-256",
    expected: file.sha256,
    update: (chunk) => hash.update(chunk),
    digest: () => hash.digest("hex"),
  };
}

/** Checks that the part is COMPLETED and that every file it names is there with its size and checksum. */
export async function verifyPart(store: BackupStore, manifest: BackupPartManifest): Promise<void> {
  if (manifest.state !== "COMPLETED") {
    throw new BackupPartDamagedError(
      manifest,
      BACKUP_FILE_NAMES.manifest,
      `shows the part ${manifest.state}${manifest.failureReason === null ? "" : `: ${manifest.failureReason}`}`,
    );
  }
  const names = new Set(manifest.files.map((file) => file.name));
  if (!names.has(BACKUP_FILE_NAMES.log) || (manifest.snapshot !== null) !== names.has(BACKUP_FILE_NAMES.snapshot)) {
    throw new BackupPartDamagedError(manifest, BACKUP_FILE_NAMES.manifest, "does not list the files the part needs");
  }
  for (const file of manifest.files) {
    const checksum = checksumOf(file);
    let sizeBytes = 0;
    try {
      for await (const chunk of store.readFile(manifest, file.name, BACKUP_CHUNK_BYTES)) {
        checksum.update(chunk);
        sizeBytes += chunk.byteLength;
      }
    } catch (error) {
      const missing = (error as NodeJS.ErrnoException).code === "ENOENT";
      throw new BackupPartDamagedError(manifest, file.name, missing ? "is missing" : "cannot be read");
    }
    if (sizeBytes !== file.sizeBytes) {
      throw new BackupPartDamagedError(manifest, file.name, `holds ${sizeBytes} bytes, not ${file.sizeBytes}`);
    }
    if (checksum.digest() !== checksum.expected) {
      throw new BackupPartDamagedError(
        manifest,
        file.name,
        `does not match its ${checksum.name} checksum in the manifest`,
      );
    }
  }
}

/**
 * The snapshot bytes of a verified part, or null when it has none. They are checked against the manifest again as
 * they are read: the file may have changed since `verifyPart` read it.
 */
export async function readPartSnapshot(store: BackupStore, manifest: BackupPartManifest): Promise<Uint8Array | null> {
  if (manifest.snapshot === null) return null;
  const file = manifest.files.find((candidate) => candidate.name === BACKUP_FILE_NAMES.snapshot);
  if (file === undefined) {
    throw new BackupPartDamagedError(manifest, BACKUP_FILE_NAMES.manifest, "does not list the files the part needs");
  }
  const checksum = checksumOf(file);
  const chunks: Uint8Array[] = [];
  for await (const chunk of store.readFile(manifest, BACKUP_FILE_NAMES.snapshot, BACKUP_CHUNK_BYTES)) {
    checksum.update(chunk);
    chunks.push(chunk);
  }
  const bytes = Buffer.concat(chunks);
  if (bytes.byteLength !== file.sizeBytes || checksum.digest() !== checksum.expected) {
    throw new BackupPartDamagedError(manifest, file.name, "changed after it was verified");
  }
  return bytes;
}

/**
 * The log entries of a verified part, in order, a frame at a time; checks that they are exactly its log range, and
 * that the file is still the one `verifyPart` checked (its size and checksum in the manifest): each entry verifies
 * alone, but a file replaced since by other well-formed entries would not be noticed otherwise. That check comes
 * after the last entry, so a caller must not keep what it made of the entries before this has ended.
 */
export async function* readPartEntries(store: BackupStore, manifest: BackupPartManifest): AsyncIterable<Entry> {
  let pending: Uint8Array = new Uint8Array(0);
  let expectedIndex = manifest.log.firstIndex;
  const damaged = (detail: string): BackupPartDamagedError =>
    new BackupPartDamagedError(manifest, BACKUP_FILE_NAMES.log, detail);
  const file = manifest.files.find((candidate) => candidate.name === BACKUP_FILE_NAMES.log);
  if (file === undefined) {
    throw new BackupPartDamagedError(manifest, BACKUP_FILE_NAMES.manifest, "does not list the files the part needs");
  }
  const checksum = checksumOf(file);
  let bytesRead = 0;
  for await (const chunk of store.readFile(manifest, BACKUP_FILE_NAMES.log, BACKUP_CHUNK_BYTES)) {
    checksum.update(chunk);
    bytesRead += chunk.byteLength;
    pending = pending.byteLength === 0 ? chunk : Buffer.concat([pending, chunk]);
    let offset = 0;
    // Bounded: every pass consumes one whole frame of the bytes at hand.
    while (pending.byteLength - offset >= LOG_FRAME_HEADER_BYTES) {
      const length = new DataView(pending.buffer, pending.byteOffset + offset).getUint32(0);
      if (length > MAX_FRAME_BYTES) throw damaged(`announces an entry of ${length} bytes at entry ${expectedIndex}`);
      if (pending.byteLength - offset - LOG_FRAME_HEADER_BYTES < length) break;
      const start = offset + LOG_FRAME_HEADER_BYTES;
      let entry: Entry;
      try {
        entry = decodeEntry(pending.subarray(start, start + length), expectedIndex);
      } catch (error) {
        throw damaged(`holds a damaged entry ${expectedIndex}: ${(error as Error).message}`);
      }
      if (expectedIndex > manifest.log.lastIndex) throw damaged(`holds entries past ${manifest.log.lastIndex}`);
      yield entry;
      expectedIndex += 1;
      offset = start + length;
    }
    pending = pending.subarray(offset);
  }
  if (bytesRead !== file.sizeBytes || checksum.digest() !== checksum.expected)
    throw damaged("changed after it was verified");
  if (pending.byteLength > 0) throw damaged("ends inside an entry");
  if (expectedIndex !== manifest.log.lastIndex + 1) {
    throw damaged(`ends at entry ${expectedIndex - 1}, not at the checkpoint position ${manifest.log.lastIndex}`);
  }
}

/**
 * Verifies the part, then rebuilds the partition's engine from its snapshot and log: the partition's state at the
 * checkpoint position, exactly as the partition had it there.
 */
export async function rebuildEngine(store: BackupStore, manifest: BackupPartManifest): Promise<PartitionEngine> {
  await verifyPart(store, manifest);
  return rebuildVerifiedEngine(store, manifest);
}

/** `rebuildEngine` of a part `verifyPart` has checked already. */
export async function rebuildVerifiedEngine(
  store: BackupStore,
  manifest: BackupPartManifest,
): Promise<PartitionEngine> {
  return (await rebuildVerifiedState(store, manifest)).engine;
}

/**
 * `rebuildVerifiedEngine`, also answering the term of the entry at the checkpoint position (the snapshot's when the
 * log holds no entries), which a restore stores with the rebuilt state: one pass over the log gives both.
 */
export async function rebuildVerifiedState(
  store: BackupStore,
  manifest: BackupPartManifest,
): Promise<{ readonly engine: PartitionEngine; readonly term: number }> {
  const snapshot = await readPartSnapshot(store, manifest);
  const engine =
    snapshot === null ? new PartitionEngine({ partitionId: manifest.partitionId }) : PartitionEngine.restore(snapshot);
  if (engine.partitionId !== manifest.partitionId) {
    throw new BackupPartDamagedError(manifest, BACKUP_FILE_NAMES.snapshot, "holds another partition's state");
  }
  if (manifest.snapshot !== null && engine.lastAppliedIndex !== manifest.snapshot.index) {
    throw new BackupPartDamagedError(
      manifest,
      BACKUP_FILE_NAMES.snapshot,
      `holds the state at entry ${engine.lastAppliedIndex}, not at the snapshot's entry ${manifest.snapshot.index}`,
    );
  }
  let term = manifest.snapshot?.term ?? 0;
  for await (const entry of readPartEntries(store, manifest)) {
    if (entry.kind === "normal") engine.apply(entry.index, entry.data);
    else engine.markApplied(entry.index);
    term = entry.term;
  }
  return { engine, term };
}
