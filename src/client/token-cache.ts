import { createHash, randomUUID } from "node:crypto";
import { chmod, mkdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import { homedir } from "node:os";
import { dirname, join } from "node:path";

/**
 * What identifies a cached token: the token endpoint, the client and a digest of its secret, the audience and the
 * requested scope.
 */
export interface TokenCacheKey {
  oauthUrl: string;
  clientId: string;
  /**
   * `credentialDigest(clientSecret)`: a token is reused only by a caller holding the secret it was issued for, so a
   * wrong or replaced secret is refused at once by the token endpoint instead of working until the cached token
   * expires.
   */
  secretDigest: string;
  audience: string;
  /** The requested scope (space-separated), or "" when none was requested. */
  scope: string;
}

/**
 * The digest of a client secret under which its tokens are cached. A one-way hash, so the cache file never holds the
 * secret itself; the platform's secrets carry 256 bits of entropy, which no dictionary reaches.
 */
export function secretDigest(clientSecret: string): string {
  return createHash("sha256").update("flowplane token cache\0").update(clientSecret).digest("base64url");
}

/** A token as the cache keeps it. */
export interface CachedToken {
  accessToken: string;
  tokenType: string;
  /** The granted scope the server reported (space-separated). */
  scope: string;
  audience: string;
  /** When the token was issued, in milliseconds since the epoch. */
  issuedAtMs: number;
  /** When the token expires (`exp`), in milliseconds since the epoch. */
  expiresAtMs: number;
  /** From this moment on the token is replaced by a new one instead of being reused. */
  refreshAtMs: number;
}

/** Serializes a cache key into the string under which it is stored. */
export function tokenCacheKeyString(key: TokenCacheKey): string {
  return JSON.stringify([key.oauthUrl, key.clientId, key.secretDigest, key.audience, key.scope]);
}

/** The default on-disk token cache: `~/.flowplane/tokens.json`. */
export function defaultTokenCacheFile(homeDirectory: string = homedir()): string {
  return join(homeDirectory, ".flowplane", "tokens.json");
}

interface CacheFileContent {
  version: 1;
  tokens: Record<string, CachedToken>;
}

function isCachedToken(value: unknown): value is CachedToken {
  const token = value as Partial<CachedToken> | null;
  return (
    typeof token === "object" &&
    token !== null &&
    typeof token.accessToken === "string" &&
    typeof token.tokenType === "string" &&
    typeof token.scope === "string" &&
    typeof token.audience === "string" &&
    typeof token.issuedAtMs === "number" &&
    typeof token.expiresAtMs === "number" &&
    typeof token.refreshAtMs === "number"
  );
}

/**
 * Tokens kept in one JSON file readable only by its owner (mode 0600, in a 0700 directory), so that separate
 * processes of the same user (e.g. successive CLI calls) reuse a token instead of asking for a new one each time.
 * Writes go to a temporary file that is then renamed over the old one, so a reader never sees a half-written file.
 * An unreadable or corrupt file counts as empty: the cache is an optimization, never a source of failure.
 */
export class TokenCacheFile {
  /** Creates a cache backed by the file at `path` (created on first write). */
  constructor(readonly path: string) {}

  private async readAll(): Promise<Record<string, CachedToken>> {
    let text: string;
    try {
      text = await readFile(this.path, "utf8");
    } catch {
      return {};
    }
    try {
      const content = JSON.parse(text) as Partial<CacheFileContent>;
      if (content.version !== 1 || typeof content.tokens !== "object" || content.tokens === null) return {};
      return Object.fromEntries(Object.entries(content.tokens).filter(([, token]) => isCachedToken(token)));
    } catch {
      return {};
    }
  }

  private async writeAll(tokens: Record<string, CachedToken>): Promise<void> {
    await mkdir(dirname(this.path), { recursive: true, mode: 0o700 });
    const temporaryPath = `${this.path}.${process.pid}.${randomUUID()}.tmp`;
    const content: CacheFileContent = { version: 1, tokens };
    try {
      await writeFile(temporaryPath, `${JSON.stringify(content, null, 2)}\n`, { mode: 0o600, flag: "wx" });
      // The mode given to writeFile is filtered by the umask; make sure it is exactly owner read/write.
      await chmod(temporaryPath, 0o600);
      await rename(temporaryPath, this.path);
    } catch (error) {
      await rm(temporaryPath, { force: true });
      throw error;
    }
  }

  /** The cached token for `key`, if one is stored and not yet expired at `nowMs`. */
  async read(key: TokenCacheKey, nowMs: number): Promise<CachedToken | undefined> {
    const token = (await this.readAll())[tokenCacheKeyString(key)];
    return token !== undefined && token.expiresAtMs > nowMs ? token : undefined;
  }

  /** Stores `token` under `key`, dropping every expired entry on the way. */
  async write(key: TokenCacheKey, token: CachedToken, nowMs: number): Promise<void> {
    const tokens = await this.readAll();
    tokens[tokenCacheKeyString(key)] = token;
    await this.writeAll(Object.fromEntries(Object.entries(tokens).filter(([, entry]) => entry.expiresAtMs > nowMs)));
  }

  /** Forgets the token stored under `key`, if any. */
  async remove(key: TokenCacheKey): Promise<void> {
    const tokens = await this.readAll();
    const name = tokenCacheKeyString(key);
    if (!(name in tokens)) return;
    delete tokens[name];
    await this.writeAll(tokens);
  }
}
