import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import {
  generateKeyEncryptionKey,
  isSealed,
  parseKeyEncryptionKey,
  SealedValueError,
  SecretsBox,
} from "../../../src/platform/store/secrets-box.js";

/** The error `action` throws, which must be a `SealedValueError`. */
function sealedValueError(action: () => unknown): SealedValueError {
  try {
    action();
  } catch (error) {
    expect(error).toBeInstanceOf(SealedValueError);
    return error as SealedValueError;
  }
  throw new Error("the value opened");
}

describe("key-encryption key format", () => {
  it("reads base64 of exactly 32 bytes, in either alphabet, with or without padding", () => {
    const key = randomBytes(32);
    for (const text of [
      key.toString("base64"),
      key.toString("base64url"),
      key.toString("base64").replace(/=$/, ""),
      ` ${key.toString("base64")}\n`,
    ]) {
      expect(parseKeyEncryptionKey(text)?.equals(key), text).toBe(true);
    }
    expect(parseKeyEncryptionKey(generateKeyEncryptionKey())).toHaveLength(32);
  });

  it("refuses keys of another length and text that is not base64", () => {
    for (const text of [
      "",
      randomBytes(31).toString("base64"),
      randomBytes(33).toString("base64"),
      randomBytes(64).toString("hex"),
      `${randomBytes(32).toString("base64").slice(0, 42)}!=`,
    ]) {
      expect(parseKeyEncryptionKey(text), text).toBeUndefined();
    }
  });
});

describe("SecretsBox", () => {
  const box = SecretsBox.withKey(randomBytes(32));
  const plaintext = JSON.stringify({ kty: "RSA", d: "private exponent" });

  it("seals a value that opens again for the same purpose, and never contains the value", () => {
    const sealed = box.seal(plaintext, "signing_keys.private_key:kid-1");
    expect(isSealed(sealed)).toBe(true);
    expect(isSealed(plaintext)).toBe(false);
    expect(sealed).not.toContain("private exponent");
    expect(sealed).toMatch(/^sealed:v1:[A-Za-z0-9_-]{12}:[A-Za-z0-9_-]+$/);
    expect(SecretsBox.keyIdOf(sealed)).toBe(box.keyId);
    expect(box.open(sealed, "signing_keys.private_key:kid-1")).toBe(plaintext);
    expect(box.open(box.seal("", "empty"), "empty")).toBe("");
  });

  it("uses a fresh nonce for every value, so equal values do not look equal", () => {
    const first = box.seal(plaintext, "purpose");
    const second = box.seal(plaintext, "purpose");
    expect(first).not.toBe(second);
    expect(box.open(first, "purpose")).toBe(box.open(second, "purpose"));
  });

  it("binds a value to its purpose: moved to another column or row, it does not open", () => {
    const sealed = box.seal(plaintext, "signing_keys.private_key:kid-1");
    const refusal = sealedValueError(() => box.open(sealed, "signing_keys.private_key:kid-2"));
    expect(refusal.problem).toBe("damaged");
    expect(refusal.message).not.toContain("private exponent");
  });

  it("refuses a value altered in any byte", () => {
    const sealed = box.seal(plaintext, "purpose");
    const prefixLength = sealed.lastIndexOf(":") + 1;
    const payload = Buffer.from(sealed.slice(prefixLength), "base64url");
    for (const position of [0, 12, payload.length - 1]) {
      const altered = Buffer.from(payload);
      altered[position] = (altered[position] ?? 0) ^ 1;
      const tampered = `${sealed.slice(0, prefixLength)}${altered.toString("base64url")}`;
      expect(sealedValueError(() => box.open(tampered, "purpose")).problem).toBe("damaged");
    }
    expect(sealedValueError(() => box.open(`${sealed.slice(0, prefixLength)}AAAA`, "purpose")).problem).toBe("damaged");
    expect(sealedValueError(() => box.open(plaintext, "purpose")).problem).toBe("damaged");
  });

  it("names the other key when a value was sealed under another key-encryption key", () => {
    const other = SecretsBox.withKey(randomBytes(32));
    expect(other.keyId).not.toBe(box.keyId);
    const refusal = sealedValueError(() => other.open(box.seal(plaintext, "purpose"), "purpose"));
    expect(refusal.problem).toBe("other-key");
    expect(refusal.sealedKeyId).toBe(box.keyId);
    // The same key always has the same id, however it was written.
    const key = randomBytes(32);
    expect(SecretsBox.withKey(Buffer.from(key)).keyId).toBe(SecretsBox.withKey(key).keyId);
  });
});
