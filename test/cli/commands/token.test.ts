import { stat } from "node:fs/promises";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { decodeJwt } from "jose";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { exitCodes } from "../../../src/cli/io.js";
import { type CliFixture, startCliFixture } from "../support.js";

let fixture: CliFixture;

beforeAll(async () => {
  fixture = await startCliFixture();
});

afterAll(async () => {
  await fixture?.close();
});

describe("flowplane token", () => {
  it("prints a token for the SERVICE_* client and reuses it from the 0600 cache file", async () => {
    const first = await fixture.cli(["token"]);
    expect(first).toMatchObject({ exitCode: exitCodes.ok, stderr: "" });
    const token = first.stdout.trim();
    expect(decodeJwt(token)).toMatchObject({ aud: "admin-api", sub: fixture.platform.adminClient.clientId });
    const cacheFile = fixture.clientEnvironment.SERVICE_CONSOLE_TOKEN_CACHE_FILE!;
    expect((await stat(cacheFile)).mode & 0o777).toBe(0o600);

    const second = await fixture.cli(["token", "--json"]);
    expect(second.exitCode).toBe(exitCodes.ok);
    const description = JSON.parse(second.stdout) as Record<string, unknown>;
    expect(description).toMatchObject({
      access_token: token,
      token_type: "Bearer",
      audience: "admin-api",
      source: "disk",
    });
    expect(description.expires_in).toBeGreaterThan(0);
    // The token's lifetime on this machine's clock, from when it was asked for: within a second of its `exp` here.
    expect(Math.abs(Date.parse(String(description.expires_at)) - (decodeJwt(token).exp ?? 0) * 1000)).toBeLessThan(
      2_000,
    );
  });

  it("asks for another audience and a narrower scope", async () => {
    const result = await fixture.cli(["token", "--audience", "modeler-api", "--scope", "modeler:read", "--json"]);
    expect(result.exitCode).toBe(exitCodes.ok);
    const description = JSON.parse(result.stdout) as { access_token: string; scope: string };
    expect(description.scope).toBe("modeler:read");
    expect(decodeJwt(description.access_token).aud).toBe("modeler-api");
  });

  it("takes the default audience from SERVICE_CONSOLE_OAUTH_AUDIENCE", async () => {
    const result = await fixture.cli(["token"], {
      ...fixture.clientEnvironment,
      SERVICE_CONSOLE_OAUTH_AUDIENCE: "modeler-api",
    });
    expect(result.exitCode).toBe(exitCodes.ok);
    expect(decodeJwt(result.stdout.trim()).aud).toBe("modeler-api");
  });

  it("exits 3 when the client cannot authenticate", async () => {
    const result = await fixture.cli(["token"], {
      ...fixture.clientEnvironment,
      SERVICE_CONSOLE_CLIENT_SECRET: "wrong-secret-wrong-secret-wrong-secret",
      SERVICE_CONSOLE_TOKEN_CACHE_FILE: "none",
    });
    expect(result.exitCode).toBe(exitCodes.authentication);
    expect(result.stderr).toContain("invalid_client");
    expect(result.stdout).toBe("");
  });

  it("exits 1 when the audience is not allowed for the client", async () => {
    const result = await fixture.cli(["token", "--audience", "no-such-api"]);
    expect(result.exitCode).toBe(exitCodes.failure);
    expect(result.stderr).toContain("invalid_target");
  });

  it("exits 1 on a rate limit, saying when to retry in one sentence", async () => {
    // A token endpoint that always answers as the platform's does once an address is over its rate.
    const limited = createServer((_request, response) => {
      response.writeHead(400, { "content-type": "application/json", "retry-after": "56" });
      response.end(
        JSON.stringify({
          error: "slow_down",
          error_description: "Too many token requests from this address; retry later.",
        }),
      );
    });
    await new Promise<void>((resolve) => limited.listen(0, "127.0.0.1", resolve));
    try {
      const result = await fixture.cli(["token"], {
        ...fixture.clientEnvironment,
        SERVICE_OAUTH_URL: `http://127.0.0.1:${(limited.address() as AddressInfo).port}/oauth/token`,
        SERVICE_CONSOLE_TOKEN_CACHE_FILE: "none",
      });
      expect(result.exitCode).toBe(exitCodes.failure);
      expect(result.stderr).toBe(
        "error: token request failed: slow_down: Too many token requests from this address; retry later (retry after 56 s)\n",
      );
    } finally {
      await new Promise((resolve) => limited.close(resolve));
    }
  });

  it("exits 2 naming every missing client variable", async () => {
    const result = await fixture.cli(["token"], {});
    expect(result.exitCode).toBe(exitCodes.usage);
    expect(result.stderr).toContain("SERVICE_CONSOLE_CLIENT_ID");
    expect(result.stderr).toContain("SERVICE_CONSOLE_CLIENT_SECRET");
  });

  it("exits 1 naming the URL when the platform cannot be reached", async () => {
    const result = await fixture.cli(["token"], {
      ...fixture.clientEnvironment,
      SERVICE_OAUTH_URL: "http://127.0.0.1:1/oauth/token",
      SERVICE_CONSOLE_TOKEN_CACHE_FILE: "none",
    });
    expect(result.exitCode).toBe(exitCodes.failure);
    expect(result.stderr).toContain("http://127.0.0.1:1/oauth/token");
  });
});
