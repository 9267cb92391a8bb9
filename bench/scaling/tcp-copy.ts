/**
 * The physical limit of moving bytes between two processes on this machine: a file sent over a loopback TCP socket
 * and written to a file on the receiving side, synced to disk before the receiver acknowledges. Two processes, like
 * a partition leader and a joining replica, with nothing else in between (no framing, no checksums, no window).
 *
 * Beside it, the least a join can be in these two processes: the receiver also keeps every byte in memory it reads
 * into and rebuilds the partition's engine from those bytes as they arrive, as a joiner must, and the file is a real
 * engine snapshot. Still no framing, checksums, window, Raft or LMDB: what a join takes beyond this is the cost of its
 * protocol and storage, and what this takes beyond the plain copy is the cost of keeping and rebuilding the state.
 *
 *   node --import tsx bench/scaling/tcp-copy.ts receive <file>     prints `listening <port>`, takes one connection,
 *                                                                   writes what arrives to <file>, fsyncs, answers
 *                                                                   one byte, prints `received <bytes> <cpu ms>`
 *   node --import tsx bench/scaling/tcp-copy.ts send <port> <file>  sends <file>, waits for that byte, prints
 *                                                                   `sent <bytes> <ms> <cpu ms>` (ms: connect to
 *                                                                   answer; cpu ms: the processor time of the copy)
 *   node --import tsx bench/scaling/tcp-copy.ts serve <file>       prints `listening <port>`, sends <file> to the one
 *                                                                   connection it takes, waits for that byte, prints
 *                                                                   `sent <bytes> <ms> <cpu ms>` (ms: accept to answer)
 *   node --import tsx bench/scaling/tcp-copy.ts restore <port> <file> <messages>
 *                                                                   connects, reads what arrives into 1 MiB pieces of
 *                                                                   256 MiB regions (as the cluster transport reads
 *                                                                   snapshot chunks), writes each piece to <file> and
 *                                                                   gives it to an engine restore; then fsyncs, checks
 *                                                                   the engine holds <messages> messages, answers one
 *                                                                   byte, prints `received <bytes> <cpu ms>`
 *
 * The restoring receiver connects, rather than listens, because only a socket it creates can read into memory of its
 * choosing (`onread`): reads into Node's own buffers would cut the pieces at other places and cost a copy into them.
 */
import { closeSync, createReadStream, createWriteStream, fsyncSync, openSync, write } from "node:fs";
import { connect, createServer, type Socket } from "node:net";
import { performance } from "node:perf_hooks";
import { RetainedRegions } from "../../src/buffers/retained-regions.js";
import { PartitionEngine } from "../../src/cluster/engine/index.js";

/** Read and write size: the same 1 MiB as a snapshot chunk. */
const CHUNK_BYTES = 1024 * 1024;
/** Memory the restoring receiver reads into is allocated this much at a time, as the transport's regions are. */
const REGION_BYTES = 256 * 1024 * 1024;

function receive(file: string): void {
  const server = createServer({ allowHalfOpen: true }, (socket) => {
    server.close();
    // Processor time from the connection on: starting Node.js and loading this file are not the copy's.
    const cpuAtStart = process.cpuUsage();
    const output = createWriteStream(file, { highWaterMark: CHUNK_BYTES });
    let bytes = 0;
    socket.on("data", (chunk: Buffer) => {
      bytes += chunk.byteLength;
    });
    socket.pipe(output);
    output.on("finish", () => {
      const descriptor = openSync(file, "r+");
      fsyncSync(descriptor);
      closeSync(descriptor);
      socket.end("k", () => {
        const cpu = process.cpuUsage(cpuAtStart);
        console.log(`received ${bytes} ${((cpu.user + cpu.system) / 1000).toFixed(1)}`);
      });
    });
  });
  server.listen(0, "127.0.0.1", () => {
    const address = server.address();
    console.log(`listening ${typeof address === "object" && address !== null ? address.port : 0}`);
  });
}

function send(port: number, file: string): void {
  const startedAtMs = performance.now();
  const cpuAtStart = process.cpuUsage();
  const socket = connect({ port, host: "127.0.0.1", allowHalfOpen: true }, () => {
    sendFile(socket, file, startedAtMs, cpuAtStart);
  });
}

