/**
 * The flowplane command line with the cluster commands, for end-to-end tests run before `src/cli/main.ts` registers
 * `broker` and `gateway` itself. It behaves like `main()`: real streams and environment, SIGTERM and Ctrl-C shut the
 * command down cleanly. Once main.ts registers both commands the tests use main.ts directly (see local-cluster.test.ts).
 */
import { homedir } from "node:os";
import { Command } from "commander";
import { registerBrokerCommand } from "../../../src/cli/commands/broker.js";
import { registerGatewayCommand } from "../../../src/cli/commands/gateway.js";
import type { CliIo } from "../../../src/cli/io.js";

const shutdown = new AbortController();
const onSignal = () => shutdown.abort();
process.on("SIGINT", onSignal);
process.on("SIGTERM", onSignal);
const io: CliIo = {
  stdout: (text) => process.stdout.write(text),
  stderr: (text) => process.stderr.write(text),
  environment: process.env,
  homeDirectory: homedir(),
  shutdownSignal: shutdown.signal,
};
const program = new Command("flowplane");
registerBrokerCommand(program, io);
registerGatewayCommand(program, io);
try {
  await program.parseAsync(process.argv.slice(2), { from: "user" });
} catch (error) {
  process.stderr.write(`error: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exitCode = 1;
}
process.off("SIGINT", onSignal);
process.off("SIGTERM", onSignal);
