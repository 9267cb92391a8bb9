import { subscribe, unsubscribe } from "node:diagnostics_channel";
import { createServer } from "node:http";
import type { AddressInfo, Socket } from "node:net";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { maxWaitingPipelinedRequests } from "../../src/http/answer-flow.js";
import { boundPipelinedParsing } from "../../src/http/pipelined-parsing.js";
import type { HttpServer } from "../../src/http/server.js";
import { createQuietHttpServer, openConnectionFrom } from "../support/http.js";

/** Requests Node's servers in this process built (a request and a response object each), counted as Node starts them. */
let requestsStarted = 0;
const countStart = (): void => {
  requestsStarted += 1;
};

const started: HttpServer[] = [];
const opened: Socket[] = [];

beforeEach(() => {
  requestsStarted = 0;
  subscribe("http.server.request.start", countStart);
});

afterEach(async () => {
  unsubscribe("http.server.request.start", countStart);
  for (const socket of opened.splice(0)) socket.destroy();
  await Promise.all(started.splice(0).map((server) => server.close()));
});

async function startServer(): Promise<number> {
  const server = createQuietHttpServer();
  server.get("/ping", async () => ({ pong: true }));
  started.push(server);
  await server.listen({ host: "127.0.0.1", port: 0 });
  return (server.server.address() as AddressInfo).port;
}

/** As many copies of `request` as fit in 64 KiB, the most one socket read hands Node's parser. */
function packetOf(request: string): string {
  return request.repeat(Math.floor((64 * 1024) / request.length));
}

/** Waits until `connection` is closed, failing after `timeoutMs`. */
async function closed(connection: { closed: boolean }, timeoutMs = 5_000): Promise<void> {
  await expect.poll(() => connection.closed, { timeout: timeoutMs, interval: 10 }).toBe(true);
}

describe("requests parsed from one connection's read", () => {
  it("stops parsing a packet of pipelined requests past the bound and closes the connection", async () => {
    const port = await startServer();
    const request = "GET /ping HTTP/1.1\r\nHost: flowplane.test\r\n\r\n";
    const packet = packetOf(request);
    const connection = await openConnectionFrom(port, "127.0.0.1", opened);
    connection.socket.write(packet);
    await closed(connection);
    // About 1,500 requests were sent in one packet; Node built every one of them before the bound (and the
    // connection closed at the first 17 waiting did not stop it).
    expect(packet.length / request.length).toBeGreaterThan(1_000);
    expect(requestsStarted).toBeLessThanOrEqual(maxWaitingPipelinedRequests + 1);
    expect(requestsStarted).toBeGreaterThan(0);
  });

  it("bounds requests without a Host header too, which Node answers itself without any handler", async () => {
    const port = await startServer();
    const connection = await openConnectionFrom(port, "127.0.0.1", opened);
    connection.socket.write(packetOf("GET /ping HTTP/1.1\r\n\r\n"));
    await closed(connection);
    expect(requestsStarted).toBeLessThanOrEqual(maxWaitingPipelinedRequests + 1);
  });

  it("serves a keep-alive connection any number of requests, one after another", async () => {
    const port = await startServer();
    const connection = await openConnectionFrom(port, "127.0.0.1", opened);
    const requests = 4 * (maxWaitingPipelinedRequests + 1);
    for (let sent = 1; sent <= requests; sent += 1) {
      connection.socket.write("GET /ping HTTP/1.1\r\nHost: flowplane.test\r\n\r\n");
      await expect
        .poll(() => connection.received.split("HTTP/1.1 200").length - 1, { timeout: 5_000, interval: 5 })
        .toBe(sent);
    }
    expect(connection.closed).toBe(false);
    expect(requestsStarted).toBe(requests);
  });

  it("serves a packet of as many pipelined requests as the bound, every answer in order", async () => {
    const port = await startServer();
    const connection = await openConnectionFrom(port, "127.0.0.1", opened);
    const requests = Array.from(
      { length: maxWaitingPipelinedRequests + 1 },
      (_, index) => `GET /ping?n=${index} HTTP/1.1\r\nHost: flowplane.test\r\n\r\n`,
    );
    connection.socket.write(requests.join(""));
    await expect
      .poll(() => connection.received.split("HTTP/1.1 200").length - 1, { timeout: 5_000, interval: 10 })
      .toBe(requests.length);
    expect(connection.closed).toBe(false);
  });

  it("refuses a bound that is not a positive integer", () => {
    const server = createServer();
    expect(() => boundPipelinedParsing(server, 0)).toThrow(/positive integer/);
    expect(() => boundPipelinedParsing(server, 1.5)).toThrow(/positive integer/);
  });
});
