import type { AddressInfo, Socket } from "node:net";
import { connect } from "node:net";
import { pino } from "pino";
import { Type } from "typebox";
import { afterEach, describe, expect, it } from "vitest";
import { type HttpServerLimits, maxJsonNestingLevels, nestsDeeperThan } from "../../src/http/limits.js";
import { createHttpServer, type HttpServer } from "../../src/http/server.js";
import { type HeldConnections, holdConnections, requestFrom } from "../support/http.js";

/** The address the tests attack from, and the one the other client uses (all of 127/8 is loopback on Linux). */
const attackerAddress = "127.0.0.1";
const otherClientAddress = "127.0.0.2";

const started: HttpServer[] = [];
const held: HeldConnections[] = [];

afterEach(async () => {
  for (const connections of held.splice(0)) connections.destroy();
  await Promise.all(started.splice(0).map((server) => server.close()));
});

/** What the server accepted from one address, watched from inside it: connections open now and at most at once. */
interface AcceptedConnections {
  open: number;
  peak: number;
}

/** A real server on 127.0.0.1 and a free port with `limits`, an echo route, and a count of what it accepts. */
async function startServer(
  limits: HttpServerLimits,
): Promise<{ server: HttpServer; url: string; port: number; accepted: Map<string, AcceptedConnections> }> {
  const server = createHttpServer({
    logger: pino({ level: "silent" }),
    bodyLimitBytes: 64 * 1024,
    trustProxy: false,
    limits,
  });
  server.post(
    "/echo",
    { schema: { body: Type.Object({ text: Type.String() }, { additionalProperties: false }) } },
    async (request) => request.body,
  );
  server.get("/ping", async () => ({ pong: true }));
  const accepted = new Map<string, AcceptedConnections>();
  // Registered after the guard's own listener: a connection the guard refused is already destroyed here.
  server.server.on("connection", (socket: Socket) => {
    if (socket.destroyed) return;
    const address = socket.remoteAddress ?? "unknown";
    const counts = accepted.get(address) ?? { open: 0, peak: 0 };
    counts.open += 1;
    counts.peak = Math.max(counts.peak, counts.open);
    accepted.set(address, counts);
    socket.once("close", () => {
      counts.open -= 1;
    });
  });
  started.push(server);
  await server.listen({ host: "127.0.0.1", port: 0 });
  const { port } = server.server.address() as AddressInfo;
  return { server, url: `http://127.0.0.1:${port}`, port, accepted };
}

const slowBodyHead =
  "POST /echo HTTP/1.1\r\nHost: flowplane.test\r\nContent-Type: application/json\r\nContent-Length: 10000\r\n\r\n{";

