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

  it("sends a POST or PATCH again only when the answer proves it was not processed", async () => {
    const unavailable = { type: "urn:flowplane:problem:unavailable", title: "u", status: 503, detail: "timeout" };
    const paused = { type: "urn:flowplane:problem:writes-paused", title: "p", status: 503, detail: "paused" };
    const cases: { method: "POST" | "PATCH" | "PUT" | "DELETE" | "GET"; status: number; body: unknown }[] = [
      { method: "POST", status: 503, body: unavailable },
      { method: "PATCH", status: 503, body: unavailable },
      { method: "POST", status: 503, body: {} },
      { method: "POST", status: 503, body: paused },
      { method: "PATCH", status: 429, body: {} },
      { method: "PUT", status: 503, body: unavailable },
      { method: "DELETE", status: 503, body: unavailable },
      { method: "GET", status: 503, body: unavailable },
    ];
    const requests: number[] = [];
    for (const { method, status, body } of cases) {
      const server = await scriptedServer([
        (_request, response) => sendJson(response, status, body, { "retry-after": "0" }),
        (_request, response) => sendJson(response, 201, {}),
      ]);
      const response = await sendWithRetry(
        { method, url: `${server.url}/clusters`, body: "{}" },
        { clock: manualClock(0) },
      );
      requests.push(server.requests());
      expect(response.status).toBe(server.requests() === 1 ? status : 201);
      await server.close();
    }
    expect(requests).toEqual([1, 1, 1, 2, 2, 2, 2, 2]);
  });

  it("retries a POST marked idempotent (a token request) after any 503", async () => {
    const server = await scriptedServer([
      (_request, response) => sendJson(response, 503, {}, { "retry-after": "0" }),
      (_request, response) => sendJson(response, 200, {}),
    ]);
    const response = await sendWithRetry(
      { method: "POST", url: `${server.url}/oauth/token`, body: "", idempotent: true },
      { clock: manualClock(0) },
    );
    expect(response.status).toBe(200);
    expect(server.requests()).toBe(2);
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
