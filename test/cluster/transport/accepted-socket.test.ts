import { once } from "node:events";
import { connect, createServer, type Server, type Socket } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { adoptAcceptedSocket } from "../../../src/cluster/transport/accepted-socket.js";
import { waitFor } from "./support.js";

const servers: Server[] = [];
const sockets: Socket[] = [];

afterEach(async () => {
  for (const socket of sockets.splice(0)) socket.destroy();
  await Promise.all(servers.splice(0).map((server) => new Promise((resolve) => server.close(resolve))));
});

/** A server on a free port whose connections go to `accept`, and a client connected to it. */
async function serverAndClient(
  options: { readonly pauseOnConnect: boolean },
  accept: (accepted: Socket) => void,
): Promise<{ server: Server; client: Socket }> {
  const server = createServer(options, accept);
  servers.push(server);
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const address = server.address();
  if (address === null || typeof address === "string") throw new Error("a TCP server has a port");
  const client = connect({ host: "127.0.0.1", port: address.port });
  sockets.push(client);
  await once(client, "connect");
  return { server, client };
}

describe("adoptAcceptedSocket", () => {
  it("reads an accepted connection into the memory `onread` hands out, and the server no longer counts it", async () => {
    const memory = Buffer.alloc(4);
    const reads: string[] = [];
    let adopted: Socket | undefined;
    const { server, client } = await serverAndClient({ pauseOnConnect: true }, (accepted) => {
      adopted = adoptAcceptedSocket(accepted, {
        buffer: () => memory,
        callback: (bytesRead, buffer) => {
          expect(buffer).toBe(memory);
          reads.push(memory.toString("latin1", 0, bytesRead));
          return true;
        },
      });
      sockets.push(adopted);
    });
    client.write("hello, adopted");
    await waitFor(() => reads.join("") === "hello, adopted", "the adopted socket read everything");
    // Memory of 4 bytes takes a read of at most 4: the reads went through it, not through buffers of Node's.
    expect(reads.every((read) => read.length <= 4)).toBe(true);
    expect(adopted?.remoteAddress).toBe("127.0.0.1");
    const connections = await new Promise<number>((resolve, reject) =>
      server.getConnections((error, count) => (error ? reject(error) : resolve(count))),
    );
    expect(connections).toBe(0);
    const answered: Buffer[] = [];
    client.on("data", (chunk: Buffer) => answered.push(chunk));
    adopted?.write("back");
    await waitFor(() => Buffer.concat(answered).toString() === "back", "the client read the answer");
    const closed = once(adopted as Socket, "close");
    client.end();
    await closed;
  });

  it("refuses a socket that its server did not pause, which may have read already", async () => {
    let refusal: unknown;
    await serverAndClient({ pauseOnConnect: false }, (accepted) => {
      sockets.push(accepted);
      try {
        adoptAcceptedSocket(accepted, { buffer: Buffer.alloc(4), callback: () => true });
      } catch (error) {
        refusal = error;
      }
    });
    await waitFor(() => refusal !== undefined, "the adoption was refused");
    expect(String(refusal)).toMatch(/invariant violated/);
  });
});
