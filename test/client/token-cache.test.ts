import { execFileSync } from "node:child_process";
import { chmod, chown, lstat, mkdir, mkdtemp, readdir, readFile, rm, stat, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  type CachedToken,
  defaultTokenCacheFile,
  maxTokenCacheFileBytes,
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

describe("TokenCacheFile and what sits at its path", () => {
  const fresh = token("fresh-token", nowMs + 3_600_000);

  /** A 0700 directory holding a valid 0600 cache file; returns the cache file's path. */
  async function privateCache(name: string): Promise<string> {
    const directory = join(temporaryDirectory, name);
    await mkdir(directory, { mode: 0o700 });
    const path = join(directory, "tokens.json");
    await new TokenCacheFile(path).write(key("admin-api"), fresh, nowMs);
    return path;
  }

  it("ignores a FIFO at the path without waiting for a writer, and replaces it on the next write", async () => {
    const directory = join(temporaryDirectory, "fifo");
    await mkdir(directory, { mode: 0o700 });
    const path = join(directory, "tokens.json");
    execFileSync("mkfifo", [path]);
    const cache = new TokenCacheFile(path);
    expect(await cache.read(key("admin-api"), nowMs)).toBeUndefined();
    await cache.write(key("admin-api"), fresh, nowMs);
    expect((await lstat(path)).isFile()).toBe(true);
    expect(await cache.read(key("admin-api"), nowMs)).toEqual(fresh);
  });

  it("does not follow a symbolic link at the path (one to /dev/zero would be read until memory ran out)", async () => {
    const directory = join(temporaryDirectory, "link");
    await mkdir(directory, { mode: 0o700 });
    const path = join(directory, "tokens.json");
    const target = await privateCache("link-target");
    await symlink(target, path);
    expect(await new TokenCacheFile(path).read(key("admin-api"), nowMs)).toBeUndefined();
    await symlink("/dev/zero", join(directory, "zero.json"));
    expect(await new TokenCacheFile(join(directory, "zero.json")).read(key("admin-api"), nowMs)).toBeUndefined();
  });

  it("ignores a file others may read or write, one larger than 1 MiB, and one of another user", async () => {
    const open = await privateCache("open-file");
    await chmod(open, 0o640);
    expect(await new TokenCacheFile(open).read(key("admin-api"), nowMs)).toBeUndefined();
    await chmod(open, 0o600);
    expect(await new TokenCacheFile(open).read(key("admin-api"), nowMs)).toEqual(fresh);

    const large = await privateCache("large-file");
    const text = await readFile(large, "utf8");
    await writeFile(large, `${text}${" ".repeat(maxTokenCacheFileBytes)}`);
    expect(await new TokenCacheFile(large).read(key("admin-api"), nowMs)).toBeUndefined();

    if (process.getuid?.() === 0) {
      const foreign = await privateCache("foreign-file");
      await chown(foreign, 65534, 65534);
      expect(await new TokenCacheFile(foreign).read(key("admin-api"), nowMs)).toBeUndefined();
    }
  });

  it("narrows its own directory to 0700, and does not use a directory others may write to", async () => {
    const own = join(temporaryDirectory, "own-open");
    await mkdir(own);
    await chmod(own, 0o777);
    const ownCache = new TokenCacheFile(join(own, "tokens.json"), { ownDirectory: true });
    await ownCache.write(key("admin-api"), fresh, nowMs);
    expect((await stat(own)).mode & 0o777).toBe(0o700);
    expect(await ownCache.read(key("admin-api"), nowMs)).toEqual(fresh);

    const chosen = await privateCache("chosen-open");
    await chmod(dirname(chosen), 0o777);
    const warnings: string[] = [];
    const cache = new TokenCacheFile(chosen, { warn: (message) => warnings.push(message) });
    expect(await cache.read(key("admin-api"), nowMs)).toBeUndefined();
    await cache.write(key("other-api"), fresh, nowMs);
    expect(await cache.read(key("other-api"), nowMs)).toBeUndefined();
    expect((await stat(dirname(chosen))).mode & 0o777).toBe(0o777);
    expect(warnings).toEqual([
      `The token cache in ${dirname(chosen)} is not used: other users may write to the directory.`,
    ]);

    if (process.getuid?.() === 0) {
      const foreign = await privateCache("foreign-directory");
      await chown(dirname(foreign), 65534, 65534);
      const foreignWarnings: string[] = [];
      const foreignCache = new TokenCacheFile(foreign, {
        ownDirectory: true,
        warn: (message) => foreignWarnings.push(message),
      });
      expect(await foreignCache.read(key("admin-api"), nowMs)).toBeUndefined();
      expect(foreignWarnings).toHaveLength(1);
      expect(foreignWarnings[0]).toContain("belongs to another user");
    }
  });
});
