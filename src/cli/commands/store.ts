import type { Command } from "commander";
import { loadConfiguration } from "../../config/load.js";
import type { CliIo } from "../io.js";
import { collectRepeated } from "../server-command.js";
import { printable } from "../terminal-text.js";
import { configurationFlags } from "./start.js";

/** Environment variable carrying the new key when the current one is `SERVICE_SECRETS_KEY`. */
export const newKeyVariable = "SERVICE_SECRETS_NEW_KEY";

interface StoreOptions {
  config?: string;
  dataDirectory?: string;
  databaseUrl?: string;
  set?: string[];
}

/** Re-seals the database's key material under a new key-encryption key and says where that key is. */
async function rotateKey(options: StoreOptions, io: CliIo): Promise<void> {
  const configuration = loadConfiguration({
    environment: io.environment,
    configFile: options.config,
    flags: configurationFlags(options),
  });
  // Loaded lazily so that client commands do not pay for the store's modules.
  const { rotateKeyEncryptionKey } = await import("../../platform/store/key-rotation.js");
  const newKey = io.environment[newKeyVariable];
  const result = await rotateKeyEncryptionKey({
    url: configuration.database.url,
    dataDirectory: configuration.dataDirectory,
    secrets: configuration.secrets,
    newKey: newKey === undefined || newKey === "" ? undefined : newKey,
  });
  io.stdout(
    `Re-encrypted ${result.resealedValues} ${result.resealedValues === 1 ? "value" : "values"} of the database's ` +
      `key material under the key-encryption key ` +
      `${result.keyId} (was ${result.previousKeyId}).\n`,
  );
  if (result.keyFile !== undefined) {
    io.stdout(
      `The new key is in ${printable(result.keyFile)}: back it up apart from the database now, and destroy the ` +
        "backups of the old key file.\n",
    );
  } else {
    io.stdout(
      `Set SERVICE_SECRETS_KEY to the value of ${newKeyVariable} on every platform replica before starting them ` +
        "again; the old key no longer opens the database.\n",
    );
  }
}

/** Registers `flowplane store rotate-key`, which works on the platform's database while the platform is stopped. */
export function registerStoreCommands(program: Command, io: CliIo): void {
  const store = program
    .command("store")
    .description("Maintain the platform's database offline (stop every platform replica first).");
  store
    .command("rotate-key")
    .description(
      "Re-encrypt the key material of the database (signing keys, hashing keys, connector secrets) under a new " +
        "key-encryption key, in one transaction.",
    )
    .option("-c, --config <file>", "YAML configuration file of the platform")
    .option("--data-directory <directory>", "the platform's data directory (service.dataDirectory)")
    .option("--database-url <url>", "sqlite:<file> or postgres://… (service.database.url)")
    .option("--set <key=value>", "any setting by its key (repeatable)", collectRepeated)
    .addHelpText(
      "after",
      `
With a key file (the default, <data directory>/keys/secrets.key, or SERVICE_SECRETS_KEY_FILE) a new key is
generated and written to that file. With SERVICE_SECRETS_KEY, give the new key in ${newKeyVariable}
(openssl rand -base64 32) and set SERVICE_SECRETS_KEY to it afterwards. Stop every platform replica first: one
still running would keep sealing values under the old key.`,
    )
    .action((options: StoreOptions) => rotateKey(options, io));
}
