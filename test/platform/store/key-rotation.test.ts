import { randomUUID } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { systemClock } from "../../../src/auth/clock.js";
import { ConnectorSecretService } from "../../../src/platform/admin/connector-secrets/service.js";
import { SigningKeyService } from "../../../src/platform/issuer/signing-keys.js";
import { openStore, type Store, type StoreOptions } from "../../../src/platform/store/database.js";
import {
  defaultKeyFile,
  KeyEncryptionKeyError,
  pendingKeyFile,
  replaceKeyFile,
} from "../../../src/platform/store/key-encryption-key.js";
import { keyEncryptionCheckSetting, secretSettingNames } from "../../../src/platform/store/key-material.js";
import { resealKeyMaterial, rotateKeyEncryptionKey } from "../../../src/platform/store/key-rotation.js";
import {
  generateKeyEncryptionKey,
  parseKeyEncryptionKey,
  SealedValueError,
  SecretsBox,
} from "../../../src/platform/store/secrets-box.js";
import {
  createTestDatabase,
  databaseKinds,
  reportSkippedPostgres,
  type TestDatabase,
} from "../../support/databases.js";
import { modeOf } from "../../support/file-modes.js";
import { clusterDirectoryOf } from "../admin/connector-secrets/support.js";

beforeAll(() => reportSkippedPostgres());

