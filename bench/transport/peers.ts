/**
 * The two processes of the transport benchmark, each run as its own child (`bench/transport/index.ts` starts them).
 *
 *   transport-receive <count>     a cluster transport (node 2) that keeps every message's payload and answers each
 *                                 one; prints `listening <port>`, then `received <bytes> <ms> <cpu ms>` from its first
 *                                 message to message <count>; runs until it is stopped
 *   transport-send <port> <count> a cluster transport (node 1) that sends <count> messages of 1 MiB, at most 16
 *                                 unanswered at a time, as a leader sends a snapshot's chunks
 *   socket-receive                a plain TCP server that keeps every read Node hands it, the least a Node.js
 *                                 process can do to receive the same bytes; prints the same two lines, the second
 *                                 when the sender has ended
 *   socket-send <port> <count>    writes <count> MiB to it as fast as the socket takes them
 *
 * The cluster secret comes from FLOWPLANE_BENCH_CLUSTER_SECRET (hex), the same in both processes.
 */
import { connect, createServer, type Socket } from "node:net";
import { performance } from "node:perf_hooks";
import { ClusterCredentials, ClusterTransport } from "../../src/cluster/transport/index.js";

/** Bytes of one message: a snapshot chunk's size. */
export const MESSAGE_BYTES = 1024 * 1024;

/** Messages sent and not yet answered, as a snapshot transfer's window. */
const WINDOW_MESSAGES = 16;

type ChunkMessage = { readonly sequence: number; readonly data: Uint8Array; readonly replyPort: number };
type Answer = { readonly answered: number };

/** A cluster transport of node `nodeId` listening on a free loopback port, with the shared secret. */
async function listeningTransport(
  nodeId: number,
): Promise<{ transport: ClusterTransport<ChunkMessage | Answer>; port: number }> {
  const secret = process.env.FLOWPLANE_BENCH_CLUSTER_SECRET;
  if (secret === undefined) throw new Error("FLOWPLANE_BENCH_CLUSTER_SECRET is not set");
  const credentials = ClusterCredentials.fromSecret(Buffer.from(secret, "hex"));
  const transport = new ClusterTransport<ChunkMessage | Answer>({ nodeId, host: "127.0.0.1", port: 0, credentials });
  const { port } = await transport.listen();
  return { transport, port };
}

/** Measures from the first byte received to the last: what the receiver spent on receiving, not on starting. */
class ReceiveClock {
  private startedAtMs = 0;
  private cpuAtStart = process.cpuUsage();
  private bytes = 0;

  received(byteCount: number): void {
    if (this.bytes === 0) {
      this.startedAtMs = performance.now();
      this.cpuAtStart = process.cpuUsage();
    }
    this.bytes += byteCount;
  }

  report(): void {
    const cpu = process.cpuUsage(this.cpuAtStart);
    const elapsedMs = performance.now() - this.startedAtMs;
    console.log(`received ${this.bytes} ${elapsedMs.toFixed(1)} ${((cpu.user + cpu.system) / 1000).toFixed(1)}`);
  }
}

async function transportReceive(count: number): Promise<void> {
  const { transport, port } = await listeningTransport(2);
  const kept: Uint8Array[] = [];
  const clock = new ReceiveClock();
  transport.onMessage((from, message) => {
    if (!("data" in message)) return;
    if (kept.length === 0) transport.setPeerAddress(from, { host: "127.0.0.1", port: message.replyPort });
    clock.received(message.data.byteLength);
    kept.push(message.data);
    transport.send(from, { answered: message.sequence });
    if (kept.length === count) clock.report();
  });
  console.log(`listening ${port}`);
}

async function transportSend(port: number, count: number): Promise<void> {
  const { transport, port: ownPort } = await listeningTransport(1);
  transport.setPeerAddress(2, { host: "127.0.0.1", port });
  const data = Buffer.alloc(MESSAGE_BYTES, 0x5a);
  let sent = 0;
  let answered = -1;
  const sendWhatTheWindowAllows = (): void => {
    while (sent < count && sent - answered <= WINDOW_MESSAGES) {
      if (!transport.send(2, { sequence: sent, data, replyPort: ownPort })) throw new Error("a message was dropped");
      sent += 1;
    }
  };
  transport.onMessage((_from, message) => {
    if (!("answered" in message)) return;
    answered = Math.max(answered, message.answered);
    if (answered === count - 1) {
      void transport.close().then(() => process.exit(0));
      return;
    }
    sendWhatTheWindowAllows();
  });
  sendWhatTheWindowAllows();
}

function socketReceive(): void {
  const kept: Buffer[] = [];
  const clock = new ReceiveClock();
  const server = createServer((socket: Socket) => {
    server.close();
    socket.on("data", (chunk: Buffer) => {
      clock.received(chunk.byteLength);
      kept.push(chunk);
    });
    socket.on("end", () => {
      clock.report();
      socket.end();
    });
  });
  server.listen(0, "127.0.0.1", () => {
    const address = server.address();
    console.log(`listening ${typeof address === "object" && address !== null ? address.port : 0}`);
  });
}

function socketSend(port: number, count: number): void {
  const data = Buffer.alloc(MESSAGE_BYTES, 0x5a);
  const socket = connect({ port, host: "127.0.0.1", allowHalfOpen: true }, () => {
    let sent = 0;
    const write = (): void => {
      while (sent < count) {
        sent += 1;
        if (!socket.write(data)) {
          socket.once("drain", write);
          return;
        }
      }
      socket.end();
    };
    write();
  });
  socket.on("close", () => process.exit(0));
  socket.resume();
}

const [mode, ...rest] = process.argv.slice(2);
if (mode === "transport-receive" && rest.length === 1) {
  await transportReceive(Number(rest[0]));
} else if (mode === "transport-send" && rest.length === 2) {
  await transportSend(Number(rest[0]), Number(rest[1]));
} else if (mode === "socket-receive") {
  socketReceive();
} else if (mode === "socket-send" && rest.length === 2) {
  socketSend(Number(rest[0]), Number(rest[1]));
} else {
  console.error(
    "usage: peers.ts transport-receive <count> | transport-send <port> <count> | socket-receive | socket-send <port> <count>",
  );
  process.exitCode = 2;
}
