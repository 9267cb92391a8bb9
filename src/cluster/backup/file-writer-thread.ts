/**
 * Writes the files of backup parts on a worker thread (file-writer-worker.ts), so that their checksums, write system
 * calls and syncs cost the broker's event loop nothing but handing each chunk over. Chunks are moved to the thread,
 * not copied (their memory comes back for reuse once written), and at most `MAX_IN_FLIGHT_BYTES` of a file are on
 * their way at once: `write` waits beyond that, which holds the reader back and bounds memory.
 *
 * One thread serves every file of a store; it starts with the first file and stops once no file was open for
 * `idleMs`. A thread that fails or exits fails every file it had open, with the reason, and the next file starts a
 * new thread: a backup never waits on a thread that is gone.
 */
import { rm } from "node:fs/promises";
import type { Worker } from "node:worker_threads";
import { startThread } from "../../threads/start-thread.js";
import { type BackupFileWriter, fileChecksum, type WrittenBackupFile } from "./store.js";

/** What the broker's thread asks of the writer thread, about file `fileId`. */
export type FileWriterRequest = { readonly fileId: number } & (
  | { readonly kind: "open"; readonly temporaryPath: string; readonly mode: number }
  | { readonly kind: "write"; readonly buffer: ArrayBuffer; readonly offset: number; readonly sizeBytes: number }
  | {
      readonly kind: "finish";
      readonly name: string;
      readonly targetPath: string;
      readonly directory: string;
      /** The CRC-32C the bytes must have, or null. */
      readonly expectedCrc32c: number | null;
    }
  | { readonly kind: "abort" }
);

/** What the writer thread answers (with the `fileId` of the request). */
export type FileWriterReply =
  | { readonly kind: "opened" }
  /** A chunk was written (or skipped after an earlier failure, named); its memory comes back. */
  | { readonly kind: "written"; readonly buffer: ArrayBuffer; readonly failure: string | null }
  | { readonly kind: "finished"; readonly sizeBytes: number; readonly crc32c: number }
  | { readonly kind: "failed"; readonly message: string }
  | { readonly kind: "aborted" };

/** Bytes of one file handed to the thread and not yet written, at most (beyond them `write` waits). */
export const MAX_IN_FLIGHT_BYTES = 4 * 1024 * 1024;

/** Smallest buffer `buffer` allocates, so that a recycled one fits the next chunk of about the same size. */
const MIN_BUFFER_BYTES = 1024 * 1024 + 256 * 1024;

/** Written chunks' buffers kept per file for reuse. */
const MAX_FREE_BUFFERS = 4;

/** How long the thread stays without open files before it stops, by default. */
const DEFAULT_IDLE_MS = 5_000;

/**
 * The worker module next to this one: the compiled product's `.js`, or the sources' `.ts` (tests, benchmarks, the
 * command line under tsx).
 */
function workerModule(): URL {
  const extension = import.meta.url.endsWith(".ts") ? "ts" : "js";
  return new URL(`./file-writer-worker.${extension}`, import.meta.url);
}

interface Waiter<Value> {
  readonly resolve: (value: Value) => void;
  readonly reject: (error: Error) => void;
}

/** The broker thread's side of one open file. */
class ThreadFile {
  inFlightBytes = 0;
  failure: Error | null = null;
  readonly freeBuffers: ArrayBuffer[] = [];
  /** Buffers `buffer` handed out or took back: the file's own, moved to the thread whatever part of them is used. */
  readonly ownBuffers = new WeakSet<ArrayBuffer>();
  /** The caller of `write` waiting for room (one at a time: the writer awaits each write). */
  room: Waiter<void> | null = null;
  /** The caller waiting for the answer to open, finish or abort. */
  control: Waiter<FileWriterReply> | null = null;

  constructor(
    readonly fileId: number,
    readonly name: string,
  ) {}

  fail(error: Error): void {
    this.failure ??= error;
    this.room?.reject(this.failure);
    this.room = null;
    this.control?.reject(this.failure);
    this.control = null;
  }
}

