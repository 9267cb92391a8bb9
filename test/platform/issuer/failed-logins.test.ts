import { request as httpRequest } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestPlatform, type TestPlatform } from "../../support/platform.js";

/** What the token endpoint answered: status, the `Retry-After` header and the RFC 6749 error, if any. */
interface TokenAnswer {
  status: number;
  retryAfter: string | undefined;
  error: string | undefined;
  errorDescription: string | undefined;
}

/**
 * Posts a token request from `localAddress`. The platform listens on 127.0.0.1 and takes the client address from
 * the socket; every 127.0.0.0/8 address is the loopback interface on Linux, so binding the client's end to another
 * of them makes the request come from a different address, as another machine's would.
 */
function requestToken(
  platformUrl: string,
  localAddress: string,
  credentials: { clientId: string; clientSecret: string },
): Promise<TokenAnswer> {
  const body = new URLSearchParams({
    grant_type: "client_credentials",
    audience: "admin-api",
    client_id: credentials.clientId,
    client_secret: credentials.clientSecret,
  }).toString();
  return new Promise((resolve, reject) => {
    const outgoing = httpRequest(
      `${platformUrl}/oauth/token`,
      {
        method: "POST",
        localAddress,
        agent: false,
        timeout: 10_000,
        headers: { "content-type": "application/x-www-form-urlencoded", "content-length": Buffer.byteLength(body) },
      },
      (response) => {
        const chunks: Buffer[] = [];
        response.on("data", (chunk: Buffer) => chunks.push(chunk));
        response.on("end", () => {
          const parsed = JSON.parse(Buffer.concat(chunks).toString("utf8")) as Record<string, unknown>;
          const retryAfter = response.headers["retry-after"];
          resolve({
            status: response.statusCode ?? 0,
            retryAfter: typeof retryAfter === "string" ? retryAfter : undefined,
            error: typeof parsed.error === "string" ? parsed.error : undefined,
            errorDescription: typeof parsed.error_description === "string" ? parsed.error_description : undefined,
          });
        });
        response.on("error", reject);
      },
    );
    outgoing.on("timeout", () => outgoing.destroy(new Error("the token request timed out")));
    outgoing.on("error", reject);
    outgoing.end(body);
  });
}

describe("failed logins from another address (real platform)", () => {
  let platform: TestPlatform;
  const attackerAddress = "127.0.0.2";
  const ownerAddress = "127.0.0.3";

  beforeAll(async () => {
    // The rate limit of the contract (burst 5, one a second, 60 s block) and a failure delay far longer than the
    // test, so that which requests are refused does not depend on how fast this machine runs them.
    platform = await startTestPlatform({
      "service.rateLimit.burst": 5,
      "service.rateLimit.refillPerSecond": 1,
      "service.rateLimit.blockSeconds": 60,
      "service.rateLimit.failureDelayBaseMs": 60_000,
      "service.rateLimit.failureDelayMaxMs": 600_000,
    });
  });
  afterAll(async () => {
    await platform?.close();
  });

  it("keeps serving the client from its address while an attacker's wrong secrets throttle only the attacker", async () => {
    const owner = platform.adminClient;
    const guess = { clientId: owner.clientId, clientSecret: "a-wrong-guess" };

    // At most five requests from each address before the last one: within the per-address burst, so every refusal
    // in the loop comes from the failure delay.
    const firstGuess = await requestToken(platform.url, attackerAddress, guess);
    expect(firstGuess).toMatchObject({ status: 401, error: "invalid_client" });
    for (let attempt = 0; attempt < 4; attempt++) {
      // Before issue 18 these were 429: the failure count was kept per client id, whatever address failed.
      expect(await requestToken(platform.url, ownerAddress, owner)).toMatchObject({ status: 200 });
      const throttled = await requestToken(platform.url, attackerAddress, guess);
      expect(throttled).toMatchObject({ status: 429, error: "slow_down" });
      expect(throttled.errorDescription).toMatch(/failed authentications/);
      expect(Number(throttled.retryAfter)).toBeGreaterThan(1);
    }
    // Even the right secret waits at the address that failed: the delay slows guessing, whatever the guess.
    expect(await requestToken(platform.url, attackerAddress, owner)).toMatchObject({ status: 429, error: "slow_down" });
    expect(await requestToken(platform.url, ownerAddress, owner)).toMatchObject({ status: 200 });
  });
});
