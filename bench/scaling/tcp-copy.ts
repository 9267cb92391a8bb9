/**
 * The physical limit of moving bytes between two processes on this machine: a file sent over a loopback TCP socket
 * and written to a file on the receiving side, synced to disk before the receiver acknowledges. Two processes, like
 * a partition leader and a joining replica, with nothing else in between (no framing, no checksums, no window).
 *
 *   node --import tsx bench/scaling/tcp-copy.ts receive <file>     prints `listening <port>`, takes one connection,
 *                                                                   writes what arrives to <file>, fsyncs, answers
 *                                                                   one byte, prints `received <bytes> <cpu ms>`
 *   node --import tsx bench/scaling/tcp-copy.ts send <port> <file>  sends <file>, waits for that byte, prints
 *                                                                   `sent <bytes> <ms> <cpu ms>` (ms: connect to
 *                                                                   answer; cpu ms: the processor time of the copy)
 */
import { closeSync, createReadStream, createWriteStream, fsyncSync, openSync } from "node:fs";
import { connect, createServer } from "node:net";
import { performance } from "node:perf_hooks";

/** Read and write size: the same 1 MiB as a snapshot chunk. */
const CHUNK_BYTES = 1024 * 1024;

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
  let bytes = 0;
  const socket = connect({ port, host: "127.0.0.1", allowHalfOpen: true }, () => {
    const input = createReadStream(file, { highWaterMark: CHUNK_BYTES });
    input.on("data", (chunk) => {
      bytes += chunk.length;
    });
    input.pipe(socket);
  });
  socket.once("data", () => {
    const cpu = process.cpuUsage(cpuAtStart);
    console.log(
      `sent ${bytes} ${(performance.now() - startedAtMs).toFixed(1)} ${((cpu.user + cpu.system) / 1000).toFixed(1)}`,
    );
    socket.destroy();
  });
}

const [mode, ...rest] = process.argv.slice(2);
if (mode === "receive" && rest.length === 1) {
  receive(rest[0] as string);
} else if (mode === "send" && rest.length === 2) {
  send(Number(rest[0]), rest[1] as string);
} else {
  console.error("usage: tcp-copy.ts receive <file> | send <port> <file>");
  process.exitCode = 2;
}
