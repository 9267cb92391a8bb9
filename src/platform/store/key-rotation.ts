/**
 * Changing the key-encryption key (`flowplane store rotate-key`): every sealed value of the database is opened
 * under the current key and sealed again under a new one, in one transaction, while the platform is stopped.
 *
 * With a key file, the new key is written beside it (`pendingKeyFile`) before the transaction commits and moved
 * over the key file after, so a crash at any point leaves a key that opens the database: before the commit the
 * key file still does; after it the pending file does, and the next start (or rotation) moves it into place. With
 * `SERVICE_SECRETS_KEY`, the operator gives the new key and holds both, and a start names the key id it needs.
 */

import { randomBytes } from "node:crypto";
import { resolve } from "node:path";
import type { Kysely, Transaction } from "kysely";
import { unlinkIfPresent } from "../../files/private-files.js";
import { claimPlatformDataDirectory } from "../data-directory-claim.js";
import { openStore, type StoreOptions } from "./database.js";
import {
  defaultKeyFile,
  KeyEncryptionKeyError,
  keyEncryptionKeyFormat,
  pendingKeyFile,
  replaceKeyFile,
} from "./key-encryption-key.js";
import {
  connectorSecretPurpose,
  holdKeyEncryptionKey,
  keyEncryptionCheckSetting,
  secretSettingNames,
  settingPurpose,
  signingKeyPurpose,
} from "./key-material.js";
import type { PlatformDatabase } from "./schema.js";
import { isSealed, parseKeyEncryptionKey, SecretsBox } from "./secrets-box.js";

/** One sealed value of the database and how to replace it. */
interface SealedValue {
  value: string;
  purpose: string;
  /** Writes `sealed` in place of `value`; answers false when the row no longer holds `value`. */
  replace(transaction: Transaction<PlatformDatabase>, sealed: string): Promise<boolean>;
}

/**
 * Every sealed value of the database. A new sealed column must be listed here, or a rotation would leave its
 * values under a key that no longer exists.
 */
async function sealedValues(transaction: Transaction<PlatformDatabase>): Promise<SealedValue[]> {
  const settings = await transaction
    .selectFrom("settings")
    .select(["name", "value"])
    .where("name", "in", [...Object.values(secretSettingNames), keyEncryptionCheckSetting])
    .execute();
  const signingKeys = await transaction.selectFrom("signing_keys").select(["key_id", "private_key"]).execute();
  const connectorSecrets = await transaction
    .selectFrom("connector_secrets")
    .select(["cluster_id", "name", "value"])
    .execute();
  const changed = (result: { numUpdatedRows: bigint }) => Number(result.numUpdatedRows) === 1;
  return [
    ...settings.map((row) => ({
      value: row.value,
      purpose: settingPurpose(row.name),
      replace: async (database: Transaction<PlatformDatabase>, sealed: string) =>
        changed(
          await database
            .updateTable("settings")
            .set({ value: sealed })
            .where("name", "=", row.name)
            .where("value", "=", row.value)
            .executeTakeFirst(),
        ),
    })),
    ...signingKeys.map((row) => ({
      value: row.private_key,
      purpose: signingKeyPurpose(row.key_id),
      replace: async (database: Transaction<PlatformDatabase>, sealed: string) =>
        changed(
          await database
            .updateTable("signing_keys")
            .set({ private_key: sealed })
            .where("key_id", "=", row.key_id)
            .where("private_key", "=", row.private_key)
            .executeTakeFirst(),
        ),
    })),
    ...connectorSecrets.map((row) => ({
      value: row.value,
      purpose: connectorSecretPurpose(row.cluster_id, row.name),
      replace: async (database: Transaction<PlatformDatabase>, sealed: string) =>
        changed(
          await database
            .updateTable("connector_secrets")
            .set({ value: sealed })
            .where("cluster_id", "=", row.cluster_id)
            .where("name", "=", row.name)
            .where("value", "=", row.value)
            .executeTakeFirst(),
        ),
    })),
  ];
}

/**
 * Opens every sealed value of the database with `current` and seals it again with `next`, in one transaction:
 * all values change or none does. Throws `SealedValueError` when a value does not open, and an error when a row
 * changed meanwhile (a platform still running); nothing is changed then. Answers how many values were re-sealed.
 */
