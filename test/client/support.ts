import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { UnsecuredJWT } from "jose";
import { Agent, type Dispatcher } from "undici";
import type { Clock } from "../../src/client/http.js";

/** An undici dispatcher that counts the requests it sends, so tests can see how often the network was used. */
export function countingDispatcher(): { dispatcher: Dispatcher; count: () => number; close: () => Promise<void> } {
  let requests = 0;
  const agent = new Agent();
  const dispatcher = agent.compose((dispatch) => (options, handler) => {
    requests++;
    return dispatch(options, handler);
  });
  return { dispatcher, count: () => requests, close: () => agent.close() };
}

/** A clock the test moves by hand; `sleep` records the wait and advances time instead of waiting. */
export function manualClock(startMs: number): Clock & { advance(durationMs: number): void; sleeps: number[] } {
  let nowMs = startMs;
  const sleeps: number[] = [];
  return {
    now: () => nowMs,
    sleep: async (durationMs) => {
      sleeps.push(durationMs);
      nowMs += durationMs;
    },
    advance: (durationMs) => {
      nowMs += durationMs;
    },
    sleeps,
  };
}

let jwtSequence = 0;

/** An unsigned JWT with the given lifetime; enough for code that only reads `iat` and `exp`. */
export function unsignedJwt(issuedAtSeconds: number, lifetimeSeconds: number): string {
  jwtSequence++;
  return new UnsecuredJWT({ jti: `test-${jwtSequence}` })
    .setIssuedAt(issuedAtSeconds)
    .setExpirationTime(issuedAtSeconds + lifetimeSeconds)
    .encode();
}

/**
 * A tiny HTTP server on 127.0.0.1 that answers from a script, one entry per request (the last entry repeats);
 * it stands below the unit under test to produce answers a real platform gives only under load.
 */
export async function scriptedServer(
  script: readonly ((request: IncomingMessage, response: ServerResponse) => void)[],
): Promise<{ url: string; requests: () => number; close: () => Promise<void> }> {
  let requests = 0;
  const server = createServer((request, response) => {
    const answer = script[Math.min(requests, script.length - 1)];
    requests++;
    request.resume();
    request.on("end", () => answer?.(request, response));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests: () => requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** Answers with a JSON body, status and headers. */
export function sendJson(
  response: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void {
  response.writeHead(status, { "content-type": "application/json", ...headers });
  response.end(JSON.stringify(body));
}
