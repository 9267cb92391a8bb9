import type { Command } from "commander";
import { type AllowlistEntry, adminAudience } from "../../client/admin.js";
import { type CliIo, UsageError } from "../io.js";
import { alignedTable } from "../table.js";
import { printable, printableJson } from "../terminal-text.js";
import { clientEnvironmentHelp, createAdminClient } from "./client-context.js";

interface AllowlistOptions {
  cluster: string;
  json?: boolean;
  audience?: string;
}

/**
 * Reads one entry as the command line writes it: `CIDR[,CIDR…][=description]`. Addresses never hold `=`, so the
 * first one starts the description; the platform checks the ranges and names a bad one.
 */
export function parseAllowlistArgument(argument: string): AllowlistEntry {
  const separator = argument.indexOf("=");
  if (separator === -1) return { ip: argument.trim(), description: "" };
  return { ip: argument.slice(0, separator).trim(), description: argument.slice(separator + 1).trim() };
}

/** Renders allowlist entries as an aligned text table, one entry per line. */
export function formatAllowlistTable(entries: readonly AllowlistEntry[]): string {
  const rows = [["IP", "DESCRIPTION"], ...entries.map((entry) => [entry.ip, entry.description].map(printable))];
  return alignedTable(rows);
}

/** Registers `flowplane allowlist get|set`, which read and replace a cluster's IP allowlist. */
export function registerAllowlistCommands(program: Command, io: CliIo): void {
  const allowlist = program
    .command("allowlist")
    .description(
      "Read or replace a cluster's IP allowlist (Administration API, scope ipallowlist); its gateway and " +
        "management port refuse other addresses.",
    )
    .addHelpText("after", clientEnvironmentHelp);

  allowlist
    .command("get")
    .description("Show the cluster's IP allowlist.")
    .requiredOption("--cluster <id>", "id of the cluster")
    .option("--json", "print the entries as JSON")
    .option("--audience <audience>", "audience of the Administration API", adminAudience)
    .action(async (options: AllowlistOptions) => {
      const entries = await createAdminClient(io, options).getIpAllowlist(options.cluster);
      if (options.json === true) {
        io.stdout(`${printableJson(entries)}\n`);
      } else if (entries.length === 0) {
        io.stdout("The allowlist is empty: every address may connect.\n");
      } else {
        io.stdout(`${formatAllowlistTable(entries)}\n`);
      }
    });

  allowlist
    .command("set")
    .description("Replace the cluster's IP allowlist with the given entries.")
    .argument("[entries...]", "entries of IPv4 or IPv6 addresses or CIDR blocks, each `CIDR[,CIDR…][=description]`")
    .requiredOption("--cluster <id>", "id of the cluster")
    .option("--allow-everyone", "empty the allowlist, so that every address may connect")
    .option("--json", "print the new allowlist as JSON")
    .option("--audience <audience>", "audience of the Administration API", adminAudience)
    .action(async (entryArguments: string[], options: AllowlistOptions & { allowEveryone?: boolean }) => {
      // An empty list opens the cluster to every address, so it takes an explicit flag rather than a missing argument.
      if (entryArguments.length === 0 && options.allowEveryone !== true) {
        throw new UsageError("give at least one entry, or --allow-everyone to empty the allowlist");
      }
      if (entryArguments.length > 0 && options.allowEveryone === true) {
        throw new UsageError("--allow-everyone empties the allowlist; give it without entries");
      }
      const entries = entryArguments.map(parseAllowlistArgument);
      await createAdminClient(io, options).setIpAllowlist(options.cluster, entries);
      if (options.json === true) {
        io.stdout(`${printableJson(entries)}\n`);
      } else if (entries.length === 0) {
        io.stdout(`Emptied the allowlist of cluster ${printable(options.cluster)}: every address may connect.\n`);
      } else {
        io.stdout(
          `The allowlist of cluster ${printable(options.cluster)} now holds ${entries.length} ` +
            `${entries.length === 1 ? "entry" : "entries"}.\n`,
        );
      }
    });
}