/** Options of `FileWriterThread`. */
export interface FileWriterThreadOptions {
  /** How long the thread stays without open files before it stops (default 5 s). */
  readonly idleMs?: number;
}

/** See the module comment. */
export class FileWriterThread {
  private worker: Worker | null = null;
  private readonly files = new Map<number, ThreadFile>();
  private nextFileId = 1;
  private idleTimer: NodeJS.Timeout | null = null;
  private readonly idleMs: number;
  /** Whether the thread runs even without open files (`keepRunning`). */
  private kept = false;

  constructor(options: FileWriterThreadOptions = {}) {
    this.idleMs = options.idleMs ?? DEFAULT_IDLE_MS;
  }

  /** Whether a thread runs now. */
  get running(): boolean {
    return this.worker !== null;
  }

  /**
   * Creates `temporaryPath` (mode `mode`, failing when it exists) and answers a writer whose `finish` syncs it,
   * checks its size and renames it to `targetPath` in `directory` (then syncs the directory).
   */
  async createFile(
    name: string,
    paths: { readonly temporaryPath: string; readonly targetPath: string; readonly directory: string },
    mode: number,
  ): Promise<BackupFileWriter> {
    const worker = this.start();
    const file = new ThreadFile(this.nextFileId++, name);
    this.files.set(file.fileId, file);
    const ask = (request: FileWriterRequest): Promise<FileWriterReply> =>
      new Promise((resolve, reject) => {
        // A file that failed still hears finish and abort, so that the thread closes and removes it; only a thread
        // that is gone is not asked.
        if (this.worker !== worker) {
          reject(file.failure ?? new Error("the backup file writer thread stopped"));
          return;
        }
        file.control = { resolve, reject };
        worker.postMessage(request);
      });
    let opened: FileWriterReply;
    try {
      opened = await ask({ fileId: file.fileId, kind: "open", temporaryPath: paths.temporaryPath, mode });
    } catch (error) {
      // The thread died, perhaps after it created the file: nothing else would remove it. Its name is this call's own
      // random one, so no other writer's file goes with it.
      this.close(file);
      await rm(paths.temporaryPath, { force: true }).catch(() => undefined);
      throw error;
    }
    if (opened.kind !== "opened") {
      this.close(file);
      throw new Error(opened.kind === "failed" ? opened.message : `${name} could not be created`);
    }
    return {
      buffer: (sizeBytes) => {
        // Bounded: drops at most MAX_FREE_BUFFERS buffers too small for the chunk.
        for (let free = file.freeBuffers.pop(); free !== undefined; free = file.freeBuffers.pop()) {
          if (free.byteLength >= sizeBytes) return new Uint8Array(free, 0, sizeBytes);
        }
        const allocated = new ArrayBuffer(Math.max(sizeBytes, MIN_BUFFER_BYTES));
        file.ownBuffers.add(allocated);
        return new Uint8Array(allocated, 0, sizeBytes);
      },
      write: async (bytes) => {
        if (file.failure !== null) throw file.failure;
        if (bytes.byteLength === 0) return;
        // The bytes' memory moves to the thread when it is the file's own or the bytes are most of it; a small view
        // of a large buffer (or shared memory) is copied instead, so that moving it takes no more than the chunk.
        const movable =
          bytes.buffer instanceof ArrayBuffer &&
          (file.ownBuffers.has(bytes.buffer) || bytes.byteLength * 2 >= bytes.buffer.byteLength);
        const buffer = movable ? (bytes.buffer as ArrayBuffer) : new Uint8Array(bytes).buffer;
        const offset = movable ? bytes.byteOffset : 0;
        file.inFlightBytes += buffer.byteLength;
        worker.postMessage(
          {
            fileId: file.fileId,
            kind: "write",
            buffer,
            offset,
            sizeBytes: bytes.byteLength,
          } satisfies FileWriterRequest,
          [buffer],
        );
        // Bounded: every answer of the thread lowers the bytes in flight, or fails the file.
        while (file.inFlightBytes > MAX_IN_FLIGHT_BYTES) {
          await new Promise<void>((resolve, reject) => {
            file.room = { resolve, reject };
          });
        }
      },
      finish: async (expectedCrc32c?: number): Promise<WrittenBackupFile> => {
        try {
          const reply = await ask({
            fileId: file.fileId,
            kind: "finish",
            name,
            ...paths,
            expectedCrc32c: expectedCrc32c ?? null,
          });
          if (reply.kind === "failed") throw new Error(reply.message);
          if (reply.kind !== "finished") throw new Error(`${name} could not be finished`);
          return { name, sizeBytes: reply.sizeBytes, crc32c: fileChecksum(reply.crc32c) };
        } catch (error) {
          // A thread that failed the file removed it; one that died before the rename cannot. The file's own error
          // is what the caller must see, not one of this removal.
          await rm(paths.temporaryPath, { force: true }).catch(() => undefined);
          throw error;
        } finally {
          this.close(file);
        }
      },
      abort: async () => {
        try {
          await ask({ fileId: file.fileId, kind: "abort" });
        } catch {
          // The thread is gone or the file failed: the temporary file is removed below either way.
        } finally {
          this.close(file);
        }
        await rm(paths.temporaryPath, { force: true });
      },
    };
  }

