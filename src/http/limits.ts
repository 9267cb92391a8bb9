/**
 * The limits every flowplane HTTP server applies, so that no client can hold a server's connections or hand it input
 * whose cost is unbounded: a deadline for each whole request and for each answer the client leaves unread, caps on
 * open connections (in all and per client address) and on requests per connection, on the size of URLs, path
 * parameters and headers, and on the nesting and the number of values of JSON bodies (`json-shape.ts` measures
 * them). How answers flow to clients that read slowly or not at
 * all is bounded in `answer-flow.ts`. `createHttpServer` applies both; the settings are `service.http.*`.
 */

import { readFileSync } from "node:fs";
import type { IncomingMessage, Server, ServerResponse } from "node:http";
import type { Socket } from "node:net";
import type { FastifyBaseLogger } from "fastify";
import { connectionAddressKey } from "../net/address-key.js";
import { ConnectionAdmission } from "./connection-admission.js";

/** The `service.http` settings: the request deadline and the connection limits of one HTTP server. */
export interface HttpServerLimits {
  /** Longest time a client may take to send one request, headers and body; a slower one is answered 408. */
  readonly requestReceiveTimeoutMs: number;
  /** Open connections the server accepts; further ones are closed at once. */
  readonly maxConnections: number;
  /** Open connections the server accepts from one client address (IPv6: one /64 network). */
  readonly maxConnectionsPerAddress: number;
  /** Requests served on one keep-alive connection before the server closes it. */
  readonly maxRequestsPerConnection: number;
  /** Longest time an answer may wait while the client reads none of it; the connection is then closed. */
  readonly responseStallTimeoutMs: number;
  /** Bytes of large answers the server holds at once until their clients have read them (`AnswerBudget`). */
  readonly maxAnswerBytesInFlight: number;
}

/** Longest accepted request target (path and query); a longer one is answered 414. */
export const maxUrlCharacters = 8 * 1024;

/** Largest accepted request line and headers together; larger ones are answered 431 by Node's parser. */
export const maxHeaderBytes = 16 * 1024;

/** Longest accepted path parameter; a request with a longer one is answered 414. */
export const maxPathParameterCharacters = 500;

/**
 * Deepest accepted nesting of arrays and objects in a JSON body, the top level counting as one; deeper bodies are
 * answered 400. Recursive code (the cluster transport's msgpack encoder and decoder, schema validation) overflows
 * its stack somewhere above a thousand levels, depending on how deep in a call it runs: this bound keeps every body
 * far away from that, and no legitimate document of the APIs comes close to it.
 */
export const maxJsonNestingLevels = 64;

/**
 * Most values (array items and object members, at every level together) a JSON body may hold; a body with more is
 * answered 400 before it is parsed. Parsing, validating and listing a body's issues cost time and memory per value,
 * on the event loop: the bytes a route accepts (up to 20 MB for model files) do not bound that work, this does. The
 * largest legitimate documents of the APIs (a message's variables, a list of addresses) hold far fewer.
 */
export const maxJsonValues = 100_000;

/** How long the refusal warning stays quiet after it was logged, however many connections are refused meanwhile. */
const REFUSAL_LOG_INTERVAL_MS = 60_000;

/**
 * How often Node checks its connections against the request deadline: a quarter of the deadline, so that a request
 * overstays it by at most a quarter, but not more often than every 50 ms nor less often than every second.
 */
export function deadlineCheckIntervalMs(limits: HttpServerLimits): number {
  return Math.min(1_000, Math.max(50, Math.floor(limits.requestReceiveTimeoutMs / 4)));
}

/** The soft limit on open files of this process, from `/proc/self/limits`; undefined where that file is missing. */
export function openFileLimit(): number | undefined {
  try {
    const line = readFileSync("/proc/self/limits", "utf8")
      .split("\n")
      .find((candidate) => candidate.startsWith("Max open files"));
    const soft = line?.split(/\s{2,}/)[1];
    return soft === undefined || !/^\d+$/.test(soft) ? undefined : Number(soft);
  } catch {
    return undefined;
  }
}

/** Options of `guardConnections`. */
export interface ConnectionGuardOptions {
  readonly logger: FastifyBaseLogger;
  /** Called when a connection sent no complete request head within the deadline; it answers 408 and closes it. */
  readonly onFirstRequestOverdue: (socket: Socket) => void;
}

