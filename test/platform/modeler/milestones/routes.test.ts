import { request as httpRequest } from "node:http";
import { afterEach, describe, expect, it } from "vitest";
import { diffTimeoutMs } from "../../../../src/platform/modeler/milestones/diff.js";
import { startTestPlatform, type TestPlatform } from "../../../support/platform.js";
import { requestToken } from "../../../support/tokens.js";

/** Tracks whether a promise has settled, without awaiting it. */
function tracked<T>(promise: Promise<T>): { promise: Promise<T>; settled: () => boolean } {
  let settled = false;
  const watched = promise.finally(() => {
    settled = true;
  });
  watched.catch(() => undefined);
  return { promise: watched, settled: () => settled };
}

/**
 * Reads a URL from the client address `localAddress`. The platform listens on 127.0.0.1 and takes the client
 * address from the socket; every 127.0.0.0/8 address is loopback on Linux, so another one is another client.
 */
function getFrom(url: string, localAddress: string): Promise<{ status: number; retryAfter: string | undefined }> {
  return new Promise((resolve, reject) => {
    const outgoing = httpRequest(url, { localAddress, agent: false, timeout: 10_000 }, (response) => {
      response.resume();
      response.on("end", () => {
        const retryAfter = response.headers["retry-after"];
        resolve({
          status: response.statusCode ?? 0,
          retryAfter: typeof retryAfter === "string" ? retryAfter : undefined,
        });
      });
    });
    outgoing.on("timeout", () => outgoing.destroy(new Error("no answer within 10 s")));
    outgoing.on("error", reject);
    outgoing.end();
  });
}

/**
 * A form whose 20,000 fields are in a shuffled order: both contents have the same lines, so counting lines does not
 * refuse their diff, and the diff itself needs tens of thousands of changes, which take far longer than any limit
 * of these tests.
 */
function formWithFieldsInOrder(order: "sorted" | "shuffled"): string {
  const fields = Array.from({ length: 20_000 }, (_, index) => `  "field${index}": ${index},`);
  if (order === "shuffled") {
    let seed = 7;
    for (let index = fields.length - 1; index > 0; index--) {
      seed = (seed * 16_807) % 2_147_483_647;
      const other = seed % (index + 1);
      [fields[index], fields[other]] = [fields[other] as string, fields[index] as string];
    }
  }
  return `{\n${fields.join("\n")}\n  "end": true\n}\n`;
}

