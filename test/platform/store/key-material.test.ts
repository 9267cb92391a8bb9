import { randomBytes } from "node:crypto";
import { existsSync, rmSync } from "node:fs";
import { createLocalJWKSet, jwtVerify } from "jose";
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { ClientSecretHasher } from "../../../src/platform/issuer/client-secrets.js";
import { SigningKeyService } from "../../../src/platform/issuer/signing-keys.js";
import { DiffLinkSigner } from "../../../src/platform/modeler/milestones/diff-links.js";
import { openStore, type Store } from "../../../src/platform/store/database.js";
import { defaultKeyFile, KeyEncryptionKeyError } from "../../../src/platform/store/key-encryption-key.js";
import {
  keyEncryptionCheckSetting,
  secretSettingNames,
  settingPurpose,
  signingKeyPurpose,
} from "../../../src/platform/store/key-material.js";
import { isSealed } from "../../../src/platform/store/secrets-box.js";
import {
  createTestDatabase,
  databaseKinds,
  reportSkippedPostgres,
  type TestDatabase,
} from "../../support/databases.js";

beforeAll(() => reportSkippedPostgres());

/** Every stored value of key material, keyed by where it is kept: what the database would give away if copied. */
async function storedKeyMaterial(store: Store): Promise<Record<string, string>> {
  const settings = await store.database
    .selectFrom("settings")
    .select(["name", "value"])
    .where("name", "in", [...Object.values(secretSettingNames), keyEncryptionCheckSetting])
    .execute();
  const keys = await store.database.selectFrom("signing_keys").select(["key_id", "private_key"]).execute();
  return Object.fromEntries([
    ...settings.map((row) => [`settings:${row.name}`, row.value]),
    ...keys.map((row) => [`signing_keys:${row.key_id}`, row.private_key]),
  ]);
}

