import { describe, expect, it } from "vitest";
import { ClientConnectionError } from "../../src/client/errors.js";
import { parseRetryAfterMs, sendWithRetry } from "../../src/client/http.js";
import { manualClock, scriptedServer, sendJson } from "./support.js";

describe("parseRetryAfterMs", () => {
  it("reads delay seconds and HTTP dates, and ignores anything else", () => {
    const nowMs = Date.parse("2026-01-01T00:00:00Z");
    expect(parseRetryAfterMs("7", nowMs)).toBe(7000);
    expect(parseRetryAfterMs("Thu, 01 Jan 2026 00:00:05 GMT", nowMs)).toBe(5000);
    expect(parseRetryAfterMs("Wed, 31 Dec 2025 23:59:00 GMT", nowMs)).toBe(0);
    expect(parseRetryAfterMs("soon", nowMs)).toBeUndefined();
    expect(parseRetryAfterMs(undefined, nowMs)).toBeUndefined();
  });
});

describe("sendWithRetry", () => {
  it("honours Retry-After given as an HTTP date on 503", async () => {
    const clock = manualClock(Date.parse("2026-01-01T00:00:00Z"));
    const server = await scriptedServer([
      (_request, response) => sendJson(response, 503, {}, { "retry-after": "Thu, 01 Jan 2026 00:00:03 GMT" }),
      (_request, response) => sendJson(response, 200, { ok: true }),
    ]);
    const response = await sendWithRetry({ method: "GET", url: `${server.url}/anything` }, { clock });
    expect(response.status).toBe(200);
    expect(clock.sleeps).toEqual([3000]);
    await server.close();
  });

  it("backs off exponentially when a 503 carries no Retry-After", async () => {
    const clock = manualClock(0);
    const server = await scriptedServer([(_request, response) => sendJson(response, 503, {})]);
    const response = await sendWithRetry(
      { method: "GET", url: `${server.url}/anything` },
      { clock, retry: { maxRetries: 3, fallbackWaitMs: 100 } },
    );
    expect(response.status).toBe(503);
    expect(clock.sleeps).toEqual([100, 200, 400]);
    expect(server.requests()).toBe(4);
    await server.close();
  });

  it("does not retry other errors", async () => {
    const clock = manualClock(0);
    const server = await scriptedServer([(_request, response) => sendJson(response, 500, {})]);
    const response = await sendWithRetry({ method: "GET", url: `${server.url}/anything` }, { clock });
    expect(response.status).toBe(500);
    expect(server.requests()).toBe(1);
    await server.close();
  });

  it("raises ClientConnectionError naming the URL when nothing listens", async () => {
    const server = await scriptedServer([(_request, response) => sendJson(response, 200, {})]);
    const url = `${server.url}/gone`;
    await server.close();
    const error = await sendWithRetry({ method: "GET", url }).catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(ClientConnectionError);
    expect((error as Error).message).toContain(url);
  });
});
