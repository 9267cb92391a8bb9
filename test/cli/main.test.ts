import { execFile } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { Command } from "commander";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { exitCodes } from "../../src/cli/io.js";
import { runCli, topLevelCommands } from "../../src/cli/main.js";
import { childCommand } from "../support/child-command.js";
import { type CliResult, captureIo } from "./support.js";

let homeDirectory: string;

beforeAll(async () => {
  homeDirectory = await mkdtemp(join(tmpdir(), "flowplane-cli-main-"));
});

afterAll(async () => {
  if (homeDirectory !== undefined) await rm(homeDirectory, { recursive: true, force: true });
});

async function cli(argv: readonly string[]): Promise<CliResult> {
  const { io, output } = captureIo({}, homeDirectory);
  const exitCode = await runCli(argv, io);
  return { exitCode, ...output };
}

describe("flowplane help and usage", () => {
  it("prints help for the program and every command with exit code 0", async () => {
    const commands = [
      ["--help"],
      ["start", "--help"],
      ["platform", "--help"],
      ["token", "--help"],
      ["members", "--help"],
      ["members", "list", "--help"],
      ["members", "invite", "--help"],
      ["members", "remove", "--help"],
      ["allowlist", "--help"],
      ["allowlist", "get", "--help"],
      ["allowlist", "set", "--help"],
    ];
    for (const argv of commands) {
      const result = await cli(argv);
      expect(result.exitCode, argv.join(" ")).toBe(exitCodes.ok);
      expect(result.stdout, argv.join(" ")).toContain(`Usage: flowplane ${argv.slice(0, -1).join(" ")}`.trimEnd());
    }
    expect((await cli(["token", "--help"])).stdout).toContain("SERVICE_CONSOLE_CLIENT_SECRET");
    // The management URL's default holds only for a token endpoint on this machine (requireClusterManagementUrl).
    for (const command of ["cluster", "backups"]) {
      expect((await cli([command, "--help"])).stdout).toMatch(
        /SERVICE_CLUSTER_MANAGEMENT_URL[^\n]*\n[^\n]*otherwise required/,
      );
    }
    expect((await cli(["--help"])).stdout).toMatch(/start[\s\S]*token[\s\S]*members/);
  });

  it("prints the version", async () => {
    const result = await cli(["--version"]);
    expect(result.exitCode).toBe(exitCodes.ok);
    expect(result.stdout).toMatch(/^\d+\.\d+\.\d+\n$/);
  });

  it("exits 2 for an unknown command, an unknown option or a missing argument", async () => {
    for (const argv of [["frobnicate"], ["token", "--frobnicate"], ["members", "remove"], []]) {
      const result = await cli(argv);
      expect(result.exitCode, argv.join(" ")).toBe(exitCodes.usage);
      expect(result.stderr, argv.join(" ")).not.toBe("");
    }
  });
});

describe("flowplane's top-level commands", () => {
  it("are each registered by the module listed for them, and help lists every one", async () => {
    const listed: string[] = [];
    for (const command of topLevelCommands) {
      const program = new Command("flowplane");
      (await command.load())(program, captureIo({}, homeDirectory).io);
      expect(program.commands.map((registered) => registered.name())).toEqual(command.names);
      listed.push(...command.names);
    }
    const help = (await cli(["--help"])).stdout;
    for (const name of listed) expect(help, name).toMatch(new RegExp(`^  ${name} `, "m"));
  });

  it("load only the modules of the command that runs: a broker's start loads none of the clients'", async () => {
    const { stdout, loaded } = await runWithLoadedModules(["broker", "--help"]);
    expect(stdout).toContain("Usage: flowplane broker");
    // The hook saw the command's own module, so an empty list below is not a hook that saw nothing.
    expect(loaded.some((url) => /\/cli\/commands\/broker\.(js|ts)$/.test(url))).toBe(true);
    expect(
      loaded.filter((url) => /\/cli\/commands\/(?!broker\.)|\/client\/http\.|node_modules\/undici\//.test(url)),
    ).toEqual([]);
  });

  it("load none for the version, which names no command", async () => {
    const { stdout, loaded } = await runWithLoadedModules(["--version"]);
    expect(stdout).toMatch(/^\d+\.\d+\.\d+\n$/);
    // The hook saw the entry point, so an empty list below is not a hook that saw nothing.
    expect(loaded.some((url) => /\/cli\/main\.(js|ts)$/.test(url))).toBe(true);
    expect(loaded.filter((url) => /\/cli\/commands\/|\/client\/http\.|node_modules\/undici\//.test(url))).toEqual([]);
  });
});

/** Runs the command line in a child process whose loader hook reports every module loaded: its output and those. */
async function runWithLoadedModules(argv: readonly string[]): Promise<{ stdout: string; loaded: string[] }> {
  const command = childCommand();
  const loadedModulesHook = fileURLToPath(new URL("../support/loaded-modules.mjs", import.meta.url));
  const { stdout, stderr } = await promisify(execFile)(
    process.execPath,
    ["--import", loadedModulesHook, ...command.nodeArguments, command.entry, ...argv],
    { env: { PATH: process.env.PATH }, maxBuffer: 16 * 1024 * 1024 },
  );
  const loaded = stderr
    .split("\n")
    .filter((line) => line.startsWith("flowplane-loaded-module "))
    .map((line) => line.slice("flowplane-loaded-module ".length));
  return { stdout, loaded };
}
