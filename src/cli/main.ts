import { realpathSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { homedir } from "node:os";
import { fileURLToPath } from "node:url";
import { Command, CommanderError } from "commander";
import { ApiError, ClientConfigurationError, ClientConnectionError, OAuthClientError } from "../client/errors.js";
import { ConfigurationError } from "../config/load.js";
import { type CliIo, type ExitCode, exitCodes, Interrupted, UsageError } from "./io.js";
import { printable, printableLines } from "./terminal-text.js";

/** What registers a module's top-level commands on the program. */
type CommandRegistration = (program: Command, io: CliIo) => void;

/**
 * The top-level commands, in the order help lists them, each with the module that registers it. A module is loaded
 * only when one of its commands runs, or when help or a usage error needs them all: every broker and gateway a local
 * cluster starts runs `flowplane broker` or `flowplane gateway`, and loading every other command's modules (the
 * clients' HTTP, token and JSON libraries) took about a third of a second of each start.
 */
export const topLevelCommands: readonly {
  readonly names: readonly string[];
  readonly load: () => Promise<CommandRegistration>;
}[] = [
  { names: ["start", "platform"], load: async () => (await import("./commands/start.js")).registerStartCommands },
  { names: ["store"], load: async () => (await import("./commands/store.js")).registerStoreCommands },
  { names: ["token"], load: async () => (await import("./commands/token.js")).registerTokenCommand },
  { names: ["members"], load: async () => (await import("./commands/members.js")).registerMembersCommands },
  { names: ["clients"], load: async () => (await import("./commands/clients.js")).registerClientsCommands },
  {
    names: ["organization-clients"],
    load: async () => (await import("./commands/organization-clients.js")).registerOrganizationClientsCommands,
  },
  { names: ["secrets"], load: async () => (await import("./commands/secrets.js")).registerSecretsCommands },
  { names: ["allowlist"], load: async () => (await import("./commands/allowlist.js")).registerAllowlistCommands },
  { names: ["modeler"], load: async () => (await import("./commands/modeler.js")).registerModelerCommands },
  { names: ["clusters"], load: async () => (await import("./commands/clusters.js")).registerClustersCommands },
  { names: ["cluster"], load: async () => (await import("./commands/cluster.js")).registerClusterCommands },
  { names: ["backups"], load: async () => (await import("./commands/backups.js")).registerBackupsCommands },
  { names: ["restore"], load: async () => (await import("./commands/restore.js")).registerRestoreCommand },
  { names: ["broker"], load: async () => (await import("./commands/broker.js")).registerBrokerCommand },
  { names: ["gateway"], load: async () => (await import("./commands/gateway.js")).registerGatewayCommand },
];

/**
 * The registrations `argv` needs: none for the version, which names no command; its command's alone; or all of them
 * when its first word names none (help and usage errors list every command).
 */
async function registrationsFor(argv: readonly string[]): Promise<CommandRegistration[]> {
  const first = argv[0];
  if (first === "-V" || first === "--version") return [];
  const named = topLevelCommands.filter((command) => first !== undefined && command.names.includes(first));
  return await Promise.all((named.length > 0 ? named : topLevelCommands).map((command) => command.load()));
}

async function readVersion(): Promise<string> {
  try {
    const text = await readFile(new URL("../../package.json", import.meta.url), "utf8");
    return (JSON.parse(text) as { version?: string }).version ?? "unknown";
  } catch {
    return "unknown";
  }
}

/**
 * The client library's refusal of a resource id that cannot be a URL path segment (`.`, `..`, empty), thrown before
 * anything is sent: the user typed it, so it is a usage error (exit 2), not a failure of the API.
 */
function isUnnamableResource(error: unknown): error is RangeError {
  return error instanceof RangeError && error.message.endsWith(" cannot name a resource in a URL path");
}

/** Prints what went wrong and chooses the exit code for it. */
function reportError(error: unknown, io: CliIo): ExitCode {
  if (error instanceof CommanderError) {
    // Commander has already printed help or the usage problem.
    return error.exitCode === 0 ? exitCodes.ok : exitCodes.usage;
  }
  // Messages carry text from servers (problem details, error descriptions) and from the user's own input.
  if (error instanceof ConfigurationError || error instanceof ClientConfigurationError) {
    io.stderr(`${printableLines(error.message)}\n`);
    return exitCodes.usage;
  }
  if (error instanceof UsageError || isUnnamableResource(error)) {
    io.stderr(`error: ${printableLines(error.message)}\n`);
    return exitCodes.usage;
  }
  if (error instanceof Interrupted) {
    io.stderr(`${printableLines(error.message)}\n`);
    return io.shutdownSignal.reason === "SIGTERM" ? exitCodes.terminated : exitCodes.interrupted;
  }
  if (error instanceof OAuthClientError) {
    if (error.isAuthenticationFailure) {
      io.stderr(`authentication failed: ${printable(`${error.errorDescription ?? error.error} (${error.error})`)}\n`);
      return exitCodes.authentication;
    }
    // The server's own message may already end a sentence ("…; retry later."): the wait replaces its last point.
    const message = printable(error.message);
    const text =
      error.retryAfterSeconds === undefined
        ? message
        : `${message.replace(/\.$/, "")} (retry after ${error.retryAfterSeconds} s)`;
    io.stderr(`error: ${text}\n`);
    return exitCodes.failure;
  }
  if (error instanceof ApiError) {
    io.stderr(`error: ${printable(error.detail === "" ? error.title : error.detail)} (HTTP ${error.status})\n`);
    return error.status === 401 ? exitCodes.authentication : exitCodes.failure;
  }
  if (error instanceof ClientConnectionError) {
    io.stderr(`error: ${printable(error.message)}\n`);
    return exitCodes.failure;
  }
  io.stderr(`error: ${printableLines(error instanceof Error ? error.message : String(error))}\n`);
  return exitCodes.failure;
}

/**
 * Runs the `flowplane` command line with `argv` (the arguments after the program name) against `io` and returns
 * the exit code: 0 ok, 1 API or runtime error, 2 usage or configuration error, 3 authentication failure, 130 (143)
 * when Ctrl-C (SIGTERM) stopped a command that was following something.
 */
export async function runCli(argv: readonly string[], io: CliIo): Promise<ExitCode> {
  const program = new Command("flowplane")
    .description("flowplane: a self-hostable control plane for a workflow-engine cluster.")
    .version(await readVersion(), "-V, --version", "print the version")
    .exitOverride()
    .configureOutput({ writeOut: (text) => io.stdout(text), writeErr: (text) => io.stderr(text) })
    .showHelpAfterError("(add --help for usage)");
  try {
    for (const register of await registrationsFor(argv)) register(program, io);
    await program.parseAsync([...argv], { from: "user" });
    return exitCodes.ok;
  } catch (error) {
    return reportError(error, io);
  }
}

/** Runs the command line of this process: real streams and environment, Ctrl-C and SIGTERM shut down cleanly. */
export async function main(): Promise<void> {
  const shutdown = new AbortController();
  const onSignal = (signal: NodeJS.Signals) => {
    // A second signal while shutting down means the user does not want to wait.
    if (shutdown.signal.aborted) process.exit(signal === "SIGINT" ? exitCodes.interrupted : exitCodes.terminated);
    // The reason tells a command that stops following which signal it was, for its exit code.
    shutdown.abort(signal);
  };
  process.on("SIGINT", onSignal);
  process.on("SIGTERM", onSignal);
  const exitCode = await runCli(process.argv.slice(2), {
    stdout: (text) => process.stdout.write(text),
    stderr: (text) => process.stderr.write(text),
    environment: process.env,
    homeDirectory: homedir(),
    shutdownSignal: shutdown.signal,
    stdoutIsTerminal: process.stdout.isTTY === true,
  });
  process.off("SIGINT", onSignal);
  process.off("SIGTERM", onSignal);
  process.exitCode = exitCode;
}

function isEntryPoint(): boolean {
  const script = process.argv[1];
  if (script === undefined) return false;
  try {
    return realpathSync(script) === realpathSync(fileURLToPath(import.meta.url));
  } catch {
    return false;
  }
}

if (isEntryPoint()) await main();
