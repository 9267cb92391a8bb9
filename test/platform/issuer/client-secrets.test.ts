import { afterEach, describe, expect, it } from "vitest";
import {
  ClientSecretHasher,
  generateClientId,
  generateClientSecret,
  secretHashKeySetting,
} from "../../../src/platform/issuer/client-secrets.js";
import { settingPurpose } from "../../../src/platform/store/key-material.js";
import { isSealed } from "../../../src/platform/store/secrets-box.js";
import { databaseKinds } from "../../support/databases.js";
import { openSecondHandle, openTestStore } from "./support.js";

describe("client secret generation", () => {
  it("makes secrets of 256 random bits and distinct URL-safe ids", () => {
    const secrets = new Set(Array.from({ length: 100 }, () => generateClientSecret()));
    expect(secrets.size).toBe(100);
    for (const secret of secrets) {
      expect(secret).toMatch(/^[A-Za-z0-9_-]{43}$/);
      expect(Buffer.from(secret, "base64url")).toHaveLength(32);
    }
    const ids = new Set(Array.from({ length: 100 }, () => generateClientId()));
    expect(ids.size).toBe(100);
    for (const id of ids) expect(id).toMatch(/^[A-Za-z0-9_-]{20,}$/);
  });

  it("starts ids and secrets with a letter or a digit, so that a command line does not take them for options", () => {
    // Plain base64url starts with a dash or an underscore 1 time in 32: 2,000 draws of each would show it.
    for (let draw = 0; draw < 2_000; draw += 1) {
      expect(generateClientId()).toMatch(/^[A-Za-z0-9]/);
      expect(generateClientSecret()).toMatch(/^[A-Za-z0-9]/);
    }
  });
});

describe.each(databaseKinds)("client secret hasher (%s)", (kind) => {
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });

  it("verifies the right secret only, and treats an unknown client or a damaged hash as a mismatch", async () => {
    const opened = await openTestStore(kind);
    cleanups.push(() => opened.close());
    const hasher = await ClientSecretHasher.open(opened.store.database, opened.store.secrets);
    const secret = generateClientSecret();
    const stored = hasher.hash(secret);
    expect(stored).not.toContain(secret);
    expect(hasher.verify(secret, stored)).toBe(true);
    expect(hasher.verify(`${secret}x`, stored)).toBe(false);
    expect(hasher.verify(secret, undefined)).toBe(false);
    expect(hasher.verify(secret, stored.slice(0, 20))).toBe(false);
    expect(hasher.verify("", stored)).toBe(false);
  });

  it("keeps one server key in the settings table that every replica uses", async () => {
    const opened = await openTestStore(kind);
    cleanups.push(() => opened.close());
    const second = await openSecondHandle(opened.database);
    cleanups.push(() => second.close());
    const [first, other] = await Promise.all([
      ClientSecretHasher.open(opened.store.database, opened.store.secrets),
      ClientSecretHasher.open(second.database, second.secrets),
    ]);
    expect(other.hash("same secret")).toBe(first.hash("same secret"));
    const rows = await opened.store.database
      .selectFrom("settings")
      .selectAll()
      .where("name", "=", secretHashKeySetting)
      .execute();
    expect(rows).toHaveLength(1);
    // Stored sealed under the key-encryption key, never as the key itself.
    const stored = rows[0]?.value ?? "";
    expect(isSealed(stored)).toBe(true);
    const key = opened.store.secrets.open(stored, settingPurpose(secretHashKeySetting));
    expect(Buffer.from(key, "base64url")).toHaveLength(32);
    expect(stored).not.toContain(key);
    const restarted = await ClientSecretHasher.open(opened.store.database, opened.store.secrets);
    expect(restarted.hash("same secret")).toBe(first.hash("same secret"));
  });
});
