/**
 * The key material the platform keeps in its database, and how it is sealed there (secrets-box.ts): the private
 * signing keys (`signing_keys.private_key`), the secret `settings` rows (the client-secret hash key, the
 * diff-link key) and the clusters' connector secrets (`connector_secrets.value`, sealed from their first write).
 * Public keys, ids and the rest stay plain: they are not secret.
 *
 * At start `protectKeyMaterial` checks that the configured key-encryption key is the one the database was sealed
 * under and seals, in place, whatever an earlier version stored in plain text. Both steps are idempotent and safe
 * while other replicas start against the same database.
 */
import { type Kysely, sql, type Transaction } from "kysely";
import { ServiceError } from "../../http/errors.js";
import { KeyEncryptionKeyError } from "./key-encryption-key.js";
import type { PlatformDatabase } from "./schema.js";
import { isSealed, SealedValueError, SecretsBox } from "./secrets-box.js";

/** Names of the `settings` rows whose values are secret, and therefore sealed. */
export const secretSettingNames = {
  /** The HMAC key of client-secret hashes (issuer/client-secrets.ts). */
  clientSecretHashKey: "client-secret-hash-key",
  /** The HMAC key of milestone diff links (modeler/milestones/diff-links.ts). */
  diffLinkKey: "modeler-diff-link-key",
} as const;

/** Name of the `settings` row that proves which key-encryption key the database's key material is sealed under. */
export const keyEncryptionCheckSetting = "key-encryption-check";

const keyEncryptionCheckText = "flowplane key-encryption check";

/** The associated data of a secret setting's value. */
export function settingPurpose(name: string): string {
  return `settings.value:${name}`;
}

/** The associated data of a signing key's private key: the column and the key's id. */
export function signingKeyPurpose(keyId: string): string {
  return `signing_keys.private_key:${keyId}`;
}

/**
 * The associated data of a connector secret's value: the column, the cluster and the secret's name. Names hold only
 * `[A-Za-z0-9_]`, so the last colon separates the two unambiguously.
 */
export function connectorSecretPurpose(clusterId: string, name: string): string {
  return `connector_secrets.value:${clusterId}:${name}`;
}

/** Whether the database holds key material sealed under some key-encryption key (the check row exists). */
export async function holdsSealedValues(database: Kysely<PlatformDatabase>): Promise<boolean> {
  const row = await database
    .selectFrom("settings")
    .select("name")
    .where("name", "=", keyEncryptionCheckSetting)
    .executeTakeFirst();
  return row !== undefined;
}

/** The key id the database's key material is sealed under (that of the check row), or undefined before the first. */
export async function sealedKeyId(database: Kysely<PlatformDatabase>): Promise<string | undefined> {
  const row = await database
    .selectFrom("settings")
    .select("value")
    .where("name", "=", keyEncryptionCheckSetting)
    .executeTakeFirst();
  return row === undefined ? undefined : SecretsBox.keyIdOf(row.value);
}

/**
 * Holds the database's key-encryption check row until `transaction` ends and confirms that it is still sealed under
 * `secrets`' key; call it before the transaction writes a newly sealed value. `flowplane store rotate-key` is meant
 * for a stopped platform: run against a running one, it re-seals everything under a new key, and a value the running
 * platform sealed afterwards under its old key would open with no key anyone holds. Touching the row (an update that
 * changes nothing) orders the two, since a rotation takes the same row first (`resealKeyMaterial`): whichever comes
 * second sees what the other did. Throws a 503 `ServiceError` asking for a restart when the key was replaced.
 */
export async function holdKeyEncryptionKey(
  transaction: Transaction<PlatformDatabase>,
  secrets: SecretsBox,
): Promise<void> {
  const prefix = SecretsBox.sealedPrefixFor(secrets.keyId);
  const result = await transaction
    .updateTable("settings")
    .set((row) => ({ value: row.ref("value") }))
    .where("name", "=", keyEncryptionCheckSetting)
    .where(sql<string>`substr(value, 1, ${prefix.length})`, "=", prefix)
    .executeTakeFirst();
  if (Number(result.numUpdatedRows) === 1) return;
  throw keyEncryptionKeyReplaced(secrets.keyId, await sealedKeyId(transaction));
}

/**
 * The error of a platform whose key-encryption key was replaced while it ran (`sealedKeyId` is the database's key
 * now): it can neither open the database's key material nor seal new values that would open later.
 */
export function keyEncryptionKeyReplaced(ownKeyId: string, sealedKeyId: string | undefined): ServiceError {
  return new ServiceError(
    "unavailable",
    `The database's key material is sealed under the key-encryption key ${sealedKeyId ?? "(none)"}, not under this ` +
      `platform's key ${ownKeyId}: the key was replaced (flowplane store rotate-key) while the platform ran. Restart ` +
      "every platform replica with the new key; nothing was written.",
  );
}

