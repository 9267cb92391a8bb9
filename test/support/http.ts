import { request as httpRequest } from "node:http";
import { connect, type Socket } from "node:net";
import { pino } from "pino";
import { loadConfiguration } from "../../src/config/load.js";
import type { HttpServerLimits } from "../../src/http/limits.js";
import { createHttpServer, type HttpServer } from "../../src/http/server.js";

/** The `service.http` settings with nothing configured: what a server started by flowplane applies by default. */
export const defaultHttpServerLimits: HttpServerLimits = loadConfiguration({ environment: {} }).http;

/** A server of `createHttpServer` with the default limits, a 2 KiB body limit and a silent logger. */
export function createQuietHttpServer(): HttpServer {
  return createHttpServer({
    logger: pino({ level: "silent" }),
    bodyLimitBytes: 2048,
    trustProxy: false,
    limits: defaultHttpServerLimits,
  });
}

/** An answer read with `requestFrom`. */
export interface RawAnswer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

/**
 * Sends one request on a new connection from `localAddress` (any 127/8 address is loopback on Linux, so a test can
 * be a second client address) and reads the whole answer; rejects when the connection fails or `timeoutMs` passes.
 */
export function requestFrom(
  localAddress: string,
  url: string,
  init: { method?: string; headers?: Record<string, string>; body?: string; timeoutMs?: number } = {},
): Promise<RawAnswer> {
  return new Promise((resolve, reject) => {
    const outgoing = httpRequest(
      url,
      {
        method: init.method ?? "GET",
        headers: { connection: "close", ...init.headers },
        localAddress,
        agent: false,
        timeout: init.timeoutMs ?? 10_000,
      },
      (response) => {
        let body = "";
        response.setEncoding("utf8");
        response.on("data", (chunk: string) => {
          body += chunk;
        });
        response.on("end", () => resolve({ status: response.statusCode ?? 0, headers: response.headers, body }));
        response.on("error", reject);
      },
    );
    outgoing.on("timeout", () => outgoing.destroy(new Error(`no answer from ${url} in time`)));
    outgoing.on("error", reject);
    outgoing.end(init.body);
  });
}

/** Connections a test opened on purpose to hold a server's resources, and what became of them. */
export interface HeldConnections {
  /** How many were opened. */
  readonly opened: number;
  /** How many the server has closed so far. */
  closedCount(): number;
  /** What the server sent on each connection that received anything. */
  answers(): string[];
  /** Resolves once the server closed every connection; rejects after `timeoutMs` with how many are still open. */
  allClosed(timeoutMs: number): Promise<void>;
  /** Stops sending and closes every connection still open. */
  destroy(): void;
}

/** Options of `holdConnections`. */
export interface HoldConnectionsOptions {
  host: string;
  port: number;
  /** The client address the connections come from. */
  localAddress: string;
  count: number;
  /** Sent once a connection is open: for example a request head announcing a body; nothing when absent. */
  opening?: string;
  /** Every this many milliseconds each open connection sends one more byte ("a"); never when absent. */
  byteIntervalMs?: number;
  /** Connections opened at once: more at a time only overflow the listen backlog and wait for SYN retries. */
  waveSize?: number;
}

/**
 * Opens `count` connections from one address, the way a host trying to exhaust a server would: each sends
 * `opening` and then one byte every `byteIntervalMs`, and never finishes its request. Resolves once every
 * connection is open or already closed by the server.
 */
export async function holdConnections(options: HoldConnectionsOptions): Promise<HeldConnections> {
  const sockets: Socket[] = [];
  const received = new Map<Socket, string>();
  let closed = 0;
  let onClosed: (() => void) | undefined;
  const waveSize = options.waveSize ?? 250;
  for (let start = 0; start < options.count; start += waveSize) {
    const wave = Math.min(waveSize, options.count - start);
    await Promise.all(
      Array.from(
        { length: wave },
        () =>
          new Promise<void>((resolve) => {
            const socket = connect({ host: options.host, port: options.port, localAddress: options.localAddress });
            sockets.push(socket);
            socket.setEncoding("utf8");
            socket.on("connect", () => {
              if (options.opening !== undefined) socket.write(options.opening);
              resolve();
            });
            socket.on("data", (chunk: string) => received.set(socket, (received.get(socket) ?? "") + chunk));
            // A refused connection is reset or closed at once; either way the server is done with it.
            socket.on("error", () => undefined);
            socket.on("close", () => {
              closed += 1;
              onClosed?.();
              resolve();
            });
          }),
      ),
    );
  }
  const trickle =
    options.byteIntervalMs === undefined
      ? undefined
      : setInterval(() => {
          for (const socket of sockets) if (!socket.destroyed && socket.writable) socket.write("a");
        }, options.byteIntervalMs);
  const stopTrickle = () => {
    if (trickle !== undefined) clearInterval(trickle);
  };
  return {
    opened: sockets.length,
    closedCount: () => closed,
    answers: () => [...received.values()],
    allClosed(timeoutMs) {
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => {
          onClosed = undefined;
          reject(
            new Error(`${sockets.length - closed} of ${sockets.length} connections still open after ${timeoutMs} ms`),
          );
        }, timeoutMs);
        onClosed = () => {
          if (closed < sockets.length) return;
          clearTimeout(timer);
          stopTrickle();
          resolve();
        };
        onClosed();
      });
    },
    destroy() {
      stopTrickle();
      for (const socket of sockets) socket.destroy();
    },
  };
}