export async function resealKeyMaterial(
  database: Kysely<PlatformDatabase>,
  current: SecretsBox,
  next: SecretsBox,
): Promise<number> {
  return await database.transaction().execute(async (transaction) => {
    // The check row first: a running platform's write of a sealed value takes it first too (`holdKeyEncryptionKey`),
    // so that write either lands before the values are read here, or finds the new key and is refused.
    await holdKeyEncryptionKey(transaction, current);
    const values = await sealedValues(transaction);
    for (const { value, purpose, replace } of values) {
      // Values are sealed at every start (protectKeyMaterial); a plain one would still be re-sealed correctly.
      const plain = isSealed(value) ? current.open(value, purpose) : value;
      if (!(await replace(transaction, next.seal(plain, purpose)))) {
        throw new Error(
          `The value of ${purpose.split(":")[0]} changed while the key was being rotated; nothing was changed. ` +
            "Stop every platform replica and run the rotation again.",
        );
      }
    }
    return values.length;
  });
}

/** Options of `rotateKeyEncryptionKey`: the store as the platform opens it, and the new key. */
export interface KeyRotationOptions extends StoreOptions {
  /**
   * The new key, base64 of 32 bytes. Required when the current key is `SERVICE_SECRETS_KEY`; with a key file, a
   * new key is generated when it is absent.
   */
  newKey?: string | undefined;
}

/** What a rotation did; key ids only, never keys. */
export interface KeyRotationResult {
  previousKeyId: string;
  keyId: string;
  /** How many sealed values were re-sealed. */
  resealedValues: number;
  /** The key file now holding the new key; undefined when the key is `SERVICE_SECRETS_KEY`. */
  keyFile: string | undefined;
}

/**
 * Replaces the key-encryption key of the database's key material: re-seals everything under the new key in one
 * transaction and, with a key file, writes the new key there (see the module comment for crash safety). Every
 * platform replica must be stopped meanwhile. Throws `KeyEncryptionKeyError` when the keys are not usable.
 */
export async function rotateKeyEncryptionKey(options: KeyRotationOptions): Promise<KeyRotationResult> {
  const settings = options.secrets ?? { key: "", keyFile: "" };
  const keyFile =
    settings.key !== ""
      ? undefined
      : settings.keyFile === ""
        ? defaultKeyFile(options.dataDirectory)
        : resolve(settings.keyFile);
  if (keyFile === undefined && options.newKey === undefined) {
    throw new KeyEncryptionKeyError(
      "The key-encryption key is SERVICE_SECRETS_KEY (service.secrets.key), so flowplane cannot keep a new one for " +
        `you: give the new key in SERVICE_SECRETS_NEW_KEY (${keyEncryptionKeyFormat}).`,
    );
  }
  const newKey = options.newKey === undefined ? randomBytes(32) : parseKeyEncryptionKey(options.newKey);
  if (newKey === undefined) {
    throw new KeyEncryptionKeyError(`SERVICE_SECRETS_NEW_KEY is not valid; allowed: ${keyEncryptionKeyFormat}.`);
  }
  // A platform running on this data directory would keep sealing values under the old key: refused up front (a
  // platform elsewhere, on the same PostgreSQL database, is fenced by the key check row instead, see key-material.ts).
  const releaseDataDirectory = await claimPlatformDataDirectory(options.dataDirectory, "a key rotation");
  // Opening the store proves the current key, seals any plain value and finishes an interrupted rotation.
  const store = await openStore(options).catch(async (error: unknown) => {
    await releaseDataDirectory();
    throw error;
  });
  try {
    const next = SecretsBox.withKey(newKey);
    if (next.keyId === store.secrets.keyId) {
      throw new KeyEncryptionKeyError("The new key-encryption key is the current one; give another.");
    }
    if (keyFile !== undefined) replaceKeyFile(pendingKeyFile(keyFile), newKey);
    const resealedValues = await resealKeyMaterial(store.database, store.secrets, next);
    if (keyFile !== undefined) {
      // Written from memory rather than renamed from the pending file, which a concurrent start may have moved.
      replaceKeyFile(keyFile, newKey);
      unlinkIfPresent(pendingKeyFile(keyFile));
    }
    return { previousKeyId: store.secrets.keyId, keyId: next.keyId, resealedValues, keyFile };
  } finally {
    await store.close();
    await releaseDataDirectory();
  }
}
