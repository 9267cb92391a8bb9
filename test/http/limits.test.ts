import { execFileSync } from "node:child_process";
import type { AddressInfo, Socket } from "node:net";
import { connect } from "node:net";
import { fileURLToPath } from "node:url";
import { pino } from "pino";
import { Type } from "typebox";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { maxWaitingPipelinedRequests } from "../../src/http/answer-flow.js";
import { type HttpServerLimits, nativeRefusalMs, withinFileLimit } from "../../src/http/limits.js";
import { createHttpServer, type HttpServer } from "../../src/http/server.js";
import {
  connectionCapLimits,
  defaultHttpServerLimits,
  type HeldConnections,
  holdConnections,
  openConnectionFrom,
  requestFrom,
} from "../support/http.js";

/** The address the tests attack from, and the one the other client uses (all of 127/8 is loopback on Linux). */
const attackerAddress = "127.0.0.1";
const otherClientAddress = "127.0.0.2";

const started: HttpServer[] = [];
let largeAnswersBuilt = 0;
const held: HeldConnections[] = [];

/** Requests to /held are answered when their test ends: they keep connections busy for as long as it needs. */
let releaseHeldRequests: () => void = () => undefined;
let heldRequestsReleased: Promise<void> = Promise.resolve();

beforeEach(() => {
  heldRequestsReleased = new Promise((resolve) => {
    releaseHeldRequests = resolve;
  });
});

