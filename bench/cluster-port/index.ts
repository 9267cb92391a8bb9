/**
 * What unauthenticated connections can make a broker's cluster transport hold (issue 18, item 8). A transport runs in
 * a child process; this process opens `FLOWPLANE_BENCH_CONNECTIONS` connections (default 40) to it, each announcing a
 * frame of 16 MiB and streaming its body as fast as the socket takes it, for `FLOWPLANE_BENCH_DURATION_MS` (default
 * 4,000). It prints the most bytes the transport read from one connection and its peak memory. No peer: the number
 * to compare is the one before the handshake existed (each connection read to 16 MiB).
 */
import { spawn } from "node:child_process";
import { connect } from "node:net";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

const ANNOUNCED_FRAME_BYTES = 16 * 1024 * 1024 - 1;
const WRITE_BYTES = 64 * 1024;

/** Streams one announced frame's body until the other side closes the connection or the time is up. */
function attack(port: number, durationMs: number): Promise<{ handedToKernelBytes: number; closedByServer: boolean }> {
  return new Promise((resolve) => {
    const socket = connect({ host: "127.0.0.1", port });
    const body = Buffer.alloc(WRITE_BYTES, 0x61);
    let handedToKernelBytes = 0;
    let settled = false;
    const finish = (closedByServer: boolean): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      resolve({ handedToKernelBytes, closedByServer });
    };
    const timer = setTimeout(() => finish(false), durationMs);
    socket.on("error", () => undefined);
    socket.on("data", () => undefined);
    socket.on("close", () => finish(true));
    socket.on("connect", () => {
      const header = Buffer.alloc(4);
      header.writeUInt32BE(ANNOUNCED_FRAME_BYTES, 0);
      socket.write(header);
      const pump = (): void => {
        while (!socket.destroyed && handedToKernelBytes < ANNOUNCED_FRAME_BYTES) {
          handedToKernelBytes += body.length;
          if (!socket.write(body)) {
            socket.once("drain", pump);
            return;
          }
        }
      };
      pump();
    });
  });
}

function mebibytes(bytes: number): string {
  return (bytes / 1024 / 1024).toFixed(1);
}

/** Runs the attack against a transport in a child process and prints what the transport held. */
export async function run(): Promise<void> {
  const connections = Number(process.env.FLOWPLANE_BENCH_CONNECTIONS ?? 40);
  const durationMs = Number(process.env.FLOWPLANE_BENCH_DURATION_MS ?? 4_000);
  const child = spawn(
    process.execPath,
    ["--import", "tsx", join(dirname(fileURLToPath(import.meta.url)), "transport-process.ts")],
    { stdio: ["pipe", "pipe", "inherit"] },
  );
  const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  const port = Number((await lines.next()).value);
  const results = await Promise.all(Array.from({ length: connections }, () => attack(port, durationMs)));
  child.stdin.write("report\n");
  const report = JSON.parse(String((await lines.next()).value)) as {
    largestReadBytes: number;
    totalReadBytes: number;
    baselineRssBytes: number;
    peakRssBytes: number;
    baselineArrayBufferBytes: number;
    peakArrayBufferBytes: number;
    handshakes: unknown;
  };
  console.log(`${connections} unauthenticated connections, each announcing a 16 MiB frame, for ${durationMs} ms:`);
  console.log(`  closed by the transport: ${results.filter((result) => result.closedByServer).length}`);
  console.log(`  most bytes read from one connection: ${report.largestReadBytes}`);
  console.log(`  bytes read from all of them: ${report.totalReadBytes}`);
  console.log(
    `  transport process RSS: ${mebibytes(report.baselineRssBytes)} -> peak ${mebibytes(report.peakRssBytes)} MiB`,
  );
  console.log(
    `  array buffers: ${mebibytes(report.baselineArrayBufferBytes)} -> peak ${mebibytes(report.peakArrayBufferBytes)} MiB`,
  );
  console.log(`  handshakes: ${JSON.stringify(report.handshakes)}`);
}
