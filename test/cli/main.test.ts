import { mkdtemp, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { decodeJwt } from "jose";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type CliIo, exitCodes } from "../../src/cli/io.js";
import { runCli } from "../../src/cli/main.js";
import { startTestPlatform } from "../support/platform.js";

let platform: Awaited<ReturnType<typeof startTestPlatform>>;
let temporaryDirectory: string;
let clientEnvironment: Record<string, string>;

beforeAll(async () => {
  platform = await startTestPlatform({
    "service.rateLimit.burst": 10_000,
    "service.rateLimit.refillPerSecond": 10_000,
  });
  temporaryDirectory = await mkdtemp(join(tmpdir(), "flowplane-cli-"));
  clientEnvironment = {
    SERVICE_CONSOLE_CLIENT_ID: platform.adminClient.clientId,
    SERVICE_CONSOLE_CLIENT_SECRET: platform.adminClient.clientSecret,
    SERVICE_OAUTH_URL: `${platform.url}/oauth/token`,
    SERVICE_CONSOLE_TOKEN_CACHE_FILE: join(temporaryDirectory, "cache", "tokens.json"),
  };
});

afterAll(async () => {
  await platform?.close();
  if (temporaryDirectory !== undefined) await rm(temporaryDirectory, { recursive: true, force: true });
});

interface Captured {
  exitCode: number;
  stdout: string;
  stderr: string;
}

function captureIo(environment: Record<string, string>, shutdownSignal = new AbortController().signal) {
  const output = { stdout: "", stderr: "" };
  const io: CliIo = {
    stdout: (text) => {
      output.stdout += text;
    },
    stderr: (text) => {
      output.stderr += text;
    },
    environment,
    homeDirectory: temporaryDirectory,
    shutdownSignal,
    logger: pino({ level: "silent" }),
  };
  return { io, output };
}

async function cli(argv: string[], environment: Record<string, string> = clientEnvironment): Promise<Captured> {
  const { io, output } = captureIo(environment);
  const exitCode = await runCli(argv, io);
  return { exitCode, ...output };
}

describe("flowplane token", () => {
  it("prints a token for the SERVICE_* client and reuses it from the 0600 cache file", async () => {
    const first = await cli(["token"]);
    expect(first).toMatchObject({ exitCode: exitCodes.ok, stderr: "" });
    const token = first.stdout.trim();
    expect(decodeJwt(token)).toMatchObject({ aud: "admin-api", sub: platform.adminClient.clientId });
    expect((await stat(clientEnvironment.SERVICE_CONSOLE_TOKEN_CACHE_FILE!)).mode & 0o777).toBe(0o600);

    const second = await cli(["token", "--json"]);
    expect(second.exitCode).toBe(exitCodes.ok);
    const description = JSON.parse(second.stdout) as Record<string, unknown>;
    expect(description).toMatchObject({
      access_token: token,
      token_type: "Bearer",
      audience: "admin-api",
      source: "disk",
    });
    expect(description.expires_in).toBeGreaterThan(0);
  });

  it("asks for another audience and a narrower scope", async () => {
    const result = await cli(["token", "--audience", "modeler-api", "--scope", "modeler:read", "--json"]);
    expect(result.exitCode).toBe(exitCodes.ok);
    const description = JSON.parse(result.stdout) as { access_token: string; scope: string };
    expect(description.scope).toBe("modeler:read");
    expect(decodeJwt(description.access_token).aud).toBe("modeler-api");
  });

  it("exits 3 when the client cannot authenticate", async () => {
    const result = await cli(["token"], {
      ...clientEnvironment,
      SERVICE_CONSOLE_CLIENT_SECRET: "wrong-secret-wrong-secret-wrong-secret",
      SERVICE_CONSOLE_TOKEN_CACHE_FILE: "none",
    });
    expect(result.exitCode).toBe(exitCodes.authentication);
    expect(result.stderr).toContain("invalid_client");
    expect(result.stdout).toBe("");
  });

  it("exits 1 when the audience is not allowed for the client", async () => {
    const result = await cli(["token", "--audience", "no-such-api"]);
    expect(result.exitCode).toBe(exitCodes.failure);
    expect(result.stderr).toContain("invalid_target");
  });

  it("exits 2 naming every missing client variable", async () => {
    const result = await cli(["token"], {});
    expect(result.exitCode).toBe(exitCodes.usage);
    expect(result.stderr).toContain("SERVICE_CONSOLE_CLIENT_ID");
    expect(result.stderr).toContain("SERVICE_CONSOLE_CLIENT_SECRET");
  });

  it("exits 1 with a clear message when the platform cannot be reached", async () => {
    const result = await cli(["token"], {
      ...clientEnvironment,
      SERVICE_OAUTH_URL: "http://127.0.0.1:1/oauth/token",
      SERVICE_CONSOLE_TOKEN_CACHE_FILE: "none",
    });
    expect(result.exitCode).toBe(exitCodes.failure);
    expect(result.stderr).toContain("http://127.0.0.1:1/oauth/token");
  });
});