describe.each(databaseKinds)("key material at rest (%s)", (kind) => {
  let testDatabase: TestDatabase;
  const opened: Store[] = [];

  afterEach(async () => {
    for (const store of opened.splice(0)) await store.close();
    await testDatabase?.drop();
  });

  async function open(key = ""): Promise<Store> {
    const store = await openStore({
      url: testDatabase.url,
      dataDirectory: testDatabase.dataDirectory,
      secrets: { key, keyFile: "" },
    });
    opened.push(store);
    return store;
  }

  async function close(store: Store): Promise<void> {
    opened.splice(opened.indexOf(store), 1);
    await store.close();
  }

  /** The platform's keys over `store`, as the services load them. */
  async function services(store: Store) {
    return {
      hasher: await ClientSecretHasher.open(store.database, store.secrets),
      signingKeys: await SigningKeyService.open({
        database: store.database,
        secrets: store.secrets,
        algorithm: "RS256",
        tokenLifetimeSeconds: 3_600,
        clock: Date.now,
      }),
      diffLinks: await DiffLinkSigner.open(store.database, store.secrets, Date.now),
    };
  }

  async function verifies(token: string, signingKeys: SigningKeyService): Promise<boolean> {
    try {
      await jwtVerify(token, createLocalJWKSet(await signingKeys.publicKeySet()));
      return true;
    } catch {
      return false;
    }
  }

  it("stores private signing keys and secret settings sealed, never in plain text, and reads them back", async () => {
    testDatabase = await createTestDatabase(kind);
    const store = await open();
    const first = await services(store);
    const stored = await storedKeyMaterial(store);
    expect(Object.keys(stored).sort()).toEqual(
      [
        `settings:${keyEncryptionCheckSetting}`,
        `settings:${secretSettingNames.clientSecretHashKey}`,
        `settings:${secretSettingNames.diffLinkKey}`,
        `signing_keys:${first.signingKeys.currentKeyId}`,
      ].sort(),
    );
    for (const [where, value] of Object.entries(stored)) expect(isSealed(value), where).toBe(true);
    const privateKey = store.secrets.open(
      stored[`signing_keys:${first.signingKeys.currentKeyId}`] ?? "",
      signingKeyPurpose(first.signingKeys.currentKeyId),
    );
    expect(JSON.parse(privateKey)).toHaveProperty("d");
    expect(JSON.stringify(stored)).not.toContain((JSON.parse(privateKey) as { d: string }).d);
    // Public keys are public: they stay plain JSON for the JWKS.
    const publicRow = await store.database.selectFrom("signing_keys").select("public_key").executeTakeFirstOrThrow();
    expect(JSON.parse(publicRow.public_key)).not.toHaveProperty("d");

    // A restart reads the same keys back.
    const token = await first.signingKeys.sign({ sub: "client" });
    const hash = first.hasher.hash("a client secret");
    const link = first.diffLinks.sign("organization", "from", "to");
    await close(store);
    const again = await services(await open());
    expect(again.signingKeys.currentKeyId).toBe(first.signingKeys.currentKeyId);
    expect(await verifies(token, again.signingKeys)).toBe(true);
    expect(again.hasher.verify("a client secret", hash)).toBe(true);
    expect(() => again.diffLinks.verify(link.grant, link.signature)).not.toThrow();
  });

  it("seals the plain key material of an earlier version in place, once, without losing a key", async () => {
    testDatabase = await createTestDatabase(kind);
    const store = await open();
    const before = await services(store);
    const token = await before.signingKeys.sign({ sub: "client" });
    const hash = before.hasher.hash("a client secret");
    const link = before.diffLinks.sign("organization", "from", "to");
    // What an earlier version left: plain values, no check row, and no key file.
    const plain: Record<string, string> = {};
    for (const name of Object.values(secretSettingNames)) {
      const row = await store.database
        .selectFrom("settings")
        .select("value")
        .where("name", "=", name)
        .executeTakeFirstOrThrow();
      plain[name] = store.secrets.open(row.value, settingPurpose(name));
      await store.database.updateTable("settings").set({ value: plain[name] }).where("name", "=", name).execute();
    }
    const keyId = before.signingKeys.currentKeyId;
    const keyRow = await store.database
      .selectFrom("signing_keys")
      .select("private_key")
      .where("key_id", "=", keyId)
      .executeTakeFirstOrThrow();
    const plainPrivateKey = store.secrets.open(keyRow.private_key, signingKeyPurpose(keyId));
    await store.database
      .updateTable("signing_keys")
      .set({ private_key: plainPrivateKey })
      .where("key_id", "=", keyId)
      .execute();
    await store.database.deleteFrom("settings").where("name", "=", keyEncryptionCheckSetting).execute();
    await close(store);
    rmSync(defaultKeyFile(testDatabase.dataDirectory));

    // Two replicas upgrade at once: both seal, and each one's update of a value the other sealed matches nothing.
    const [upgraded, replica] = await Promise.all([open(), open()]);
    expect(existsSync(defaultKeyFile(testDatabase.dataDirectory))).toBe(true);
    expect(replica.secrets.keyId).toBe(upgraded.secrets.keyId);
    const sealed = await storedKeyMaterial(upgraded);
    for (const [where, value] of Object.entries(sealed)) expect(isSealed(value), where).toBe(true);
    for (const name of Object.values(secretSettingNames)) {
      expect(upgraded.secrets.open(sealed[`settings:${name}`] ?? "", settingPurpose(name))).toBe(plain[name]);
    }
    expect(upgraded.secrets.open(sealed[`signing_keys:${keyId}`] ?? "", signingKeyPurpose(keyId))).toBe(
      plainPrivateKey,
    );
    const after = await services(upgraded);
    expect(after.signingKeys.currentKeyId).toBe(keyId);
    expect(await verifies(token, after.signingKeys)).toBe(true);
    expect(await verifies(await after.signingKeys.sign({ sub: "client" }), before.signingKeys)).toBe(true);
    expect(after.hasher.verify("a client secret", hash)).toBe(true);
    expect(() => after.diffLinks.verify(link.grant, link.signature)).not.toThrow();

    // Once sealed, a start rewrites nothing.
    await close(upgraded);
    await close(replica);
    expect(await storedKeyMaterial(await open())).toEqual(sealed);
  });

  it("refuses to start with another key-encryption key, naming both keys, and changes nothing", async () => {
    testDatabase = await createTestDatabase(kind);
    const rightKey = randomBytes(32).toString("base64");
    const store = await open(rightKey);
    const first = await services(store);
    const stored = await storedKeyMaterial(store);
    await close(store);

    const wrongKey = randomBytes(32).toString("base64");
    const error = await open(wrongKey).then(
      () => undefined,
      (rejection: unknown) => rejection,
    );
    expect(error).toBeInstanceOf(KeyEncryptionKeyError);
    const message = (error as Error).message;
    expect(message).toMatch(/SERVICE_SECRETS_KEY .* is not the key the database was encrypted with/);
    expect(message).not.toContain(wrongKey);
    expect(message).not.toContain(rightKey);
    // Nor does a start without the key fall back to a key file: none is generated for an encrypted database.
    expect(
      await open().then(
        () => "opened",
        (rejection: unknown) => rejection,
      ),
    ).toBeInstanceOf(KeyEncryptionKeyError);
    expect(existsSync(defaultKeyFile(testDatabase.dataDirectory))).toBe(false);

    const reopened = await open(rightKey);
    expect(await storedKeyMaterial(reopened)).toEqual(stored);
    expect((await services(reopened)).signingKeys.currentKeyId).toBe(first.signingKeys.currentKeyId);
  });

  it("refuses to start when the key file of an encrypted database is gone, and makes no new key", async () => {
    testDatabase = await createTestDatabase(kind);
    const store = await open();
    await services(store);
    await close(store);
    const keyFile = defaultKeyFile(testDatabase.dataDirectory);
    rmSync(keyFile);
    const error = await open().then(
      () => undefined,
      (rejection: unknown) => rejection,
    );
    expect(error).toBeInstanceOf(KeyEncryptionKeyError);
    expect((error as Error).message).toContain(keyFile);
    expect(existsSync(keyFile)).toBe(false);
  });
});