/**
 * Opens a value of the database while the platform serves: like `secrets.open`, but a value sealed under another key
 * (the key was replaced while this platform ran) is the 503 of `keyEncryptionKeyReplaced`, asking for a restart.
 */
export function openWhileServing(secrets: SecretsBox, sealed: string, purpose: string): string {
  try {
    return secrets.open(sealed, purpose);
  } catch (error) {
    if (error instanceof SealedValueError && error.problem === "other-key") {
      throw keyEncryptionKeyReplaced(secrets.keyId, error.sealedKeyId);
    }
    throw error;
  }
}

/**
 * Reads the secret setting `name`, creating it with `generate()` on first use. Replicas starting together converge
 * on one value: each inserts its sealed candidate only if the row is absent, then all read back the stored one.
 */
export async function loadSecretSetting(
  database: Kysely<PlatformDatabase>,
  secrets: SecretsBox,
  name: string,
  generate: () => string,
): Promise<string> {
  const purpose = settingPurpose(name);
  await database
    .insertInto("settings")
    .values({ name, value: secrets.seal(generate(), purpose) })
    .onConflict((conflict) => conflict.column("name").doNothing())
    .execute();
  const row = await database.selectFrom("settings").select("value").where("name", "=", name).executeTakeFirstOrThrow();
  return secrets.open(row.value, purpose);
}

/**
 * Makes sure the database's key material is sealed under `secrets`' key: records (or checks) the key in the check
 * row, seals every plain secret setting and private signing key in place, and opens every sealed one. Throws
 * `KeyEncryptionKeyError` naming `keySource` when the key is not the database's; nothing is changed then.
 */
export async function protectKeyMaterial(
  database: Kysely<PlatformDatabase>,
  secrets: SecretsBox,
  keySource: string,
): Promise<void> {
  const checkPurpose = settingPurpose(keyEncryptionCheckSetting);
  await database
    .insertInto("settings")
    .values({ name: keyEncryptionCheckSetting, value: secrets.seal(keyEncryptionCheckText, checkPurpose) })
    .onConflict((conflict) => conflict.column("name").doNothing())
    .execute();
  const check = await database
    .selectFrom("settings")
    .select("value")
    .where("name", "=", keyEncryptionCheckSetting)
    .executeTakeFirstOrThrow();
  openOrExplain(secrets, check.value, checkPurpose, keySource, "the database");

  const settingRows = await database
    .selectFrom("settings")
    .select(["name", "value"])
    .where("name", "in", Object.values(secretSettingNames))
    .execute();
  const keyRows = await database.selectFrom("signing_keys").select(["key_id", "private_key"]).execute();
  const values = [
    ...settingRows.map((row) => ({ ...row, purpose: settingPurpose(row.name), what: `the setting ${row.name}` })),
    ...keyRows.map((row) => ({
      name: row.key_id,
      value: row.private_key,
      purpose: signingKeyPurpose(row.key_id),
      what: `the signing key ${row.key_id}`,
    })),
  ];
  // Every sealed value is opened before anything is written, so a wrong key changes nothing.
  for (const { value, purpose, what } of values) {
    if (isSealed(value)) openOrExplain(secrets, value, purpose, keySource, what);
  }
  // Only the values still in plain text change, each with a conditional update: a replica sealing the same value
  // at the same moment makes the other's update match nothing, and a start interrupted half-way resumes where it
  // stopped.
  for (const row of settingRows) {
    if (isSealed(row.value)) continue;
    await database
      .updateTable("settings")
      .set({ value: secrets.seal(row.value, settingPurpose(row.name)) })
      .where("name", "=", row.name)
      .where("value", "=", row.value)
      .execute();
  }
  for (const row of keyRows) {
    if (isSealed(row.private_key)) continue;
    await database
      .updateTable("signing_keys")
      .set({ private_key: secrets.seal(row.private_key, signingKeyPurpose(row.key_id)) })
      .where("key_id", "=", row.key_id)
      .where("private_key", "=", row.private_key)
      .execute();
  }
}

/** Opens a sealed value to prove the key; a failure becomes a `KeyEncryptionKeyError` saying what to do. */
function openOrExplain(secrets: SecretsBox, sealed: string, purpose: string, keySource: string, what: string): void {
  try {
    secrets.open(sealed, purpose);
  } catch (error) {
    if (!(error instanceof SealedValueError)) throw error;
    if (error.problem === "other-key") {
      throw new KeyEncryptionKeyError(
        `The key-encryption key from ${keySource} is not the key ${what} was encrypted with: its key id is ` +
          `${secrets.keyId}, the one of ${what} is ${error.sealedKeyId}. Start with the key the database was ` +
          "protected with: the same SERVICE_SECRETS_KEY on every replica, or the key file it was first started " +
          "with. flowplane does not replace keys it cannot read.",
      );
    }
    throw new KeyEncryptionKeyError(
      `The encrypted key material of ${what} does not open with the key from ${keySource} (key id ${secrets.keyId}): ` +
        "it was altered. Restore the database from a backup.",
    );
  }
}
