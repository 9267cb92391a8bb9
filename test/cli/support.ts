import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pino from "pino";
import type { CliIo } from "../../src/cli/io.js";
import { runCli } from "../../src/cli/main.js";
import { startTestPlatform, type TestPlatform, type TestPlatformOptions } from "../support/platform.js";

/** What one in-process CLI run printed and returned. */
export interface CliResult {
  exitCode: number;
  stdout: string;
  stderr: string;
}

/** An in-memory `CliIo` whose output the test reads back; the home directory is a temporary one. */
export function captureIo(
  environment: Record<string, string>,
  homeDirectory: string,
  shutdownSignal: AbortSignal = new AbortController().signal,
): { io: CliIo; output: { stdout: string; stderr: string } } {
  const output = { stdout: "", stderr: "" };
  const io: CliIo = {
    stdout: (text) => {
      output.stdout += text;
    },
    stderr: (text) => {
      output.stderr += text;
    },
    environment,
    homeDirectory,
    shutdownSignal,
    logger: pino({ level: "silent" }),
  };
  return { io, output };
}

/** A real test platform, a temporary directory and the `SERVICE_*` environment of its administration client. */
export interface CliFixture {
  platform: TestPlatform;
  temporaryDirectory: string;
  /** SERVICE_* client variables of the platform's administration client, with a token cache in the temp directory. */
  clientEnvironment: Record<string, string>;
  /** Runs `flowplane <argv>` in-process, by default with `clientEnvironment`. */
  cli(argv: readonly string[], environment?: Record<string, string>): Promise<CliResult>;
  close(): Promise<void>;
}

/** Starts a test platform (with `platformOptions` and configuration `overrides`) and prepares what a CLI test needs. */
export async function startCliFixture(
  platformOptions: TestPlatformOptions = {},
  overrides: Record<string, string | number | boolean> = {},
): Promise<CliFixture> {
  const platform = await startTestPlatform(overrides, platformOptions);
  const temporaryDirectory = await mkdtemp(join(tmpdir(), "flowplane-cli-"));
  const clientEnvironment = {
    SERVICE_CONSOLE_CLIENT_ID: platform.adminClient.clientId,
    SERVICE_CONSOLE_CLIENT_SECRET: platform.adminClient.clientSecret,
    SERVICE_OAUTH_URL: `${platform.url}/oauth/token`,
    SERVICE_CONSOLE_TOKEN_CACHE_FILE: join(temporaryDirectory, "cache", "tokens.json"),
  };
  return {
    platform,
    temporaryDirectory,
    clientEnvironment,
    async cli(argv, environment = clientEnvironment) {
      const { io, output } = captureIo(environment, temporaryDirectory);
      const exitCode = await runCli(argv, io);
      return { exitCode, ...output };
    },
    async close() {
      await platform.close();
      await rm(temporaryDirectory, { recursive: true, force: true });
    },
  };
}
