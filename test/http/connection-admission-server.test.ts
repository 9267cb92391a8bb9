/**
 * Which connection makes room at the cap, on real servers (connection-admission.ts): answers left unread make room
 * even with a pipelined request behind them, and an upload or a download that moves its bytes promptly is never
 * closed for a newcomer, however long it lasts; an idle keep-alive connection goes instead.
 */
import type { AddressInfo, Socket } from "node:net";
import { pino } from "pino";
import { Type } from "typebox";
import { afterEach, describe, expect, it } from "vitest";
import type { HttpServerLimits } from "../../src/http/limits.js";
import { createHttpServer, type HttpServer } from "../../src/http/server.js";
import { connectionCapLimits, openConnectionFrom, requestFrom } from "../support/http.js";

const started: HttpServer[] = [];
const opened: Socket[] = [];
const timers: NodeJS.Timeout[] = [];

afterEach(async () => {
  for (const timer of timers.splice(0)) clearTimeout(timer);
  for (const socket of opened.splice(0)) socket.destroy();
  await Promise.all(started.splice(0).map((server) => server.close()));
});

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const BIG = 32 * 1024 * 1024;

async function startServer(limits: HttpServerLimits) {
  const server = createHttpServer({
    logger: pino({ level: "silent" }),
    bodyLimitBytes: 16 * 1024 * 1024,
    trustProxy: false,
    limits,
  });
  server.post(
    "/echo",
    { schema: { body: Type.Object({ text: Type.String() }, { additionalProperties: false }) } },
    async (request) => ({ length: request.body.text.length }),
  );
  server.get("/ping", async () => ({ pong: true }));
  const big = Buffer.alloc(BIG, 120);
  server.get("/big", async (_request, reply) => reply.type("application/octet-stream").send(big));
  started.push(server);
  await server.listen({ host: "127.0.0.1", port: 0 });
  const { port } = server.server.address() as AddressInfo;
  return { server, url: `http://127.0.0.1:${port}`, port };
}

const ping = "GET /ping HTTP/1.1\r\nHost: flowplane.test\r\n\r\n";

async function idleKeepAlive(port: number, address: string) {
  const connection = await openConnectionFrom(port, address, opened);
  connection.socket.write(ping);
  await expect.poll(() => connection.received).toContain('{"pong":true}');
  return connection;
}

describe("making room at the connection cap", () => {
  it("makes room by closing connections that leave their answers unread, pipelined requests behind them or not", async () => {
    // 2 addresses x 2 connections (the per-address cap) fill a cap of 4.
    const { port, url } = await startServer(connectionCapLimits(4, 2));
    for (const address of ["127.0.0.3", "127.0.0.4"]) {
      for (let index = 0; index < 2; index += 1) {
        const connection = await openConnectionFrom(port, address, opened, false);
        connection.socket.write(
          "GET /big HTTP/1.1\r\nHost: flowplane.test\r\n\r\n" +
            "POST /echo HTTP/1.1\r\nHost: flowplane.test\r\nContent-Type: application/json\r\nContent-Length: 10000\r\n\r\n{",
        );
      }
    }
    await sleep(1_500);
    const statuses: (number | string)[] = [];
    for (let attempt = 0; attempt < 3; attempt += 1) {
      statuses.push(
        await requestFrom("127.0.0.9", `${url}/ping`, { timeoutMs: 2_000 }).then(
          (answer) => answer.status,
          () => "refused",
        ),
      );
      await sleep(1_100);
    }
    // The first newcomer's look finds the answers just written; a second later they show as stalled.
    expect(statuses.slice(1)).toEqual([200, 200]);
  }, 30_000);

  it("closes an idle keep-alive connection, not an upload arriving steadily for over a second", async () => {
    const { port, url } = await startServer(connectionCapLimits(2));
    const idle = await idleKeepAlive(port, "127.0.0.4");
    const upload = await openConnectionFrom(port, "127.0.0.3", opened);
    const text = "y".repeat(4 * 1024 * 1024);
    const body = JSON.stringify({ text });
    upload.socket.write(
      `POST /echo HTTP/1.1\r\nHost: flowplane.test\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`,
    );
    // 4 MB at ~1.6 MB/s: 64 KiB every 40 ms, about 2.6 s in all.
    let offset = 0;
    const sendNext = () => {
      if (upload.closed || offset >= body.length) return;
      upload.socket.write(body.slice(offset, offset + 64 * 1024));
      offset += 64 * 1024;
      timers.push(setTimeout(sendNext, 40));
    };
    sendNext();
    await sleep(1_300);
    expect((await requestFrom("127.0.0.9", `${url}/ping`, { timeoutMs: 2_000 })).status).toBe(200);
    await expect.poll(() => upload.received || upload.closed, { timeout: 5_000 }).toBeTruthy();
    expect({ uploadClosed: upload.closed, idleClosed: idle.closed }).toEqual({ uploadClosed: false, idleClosed: true });
    expect(upload.received).toContain(`{"length":${text.length}}`);
  }, 30_000);

  it("closes an idle keep-alive connection, not a download read steadily for over a second", async () => {
    const { port, url } = await startServer(connectionCapLimits(2));
    const idle = await idleKeepAlive(port, "127.0.0.4");
    const download = await openConnectionFrom(port, "127.0.0.3", opened, false);
    download.socket.on("data", (chunk: Buffer) => {
      download.bytes += chunk.length;
    });
    // Reads at ~10 MB/s (a 100 Mbit/s client): 32 MB in about 3.2 s.
    const startedAt = performance.now();
    const pace = () => {
      if (download.closed) return;
      const allowed = ((performance.now() - startedAt) / 1000) * 10 * 1024 * 1024;
      if (download.bytes < allowed) download.socket.resume();
      else download.socket.pause();
      timers.push(setTimeout(pace, 10));
    };
    download.socket.write("GET /big HTTP/1.1\r\nHost: flowplane.test\r\n\r\n");
    pace();
    await sleep(1_300);
    const readBefore = download.bytes;
    expect((await requestFrom("127.0.0.9", `${url}/ping`, { timeoutMs: 2_000 })).status).toBe(200);
    expect(readBefore).toBeGreaterThan(8 * 1024 * 1024);
    // Stop pacing and read the rest at once: a whole answer is its head plus 32 MB.
    for (const timer of timers.splice(0)) clearTimeout(timer);
    download.socket.resume();
    await expect.poll(() => download.closed || download.bytes >= BIG, { timeout: 10_000 }).toBe(true);
    await sleep(200);
    expect({ downloadWhole: download.bytes >= BIG, idleClosed: idle.closed }).toEqual({
      downloadWhole: true,
      idleClosed: true,
    });
  }, 30_000);
});
