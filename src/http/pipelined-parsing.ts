/**
 * How many requests Node's parser may take from what one connection sent in one turn of the event loop.
 *
 * Why: Node parses everything a socket read returned (up to 64 KiB) in one go and builds a request and a response
 * object for every request in it before any handler of ours runs. 64 KiB of minimal pipelined requests are about
 * 3,600 of them; closing the connection for too many waiting requests (`oneRequestAtATime`) stops what comes after that
 * read, not the rest of it. A hostile test sent that from 1,000 connections with no token: a broker's management
 * server built some 3.6 million requests, held 2.8 GB and answered nothing for a minute, long enough for the broker to
 * lose its leaderships. HTTP/1.1 requests without a `Host` header never reach a handler at all: Node answers each with
 * a 400 of its own.
 *
 * So each connection's parser is given a bound: past it, the parser is told to stop (its request callback answers
 * with an error, which ends the parse of that read where it is) and the connection is closed without an answer.
 * The bound is per turn, not per connection: a client pipelining within `oneRequestAtATime`'s cap never meets it.
 * This relies on `parser.onIncoming`, the callback through which Node's server has received each parsed request since
 * its first versions; where a version of Node has none, the server keeps working, without this bound.
 */
import type { IncomingMessage, Server } from "node:http";
import type { Socket } from "node:net";

/** The part of Node's per-connection HTTP parser this module uses. */
interface ParserWithIncoming {
  onIncoming: ((request: IncomingMessage, keepAlive: boolean) => number) | null;
}

/** What the parser's request callback returns to stop the parse; Node reports it as a parse error of the connection. */
const STOP_PARSING = -1;

/**
 * Has every connection of `server` parse at most `maxRequestsPerTurn` requests from what it sent in one turn of the
 * event loop; the connection that sends more is closed without an answer.
 */
export function boundPipelinedParsing(server: Server, maxRequestsPerTurn: number): void {
  if (!Number.isSafeInteger(maxRequestsPerTurn) || maxRequestsPerTurn < 1) {
    throw new Error(`the requests parsed per turn must be a positive integer, got ${maxRequestsPerTurn}`);
  }
  // Registered after Node's own listener, which gives the connection its parser.
  server.on("connection", (socket: Socket & { parser?: ParserWithIncoming | null }) => {
    const parser = socket.parser;
    const received = parser?.onIncoming;
    if (parser === undefined || parser === null || typeof received !== "function") return;
    let parsedThisTurn = 0;
    let resetScheduled = false;
    parser.onIncoming = (request, keepAlive) => {
      parsedThisTurn += 1;
      if (!resetScheduled) {
        resetScheduled = true;
        setImmediate(() => {
          parsedThisTurn = 0;
          resetScheduled = false;
        });
      }
      if (parsedThisTurn <= maxRequestsPerTurn) return received(request, keepAlive);
      socket.destroy();
      return STOP_PARSING;
    };
  });
}
