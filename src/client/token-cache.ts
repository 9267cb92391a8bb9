import { createHash, randomUUID } from "node:crypto";
import { constants } from "node:fs";
import { chmod, lstat, mkdir, open, rename, rm, stat, writeFile } from "node:fs/promises";
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
    Number.isFinite(token.issuedAtMs) &&
    Number.isFinite(token.expiresAtMs) &&
    Number.isFinite(token.refreshAtMs)
  );
}

/** Largest cache file read; a cache of a few dozen tokens takes a few KiB, so anything larger is not ours. */
export const maxTokenCacheFileBytes = 1024 * 1024;

/** Options of a `TokenCacheFile`. */
export interface TokenCacheFileOptions {
  /**
   * True when the cache's directory is flowplane's own (`~/.flowplane`): an existing one owned by the user is then
   * narrowed to 0700. A directory the user named is left as it is.
   */
  ownDirectory?: boolean | undefined;
  /** Receives the one warning given when the directory is not safe to keep tokens in; silent when absent. */
  warn?: ((message: string) => void) | undefined;
}

/**
 * The text of the file at `path` when it is safe to trust: a regular file (not a FIFO, device or symbolic link, which
 * could hang the read or never end it) owned by this user, neither readable nor writable by others, and at most
 * `maxTokenCacheFileBytes` long. Undefined otherwise, or when it cannot be read.
 */
async function readTrustedFile(path: string): Promise<string | undefined> {
  let handle: Awaited<ReturnType<typeof open>>;
  try {
    // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
    handle = await open(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch {
    return undefined;
  }
  try {
    const info = await handle.stat();
    const uid = process.getuid?.();
    if (!info.isFile() || (uid !== undefined && info.uid !== uid) || (info.mode & 0o066) !== 0) return undefined;
    if (info.size > maxTokenCacheFileBytes) return undefined;
    const buffer = Buffer.alloc(maxTokenCacheFileBytes + 1);
    let length = 0;
    for (;;) {
      const { bytesRead } = await handle.read(buffer, length, buffer.byteLength - length, length);
      if (bytesRead === 0) break;
      length += bytesRead;
      // It grew past the bound while being read.
      if (length > maxTokenCacheFileBytes) return undefined;
    }
    return buffer.subarray(0, length).toString("utf8");
  } catch {
    return undefined;
  } finally {
    await handle.close();
  }
}

/**
 * Tokens kept in one JSON file readable only by its owner (mode 0600, in a 0700 directory), so that separate
 * processes of the same user (e.g. successive CLI calls) reuse a token instead of asking for a new one each time.
 * Writes go to a temporary file that is then renamed over the old one, so a reader never sees a half-written file.
 * An unreadable, corrupt or untrusted file (see `readTrustedFile`) counts as empty and is replaced on the next write:
 * the cache is an optimization, never a source of failure.
 */
export class TokenCacheFile {
  private readonly ownDirectory: boolean;
  private readonly warn: ((message: string) => void) | undefined;
  private directoryUsable: Promise<boolean> | undefined;

  /** Creates a cache backed by the file at `path` (created on first write). */
  constructor(
    readonly path: string,
    options: TokenCacheFileOptions = {},
  ) {
    this.ownDirectory = options.ownDirectory ?? false;
    this.warn = options.warn;
  }

  /** Whether the cache's directory may hold tokens; checked once, with at most one warning. */
  private usable(): Promise<boolean> {
    this.directoryUsable ??= this.checkDirectory();
    return this.directoryUsable;
  }

  /**
   * A directory another user owns, or one others may write to, lets them replace the cache file (with tokens of
   * their choosing, or a link to one of ours): the cache is then not used. flowplane's own directory, when the user
   * owns it, is narrowed to 0700 instead.
   */
  private async checkDirectory(): Promise<boolean> {
    const directory = dirname(this.path);
    let entry: Awaited<ReturnType<typeof lstat>>;
    try {
      entry = await lstat(directory);
    } catch (error) {
      // A missing directory is created 0700 on the first write.
      return (error as NodeJS.ErrnoException).code === "ENOENT";
    }
    const info = entry.isSymbolicLink() ? await stat(directory).catch(() => undefined) : entry;
    const uid = process.getuid?.();
    const refuse = (reason: string): boolean => {
      this.warn?.(`The token cache in ${directory} is not used: ${reason}.`);
      return false;
    };
    if (info === undefined || !info.isDirectory()) return refuse("it is not a directory");
    if (uid !== undefined && info.uid !== uid) return refuse("the directory belongs to another user");
    if ((info.mode & 0o077) !== 0 && this.ownDirectory && !entry.isSymbolicLink()) {
      try {
        await chmod(directory, 0o700);
        return true;
      } catch {
        return refuse("the directory is open to other users and cannot be narrowed to 0700");
      }
    }
    if ((info.mode & 0o022) !== 0) return refuse("other users may write to the directory");
    return true;
  }

  private async readAll(): Promise<Record<string, CachedToken>> {
    if (!(await this.usable())) return {};
    const text = await readTrustedFile(this.path);
    if (text === undefined) return {};
    try {
      const content = JSON.parse(text) as Partial<CacheFileContent>;
      if (content.version !== 1 || typeof content.tokens !== "object" || content.tokens === null) return {};
      return Object.fromEntries(Object.entries(content.tokens).filter(([, token]) => isCachedToken(token)));
    } catch {
      return {};
    }
  }

  private async writeAll(tokens: Record<string, CachedToken>): Promise<void> {
    if (!(await this.usable())) return;
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
