import { mkdtemp, readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  type CachedToken,
  defaultTokenCacheFile,
  secretDigest,
  TokenCacheFile,
  type TokenCacheKey,
} from "../../src/client/token-cache.js";

let temporaryDirectory: string;

beforeAll(async () => {
  temporaryDirectory = await mkdtemp(join(tmpdir(), "flowplane-token-cache-"));
});

afterAll(async () => {
  if (temporaryDirectory !== undefined) await rm(temporaryDirectory, { recursive: true, force: true });
});

const nowMs = Date.parse("2026-01-01T00:00:00Z");

function key(audience: string): TokenCacheKey {
  return {
    oauthUrl: "http://127.0.0.1:8088/oauth/token",
    clientId: "client",
    secretDigest: secretDigest("secret"),
    audience,
    scope: "",
  };
}

function token(accessToken: string, expiresAtMs: number): CachedToken {
  return {
    accessToken,
    tokenType: "Bearer",
    scope: "members",
    audience: "admin-api",
    issuedAtMs: expiresAtMs - 3_600_000,
    expiresAtMs,
    refreshAtMs: expiresAtMs - 60_000,
  };
}

describe("TokenCacheFile", () => {
  it("writes an owner-only file in an owner-only directory and leaves no temporary file behind", async () => {
    const directory = join(temporaryDirectory, "private");
    const cache = new TokenCacheFile(join(directory, "tokens.json"));
    await cache.write(key("admin-api"), token("one", nowMs + 3_600_000), nowMs);
    expect((await stat(cache.path)).mode & 0o777).toBe(0o600);
    expect((await stat(directory)).mode & 0o777).toBe(0o700);
    expect(await readdir(directory)).toEqual(["tokens.json"]);
    expect((await cache.read(key("admin-api"), nowMs))?.accessToken).toBe("one");
  });

  it("tightens a file that was readable by others when it rewrites it", async () => {
    const path = join(temporaryDirectory, "loose.json");
    await writeFile(path, JSON.stringify({ version: 1, tokens: {} }), { mode: 0o644 });
    await new TokenCacheFile(path).write(key("admin-api"), token("one", nowMs + 1_000), nowMs);
    expect((await stat(path)).mode & 0o777).toBe(0o600);
  });

  it("keeps entries per key, drops expired ones and forgets removed ones", async () => {
    const cache = new TokenCacheFile(join(temporaryDirectory, "keys.json"));
    await cache.write(key("admin-api"), token("admin", nowMs + 1_000), nowMs);
    await cache.write(key("modeler-api"), token("modeler", nowMs + 5_000), nowMs);
    expect((await cache.read(key("admin-api"), nowMs))?.accessToken).toBe("admin");
    expect((await cache.read(key("modeler-api"), nowMs))?.accessToken).toBe("modeler");

    expect(await cache.read(key("admin-api"), nowMs + 1_000)).toBeUndefined();
    await cache.write(key("gateway-api"), token("gateway", nowMs + 9_000), nowMs + 2_000);
    const content = JSON.parse(await readFile(cache.path, "utf8")) as { tokens: object };
    expect(Object.keys(content.tokens)).toHaveLength(2);

    await cache.remove(key("modeler-api"));
    expect(await cache.read(key("modeler-api"), nowMs)).toBeUndefined();
    expect((await cache.read(key("gateway-api"), nowMs))?.accessToken).toBe("gateway");
  });

  it("treats a missing, corrupt or foreign file as empty", async () => {
    const missing = new TokenCacheFile(join(temporaryDirectory, "missing.json"));
    expect(await missing.read(key("admin-api"), nowMs)).toBeUndefined();

    const corruptPath = join(temporaryDirectory, "corrupt.json");
    await writeFile(corruptPath, "{ not json");
    const corrupt = new TokenCacheFile(corruptPath);
    expect(await corrupt.read(key("admin-api"), nowMs)).toBeUndefined();
    await corrupt.write(key("admin-api"), token("fresh", nowMs + 1_000), nowMs);
    expect((await corrupt.read(key("admin-api"), nowMs))?.accessToken).toBe("fresh");

    const foreignPath = join(temporaryDirectory, "foreign.json");
    await writeFile(foreignPath, JSON.stringify({ version: 1, tokens: { x: { accessToken: 7 } } }));
    expect(await new TokenCacheFile(foreignPath).read(key("admin-api"), nowMs)).toBeUndefined();
  });

  it("lives under ~/.flowplane by default", () => {
    expect(defaultTokenCacheFile("/home/user")).toBe("/home/user/.flowplane/tokens.json");
  });
});
