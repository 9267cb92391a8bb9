import SqliteDatabase from "better-sqlite3";
import { afterEach, describe, expect, it } from "vitest";
import { callWithToken } from "../../support/http.js";
import { startTestPlatform } from "../../support/platform.js";
import { requestToken, tokenEndpointAnswer } from "../../support/tokens.js";

/** Things a test opened, closed after it whatever happened. */
const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

describe("a SQLite database locked by another process", () => {
  it("is waited for 5 s without holding up the process, then answered 503 on the API and the token endpoint", async () => {
    const platform = await startTestPlatform();
    cleanups.push(() => platform.close());
    const token = await requestToken(platform, platform.adminClient, "admin-api");
    const locker = new SqliteDatabase(`${platform.dataDirectory}/platform.sqlite`);
    locker.exec("BEGIN EXCLUSIVE");
    cleanups.push(async () => {
      if (locker.inTransaction) locker.exec("ROLLBACK");
      locker.close();
    });

    // The platform runs in this process: the longest pause of its event loop shows whether a waiting write blocks it.
    let longestPauseMs = 0;
    let lastTickMs = Date.now();
    const ticks = setInterval(() => {
      longestPauseMs = Math.max(longestPauseMs, Date.now() - lastTickMs);
      lastTickMs = Date.now();
    }, 10);
    const [invite, issued] = await Promise.all([
      callWithToken(platform.url, token, "POST", "/admin/members/locked@example.com", { orgRoles: ["developer"] }),
      tokenEndpointAnswer(platform),
    ]).finally(() => clearInterval(ticks));
    // The writes waited for the lock on timers, not in SQLite's busy handler, which held the thread (and every other
    // request of the process) for its whole 5 s wait.
    expect(longestPauseMs).toBeLessThan(1_000);
    const health = await fetch(`${platform.url}/health`);
    expect(invite.status).toBe(503);
    expect(invite.headers.get("retry-after")).toBe("5");
    expect(await invite.json()).toMatchObject({
      status: 503,
      detail: expect.stringMatching(/locked by another writer/),
    });
    expect(issued).toMatchObject({ status: 503, body: { error: "temporarily_unavailable" }, retryAfter: "5" });
    // The write-ahead log lets reads go on beside the writer holding the lock.
    expect(health.status).toBe(200);

    locker.exec("ROLLBACK");
    const retried = await callWithToken(platform.url, token, "POST", "/admin/members/locked@example.com", {
      orgRoles: ["developer"],
    });
    expect(retried.status).toBe(204);
  });
});