  /**
   * Starts the thread now and keeps it running without open files (it does not keep the process alive then), so
   * that the first file of a backup does not wait for a thread to start. A thread that fails is started again with
   * the next file.
   */
  keepRunning(): void {
    this.kept = true;
    this.start();
    this.idle();
  }

  /** Stops the thread now; the files it had open fail (for tests and shutdown). */
  async terminate(): Promise<void> {
    await this.worker?.terminate();
  }

  private start(): Worker {
    if (this.idleTimer !== null) clearTimeout(this.idleTimer);
    this.idleTimer = null;
    if (this.worker !== null) {
      this.worker.ref();
      return this.worker;
    }
    const worker = startThread(workerModule());
    this.worker = worker;
    worker.on("message", (message: FileWriterReply & { readonly fileId: number }) => this.receive(message));
    worker.on("error", (error) => this.stopped(worker, `the backup file writer thread failed: ${error.message}`));
    worker.on("exit", (code) => this.stopped(worker, `the backup file writer thread exited with code ${code}`));
    return worker;
  }

  private receive(message: FileWriterReply & { readonly fileId: number }): void {
    const file = this.files.get(message.fileId);
    if (file === undefined) return;
    if (message.kind === "written") {
      file.inFlightBytes -= message.buffer.byteLength;
      if (file.freeBuffers.length < MAX_FREE_BUFFERS) {
        file.freeBuffers.push(message.buffer);
        file.ownBuffers.add(message.buffer);
      }
      if (message.failure !== null) file.fail(new Error(message.failure));
      if (file.inFlightBytes <= MAX_IN_FLIGHT_BYTES) {
        file.room?.resolve();
        file.room = null;
      }
      return;
    }
    const control = file.control;
    file.control = null;
    control?.resolve(message);
  }

  /** A thread that failed or exited fails every file it had open; the next file starts another. */
  private stopped(worker: Worker, reason: string): void {
    if (this.worker !== worker) return;
    this.worker = null;
    const error = new Error(reason);
    for (const file of this.files.values()) file.fail(error);
    this.files.clear();
    void worker.terminate();
  }

  private close(file: ThreadFile): void {
    this.files.delete(file.fileId);
    this.idle();
  }

  /** Once no file is open: the thread no longer keeps the process alive, and stops after a while unless kept. */
  private idle(): void {
    if (this.files.size > 0 || this.worker === null) return;
    const worker = this.worker;
    worker.unref();
    if (this.kept) return;
    this.idleTimer = setTimeout(() => {
      this.idleTimer = null;
      if (this.worker === worker && this.files.size === 0) {
        this.worker = null;
        void worker.terminate();
      }
    }, this.idleMs);
    this.idleTimer.unref();
  }
}
