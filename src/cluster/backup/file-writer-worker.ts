/**
 * The backup file writer's thread (see file-writer-thread.ts): it hashes, writes and syncs the files of backup parts
 * off the broker's event loop, at a lower scheduling priority than the broker, so that hashing, write system calls
 * and syncs never delay the broker's Raft and apply work. It imports only Node.js modules, so that it starts fast.
 *
 * Every chunk it receives was moved to it (not copied); once written, the chunk's memory goes back to the broker's
 * thread for reuse. Messages of one file are handled in the order they were sent.
 */
import { createHash, type Hash } from "node:crypto";
import {
  closeSync,
  fdatasyncSync,
  fstatSync,
  fsyncSync,
  openSync,
  readlinkSync,
  renameSync,
  rmSync,
  writeSync,
} from "node:fs";
import { getPriority, setPriority } from "node:os";
import { parentPort } from "node:worker_threads";
import type { FileWriterReply, FileWriterRequest } from "./file-writer-thread.js";

/** Niceness added to this thread's: the broker's own threads go first whenever both want a core. */
const NICENESS_INCREMENT = 10;

/**
 * Bytes written between two syncs of the file's data while it is written. Without them a part's whole file would
 * reach the disk in one flush at its end, and the brokers' journal writes (which wait for the disk) would queue
 * behind it; several small flushes let them through in between.
 */
const SYNC_INTERVAL_BYTES = 8 * 1024 * 1024;

/** One file being written. */
interface OpenFile {
  readonly descriptor: number;
  readonly temporaryPath: string;
  readonly hash: Hash;
  sizeBytes: number;
  unsyncedBytes: number;
  /** Why the file can no longer be finished (a write failed); every later write is skipped. */
  failure: string | null;
}

/** Lowers this thread's scheduling priority (Linux: niceness applies per thread); elsewhere it stays as it is. */
function lowerThreadPriority(): void {
  try {
    const systemThreadId = Number(readlinkSync("/proc/thread-self").split("/").at(-1));
    if (!Number.isInteger(systemThreadId) || systemThreadId <= 0) return;
    setPriority(systemThreadId, Math.min(19, getPriority(systemThreadId) + NICENESS_INCREMENT));
  } catch {
    // Not Linux, or not permitted: the thread competes with the broker at the same priority.
  }
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

function closeAndRemove(file: OpenFile): void {
  try {
    closeSync(file.descriptor);
  } finally {
    rmSync(file.temporaryPath, { force: true });
  }
}

function syncDirectory(directory: string): void {
  const descriptor = openSync(directory, "r");
  try {
    fsyncSync(descriptor);
  } finally {
    closeSync(descriptor);
  }
}

function writeChunk(file: OpenFile, bytes: Uint8Array): void {
  file.hash.update(bytes);
  // Bounded: writes until every byte is written (a short write leaves the rest for the next pass).
  for (let offset = 0; offset < bytes.byteLength; ) {
    offset += writeSync(file.descriptor, bytes, offset, bytes.byteLength - offset);
  }
  file.sizeBytes += bytes.byteLength;
  file.unsyncedBytes += bytes.byteLength;
  if (file.unsyncedBytes >= SYNC_INTERVAL_BYTES) {
    fdatasyncSync(file.descriptor);
    file.unsyncedBytes = 0;
  }
}

/**
 * Syncs the file, checks that the synced size is the count of bytes written, and renames it into place (then syncs
 * the directory); the temporary file is removed on any failure.
 */
function finishFile(file: OpenFile, name: string, targetPath: string, directory: string): FileWriterReply {
  try {
    if (file.failure !== null) throw new Error(file.failure);
    fsyncSync(file.descriptor);
    // The file is not read back and hashed again: right after the sync that read would come from the page cache,
    // not the disk, so it would only repeat the hash of the same bytes. The checksum is that of the bytes handed to
    // the file, every write is completed (short writes are continued), and the synced size must match their count;
    // the bytes on the disk are checked against the manifest's SHA-256 whenever a part is verified or restored.
    const storedBytes = fstatSync(file.descriptor).size;
    if (storedBytes !== file.sizeBytes) {
      throw new Error(`${name} holds ${storedBytes} bytes in the backup store, not the ${file.sizeBytes} written`);
    }
    closeSync(file.descriptor);
    renameSync(file.temporaryPath, targetPath);
    syncDirectory(directory);
    return { kind: "finished", sizeBytes: file.sizeBytes, sha256: file.hash.digest("hex") };
  } catch (error) {
    try {
      closeAndRemove(file);
    } catch {
      // Already closed: the temporary file is gone or is removed by the broker's thread when it aborts.
    }
    return { kind: "failed", message: messageOf(error) };
  }
}

/** Serves the broker's thread: see the module comment and `FileWriterRequest`. */
function serve(): void {
  const port = parentPort;
  if (port === null) throw new Error("the backup file writer runs in a worker thread");
  lowerThreadPriority();
  const files = new Map<number, OpenFile>();
  const reply = (fileId: number, message: FileWriterReply, transfer: ArrayBuffer[] = []): void => {
    port.postMessage({ fileId, ...message }, transfer);
  };
  port.on("message", (request: FileWriterRequest) => {
    const { fileId } = request;
    switch (request.kind) {
      case "open": {
        try {
          const descriptor = openSync(request.temporaryPath, "wx", request.mode);
          files.set(fileId, {
            descriptor,
            temporaryPath: request.temporaryPath,
            hash: createHash("sha256"),
            sizeBytes: 0,
            unsyncedBytes: 0,
            failure: null,
          });
          reply(fileId, { kind: "opened" });
        } catch (error) {
          reply(fileId, { kind: "failed", message: messageOf(error) });
        }
        return;
      }
      case "write": {
        const file = files.get(fileId);
        if (file !== undefined && file.failure === null) {
          try {
            writeChunk(file, new Uint8Array(request.buffer, request.offset, request.sizeBytes));
          } catch (error) {
            file.failure = messageOf(error);
          }
        }
        // The chunk's memory goes back either way: the broker's thread counts it as no longer in flight. A write for a
        // file this thread does not hold is a protocol error, reported as the file's failure, never as written.
        const failure = file === undefined ? `file ${fileId} is not open in the writer thread` : file.failure;
        reply(fileId, { kind: "written", buffer: request.buffer, failure }, [request.buffer]);
        return;
      }
      case "finish": {
        const file = files.get(fileId);
        files.delete(fileId);
        if (file === undefined) reply(fileId, { kind: "failed", message: `${request.name} is not open` });
        else reply(fileId, finishFile(file, request.name, request.targetPath, request.directory));
        return;
      }
      case "abort": {
        const file = files.get(fileId);
        files.delete(fileId);
        try {
          if (file !== undefined) closeAndRemove(file);
        } catch {
          // The broker's thread removes the temporary file as well once the abort is answered.
        }
        reply(fileId, { kind: "aborted" });
        return;
      }
    }
  });
}

serve();
