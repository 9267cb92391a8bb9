/**
 * The attacked side of `npm run bench -- cluster-port`: one ClusterTransport in a process of its own, so that its
 * memory is measured apart from the attacker's. It prints its port, samples its memory and the bytes read from each
 * inbound socket while connections arrive, and prints what it held once a line arrives on its standard input.
 */
import type { Server, Socket } from "node:net";
import { ClusterCredentials, ClusterTransport } from "../../src/cluster/transport/index.js";
import { generateClusterSecret } from "../../src/config/cluster-secret.js";

const credentials = ClusterCredentials.fromSecret(Buffer.from(generateClusterSecret(), "base64"));
const transport = new ClusterTransport({ nodeId: 0, host: "127.0.0.1", port: 0, credentials });
const address = await transport.listen();
const sockets: Socket[] = [];
// The transport's server is private; the benchmark reads every socket's byte count to see what it was made to read.
(transport as unknown as { server: Server }).server.on("connection", (socket: Socket) => sockets.push(socket));
const baseline = process.memoryUsage();
let peakRssBytes = baseline.rss;
let peakArrayBufferBytes = baseline.arrayBuffers;
const sampler = setInterval(() => {
  const usage = process.memoryUsage();
  peakRssBytes = Math.max(peakRssBytes, usage.rss);
  peakArrayBufferBytes = Math.max(peakArrayBufferBytes, usage.arrayBuffers);
}, 20);
process.stdout.write(`${address.port}\n`);
process.stdin.once("data", async () => {
  clearInterval(sampler);
  const bytesRead = sockets.map((socket) => socket.bytesRead);
  process.stdout.write(
    `${JSON.stringify({
      connections: sockets.length,
      largestReadBytes: Math.max(0, ...bytesRead),
      totalReadBytes: bytesRead.reduce((sum, bytes) => sum + bytes, 0),
      baselineRssBytes: baseline.rss,
      peakRssBytes,
      baselineArrayBufferBytes: baseline.arrayBuffers,
      peakArrayBufferBytes,
      handshakes: transport.statistics().handshakes,
    })}\n`,
  );
  await transport.close();
  process.exit(0);
});