describe.each(databaseKinds)("rotating the key-encryption key (%s)", (kind) => {
  let testDatabase: TestDatabase;
  const opened: Store[] = [];
  const organizationId = randomUUID();
  const clusterId = randomUUID();

  afterEach(async () => {
    for (const store of opened.splice(0)) await store.close();
    await testDatabase?.drop();
  });

  function storeOptions(key = ""): StoreOptions {
    return { url: testDatabase.url, dataDirectory: testDatabase.dataDirectory, secrets: { key, keyFile: "" } };
  }

  async function open(key = ""): Promise<Store> {
    const store = await openStore(storeOptions(key));
    opened.push(store);
    return store;
  }

  async function close(store: Store): Promise<void> {
    opened.splice(opened.indexOf(store), 1);
    await store.close();
  }

  function connectorSecrets(store: Store): ConnectorSecretService {
    return new ConnectorSecretService({
      database: store.database,
      secrets: store.secrets,
      clusters: clusterDirectoryOf({ [clusterId]: organizationId }),
    });
  }

  /** A database holding every kind of sealed value: secret settings, a signing key and connector secrets. */
  async function populate(key = ""): Promise<void> {
    testDatabase = await createTestDatabase(kind);
    const store = await open(key);
    await store.database
      .insertInto("organizations")
      .values({ id: organizationId, name: "o", created_at: new Date(0).toISOString() })
      .execute();
    await SigningKeyService.open({
      database: store.database,
      secrets: store.secrets,
      algorithm: "ES256",
      tokenLifetimeSeconds: 600,
      clock: systemClock,
    });
    await connectorSecrets(store).create(organizationId, clusterId, "DATABASE_PASSWORD", "rotate-me-1");
    await connectorSecrets(store).create(organizationId, clusterId, "API_TOKEN", "rotate-me-2");
    await close(store);
  }

  /** The key ids named by every sealed value of the database. */
  async function sealedKeyIds(store: Store): Promise<Set<string | undefined>> {
    const settings = await store.database
      .selectFrom("settings")
      .select("value")
      .where("name", "in", [...Object.values(secretSettingNames), keyEncryptionCheckSetting])
      .execute();
    const signingKeys = await store.database.selectFrom("signing_keys").select("private_key").execute();
    const secrets = await store.database.selectFrom("connector_secrets").select("value").execute();
    return new Set(
      [
        ...settings.map((row) => row.value),
        ...signingKeys.map((row) => row.private_key),
        ...secrets.map((row) => row.value),
      ].map((value) => SecretsBox.keyIdOf(value)),
    );
  }

  it("re-seals everything under a new key file; the old key no longer opens the database", async () => {
    await populate();
    const keyFile = defaultKeyFile(testDatabase.dataDirectory);
    const oldKeyText = readFileSync(keyFile, "utf8").trim();

    const result = await rotateKeyEncryptionKey(storeOptions());
    expect(result.keyFile).toBe(keyFile);
    expect(result.keyId).not.toBe(result.previousKeyId);
    // The check row, the signing key and two connector secrets.
    expect(result.resealedValues).toBe(4);
    const newKey = parseKeyEncryptionKey(readFileSync(keyFile, "utf8"));
    expect(newKey !== undefined && SecretsBox.withKey(newKey).keyId).toBe(result.keyId);
    expect(modeOf(keyFile)).toBe(0o600);
    expect(existsSync(pendingKeyFile(keyFile))).toBe(false);

    const store = await open();
    expect(store.secrets.keyId).toBe(result.keyId);
    expect(await sealedKeyIds(store)).toEqual(new Set([result.keyId]));
    expect(await connectorSecrets(store).list(organizationId, clusterId)).toEqual({
      API_TOKEN: "rotate-me-2",
      DATABASE_PASSWORD: "rotate-me-1",
    });
    await close(store);

    await expect(open(oldKeyText)).rejects.toBeInstanceOf(KeyEncryptionKeyError);
  });

  it("with SERVICE_SECRETS_KEY, requires the new key and re-seals under it", async () => {
    const oldKey = generateKeyEncryptionKey();
    await populate(oldKey);
    await expect(rotateKeyEncryptionKey(storeOptions(oldKey))).rejects.toThrow(/SERVICE_SECRETS_NEW_KEY/);
    await expect(rotateKeyEncryptionKey({ ...storeOptions(oldKey), newKey: oldKey })).rejects.toThrow(
      /is the current one/,
    );
    await expect(rotateKeyEncryptionKey({ ...storeOptions(oldKey), newKey: "too short" })).rejects.toThrow(
      /SERVICE_SECRETS_NEW_KEY is not valid/,
    );

    const newKey = generateKeyEncryptionKey();
    const result = await rotateKeyEncryptionKey({ ...storeOptions(oldKey), newKey });
    expect(result.keyFile).toBeUndefined();
    expect(existsSync(defaultKeyFile(testDatabase.dataDirectory))).toBe(false);
    await expect(open(oldKey)).rejects.toBeInstanceOf(KeyEncryptionKeyError);
    const store = await open(newKey);
    expect(await connectorSecrets(store).list(organizationId, clusterId)).toMatchObject({
      DATABASE_PASSWORD: "rotate-me-1",
    });
  });

  it("finishes at the next start a rotation that committed but did not replace the key file", async () => {
    await populate();
    const keyFile = defaultKeyFile(testDatabase.dataDirectory);
    const newKey = parseKeyEncryptionKey(generateKeyEncryptionKey()) as Buffer;
    // What a rotation has done when it dies right after its commit.
    const store = await open();
    replaceKeyFile(pendingKeyFile(keyFile), newKey);
    await resealKeyMaterial(store.database, store.secrets, SecretsBox.withKey(newKey));
    await close(store);

    const restarted = await open();
    expect(restarted.secrets.keyId).toBe(SecretsBox.withKey(newKey).keyId);
    expect(parseKeyEncryptionKey(readFileSync(keyFile, "utf8"))?.equals(newKey)).toBe(true);
    expect(existsSync(pendingKeyFile(keyFile))).toBe(false);
    expect(await connectorSecrets(restarted).list(organizationId, clusterId)).toMatchObject({
      API_TOKEN: "rotate-me-2",
    });
  });

  it("ignores the new key of a rotation that died before its commit, and rotates again over it", async () => {
    await populate();
    const keyFile = defaultKeyFile(testDatabase.dataDirectory);
    const keyText = readFileSync(keyFile, "utf8");
    replaceKeyFile(pendingKeyFile(keyFile), parseKeyEncryptionKey(generateKeyEncryptionKey()) as Buffer);

    const store = await open();
    expect(readFileSync(keyFile, "utf8")).toBe(keyText);
    expect(await connectorSecrets(store).list(organizationId, clusterId)).toMatchObject({
      API_TOKEN: "rotate-me-2",
    });
    await close(store);

    const result = await rotateKeyEncryptionKey(storeOptions());
    expect(parseKeyEncryptionKey(readFileSync(keyFile, "utf8"))).toBeDefined();
    expect((await open()).secrets.keyId).toBe(result.keyId);
  });

  it("changes nothing when a value does not open: the whole rotation is one transaction", async () => {
    await populate();
    const keyFile = defaultKeyFile(testDatabase.dataDirectory);
    const keyText = readFileSync(keyFile, "utf8");
    const store = await open();
    const previousKeyId = store.secrets.keyId;
    // A value sealed for another row, as if copied there: it cannot be opened for this one.
    const source = await store.database
      .selectFrom("connector_secrets")
      .select("value")
      .where("name", "=", "API_TOKEN")
      .executeTakeFirstOrThrow();
    await store.database
      .updateTable("connector_secrets")
      .set({ value: source.value })
      .where("name", "=", "DATABASE_PASSWORD")
      .execute();
    await close(store);

    await expect(rotateKeyEncryptionKey(storeOptions())).rejects.toBeInstanceOf(SealedValueError);
    expect(readFileSync(keyFile, "utf8")).toBe(keyText);
    const after = await open();
    expect(await sealedKeyIds(after)).toEqual(new Set([previousKeyId]));
  });
  it("a platform still running when the key is rotated refuses to seal values under its old key, and loses none", async () => {
    await populate();
    // The platform keeps running with the old key while the rotation runs beside it.
    const running = await open();
    const secrets = connectorSecrets(running);
    const signingKeys = await SigningKeyService.open({
      database: running.database,
      secrets: running.secrets,
      algorithm: "ES256",
      tokenLifetimeSeconds: 600,
      clock: systemClock,
    });
    const result = await rotateKeyEncryptionKey(storeOptions());

    const refusal = {
      status: 503,
      message: expect.stringContaining(`sealed under the key-encryption key ${result.keyId}`),
    };
    await expect(secrets.create(organizationId, clusterId, "WRITTEN_AFTER", "lost?")).rejects.toMatchObject(refusal);
    await expect(secrets.update(organizationId, clusterId, "API_TOKEN", "lost?")).rejects.toMatchObject(refusal);
    await expect(signingKeys.rotate()).rejects.toMatchObject(refusal);
    // Reading what the rotation re-sealed asks for the same restart, rather than failing as damaged data: the
    // connector secrets, and a signing key another replica, started with the new key, made current.
    await expect(secrets.list(organizationId, clusterId)).rejects.toMatchObject(refusal);
    const other = await open();
    const otherSigningKeys = await SigningKeyService.open({
      database: other.database,
      secrets: other.secrets,
      algorithm: "ES256",
      tokenLifetimeSeconds: 600,
      clock: systemClock,
    });
    await otherSigningKeys.rotate();
    await close(other);
    await expect(signingKeys.refresh()).rejects.toMatchObject(refusal);
    await close(running);

    // After the restart with the new key, every value opens and nothing written under the old key is there.
    const restarted = await open();
    expect(restarted.secrets.keyId).toBe(result.keyId);
    expect(await sealedKeyIds(restarted)).toEqual(new Set([result.keyId]));
    expect(await connectorSecrets(restarted).list(organizationId, clusterId)).toEqual({
      API_TOKEN: "rotate-me-2",
      DATABASE_PASSWORD: "rotate-me-1",
    });
  });
});
