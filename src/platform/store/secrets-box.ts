/**
 * Encryption of secrets kept in the database (signing keys, the client-secret hash key, the diff-link key, and
 * later the Administration API's connector secrets) under a key-encryption key that is kept apart from the
 * database (see key-encryption-key.ts). A copy of the database alone then reveals none of them.
 *
 * A sealed value is text, so it fits the same column as the plain value did:
 *
 *     sealed:v1:<key id>:<base64url of nonce (12 bytes) || ciphertext || GCM tag (16 bytes)>
 *
 * AES-256-GCM with a random nonce per value; the purpose of the value (its table, column and, where the row has
 * one, its identity) is the associated data, so a sealed value copied into another column or row does not open.
 * The key id names the key-encryption key without revealing it, so a wrong key is reported as such rather than as
 * damaged data.
 */
import { createCipheriv, createDecipheriv, hkdfSync, randomBytes } from "node:crypto";
import { keyEncryptionKeyPattern } from "../../config/schema.js";

/** Bytes of a key-encryption key (AES-256). */
export const keyEncryptionKeyBytes = 32;

const sealedPrefix = "sealed:v1:";
const nonceBytes = 12;
const tagBytes = 16;
const keyIdBytes = 9;

/** Why a sealed value could not be opened. */
export type SealedValueProblem = "other-key" | "damaged";

/** Thrown when a sealed value does not open: sealed under another key, altered, or read for another purpose. */
export class SealedValueError extends Error {
  constructor(
    readonly problem: SealedValueProblem,
    /** The key id the value names (undefined when it names none). */
    readonly sealedKeyId: string | undefined,
    message: string,
  ) {
    super(message);
    this.name = "SealedValueError";
  }
}

/**
 * Decodes a key-encryption key written as base64 (standard or URL-safe alphabet, padding optional) of exactly 32
 * bytes; answers undefined for anything else. Surrounding whitespace (a newline at the end of a file) is ignored.
 */
export function parseKeyEncryptionKey(text: string): Buffer | undefined {
  const trimmed = text.trim();
  if (!keyEncryptionKeyPattern.test(trimmed)) return undefined;
  const key = Buffer.from(trimmed.replace(/=$/, ""), "base64");
  return key.length === keyEncryptionKeyBytes ? key : undefined;
}

/** A new random key-encryption key, written as `parseKeyEncryptionKey` reads it (standard base64). */
export function generateKeyEncryptionKey(): string {
  return randomBytes(keyEncryptionKeyBytes).toString("base64");
}

/** Whether `value` is a sealed value (rather than a plain one written before values were sealed). */
export function isSealed(value: string): boolean {
  return value.startsWith(sealedPrefix);
}

/**
 * Seals and opens secrets under one key-encryption key. The AES key and the key id are derived from it with
 * HKDF-SHA-256 under distinct labels, so publishing the key id says nothing about the key.
 */
export class SecretsBox {
  /** Identifies the key-encryption key (12 base64url characters); safe to show in messages. */
  readonly keyId: string;
  private readonly encryptionKey: Buffer;

  private constructor(keyEncryptionKey: Buffer) {
    if (keyEncryptionKey.length !== keyEncryptionKeyBytes) {
      throw new Error(`a key-encryption key must be ${keyEncryptionKeyBytes} bytes, got ${keyEncryptionKey.length}`);
    }
    this.encryptionKey = Buffer.from(
      hkdfSync("sha256", keyEncryptionKey, Buffer.alloc(0), "flowplane secrets box v1: AES-256-GCM key", 32),
    );
    this.keyId = Buffer.from(
      hkdfSync("sha256", keyEncryptionKey, Buffer.alloc(0), "flowplane secrets box v1: key id", keyIdBytes),
    ).toString("base64url");
  }

  /** A box for the 32-byte key-encryption key `key`. */
  static withKey(key: Buffer): SecretsBox {
    return new SecretsBox(key);
  }

  /** The text every value sealed under the key `keyId` starts with. */
  static sealedPrefixFor(keyId: string): string {
    return `${sealedPrefix}${keyId}:`;
  }

  /** The key id a sealed value names, or undefined when `value` is not sealed. */
  static keyIdOf(value: string): string | undefined {
    if (!isSealed(value)) return undefined;
    return value.slice(sealedPrefix.length).split(":")[0];
  }

  /** Seals `plaintext` for `purpose` (e.g. `signing_keys.private_key:<kid>`), with a fresh random nonce. */
  seal(plaintext: string, purpose: string): string {
    const nonce = randomBytes(nonceBytes);
    const cipher = createCipheriv("aes-256-gcm", this.encryptionKey, nonce, { authTagLength: tagBytes });
    cipher.setAAD(Buffer.from(purpose, "utf8"));
    const ciphertext = Buffer.concat([cipher.update(plaintext, "utf8"), cipher.final()]);
    const payload = Buffer.concat([nonce, ciphertext, cipher.getAuthTag()]).toString("base64url");
    return `${sealedPrefix}${this.keyId}:${payload}`;
  }

  /**
   * Opens a value sealed for `purpose`. Throws `SealedValueError` when it is sealed under another key, was
   * altered, or was sealed for another purpose; the message never contains the value.
   */
  open(sealed: string, purpose: string): string {
    if (!isSealed(sealed)) throw new SealedValueError("damaged", undefined, `the ${purpose} value is not sealed`);
    const parts = sealed.slice(sealedPrefix.length).split(":");
    const [keyId, payload] = parts;
    if (parts.length !== 2 || keyId === undefined || payload === undefined) {
      throw new SealedValueError("damaged", undefined, `the sealed ${purpose} value is malformed`);
    }
    if (keyId !== this.keyId) {
      throw new SealedValueError(
        "other-key",
        keyId,
        `the ${purpose} value is sealed under the key-encryption key ${keyId}, not under ${this.keyId}`,
      );
    }
    const bytes = Buffer.from(payload, "base64url");
    if (bytes.length < nonceBytes + tagBytes) {
      throw new SealedValueError("damaged", keyId, `the sealed ${purpose} value is truncated`);
    }
    const decipher = createDecipheriv("aes-256-gcm", this.encryptionKey, bytes.subarray(0, nonceBytes), {
      authTagLength: tagBytes,
    });
    decipher.setAAD(Buffer.from(purpose, "utf8"));
    decipher.setAuthTag(bytes.subarray(bytes.length - tagBytes));
    try {
      const plaintext = Buffer.concat([
        decipher.update(bytes.subarray(nonceBytes, bytes.length - tagBytes)),
        decipher.final(),
      ]);
      return plaintext.toString("utf8");
    } catch {
      throw new SealedValueError(
        "damaged",
        keyId,
        `the sealed ${purpose} value does not authenticate: it was altered or sealed for another purpose`,
      );
    }
  }
}