/**
 * Connections Node admits beyond the cap, so that a new connection at the cap reaches the guard, which may close
 * another for it (connection-admission.ts). While no connection can make room, Node's own cap is lowered to ours
 * for `nativeRefusalMs`, so that a flood is refused by Node before any JavaScript object exists for it.
 */
const ADMISSION_HEADROOM_CONNECTIONS = 64;
/** How long Node's own cap stays lowered after a connection found no room (see above). */
export const nativeRefusalMs = 100;

/**
 * Applies the connection limits to a Node HTTP server: the per-address cap, the total cap, and the deadline of a
 * connection's first request, which Node does not enforce while the client has sent nothing at all. Refused
 * connections are closed at once, without a response: anything more would let the refused spend the server's time.
 * At the total cap a new connection takes the place of one doing nothing useful when there is one
 * (connection-admission.ts), so that a few addresses cannot lock every new client out.
 */
export function guardConnections(
  server: Server,
  configuredLimits: HttpServerLimits,
  options: ConnectionGuardOptions,
): void {
  const limits = withinFileLimit(configuredLimits, openFileLimit(), options.logger);
  const admittingHeadroom = limits.maxConnections + ADMISSION_HEADROOM_CONNECTIONS;
  server.maxConnections = admittingHeadroom;
  // Node's idle timer of each connection while a request is on it, restarted by every read and write that moves
  // bytes. When it fires during an answer, the answer's listener (below, per request) decides: it ends only an answer
  // the client leaves unread (bytes wait to be sent and nothing moves), not a handler still at work, which has sent
  // nothing yet. Between requests the same timer is Node's keep-alive timeout, which no listener of ours may take
  // over: a listener on the server would keep every idle connection open for good.
  server.setTimeout(limits.responseStallTimeoutMs);
  const openByAddress = new Map<string, number>();
  const firstRequestTimers = new WeakMap<Socket, NodeJS.Timeout>();
  const requestsBySocket = new WeakMap<Socket, number>();
  const admission = new ConnectionAdmission(limits.maxConnections);
  let nativeRefusalTimer: NodeJS.Timeout | undefined;
  let refusedSinceLastWarning = 0;
  let replacedSinceLastWarning = 0;
  let quietUntilMs = 0;

  const noteRefusal = (
    limit: "maxConnections" | "maxConnectionsPerAddress",
    address: string | undefined,
    outcome: "refused" | "replaced",
  ) => {
    if (outcome === "refused") refusedSinceLastWarning += 1;
    else replacedSinceLastWarning += 1;
    const nowMs = performance.now();
    if (nowMs < quietUntilMs) return;
    options.logger.warn(
      {
        limit,
        address,
        refusedConnections: refusedSinceLastWarning,
        connectionsClosedForNewOnes: replacedSinceLastWarning,
      },
      "connections refused, or closed to admit new ones: clients hold as many as the server allows",
    );
    refusedSinceLastWarning = 0;
    replacedSinceLastWarning = 0;
    quietUntilMs = nowMs + REFUSAL_LOG_INTERVAL_MS;
  };

  server.on("drop", (data?: { remoteAddress?: string }) =>
    noteRefusal("maxConnections", data?.remoteAddress, "refused"),
  );
  // Prepended so that a refused connection is closed before Node's HTTP machinery does any work for it.
  server.prependListener("connection", (socket: Socket) => {
    const key = connectionAddressKey(socket.remoteAddress);
    const open = openByAddress.get(key) ?? 0;
    if (open >= limits.maxConnectionsPerAddress) {
      socket.destroy();
      noteRefusal("maxConnectionsPerAddress", socket.remoteAddress, "refused");
      return;
    }
    const admitted = admission.admit(socket, performance.now(), key);
    if (!admitted.admitted) {
      socket.destroy();
      noteRefusal("maxConnections", socket.remoteAddress, "refused");
      if (nativeRefusalTimer === undefined) {
        server.maxConnections = limits.maxConnections;
        nativeRefusalTimer = setTimeout(() => {
          nativeRefusalTimer = undefined;
          server.maxConnections = admittingHeadroom;
        }, nativeRefusalMs);
        nativeRefusalTimer.unref();
      }
      return;
    }
    if (admitted.replaced !== null) {
      admitted.replaced.destroy();
      noteRefusal("maxConnections", admitted.replaced.remoteAddress, "replaced");
    }
    openByAddress.set(key, open + 1);
    const timer = setTimeout(() => options.onFirstRequestOverdue(socket), limits.requestReceiveTimeoutMs);
    timer.unref();
    firstRequestTimers.set(socket, timer);
    socket.once("close", () => {
      clearTimeout(timer);
      admission.closed(socket);
      const remaining = (openByAddress.get(key) ?? 1) - 1;
      if (remaining <= 0) openByAddress.delete(key);
      else openByAddress.set(key, remaining);
    });
  });
  // Prepended because Fastify may answer within its own listener (an unknown route, a refused URL), after which no
  // header can be set any more.
  const onRequest = (request: IncomingMessage, response: ServerResponse) => {
    const { socket } = request;
    admission.requestReceived(socket, request, performance.now());
    // 'close' follows the end of the answer, or the end of the connection before it.
    response.once("close", () => admission.answerEnded(socket, performance.now()));
    // The stall deadline of this answer (see `server.setTimeout` above).
    response.on("timeout", (timedOut: Socket) => {
      if (timedOut.writableLength > 0) timedOut.destroy();
    });
    // Node's own `maxRequestsPerSocket` announces the end but leaves the connection open and answers further
    // requests with a bare 503; asking for the close on the last answer makes Node close it after that answer.
    const requests = (requestsBySocket.get(socket) ?? 0) + 1;
    requestsBySocket.set(socket, requests);
    if (requests >= limits.maxRequestsPerConnection) response.setHeader("connection", "close");
    // From the first request head on, Node's own deadline (requestTimeout, headersTimeout) takes over.
    const timer = firstRequestTimers.get(socket);
    if (timer === undefined) return;
    clearTimeout(timer);
    firstRequestTimers.delete(socket);
  };
  server.prependListener("request", onRequest);
  // A request with an `Expect` header arrives as one of these events instead (see `createHttpServer`), and must be
  // counted, timed and admitted like any other: missed, it kept its connection's first-request deadline (a 408 in
  // the middle of an upload), escaped the per-connection request cap, and left its connection first in line for
  // eviction as one that never sent a request.
  server.prependListener("checkContinue", onRequest);
  server.prependListener("checkExpectation", onRequest);
}

