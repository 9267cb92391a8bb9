import { createServer, type Server, type Socket, connect as tcpConnect } from "node:net";

/**
 * A TCP proxy on 127.0.0.1 in front of a server, through which a test makes that server unreachable, silent, or
 * back again without touching the server itself (a shared database server, for instance).
 */
export interface TcpProxy {
  /** The port clients connect to; it stays the same across `cut` and `restore`. */
  readonly port: number;
  /** Closes every connection and refuses new ones, as a server that went away. */
  cut(): Promise<void>;
  /** Accepts connections again on the same port. */
  restore(): Promise<void>;
  /** Keeps connections open but forwards nothing either way, as a server that stopped answering. */
  freeze(): void;
  /** Forwards again, including what arrived while frozen. */
  thaw(): void;
  /**
   * Leaves the connections open now open but silent for good (what is sent on them is dropped), while new ones are
   * forwarded: a network path that went dead without closing anything, and a server reachable again.
   */
  silenceExisting(): void;
  close(): Promise<void>;
}

interface Pair {
  readonly client: Socket;
  readonly upstream: Socket;
  readonly held: { toUpstream: Buffer[]; toClient: Buffer[] };
  silenced: boolean;
}

/** Starts a proxy forwarding to `targetHost:targetPort`. */
export async function startTcpProxy(targetHost: string, targetPort: number): Promise<TcpProxy> {
  const pairs = new Set<Pair>();
  let frozen = false;

  const accept = (client: Socket): void => {
    const upstream = tcpConnect(targetPort, targetHost);
    const pair: Pair = { client, upstream, held: { toUpstream: [], toClient: [] }, silenced: false };
    pairs.add(pair);
    client.on("data", (chunk: Buffer) => {
      if (pair.silenced) return;
      if (frozen) pair.held.toUpstream.push(chunk);
      else upstream.write(chunk);
    });
    upstream.on("data", (chunk: Buffer) => {
      if (pair.silenced) return;
      if (frozen) pair.held.toClient.push(chunk);
      else client.write(chunk);
    });
    const end = (): void => {
      pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on("close", end).on("error", end);
    upstream.on("close", end).on("error", end);
  };

  let server: Server = createServer(accept);
  const listen = (port: number): Promise<number> =>
    new Promise((resolve, reject) => {
      server.once("error", reject);
      server.listen(port, "127.0.0.1", () => {
        const address = server.address();
        resolve(typeof address === "object" && address !== null ? address.port : port);
      });
    });
  const port = await listen(0);
  const closeServer = (): Promise<void> => new Promise((resolve) => server.close(() => resolve()));

  return {
    port,
    async cut() {
      const closed = closeServer();
      for (const pair of pairs) {
        pair.client.destroy();
        pair.upstream.destroy();
      }
      pairs.clear();
      await closed;
    },
    async restore() {
      server = createServer(accept);
      await listen(port);
    },
    freeze() {
      frozen = true;
    },
    thaw() {
      frozen = false;
      for (const pair of pairs) {
        for (const chunk of pair.held.toUpstream.splice(0)) pair.upstream.write(chunk);
        for (const chunk of pair.held.toClient.splice(0)) pair.client.write(chunk);
      }
    },
    silenceExisting() {
      for (const pair of pairs) pair.silenced = true;
    },
    async close() {
      frozen = false;
      const closed = server.listening ? closeServer() : Promise.resolve();
      for (const pair of pairs) {
        pair.client.destroy();
        pair.upstream.destroy();
      }
      pairs.clear();
      await closed;
    },
  };
}