describe("milestone diffs in the worker pool, over HTTP", () => {
  let platform: TestPlatform | undefined;
  afterEach(async () => await platform?.close());

  it("keeps answering while a diff computes, refuses pool work beyond the queue, and stops a diff at the time limit", async () => {
    // Long enough that the checks below run while the diff still computes, also on a slow, loaded machine, and
    // below the diff's own time limit, after which it would answer 409 instead.
    const taskTimeLimitMs = 8_000;
    expect(taskTimeLimitMs).toBeLessThan(diffTimeoutMs);
    platform = await startTestPlatform({
      "service.platform.workers.threads": 1,
      "service.platform.workers.queueLength": 0,
      "service.platform.workers.taskTimeLimitMs": taskTimeLimitMs,
      "service.modeler.diffMaxChangedLines": 1_000_000,
    });
    const running = platform;
    const token = await requestToken(running, running.adminClient, "modeler-api");
    const call = async (method: string, path: string, body?: unknown) =>
      await fetch(`${running.url}/modeler/api/v1${path}`, {
        method,
        headers: {
          authorization: `Bearer ${token}`,
          ...(body === undefined ? {} : { "content-type": "application/json" }),
        },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
    const json = async <T>(response: Response, status = 200): Promise<T> => {
      const text = await response.text();
      expect(response.status, text.slice(0, 300)).toBe(status);
      return JSON.parse(text) as T;
    };
    const uploadSmallForm = async (projectId: string) =>
      await call("POST", "/files", { name: "small.form", content: '{"a": 1}', fileType: "form", projectId });

    // Creating the files validates their content in the worker pool, which starts its one worker.
    const project = await json<{ id: string }>(await call("POST", "/projects", { name: "diffs" }));
    const file = await json<{ id: string }>(
      await call("POST", "/files", {
        name: "large.form",
        content: formWithFieldsInOrder("sorted"),
        fileType: "form",
        projectId: project.id,
      }),
    );
    const first = await json<{ id: string }>(await call("POST", "/milestones", { name: "sorted", fileId: file.id }));
    await json(await call("PATCH", `/files/${file.id}`, { revision: 1, content: formWithFieldsInOrder("shuffled") }));
    const second = await json<{ id: string }>(await call("POST", "/milestones", { name: "shuffled", fileId: file.id }));
    const url = await (await call("GET", `/milestones/compare/${first.id}...${second.id}`)).text();

    let diff = tracked(fetch(url));
    // Work for the pool beyond its (empty) queue is refused at once once the diff occupies the only worker. Until
    // the diff request has reached the worker, a small upload still finds it free and is served (file names need not
    // be unique), so uploads go on until one is refused: bounded (30 s, on a loaded machine the diff's request may
    // take seconds to reach the worker), and ordered by the pool, not by time. The race goes the other way too: a
    // diff that reaches the pool while an upload holds the worker is refused, and is asked for again.
    let refused = await uploadSmallForm(project.id);
    const deadlineMs = Date.now() + 30_000;
    while (refused.status !== 503 && Date.now() < deadlineMs) {
      expect(refused.status, await refused.text()).toBe(200);
      if (diff.settled()) {
        const refusedDiff = await diff.promise;
        expect(refusedDiff.status, await refusedDiff.text()).toBe(503);
        diff = tracked(fetch(url));
      }
      await new Promise((resolve) => setTimeout(resolve, 10));
      refused = await uploadSmallForm(project.id);
    }
    expect(refused.status).toBe(503);
    expect(refused.headers.get("retry-after")).toBe("1");
    expect(refused.headers.get("content-type")).toContain("application/problem+json");
    // Meanwhile the event loop answers a token request and a health check.
    expect((await fetch(`${running.url}/health`)).status).toBe(200);
    await requestToken(running, running.adminClient, "admin-api");
    // A large body is refused before it is read, and its connection closed so that the rest is not sent.
    const largeForm = JSON.stringify({ padding: "x".repeat(200_000) });
    const refusedUnread = await call("POST", "/files", {
      name: "large.form",
      content: largeForm,
      fileType: "form",
      projectId: project.id,
    });
    expect(refusedUnread.status).toBe(503);
    expect(refusedUnread.headers.get("connection")).toBe("close");
    expect(diff.settled()).toBe(false);

    const stopped = await diff.promise;
    const problem = await json<{ detail: string }>(stopped, 503);
    expect(problem.detail).toContain(`longer than the limit of ${taskTimeLimitMs} ms`);
    // The stuck worker was replaced: the pool serves the next task.
    await json(await uploadSmallForm(project.id));
    // The test's own bounds (30 s of uploads, then the 8 s limit) exceed the default timeout on a loaded machine.
  }, 60_000);

  it("limits diff-link requests per address with 429 and Retry-After, forged links included", async () => {
    platform = await startTestPlatform({
      "service.modeler.diffLinkRateLimit.burst": 3,
      "service.modeler.diffLinkRateLimit.refillPerSecond": 0.001,
      "service.modeler.diffLinkRateLimit.blockSeconds": 60,
    });
    const running = platform;
    const token = await requestToken(running, running.adminClient, "modeler-api");
    const call = async (method: string, path: string, body: unknown) => {
      const response = await fetch(`${running.url}/modeler/api/v1${path}`, {
        method,
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
        body: JSON.stringify(body),
      });
      expect(response.status).toBe(200);
      return (await response.json()) as { id: string };
    };
    const project = await call("POST", "/projects", { name: "limits" });
    const file = await call("POST", "/files", {
      name: "f",
      content: '{"a": 1}',
      fileType: "form",
      projectId: project.id,
    });
    const first = await call("POST", "/milestones", { name: "one", fileId: file.id });
    const second = await call("POST", "/milestones", { name: "two", fileId: file.id });
    const compared = await fetch(`${running.url}/modeler/api/v1/milestones/compare/${first.id}...${second.id}`, {
      headers: { authorization: `Bearer ${token}` },
    });
    const url = await compared.text();
    const forged = new URL(url);
    forged.searchParams.set("signature", "A".repeat(43));

    expect((await getFrom(url, "127.0.0.1")).status).toBe(200);
    expect((await getFrom(forged.href, "127.0.0.1")).status).toBe(403);
    expect((await getFrom(url, "127.0.0.1")).status).toBe(200);
    const limited = await getFrom(url, "127.0.0.1");
    expect(limited.status).toBe(429);
    // The address may come back when the block is over and a token has refilled (one in 1,000 s here).
    expect(Number(limited.retryAfter)).toBeGreaterThanOrEqual(60);
    const problem = await fetch(url);
    expect(problem.status).toBe(429);
    expect(problem.headers.get("content-type")).toContain("application/problem+json");
    // Another address has its own bucket; requests needing a token are not limited by it.
    expect((await getFrom(url, "127.0.0.2")).status).toBe(200);
    expect((await requestToken(running, running.adminClient, "modeler-api")).length).toBeGreaterThan(0);
  });
});