function serve(file: string): void {
  const server = createServer({ allowHalfOpen: true }, (socket) => {
    server.close();
    sendFile(socket, file, performance.now(), process.cpuUsage());
  });
  server.listen(0, "127.0.0.1", () => {
    const address = server.address();
    console.log(`listening ${typeof address === "object" && address !== null ? address.port : 0}`);
  });
}

/** Sends `file` over `socket`, waits for the receiver's byte and prints the copy's time and processor time. */
function sendFile(socket: Socket, file: string, startedAtMs: number, cpuAtStart: NodeJS.CpuUsage): void {
  let bytes = 0;
  const input = createReadStream(file, { highWaterMark: CHUNK_BYTES });
  input.on("data", (chunk) => {
    bytes += chunk.length;
  });
  input.pipe(socket);
  socket.once("data", () => {
    const cpu = process.cpuUsage(cpuAtStart);
    console.log(
      `sent ${bytes} ${(performance.now() - startedAtMs).toFixed(1)} ${((cpu.user + cpu.system) / 1000).toFixed(1)}`,
    );
    socket.destroy();
  });
}

/** See the module comment: receives a snapshot, keeps it, writes it and rebuilds the engine from it. */
function restore(port: number, file: string, messages: number): void {
  const descriptor = openSync(file, "w");
  const restorer = PartitionEngine.restorer();
  let cpuAtStart = process.cpuUsage();
  // The transport's own allocator, so that the restore keeps its messages where they were read (entry-slabs.ts).
  const regions = new RetainedRegions({ regionBytes: REGION_BYTES });
  let piece: Buffer = Buffer.alloc(0);
  let pieceFilledBytes = 0;
  let bytes = 0;
  let writesInFlight = 0;
  let ended = false;
  let failure: Error | null = null;
  const nextPiece = (): void => {
    // Touched before the first read into it, as the transport does (DEVELOPERS.md, "How the transport reads").
    piece = regions.allocate(CHUNK_BYTES).fill(0);
    pieceFilledBytes = 0;
  };
  const finishIfDone = (socket: Socket): void => {
    if (!ended || writesInFlight > 0) return;
    if (failure !== null) throw failure;
    fsyncSync(descriptor);
    closeSync(descriptor);
    const engine = restorer.finish();
    if (engine.bufferedMessageCount !== messages) {
      throw new Error(`restored ${engine.bufferedMessageCount} messages of ${messages}`);
    }
    socket.end("k", () => {
      const cpu = process.cpuUsage(cpuAtStart);
      console.log(`received ${bytes} ${((cpu.user + cpu.system) / 1000).toFixed(1)}`);
    });
  };
  /** Writes the filled part of the piece and gives it to the restore, which may keep its memory. */
  const handOver = (socket: Socket): void => {
    if (pieceFilledBytes === 0) return;
    const filled = piece.subarray(0, pieceFilledBytes);
    writesInFlight += 1;
    write(descriptor, filled, 0, filled.length, bytes - filled.length, (error) => {
      writesInFlight -= 1;
      if (error !== null) failure ??= error;
      finishIfDone(socket);
    });
    restorer.pushGiven(filled);
  };
  nextPiece();
  const socket = connect({
    port,
    host: "127.0.0.1",
    allowHalfOpen: true,
    onread: {
      buffer: () => piece.subarray(pieceFilledBytes),
      callback: (byteCount) => {
        pieceFilledBytes += byteCount;
        bytes += byteCount;
        if (pieceFilledBytes === piece.length) {
          handOver(socket);
          nextPiece();
        }
        return true;
      },
    },
  });
  socket.once("connect", () => {
    // Processor time from the connection on: starting Node.js and loading this file are not the copy's.
    cpuAtStart = process.cpuUsage();
  });
  socket.once("end", () => {
    handOver(socket);
    ended = true;
    finishIfDone(socket);
  });
}

const [mode, ...rest] = process.argv.slice(2);
if (mode === "receive" && rest.length === 1) {
  receive(rest[0] as string);
} else if (mode === "send" && rest.length === 2) {
  send(Number(rest[0]), rest[1] as string);
} else if (mode === "serve" && rest.length === 1) {
  serve(rest[0] as string);
} else if (mode === "restore" && rest.length === 3) {
  restore(Number(rest[0]), rest[1] as string, Number(rest[2]));
} else {
  console.error(
    "usage: tcp-copy.ts receive <file> | send <port> <file> | serve <file> | restore <port> <file> <messages>",
  );
  process.exitCode = 2;
}