describe("connection limits of every HTTP server", () => {
  it("cuts off 2,000 slow connections from one address while another address is served", async () => {
    const limits = {
      requestReceiveTimeoutMs: 1_500,
      maxConnections: 1024,
      maxConnectionsPerAddress: 50,
      maxRequestsPerConnection: 100,
    };
    const { url, port, accepted } = await startServer(limits);

    // The other client keeps sending requests, each on a new connection, for as long as the attack lasts.
    let attackOver = false;
    const otherClientAnswers: number[] = [];
    const otherClient = (async () => {
      while (!attackOver && otherClientAnswers.length < 200) {
        const answer = await requestFrom(otherClientAddress, `${url}/echo`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ text: "still served" }),
        });
        otherClientAnswers.push(answer.status);
        expect(JSON.parse(answer.body)).toEqual({ text: "still served" });
      }
    })();

    // Each connection announces a 10 kB body and sends one byte of it every 250 ms: never idle, never done.
    const slow = await holdConnections({
      host: "127.0.0.1",
      port,
      localAddress: attackerAddress,
      count: 2_000,
      opening: slowBodyHead,
      byteIntervalMs: 250,
    });
    held.push(slow);
    try {
      await slow.allClosed(30_000);
    } finally {
      attackOver = true;
      await otherClient;
    }

    expect(slow.opened).toBe(2_000);
    expect(accepted.get(attackerAddress)?.peak).toBeLessThanOrEqual(limits.maxConnectionsPerAddress);
    // The connections the server admitted were answered when the deadline passed, although they kept sending.
    const timedOut = slow.answers().filter((answer) => answer.startsWith("HTTP/1.1 408"));
    expect(timedOut.length).toBeGreaterThan(0);
    expect(timedOut[0]).toContain("application/problem+json");
    expect(timedOut[0]).toContain('"type":"urn:flowplane:problem:request-timeout"');
    expect(otherClientAnswers.length).toBeGreaterThan(0);
    expect(otherClientAnswers.every((status) => status === 200)).toBe(true);
  }, 60_000);

  it("closes connections that send nothing once the deadline passes, and caps connections in all", async () => {
    const limits = {
      requestReceiveTimeoutMs: 1_000,
      maxConnections: 20,
      maxConnectionsPerAddress: 1_000,
      maxRequestsPerConnection: 100,
    };
    const { url, port, accepted } = await startServer(limits);
    const idle = await holdConnections({ host: "127.0.0.1", port, localAddress: attackerAddress, count: 40 });
    held.push(idle);
    await idle.allClosed(20_000);
    expect(accepted.get(attackerAddress)?.peak).toBeLessThanOrEqual(limits.maxConnections);
    const timedOut = idle.answers().filter((answer) => answer.startsWith("HTTP/1.1 408"));
    expect(timedOut.length).toBeGreaterThan(0);
    expect((await requestFrom(otherClientAddress, `${url}/ping`)).status).toBe(200);
  }, 30_000);

  it("closes a keep-alive connection after its request limit, saying so on the last answer", async () => {
    const { port } = await startServer({
      requestReceiveTimeoutMs: 10_000,
      maxConnections: 100,
      maxConnectionsPerAddress: 100,
      maxRequestsPerConnection: 2,
    });
    const socket = connect({ host: "127.0.0.1", port });
    let received = "";
    socket.setEncoding("utf8");
    socket.on("data", (chunk: string) => {
      received += chunk;
    });
    const closed = new Promise<void>((resolve, reject) => {
      socket.on("close", () => resolve());
      setTimeout(() => reject(new Error("the server kept the connection open")), 10_000).unref();
    });
    socket.on("error", () => undefined);
    socket.write("GET /ping HTTP/1.1\r\nHost: flowplane.test\r\n\r\n");
    await new Promise((resolve) => setTimeout(resolve, 200));
    // The last request matches no route, which Fastify answers before any route runs: the close is announced anyway.
    socket.write("GET /nowhere HTTP/1.1\r\nHost: flowplane.test\r\n\r\n");
    await closed.finally(() => socket.destroy());
    const answers = received.split("HTTP/1.1 ").slice(1);
    expect(answers).toHaveLength(2);
    expect(answers[0]).toMatch(/^200 /);
    expect(answers[0]?.toLowerCase()).toContain("connection: keep-alive");
    expect(answers[1]).toMatch(/^404 /);
    expect(answers[1]?.toLowerCase()).toContain("connection: close");
  }, 20_000);
});

describe("nestsDeeperThan", () => {
  function nested(levels: number): unknown {
    let value: unknown = "leaf";
    for (let level = 0; level < levels; level += 1) value = level % 2 === 0 ? { inner: value } : [value];
    return value;
  }

  it("counts levels of arrays and objects, scalars being none", () => {
    expect(nestsDeeperThan("text", 0)).toBe(false);
    expect(nestsDeeperThan({}, 0)).toBe(true);
    expect(nestsDeeperThan(nested(maxJsonNestingLevels), maxJsonNestingLevels)).toBe(false);
    expect(nestsDeeperThan(nested(maxJsonNestingLevels + 1), maxJsonNestingLevels)).toBe(true);
    expect(nestsDeeperThan({ shallow: [1, 2], deep: nested(10) }, 10)).toBe(true);
  });

  it("walks values far deeper than any recursion could", () => {
    expect(nestsDeeperThan(nested(200_000), maxJsonNestingLevels)).toBe(true);
  });
});
