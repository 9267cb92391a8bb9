/**
 * The backup file writer's thread (see file-writer-thread.ts): it checksums, writes and syncs the files of backup
 * parts off the broker's event loop, at a lower scheduling priority than the broker, so that checksums, write system
 * calls and syncs never delay the broker's Raft and apply work. It imports only Node.js modules and
 * file-writer-disk-file.ts (which adds only the CRC-32C addon), so that it starts fast.
 *
 * Every chunk it receives was moved to it (not copied); once written, the chunk's memory goes back to the broker's
 * thread for reuse. Messages are handled one after the other in the order they were sent, also while one waits for a
 * file's background sync (file-writer-disk-file.ts): a file's chunks are written in order and its finish follows them.
 */
import { readlinkSync } from "node:fs";
import { getPriority, setPriority } from "node:os";
import { parentPort } from "node:worker_threads";
import { DiskFile } from "./file-writer-disk-file.js";
import type { FileWriterReply, FileWriterRequest } from "./file-writer-thread.js";

/** Niceness added to this thread's: the broker's own threads go first whenever both want a core. */
const NICENESS_INCREMENT = 10;

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

type Reply = (fileId: number, message: FileWriterReply, transfer?: ArrayBuffer[]) => void;

/** Handles one request of the broker's thread (see `FileWriterRequest`); never rejects. */
async function handle(request: FileWriterRequest, files: Map<number, DiskFile>, reply: Reply): Promise<void> {
  const { fileId } = request;
  switch (request.kind) {
    case "open": {
      try {
        files.set(fileId, DiskFile.open(request.temporaryPath, request.mode));
        reply(fileId, { kind: "opened" });
      } catch (error) {
        reply(fileId, { kind: "failed", message: messageOf(error) });
      }
      return;
    }
    case "write": {
      const file = files.get(fileId);
      let bytes: Uint8Array | undefined;
      try {
        bytes = new Uint8Array(request.buffer, request.offset, request.sizeBytes);
      } catch (error) {
        // A request whose range does not fit its memory fails its file, not the thread (and every other file).
        if (file !== undefined) file.failure ??= `a write's bytes are out of range: ${messageOf(error)}`;
      }
      if (bytes !== undefined) await file?.write(bytes);
      // The chunk's memory goes back either way: the broker's thread counts it as no longer in flight. A write for a
      // file this thread does not hold is a protocol error, reported as the file's failure, never as written.
      const failure = file === undefined ? `file ${fileId} is not open in the writer thread` : file.failure;
      reply(fileId, { kind: "written", buffer: request.buffer, failure }, [request.buffer]);
      return;
    }
    case "finish": {
      const file = files.get(fileId);
      files.delete(fileId);
      if (file === undefined) {
        reply(fileId, { kind: "failed", message: `${request.name} is not open` });
        return;
      }
      try {
        const finished = await file.finish(request.name, request.targetPath, request.directory, request.expectedCrc32c);
        reply(fileId, { kind: "finished", ...finished });
      } catch (error) {
        reply(fileId, { kind: "failed", message: messageOf(error) });
      }
      return;
    }
    case "abort": {
      const file = files.get(fileId);
      files.delete(fileId);
      try {
        await file?.closeAndRemove();
      } catch {
        // The broker's thread removes the temporary file as well once the abort is answered.
      }
      reply(fileId, { kind: "aborted" });
      return;
    }
  }
}

/** Serves the broker's thread: see the module comment and `FileWriterRequest`. */
function serve(): void {
  const port = parentPort;
  if (port === null) throw new Error("the backup file writer runs in a worker thread");
  lowerThreadPriority();
  const files = new Map<number, DiskFile>();
  const reply: Reply = (fileId, message, transfer = []) => {
    port.postMessage({ fileId, ...message }, transfer);
  };
  let handled: Promise<void> = Promise.resolve();
  port.on("message", (request: FileWriterRequest) => {
    handled = handled.then(() => handle(request, files, reply));
  });
}

serve();