/** What `probeConnectionLimits` saw. */
export interface ConnectionLimitsProbe {
  /** What the server sent on each connection it admitted (the 408 of the deadline). */
  answered: string[];
  /** Connections the server closed without a word: refused at once. */
  unanswered: number;
  /** Status of the request another client address made while the connections were held. */
  otherClientStatus: number;
}

/**
 * Holds `count` silent connections from 127.0.0.3 against the server at `url` until the server has closed them all
 * (at most `timeoutMs`), and meanwhile sends one GET for `otherClientPath` from 127.0.0.2. A server applying its
 * `service.http` limits admits `maxConnectionsPerAddress` of them, answers those 408 at the deadline, and refuses
 * the rest at once, while the other address is served.
 */
export async function probeConnectionLimits(
  url: string,
  options: { count: number; otherClientPath: string; timeoutMs: number },
): Promise<ConnectionLimitsProbe> {
  const target = new URL(url);
  const held = await holdConnections({
    host: target.hostname,
    port: Number(target.port),
    localAddress: "127.0.0.3",
    count: options.count,
  });
  try {
    const otherClient = await requestFrom("127.0.0.2", `${url}${options.otherClientPath}`);
    await held.allClosed(options.timeoutMs);
    const answered = held.answers();
    return { answered, unanswered: held.opened - answered.length, otherClientStatus: otherClient.status };
  } finally {
    held.destroy();
  }
}

/** Sends `body` (when given) as JSON to `baseUrl` + `path` with a bearer token: how tests call the platform's APIs. */
export async function callWithToken(
  baseUrl: string,
  token: string,
  method: string,
  path: string,
  body?: unknown,
): Promise<Response> {
  return await fetch(`${baseUrl}${path}`, {
    method,
    headers: {
      authorization: `Bearer ${token}`,
      ...(body === undefined ? {} : { "content-type": "application/json" }),
    },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
}

/** The limits the tests of the connection cap use: `maxConnections` in all and `maxConnectionsPerAddress` per address. */
export function connectionCapLimits(maxConnections: number, maxConnectionsPerAddress = 1_000): HttpServerLimits {
  return {
    requestReceiveTimeoutMs: 20_000,
    maxConnections,
    maxConnectionsPerAddress,
    maxRequestsPerConnection: 1_000,
    responseStallTimeoutMs: 30_000,
    maxAnswerBytesInFlight: 1024 * 1024 * 1024,
  };
}

/** A raw connection `openConnectionFrom` opened: what it received (the first 64 KiB as text), bytes, whether closed. */
export interface RawConnection {
  readonly socket: Socket;
  received: string;
  bytes: number;
  closed: boolean;
}

/**
 * Opens a raw connection to 127.0.0.1:`port` from `localAddress`, adding its socket to `opened` (the caller destroys
 * them); it reads what arrives unless `read` is false, when it reads nothing, as a client leaving its answers unread.
 */
export async function openConnectionFrom(
  port: number,
  localAddress: string,
  opened: Socket[],
  read = true,
): Promise<RawConnection> {
  const socket = connect({ host: "127.0.0.1", port, localAddress });
  opened.push(socket);
  const connection: RawConnection = { socket, received: "", bytes: 0, closed: false };
  socket.on("data", (chunk: Buffer) => {
    connection.bytes += chunk.length;
    if (connection.received.length < 64 * 1024) connection.received += chunk.toString("latin1");
  });
  socket.on("error", () => undefined);
  socket.on("close", () => {
    connection.closed = true;
  });
  await new Promise<void>((resolve, reject) => {
    socket.once("connect", () => resolve());
    socket.once("close", () => reject(new Error("closed before it connected")));
  });
  if (!read) socket.pause();
  return connection;
}
