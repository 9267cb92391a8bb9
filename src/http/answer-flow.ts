/**
 * How answers flow to clients that read them slowly or not at all: each connection's requests are answered one at a
 * time, a connection that pipelines too many is closed, and large answers held for their clients share one budget per
 * server. `createHttpServer` applies them; the stall deadline that closes a connection whose answer stays unread is
 * `guardConnections`'s (`limits.ts`).
 */
import type { IncomingMessage, RequestListener, ServerResponse } from "node:http";
import type { Socket } from "node:net";

/**
 * Requests one connection may have waiting behind the one being answered (HTTP/1.1 pipelining); one more closes the
 * connection. Clients that pipeline at all keep a few requests in flight; a client that sends many and reads no answer
 * only wants the server to hold them.
 */
export const maxWaitingPipelinedRequests = 16;

/**
 * Has `handle` answer each connection's requests one after another: a request that arrives (pipelined) while the
 * previous one on its connection is being answered waits until that answer has been handed to the connection, and the
 * connection is closed when more than `maxWaiting` wait. Node itself runs the handler of every pipelined request at
 * once and buffers the answers in order until the client reads them, however many the client sent in one packet: 24
 * connections that each pipelined 1,000 requests for the 208 KB OpenAPI document and read nothing took the platform's
 * heap, and the whole product with it. One answer at a time also hands the backpressure of a client that does not read
 * to the answer being written, where the stall deadline (`guardConnections`) ends it.
 */
export function oneRequestAtATime(handle: RequestListener, maxWaiting: number): RequestListener {
  const connections = new WeakMap<
    Socket,
    { answering: boolean; readonly waiting: [IncomingMessage, ServerResponse][] }
  >();
  const answer = (request: IncomingMessage, response: ServerResponse) => {
    const socket = request.socket;
    const connection = connections.get(socket);
    if (connection === undefined) throw new Error("invariant violated: a request is answered on an unknown connection");
    connection.answering = true;
    // 'close' follows the end of the answer, or the end of the connection before it.
    response.once("close", () => {
      connection.answering = false;
      const next = connection.waiting.shift();
      if (next !== undefined && !socket.destroyed) answer(...next);
    });
    handle(request, response);
  };
  return (request, response) => {
    const socket = request.socket;
    // Requests Node parsed from the same packet after the connection was closed for too many are not answered.
    if (socket.destroyed) return;
    let connection = connections.get(socket);
    if (connection === undefined) {
      connection = { answering: false, waiting: [] };
      connections.set(socket, connection);
    }
    if (!connection.answering) {
      answer(request, response);
      return;
    }
    if (connection.waiting.length >= maxWaiting) {
      connection.waiting.length = 0;
      socket.destroy();
      return;
    }
    connection.waiting.push([request, response]);
  };
}

/** Answers of at least this many bytes count against a server's `AnswerBudget`; smaller ones never wait for it. */
export const largeAnswerBytes = 1024 * 1024;

/**
 * The bytes of large answers a server holds at once: from the moment an answer is handed to its connection until the
 * connection is done with it (the client read it, or the connection closed). Each connection holds one answer at a
 * time (`oneRequestAtATime`), but a 9 MB model file asked for on many connections that read nothing took 17 MB of
 * memory per connection, 5 GB for 256 of them, with nothing but a read token: a server with 1,024 connections would
 * have held 17 GB until the stall deadline closed them, and the attacker reconnects.
 */
export class AnswerBudget {
  private bytesInFlightValue = 0;

  constructor(private readonly maxBytes: number) {
    if (!Number.isSafeInteger(maxBytes) || maxBytes < largeAnswerBytes) {
      throw new Error(`an answer budget must hold at least one large answer, got ${maxBytes} bytes`);
    }
  }

  /** Bytes of large answers held now. */
  get bytesInFlight(): number {
    return this.bytesInFlightValue;
  }

  /**
   * Reserves `bytes` for an answer until `response` closes; false, reserving nothing, when a large answer would take
   * the server beyond its budget. Small answers always pass.
   */
  reserve(bytes: number, response: ServerResponse): boolean {
    if (bytes < largeAnswerBytes) return true;
    if (this.bytesInFlightValue + bytes > this.maxBytes) return false;
    this.bytesInFlightValue += bytes;
    response.once("close", () => {
      this.bytesInFlightValue -= bytes;
    });
    return true;
  }
}