describe("flowplane members", () => {
  it("lists members as a table and as JSON", async () => {
    const table = await cli(["members", "list"]);
    expect(table.exitCode).toBe(exitCodes.ok);
    expect(table.stdout.split("\n")[0]).toMatch(/^EMAIL\s+NAME\s+ROLES\s+INVITE PENDING$/);
    expect(table.stdout).toContain("owner");

    const json = await cli(["members", "list", "--json"]);
    const members = JSON.parse(json.stdout) as { roles: string[] }[];
    expect(members.some((member) => member.roles.includes("owner"))).toBe(true);
  });

  it("invites, changes roles and removes a member", async () => {
    const invited = await cli([
      "members",
      "invite",
      "grace@example.com",
      "--role",
      "developer",
      "--role",
      "analyst",
      "--json",
    ]);
    expect(invited.exitCode).toBe(exitCodes.ok);
    expect(JSON.parse(invited.stdout)).toEqual({ email: "grace@example.com", roles: ["developer", "analyst"] });

    const changed = await cli(["members", "invite", "grace@example.com", "-r", "admin"]);
    expect(changed.exitCode).toBe(exitCodes.ok);
    const members = JSON.parse((await cli(["members", "list", "--json"])).stdout) as {
      email: string;
      roles: string[];
    }[];
    expect(members.find((member) => member.email === "grace@example.com")?.roles).toEqual(["admin"]);

    const removed = await cli(["members", "remove", "grace@example.com"]);
    expect(removed).toMatchObject({ exitCode: exitCodes.ok, stdout: "Removed member grace@example.com.\n" });

    const again = await cli(["members", "remove", "grace@example.com"]);
    expect(again.exitCode).toBe(exitCodes.failure);
    expect(again.stderr).toContain("HTTP 404");
  });

  it("exits 2 for a role that cannot be assigned or a missing role", async () => {
    const owner = await cli(["members", "invite", "x@example.com", "--role", "owner"]);
    expect(owner.exitCode).toBe(exitCodes.usage);
    expect(owner.stderr).toContain("allowed roles");
    const none = await cli(["members", "invite", "x@example.com"]);
    expect(none.exitCode).toBe(exitCodes.usage);
    expect(none.stderr).toContain("--role");
  });

  it("exits 1 with the problem document's detail for an invalid email", async () => {
    const result = await cli(["members", "invite", "not-an-email", "--role", "developer"]);
    expect(result.exitCode).toBe(exitCodes.failure);
    expect(result.stderr).toContain("HTTP 400");
  });
});

describe("flowplane help and usage", () => {
  it("prints help for the program and every command with exit code 0", async () => {
    for (const argv of [
      ["--help"],
      ["token", "--help"],
      ["members", "--help"],
      ["members", "invite", "--help"],
      ["start", "--help"],
    ]) {
      const result = await cli(argv);
      expect(result.exitCode, argv.join(" ")).toBe(exitCodes.ok);
      expect(result.stdout, argv.join(" ")).toContain("Usage: flowplane");
    }
    expect((await cli(["token", "--help"])).stdout).toContain("SERVICE_CONSOLE_CLIENT_SECRET");
  });

  it("exits 2 for an unknown command or option", async () => {
    expect((await cli(["frobnicate"])).exitCode).toBe(exitCodes.usage);
    expect((await cli(["token", "--frobnicate"])).exitCode).toBe(exitCodes.usage);
  });
});

describe("flowplane start", () => {
  it("exits 2 listing each configuration problem", async () => {
    const result = await cli([
      "start",
      "--port",
      "70000",
      "--set",
      "service.token.signingAlgorithm=HS256",
      "--data-directory",
      join(temporaryDirectory, "never"),
    ]);
    expect(result.exitCode).toBe(exitCodes.usage);
    expect(result.stderr).toContain("service.platform.port");
    expect(result.stderr).toContain("service.token.signingAlgorithm");
  });

  it("exits 2 for an unknown setting or a malformed --set", async () => {
    expect((await cli(["start", "--set", "service.no.such=1"])).exitCode).toBe(exitCodes.usage);
    const malformed = await cli(["start", "--set", "service.platform.port"]);
    expect(malformed.exitCode).toBe(exitCodes.usage);
    expect(malformed.stderr).toContain("key=value");
  });

  it("prints the bootstrap credentials once, serves them, and stops cleanly on shutdown", async () => {
    const dataDirectory = join(temporaryDirectory, "started");
    const argv = ["start", "--port", "0", "--data-directory", dataDirectory, "--set", "service.rateLimit.burst=100"];

    const firstShutdown = new AbortController();
    const first = captureIo({}, firstShutdown.signal);
    const firstRun = runCli(argv, first.io);
    await expect.poll(() => first.output.stdout, { timeout: 20_000 }).toContain("it is not shown again");
    const exports = Object.fromEntries(
      [...first.output.stdout.matchAll(/export (SERVICE_[A-Z_]+)=(\S+)/g)].map((match) => [match[1], match[2]]),
    );
    expect(Object.keys(exports).sort()).toEqual([
      "SERVICE_CONSOLE_CLIENT_ID",
      "SERVICE_CONSOLE_CLIENT_SECRET",
      "SERVICE_OAUTH_URL",
    ]);
    const token = await cli(["token"], { ...exports, SERVICE_CONSOLE_TOKEN_CACHE_FILE: "none" } as Record<
      string,
      string
    >);
    expect(token.exitCode).toBe(exitCodes.ok);
    firstShutdown.abort();
    expect(await firstRun).toBe(exitCodes.ok);
    expect(first.output.stdout).toContain("stopped");

    const secondShutdown = new AbortController();
    const second = captureIo({}, secondShutdown.signal);
    const secondRun = runCli(argv, second.io);
    await expect.poll(() => second.output.stdout, { timeout: 20_000 }).toContain("listening at");
    secondShutdown.abort();
    expect(await secondRun).toBe(exitCodes.ok);
    expect(second.output.stdout).not.toContain("SERVICE_CONSOLE_CLIENT_SECRET");
  });
});
