import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { probeConnectionLimits } from "../support/http.js";
import { startTestPlatform, type TestPlatform } from "../support/platform.js";

describe("the platform's HTTP server", () => {
  let platform: TestPlatform;

  beforeAll(async () => {
    platform = await startTestPlatform({
      "service.http.maxConnectionsPerAddress": 3,
      "service.http.requestReceiveTimeoutMs": 2_000,
    });
  });
  afterAll(async () => await platform?.close());

  it("applies the connection limits and the request deadline of service.http", async () => {
    const probe = await probeConnectionLimits(platform.url, {
      count: 10,
      otherClientPath: "/.well-known/jwks.json",
      timeoutMs: 20_000,
    });
    expect(probe.otherClientStatus).toBe(200);
    expect(probe.unanswered).toBe(7);
    expect(probe.answered).toHaveLength(3);
    for (const answer of probe.answered) expect(answer).toMatch(/^HTTP\/1\.1 408 [\s\S]*request-timeout/);
  }, 30_000);
});
