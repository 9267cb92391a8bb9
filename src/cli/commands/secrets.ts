import { readFileSync } from "node:fs";
import type { Command } from "commander";
import { adminAudience } from "../../client/admin.js";
import { type CliIo, UsageError } from "../io.js";
import { printable, printableJson } from "../terminal-text.js";
import { clientEnvironmentHelp, createAdminClient } from "./client-context.js";

interface SecretOptions {
  cluster: string;
  json?: boolean;
  audience?: string;
}

interface ValueOptions extends SecretOptions {
  value?: string;
  valueFile?: string;
  valueFromEnv?: string;
}

/** The secret's value from exactly one of --value, --value-file and --value-from-env. */
function secretValueOf(options: ValueOptions, io: CliIo): string {
  const given = [options.value, options.valueFile, options.valueFromEnv].filter((option) => option !== undefined);
  if (given.length !== 1)
    throw new UsageError("give the value with exactly one of --value-file, --value-from-env, --value");
  if (options.valueFile !== undefined) {
    try {
      return readFileSync(options.valueFile, "utf8");
    } catch (error) {
      throw new UsageError(`cannot read ${options.valueFile}: ${(error as Error).message}`);
    }
  }
  if (options.valueFromEnv !== undefined) {
    const value = io.environment[options.valueFromEnv];
    if (value === undefined) throw new UsageError(`the environment variable ${options.valueFromEnv} is not set`);
    return value;
  }
  // The value is in the process's arguments, which every local user can read (ps, /proc/<pid>/cmdline) while the
  // command runs, and which the shell may keep in its history: said once, on standard error, so scripts keep working.
  io.stderr(
    "warning: --value puts the secret in the command line, which other users of this machine can see in the " +
      "process list; use --value-file or --value-from-env instead\n",
  );
  return options.value as string;
}

function addValueOptions(command: Command): Command {
  return command
    .option("--value-file <file>", "read the value from this file, byte for byte (a final newline included)")
    .option("--value-from-env <variable>", "read the value from this environment variable")
    .option("--value <value>", "the value itself (other users of the machine see it in the process list)");
}

function addCommonOptions(command: Command): Command {
  return command
    .requiredOption("--cluster <clusterId>", "id of the cluster")
    .option("--json", "print the result as JSON")
    .option("--audience <audience>", "audience of the Administration API", adminAudience);
}

/** Registers `flowplane secrets list|create|update|delete`, which manage the connector secrets of a cluster. */
export function registerSecretsCommands(program: Command, io: CliIo): void {
  const secrets = program
    .command("secrets")
    .description("Manage the connector secrets of a cluster (Administration API, scope secrets).")
    .addHelpText("after", clientEnvironmentHelp);

  addCommonOptions(
    secrets
      .command("list")
      .description("List the names of the cluster's secrets (their values too with --show-values).")
      .option("--show-values", "print NAME=value lines (with --json: an object of names and values)"),
  ).action(async (options: SecretOptions & { showValues?: boolean }) => {
    const list = await createAdminClient(io, options).listSecrets(options.cluster);
    if (options.json === true) {
      // Values only when asked for by name: a script's `--json` output tends to end up in logs.
      io.stdout(`${printableJson(options.showValues === true ? list : Object.keys(list))}\n`);
      return;
    }
    const lines = Object.entries(list).map(([name, value]) =>
      options.showValues === true ? `${printable(name)}=${printable(value)}` : printable(name),
    );
    io.stdout(lines.length === 0 ? "" : `${lines.join("\n")}\n`);
  });

  addValueOptions(
    addCommonOptions(
      secrets
        .command("create")
        .description("Create a secret (fails when the cluster already has one by that name).")
        .argument("<name>", "name of the secret: 1 to 49 characters of A-Z, a-z, 0-9 and _"),
    ),
  ).action(async (name: string, options: ValueOptions) => {
    await createAdminClient(io, options).createSecret(options.cluster, name, secretValueOf(options, io));
    if (options.json === true) {
      io.stdout(`${printableJson({ clusterId: options.cluster, name, created: true }, 0)}\n`);
    } else {
      io.stdout(`Created the secret ${printable(name)} of cluster ${printable(options.cluster)}.\n`);
    }
  });

  addValueOptions(
    addCommonOptions(
      secrets.command("update").description("Replace the value of a secret.").argument("<name>", "name of the secret"),
    ),
  ).action(async (name: string, options: ValueOptions) => {
    await createAdminClient(io, options).updateSecret(options.cluster, name, secretValueOf(options, io));
    if (options.json === true) {
      io.stdout(`${printableJson({ clusterId: options.cluster, name, updated: true }, 0)}\n`);
    } else {
      io.stdout(`Replaced the value of the secret ${printable(name)} of cluster ${printable(options.cluster)}.\n`);
    }
  });

  addCommonOptions(
    secrets.command("delete").description("Delete a secret.").argument("<name>", "name of the secret"),
  ).action(async (name: string, options: SecretOptions) => {
    await createAdminClient(io, options).deleteSecret(options.cluster, name);
    if (options.json === true) {
      io.stdout(`${printableJson({ clusterId: options.cluster, name, deleted: true }, 0)}\n`);
    } else {
      io.stdout(`Deleted the secret ${printable(name)} of cluster ${printable(options.cluster)}.\n`);
    }
  });
}
