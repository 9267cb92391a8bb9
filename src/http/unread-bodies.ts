/**
 * Request bodies a server answers without reading: a request refused by a hook (no token), an unknown route, a body
 * declared larger than the route accepts. Node reads such a body to the end after the answer, to keep the connection
 * for the next request, however large the body says it is: a client without a token could have a server read
 * gigabytes for the whole request deadline. `createHttpServer` applies this in its `onSend` hook.
 */

import type { Socket } from "node:net";
import type { FastifyReply, FastifyRequest } from "fastify";

/**
 * How long a connection closed after an answer goes on reading (and discarding) what its client still sends before
 * it is reset: closing at once with unread bytes in the socket resets the connection, and a client still sending its
 * body would then lose the answer with it.
 */
export const LINGER_AFTER_ANSWER_MS = 1_000;

/**
 * Called before an answer's head is sent: when the request's body has not all arrived and is larger than the route
 * accepts, or of a length not declared, has the connection closed after the answer (a body within the limit is still
 * read, and the connection kept).
 */
export function closeAfterUnreadBody(
  request: FastifyRequest,
  reply: FastifyReply,
  defaultBodyLimitBytes: number,
): void {
  if (request.raw.complete || reply.raw.headersSent) return;
  const declared = request.headers["content-length"];
  const limitBytes = request.routeOptions.bodyLimit ?? defaultBodyLimitBytes;
  const unknownLength = request.headers["transfer-encoding"] !== undefined;
  if (!unknownLength && (declared === undefined || Number(declared) <= limitBytes)) return;
  reply.header("connection", "close");
  lingerOnClose(request.raw.socket);
}

/**
 * Replaces how Node ends `socket` after an answer announcing its close (Node calls `destroySoon` where a socket has
 * one): the answer is flushed and the sending side closed as before, but the socket is destroyed only
 * `LINGER_AFTER_ANSWER_MS` later, reading and discarding meanwhile, unless the client closes first.
 */
function lingerOnClose(socket: Socket): void {
  socket.destroySoon = function lingeringClose(this: Socket): void {
    if (this.writable) this.end();
    const timer = setTimeout(() => this.destroy(), LINGER_AFTER_ANSWER_MS);
    timer.unref();
    this.once("close", () => clearTimeout(timer));
    // Once the client has closed its side, nothing is left to wait for.
    this.once("end", () => this.destroy());
  };
}