afterEach(async () => {
  releaseHeldRequests();
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
  // An answer far larger than a socket's buffers, counting how often it was built.
  server.get("/large", async () => {
    largeAnswersBuilt += 1;
    return { blob: "x".repeat(4 * 1024 * 1024) };
  });
  server.get("/slow", async () => {
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    return { slow: true };
  });
  server.get("/held", async () => {
    await heldRequestsReleased;
    return { held: true };
  });
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

const intervals: NodeJS.Timeout[] = [];
const opened: Socket[] = [];

afterEach(() => {
  for (const interval of intervals.splice(0)) clearInterval(interval);
  for (const socket of opened.splice(0)) socket.destroy();
});

const slowBodyHead =
  "POST /echo HTTP/1.1\r\nHost: flowplane.test\r\nContent-Type: application/json\r\nContent-Length: 10000\r\n\r\n{";

describe("connection limits of every HTTP server", () => {
  it("cuts off 2,000 slow connections from one address while another address is served", async () => {
    const limits = {
      requestReceiveTimeoutMs: 1_500,
      maxConnections: 1024,
      maxConnectionsPerAddress: 50,
      maxRequestsPerConnection: 100,
      responseStallTimeoutMs: 30_000,
      maxAnswerBytesInFlight: 256 * 1024 * 1024,
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
      responseStallTimeoutMs: 30_000,
      maxAnswerBytesInFlight: 256 * 1024 * 1024,
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

  it("at its connection cap, closes the connection receiving a request longest to admit a client that sends one", async () => {
    const limits = {
      requestReceiveTimeoutMs: 20_000,
      maxConnections: 16,
      maxConnectionsPerAddress: 1_000,
      maxRequestsPerConnection: 100,
      responseStallTimeoutMs: 30_000,
      maxAnswerBytesInFlight: 256 * 1024 * 1024,
    };
    const { url, port } = await startServer(limits);
    // The cap filled by connections that send their request heads a byte at a time, as a few addresses each within
    // its own cap could do, opening them again whenever they are closed.
    const slow = await holdConnections({
      host: "127.0.0.1",
      port,
      localAddress: attackerAddress,
      count: limits.maxConnections,
      opening: "GET /ping HTTP/1.1\r\nHost: flowplane.test\r\nX-Slow: ",
      byteIntervalMs: 250,
    });
    held.push(slow);
    // None of them has waited the minimum yet: a new connection is refused rather than one of them closed. The new
    // client shares the slow connections' address, so that it has no fair share to claim (another address would).
    await expect(requestFrom(attackerAddress, `${url}/ping`, { timeoutMs: 2_000 })).rejects.toThrow();
    expect(slow.closedCount()).toBe(0);
    await new Promise((resolve) => setTimeout(resolve, 1_200));
    const statuses: number[] = [];
    for (let request = 0; request < 5; request += 1) {
      statuses.push((await requestFrom(attackerAddress, `${url}/ping`)).status);
    }
    expect(statuses).toEqual([200, 200, 200, 200, 200]);
    // Only one slow connection was closed, for the first request: each answered connection closed after its answer
    // and left its place to the next. The rest are still held.
    expect(slow.closedCount()).toBe(1);
  }, 30_000);

  it("admits a new client while keep-alive connections hold the cap with a cheap request every half second", async () => {
    const { port, url } = await startServer(connectionCapLimits(4, 2));
    for (const address of ["127.0.0.3", "127.0.0.4"]) {
      for (let index = 0; index < 2; index += 1) {
        const connection = await openConnectionFrom(port, address, opened);
        const send = () => connection.socket.write("GET /ping HTTP/1.1\r\nHost: flowplane.test\r\n\r\n");
        send();
        intervals.push(setInterval(send, 500));
      }
    }
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    const statuses: number[] = [];
    for (let attempt = 0; attempt < 5; attempt += 1) {
      statuses.push((await requestFrom(otherClientAddress, `${url}/ping`, { timeoutMs: 2_000 })).status);
    }
    expect(statuses).toEqual([200, 200, 200, 200, 200]);
  }, 30_000);

  it("spares a request whose body has just begun to arrive on a reused keep-alive connection", async () => {
    const { port, url } = await startServer(connectionCapLimits(2));
    const reused = await openConnectionFrom(port, "127.0.0.3", opened);
    reused.socket.write("GET /ping HTTP/1.1\r\nHost: flowplane.test\r\n\r\n");
    await expect.poll(() => reused.received).toContain('{"pong":true}');
    const filler = await openConnectionFrom(port, "127.0.0.4", opened);
    filler.socket.write("GET /ping HTTP/1.1\r\nHost: flowplane.test\r\n\r\n");
    await expect.poll(() => filler.received).toContain('{"pong":true}');
    // Both idle for over a second; then the reused one begins a request whose body is on its way.
    await new Promise((resolve) => setTimeout(resolve, 1_200));
    const body = JSON.stringify({ text: "hello" });
    reused.socket.write(
      `POST /echo HTTP/1.1\r\nHost: flowplane.test\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body.slice(0, 4)}`,
    );
    await new Promise((resolve) => setTimeout(resolve, 30));
    // A newcomer at the cap takes the idle filler's place, not the request under way.
    expect((await requestFrom(otherClientAddress, `${url}/ping`, { timeoutMs: 2_000 })).status).toBe(200);
    reused.socket.write(body.slice(4));
    await expect.poll(() => reused.received).toContain('{"text":"hello"}');
    expect(reused.closed).toBe(false);
    expect(filler.closed).toBe(true);
  }, 30_000);

  it("spares a connection answering a whole request while a pipelined one behind it still arrives", async () => {
    const { port, url } = await startServer(connectionCapLimits(1));
    const connection = await openConnectionFrom(port, "127.0.0.3", opened);
    connection.socket.write(
      "GET /slow HTTP/1.1\r\nHost: flowplane.test\r\n\r\nPOST /echo HTTP/1.1\r\nHost: flowplane.test\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{",
    );
    await new Promise((resolve) => setTimeout(resolve, 1_100));
    await expect(requestFrom(otherClientAddress, `${url}/ping`, { timeoutMs: 1_000 })).rejects.toThrow();
    await expect.poll(() => connection.received, { timeout: 5_000 }).toContain('{"slow":true}');
  }, 30_000);

  it("has Node refuse a flood at the cap itself while no connection can make room", async () => {
    const { server, port } = await startServer(connectionCapLimits(4));
    // Four requests being answered until the test ends fill the cap; none can make room, however long the flood takes.
    for (let index = 0; index < 4; index += 1) {
      const connection = await openConnectionFrom(port, "127.0.0.3", opened);
      connection.socket.write("GET /held HTTP/1.1\r\nHost: flowplane.test\r\n\r\n");
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
    let reachedJavaScript = 0;
    let refusedByNode = 0;
    const arrivalsMs: number[] = [];
    server.server.prependListener("connection", () => {
      reachedJavaScript += 1;
      arrivalsMs.push(performance.now());
    });
    server.server.on("drop", () => {
      refusedByNode += 1;
      arrivalsMs.push(performance.now());
    });
    const flood = 300;
    await Promise.all(
      Array.from({ length: flood }, async () => {
        const connection = await openConnectionFrom(port, "127.0.0.4", opened).catch(() => undefined);
        if (connection !== undefined) await expect.poll(() => connection.closed, { timeout: 10_000 }).toBe(true);
      }),
    );
    // The first surplus connection reaches the guard, which finds no room and lowers Node's cap for a moment; the
    // first one after that moment reaches it again. So at most one connection per moment reaches JavaScript, however
    // long a busy machine takes to deliver the flood (a fixed bound failed while another test file ran beside it).
    expect(reachedJavaScript + refusedByNode).toBe(flood);
    const arrivalSpanMs = Math.max(...arrivalsMs) - Math.min(...arrivalsMs);
    // Node's timers run on a clock of whole milliseconds that may lag this one, so a moment can measure up to about
    // two milliseconds short of its delay here.
    expect(reachedJavaScript).toBeLessThanOrEqual(2 + Math.floor(arrivalSpanMs / (nativeRefusalMs - 2)));
    expect(refusedByNode).toBeGreaterThan(0);
  }, 30_000);

  it("never closes a connection whose request is being served to admit another", async () => {
    const limits = {
      requestReceiveTimeoutMs: 20_000,
      maxConnections: 4,
      maxConnectionsPerAddress: 1_000,
      maxRequestsPerConnection: 100,
      responseStallTimeoutMs: 30_000,
      maxAnswerBytesInFlight: 256 * 1024 * 1024,
    };
    const { url } = await startServer(limits);
    // Four requests the server takes 1.5 s to answer fill the cap, and keep it full past the minimum wait.
    const served = Array.from({ length: limits.maxConnections }, () =>
      requestFrom(attackerAddress, `${url}/slow`, { timeoutMs: 10_000 }),
    );
    await new Promise((resolve) => setTimeout(resolve, 1_100));
    await expect(requestFrom(otherClientAddress, `${url}/ping`, { timeoutMs: 2_000 })).rejects.toThrow();
    expect((await Promise.all(served)).map((answer) => answer.status)).toEqual([200, 200, 200, 200]);
    expect((await requestFrom(otherClientAddress, `${url}/ping`)).status).toBe(200);
  }, 30_000);

  /** Limits of two requests per connection, and a client connection that collects what it receives. */
  async function twoRequestConnection(requestReceiveTimeoutMs: number) {
    const { port } = await startServer({
      requestReceiveTimeoutMs,
      maxConnections: 100,
      maxConnectionsPerAddress: 100,
      maxRequestsPerConnection: 2,
      responseStallTimeoutMs: 30_000,
      maxAnswerBytesInFlight: 256 * 1024 * 1024,
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
    return { socket, received: () => received, closed };
  }

  it("closes a keep-alive connection after its request limit, saying so on the last answer", async () => {
    const { socket, received, closed } = await twoRequestConnection(10_000);
    socket.write("GET /ping HTTP/1.1\r\nHost: flowplane.test\r\n\r\n");
    await new Promise((resolve) => setTimeout(resolve, 200));
    // The last request matches no route, which Fastify answers before any route runs: the close is announced anyway.
    socket.write("GET /nowhere HTTP/1.1\r\nHost: flowplane.test\r\n\r\n");
    await closed.finally(() => socket.destroy());
    const answers = received().split("HTTP/1.1 ").slice(1);
    expect(answers).toHaveLength(2);
    expect(answers[0]).toMatch(/^200 /);
    expect(answers[0]?.toLowerCase()).toContain("connection: keep-alive");
    expect(answers[1]).toMatch(/^404 /);
    expect(answers[1]?.toLowerCase()).toContain("connection: close");
  }, 20_000);

  it("times and counts a request expecting 100-continue like any other", async () => {
    const { socket, received, closed } = await twoRequestConnection(1_000);
    const body = JSON.stringify({ text: "sent after the invitation" });
    const expecting = `POST /echo HTTP/1.1\r\nHost: flowplane.test\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nExpect: 100-continue\r\n\r\n`;
    const answered = async (count: number) =>
      await expect.poll(() => received().split("sent after the invitation").length).toBe(count + 1);
    socket.write(expecting);
    await expect.poll(() => received()).toContain("100 Continue");
    socket.write(body);
    await answered(1);
    // Past the first request's deadline, the connection idles at keep-alive: its first request ended that deadline,
    // which used to close it with a 408 of its own.
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    expect(received()).not.toContain("408");
    socket.write(expecting);
    await expect.poll(() => received().split("100 Continue").length).toBe(3);
    socket.write(body);
    await answered(2);
    // The second request is the connection's last: its answer says so and the server closes the connection.
    await closed;
    const answers = received()
      .split("HTTP/1.1 ")
      .slice(1)
      .filter((answer) => !answer.startsWith("100 "));
    expect(answers.map((answer) => answer.slice(0, 3))).toEqual(["200", "200"]);
    expect(answers[0]?.toLowerCase()).toContain("connection: keep-alive");
    expect(answers[1]?.toLowerCase()).toContain("connection: close");
  }, 20_000);
});

/**
 * A raw connection to `server` that collects what it receives (when it reads) and says when the server closed its side
 * (watched on the server: a client that reads nothing never sees the close).
 */
async function rawConnection(server: HttpServer, options: { readAnswers: boolean }) {
  const accepted = new Promise<Socket>((resolve) => server.server.once("connection", resolve));
  const socket = connect({ host: "127.0.0.1", port: (server.server.address() as AddressInfo).port });
  let received = "";
  if (options.readAnswers) {
    socket.setEncoding("utf8");
    socket.on("data", (chunk: string) => {
      received += chunk;
    });
  } else {
    // Never read: the socket's buffers fill and the server's writes stall, as with a client that does not read.
    socket.pause();
  }
  socket.on("error", () => undefined);
  const serverSide = await accepted;
  const closedAtMs = new Promise<number>((resolve) => serverSide.once("close", () => resolve(performance.now())));
  return { socket, serverSide, received: () => received, closedAtMs };
}

const stallLimits: HttpServerLimits = {
  requestReceiveTimeoutMs: 10_000,
  maxConnections: 100,
  maxConnectionsPerAddress: 100,
  maxRequestsPerConnection: 10_000,
  responseStallTimeoutMs: 500,
  maxAnswerBytesInFlight: 256 * 1024 * 1024,
};

describe("answers a client leaves unread", () => {
  it("answers pipelined requests one at a time, and closes a connection with more waiting than the cap", async () => {
    const { server } = await startServer(stallLimits);
    largeAnswersBuilt = 0;
    // 1,000 requests in one packet, no answer read: Node ran every handler at once and held 1,000 answers.
    const attacker = await rawConnection(server, { readAnswers: false });
    attacker.socket.write("GET /large HTTP/1.1\r\nHost: flowplane.test\r\n\r\n".repeat(1_000));
    const startedMs = performance.now();
    const closedMs = await attacker.closedAtMs;
    // Closed as soon as the 17th request waited behind the first, long before the stall deadline.
    expect(closedMs - startedMs).toBeLessThan(stallLimits.responseStallTimeoutMs);
    expect(largeAnswersBuilt).toBe(1);
    attacker.socket.destroy();

    // A client that pipelines within the cap and reads gets every answer, in order.
    const client = await rawConnection(server, { readAnswers: true });
    const requests = Array.from(
      { length: maxWaitingPipelinedRequests + 1 },
      (_, index) => `GET /ping?n=${index} HTTP/1.1\r\nHost: flowplane.test\r\n\r\n`,
    );
    client.socket.write(requests.join(""));
    for (
      let waitedMs = 0;
      client.received().split("HTTP/1.1 200").length <= requests.length && waitedMs < 5_000;
      waitedMs += 20
    ) {
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    expect(client.received().split("HTTP/1.1 200")).toHaveLength(requests.length + 1);
    expect(client.serverSide.destroyed).toBe(false);
    client.socket.destroy();
  }, 20_000);

  it("closes a connection whose answer the client leaves unread past the stall deadline, and only that one", async () => {
    const { server } = await startServer(stallLimits);
    // Long enough that the idle connection below is not closed by its keep-alive timeout during the test.
    server.server.keepAliveTimeout = 5_000;
    const unread = await rawConnection(server, { readAnswers: false });
    unread.socket.write("GET /large HTTP/1.1\r\nHost: flowplane.test\r\n\r\n");
    const startedMs = performance.now();
    // A handler at work for three times the stall deadline writes nothing meanwhile: its answer still arrives.
    const working = await rawConnection(server, { readAnswers: true });
    working.socket.write("GET /slow HTTP/1.1\r\nHost: flowplane.test\r\n\r\n");
    // An idle keep-alive connection has nothing to send: it stays open past the deadline and serves again.
    const idle = await rawConnection(server, { readAnswers: true });
    idle.socket.write("GET /ping HTTP/1.1\r\nHost: flowplane.test\r\n\r\n");

    const closedMs = await unread.closedAtMs;
    expect(closedMs - startedMs).toBeGreaterThanOrEqual(stallLimits.responseStallTimeoutMs - 50);
    expect(closedMs - startedMs).toBeLessThan(stallLimits.responseStallTimeoutMs + 2_000);
    // The handler answers 1.5 s after its request; a loaded machine may take longer, so the answer is waited for.
    await expect.poll(() => working.received(), { timeout: 5_000, interval: 50 }).toMatch(/\{"slow":true\}$/);
    expect(working.received()).toMatch(/^HTTP\/1\.1 200 [\s\S]*\{"slow":true\}$/);
    expect(idle.serverSide.destroyed).toBe(false);
    idle.socket.write("GET /ping HTTP/1.1\r\nHost: flowplane.test\r\n\r\n");
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(idle.received().split("HTTP/1.1 200")).toHaveLength(3);
    for (const connection of [unread, working, idle]) connection.socket.destroy();
  }, 20_000);

  it("holds large answers up to its budget, answers 503 beyond it, and takes them again once one is done", async () => {
    // A 9 MB model file asked for on 256 connections that read nothing held 5 GB: the budget bounds that.
    const { server } = await startServer({
      ...stallLimits,
      responseStallTimeoutMs: 30_000,
      // Two answers of /large (4 MiB and a little), more than the kernel's buffers take, while their clients read none.
      maxAnswerBytesInFlight: 9 * 1024 * 1024,
    });
    const url = `http://127.0.0.1:${(server.server.address() as AddressInfo).port}`;
    const unread = [
      await rawConnection(server, { readAnswers: false }),
      await rawConnection(server, { readAnswers: false }),
    ];
    for (const connection of unread) connection.socket.write("GET /large HTTP/1.1\r\nHost: flowplane.test\r\n\r\n");
    await new Promise((resolve) => setTimeout(resolve, 300));
    const built = largeAnswersBuilt;
    const refused = await requestFrom(otherClientAddress, `${url}/large`);
    expect(refused.status).toBe(503);
    expect(refused.headers["retry-after"]).toBe("5");
    expect(JSON.parse(refused.body)).toMatchObject({ type: "urn:flowplane:problem:unavailable", instance: "/large" });
    expect(largeAnswersBuilt).toBe(built + 1);
    // Small answers never wait for the budget.
    expect((await requestFrom(otherClientAddress, `${url}/ping`)).status).toBe(200);
    unread[0]?.socket.destroy();
    await unread[0]?.closedAtMs;
    const served = await requestFrom(otherClientAddress, `${url}/large`);
    expect(served.status).toBe(200);
    expect(served.body.length).toBeGreaterThan(4 * 1024 * 1024);
    unread[1]?.socket.destroy();
  }, 20_000);

  it("still closes an idle keep-alive connection at its keep-alive timeout", async () => {
    // The stall deadline must not take over Node's keep-alive timeout, which runs on the same timer: a listener of
    // the server's 'timeout' event kept every idle connection open for good (1,024 of them held every slot).
    const { server } = await startServer(stallLimits);
    server.server.keepAliveTimeout = 200;
    const idle = await rawConnection(server, { readAnswers: true });
    idle.socket.write("GET /ping HTTP/1.1\r\nHost: flowplane.test\r\n\r\n");
    const startedMs = performance.now();
    const closedMs = await idle.closedAtMs;
    // Node adds a second to the advertised timeout.
    expect(closedMs - startedMs).toBeLessThan(5_000);
    expect(idle.received()).toMatch(/^HTTP\/1\.1 200 /);
    idle.socket.destroy();
  }, 20_000);

  it("queues requests with an unknown expectation like any other, instead of Node answering each with a 417", async () => {
    // A stall deadline far beyond the bound below, so that only the pipeline cap can close the attacker's connection
    // within it, however loaded the machine.
    const { server } = await startServer({ ...stallLimits, responseStallTimeoutMs: 10_000 });
    const client = await rawConnection(server, { readAnswers: true });
    client.socket.write("GET /ping HTTP/1.1\r\nHost: flowplane.test\r\nExpect: x\r\n\r\n");
    for (let waitedMs = 0; !client.received().includes("pong") && waitedMs < 5_000; waitedMs += 20) {
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    expect(client.received()).toMatch(/^HTTP\/1\.1 200 [\s\S]*\{"pong":true\}$/);
    client.socket.destroy();
    // Pipelined without reading, they count against the cap: one more than it closes the connection.
    const attacker = await rawConnection(server, { readAnswers: false });
    attacker.socket.write("GET /large HTTP/1.1\r\nHost: flowplane.test\r\nExpect: x\r\n\r\n".repeat(1_000));
    const startedMs = performance.now();
    expect((await attacker.closedAtMs) - startedMs).toBeLessThan(3_000);
    attacker.socket.destroy();
  }, 20_000);
});

describe("connection caps within the open-file limit", () => {
  const logger = pino({ level: "silent" });
  const configured = { ...defaultHttpServerLimits, maxConnections: 1_024, maxConnectionsPerAddress: 256 };

  it("lowers the caps under a small open-file limit, so they engage before the process runs out of files", () => {
    // 512 files: 128 kept for the process, half of the rest for this server, less the 64 admitted beyond the cap.
    const lowered = withinFileLimit(configured, 512, logger);
    expect(lowered.maxConnections).toBe(128);
    expect(lowered.maxConnectionsPerAddress).toBe(128);
    expect(lowered.maxConnections + 64).toBeLessThanOrEqual((512 - 128) / 2);
    expect(withinFileLimit(configured, 150, logger).maxConnections).toBe(16);
  });

  it("applies them to every guarded server, read from the process's own limit", () => {
    // A child process under `ulimit -n 512`, since the limit is read from /proc/self/limits when the guard is set up.
    const script = `
      const { createServer } = await import("node:http");
      const { pino } = await import("pino");
      const { guardConnections } = await import(${JSON.stringify(fileURLToPath(new URL("../../src/http/limits.ts", import.meta.url)))});
      const server = createServer();
      guardConnections(server, ${JSON.stringify(configured)}, { logger: pino({ level: "silent" }), onHeadTimeout: () => {} });
      console.log(server.maxConnections);`;
    const output = execFileSync(
      "bash",
      ["-c", 'ulimit -n 512 && exec node --import tsx --input-type=module -e "$0"', script],
      { encoding: "utf8" },
    );
    // The lowered cap of 128, plus the 64 connections admitted beyond it for a moment (connection-admission.ts).
    expect(Number(output.trim())).toBe(128 + 64);
  });

  it("keeps the configured caps where the limit leaves room for them, or is unknown", () => {
    expect(withinFileLimit(configured, 1_048_576, logger)).toBe(configured);
    const small = { ...configured, maxConnections: 4, maxConnectionsPerAddress: 2 };
    expect(withinFileLimit(small, 150, logger)).toBe(small);
    expect(withinFileLimit(configured, undefined, logger)).toBe(configured);
  });
});
