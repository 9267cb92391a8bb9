import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import type { Kysely } from "kysely";
import { loadSecretSetting, secretSettingNames } from "../store/key-material.js";
import type { PlatformDatabase } from "../store/schema.js";
import type { SecretsBox } from "../store/secrets-box.js";

/** Name of the `settings` row holding the key of the client-secret hash (sealed, see store/key-material.ts). */
export const secretHashKeySetting = secretSettingNames.clientSecretHashKey;

/** Bytes of entropy in a generated client secret (256 bits). */
export const clientSecretBytes = 32;

/** Bytes of entropy in a generated client id. */
const clientIdBytes = 15;

/** Bytes of the HMAC key kept in the `settings` table. */
const hashKeyBytes = 32;

/** A new client id: 120 random bits as 20 URL-safe characters, which need no escaping in Basic or form bodies. */
export function generateClientId(): string {
  return randomUrlSafe(clientIdBytes);
}

/** A new client secret: 256 random bits, base64url-encoded (43 characters). */
export function generateClientSecret(): string {
  return randomUrlSafe(clientSecretBytes);
}

/** Draws before `randomUrlSafe` gives up; each draw starts with a dash or an underscore 1 time in 32. */
const MAX_DRAWS = 64;

/**
 * `bytes` random bytes as base64url that starts with a letter or a digit. Why: one id in 32 started with a dash, and
 * a command line takes such an argument for an option (`flowplane organization-clients delete -XziX…` answered with
 * its usage), so the client could not be named there without knowing `--`.
 */
function randomUrlSafe(bytes: number): string {
  for (let draw = 0; draw < MAX_DRAWS; draw += 1) {
    const text = randomBytes(bytes).toString("base64url");
    if (!text.startsWith("-") && !text.startsWith("_")) return text;
  }
  throw new Error(`invariant violated: ${MAX_DRAWS} random draws all started with a dash or an underscore`);
}

/**
 * Hashes and checks client secrets with HMAC-SHA-256 under a server key. A keyed hash (rather than a plain or
 * salted one) means a copy of the `clients` table alone does not allow offline guessing; the secrets carry 256 bits
 * of entropy, so a slow password hash would only cost throughput without adding strength.
 */
export class ClientSecretHasher {
  private readonly key: Buffer;
  /** Hash compared against when the client id is unknown, so the answer takes the same work either way. */
  private readonly dummyHash: Buffer;

  private constructor(key: Buffer) {
    if (key.length !== hashKeyBytes) {
      throw new Error(`the client-secret hash key must be ${hashKeyBytes} bytes, found ${key.length}`);
    }
    this.key = key;
    this.dummyHash = this.digest(generateClientSecret());
  }

  /**
   * Loads the hash key from the `settings` table (sealed under the store's key-encryption key), creating it on
   * first use; several replicas starting together converge on one key.
   */
  static async open(database: Kysely<PlatformDatabase>, secrets: SecretsBox): Promise<ClientSecretHasher> {
    const value = await loadSecretSetting(database, secrets, secretHashKeySetting, () =>
      randomBytes(hashKeyBytes).toString("base64url"),
    );
    return new ClientSecretHasher(Buffer.from(value, "base64url"));
  }

  /** The keyed hash of `secret`, as stored in `clients.secret_hash`. */
  hash(secret: string): string {
    return this.digest(secret).toString("base64url");
  }

  /**
   * Whether `secret` matches `storedHash` (undefined when the client id is unknown). The comparison is constant
   * time, and an unknown client costs the same HMAC as a known one, so timing reveals neither.
   */
  verify(secret: string, storedHash: string | undefined): boolean {
    const presented = this.digest(secret);
    const stored = storedHash === undefined ? undefined : Buffer.from(storedHash, "base64url");
    const comparable = stored !== undefined && stored.length === presented.length;
    const matches = timingSafeEqual(presented, comparable ? stored : this.dummyHash);
    return comparable && matches;
  }

  private digest(secret: string): Buffer {
    return createHmac("sha256", this.key).update(secret, "utf8").digest();
  }
}
