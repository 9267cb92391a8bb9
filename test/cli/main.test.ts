import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { exitCodes } from "../../src/cli/io.js";
import { runCli } from "../../src/cli/main.js";
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