/** Open files a process keeps for what is not a client's connection: its storage, database, peers and threads. */
const FILES_RESERVED_BESIDE_CONNECTIONS = 128;

/**
 * The limits with the connection caps lowered to what the process's open-file limit leaves a server: half of what is
 * not reserved (a process may run two servers, as a gateway does), less the connections admitted beyond the cap for
 * a moment. Why: the caps only protect a process if they are reached before its open files run out. With a limit of
 * 512 and the default cap of 1,024, clients of a broker's management port took every descriptor, and the broker's
 * journal could not open its next segment (EMFILE), which stopped every replica it hosted.
 */
export function withinFileLimit(
  limits: HttpServerLimits,
  fileLimit: number | undefined,
  logger: FastifyBaseLogger,
): HttpServerLimits {
  if (fileLimit === undefined) return limits;
  const share = Math.floor((fileLimit - FILES_RESERVED_BESIDE_CONNECTIONS) / 2) - ADMISSION_HEADROOM_CONNECTIONS;
  const maxConnections = Math.min(limits.maxConnections, Math.max(MIN_CONNECTIONS_WITHIN_FILE_LIMIT, share));
  if (maxConnections === limits.maxConnections) return limits;
  logger.warn(
    { maxConnections: limits.maxConnections, loweredTo: maxConnections, openFileLimit: fileLimit },
    "service.http.maxConnections is lowered to what this process's open-file limit leaves for connections; raise the limit (ulimit -n, LimitNOFILE) to allow more",
  );
  return {
    ...limits,
    maxConnections,
    maxConnectionsPerAddress: Math.min(limits.maxConnectionsPerAddress, maxConnections),
  };
}

/** The fewest connections a server is left by a small open-file limit (below it the process cannot serve anyway). */
const MIN_CONNECTIONS_WITHIN_FILE_LIMIT = 16;
