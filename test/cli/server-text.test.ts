/**
 * Text a server chose, in places the command line printed it raw or let it span lines: a fake platform answers what a
 * real one would not, and the output must hold no control character and no line the server forged.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { resolveParameter } from "../../src/cli/commands/clusters.js";
import { exitCodes } from "../../src/cli/io.js";
import { type FakePlatform, startFakePlatform } from "./fake-platform.js";

const hostileTitle = "\u001b]0;owned\u0007";
const forgedLine = "\nerror: forged line";

let fake: FakePlatform;
let directory: string;

beforeAll(async () => {
  fake = await startFakePlatform();
  directory = await mkdtemp(join(tmpdir(), "flowplane-server-text-"));
});

afterAll(async () => {
  await fake?.close();
  await rm(directory, { recursive: true, force: true });
});

describe("clients get", () => {
  it("escapes a variable name the server added to the connection details", async () => {
    fake.answer("GET /admin/clusters/c1/clients/k1", {
      name: "n",
      SERVICE_ADDRESS: "a",
      SERVICE_CLIENT_ID: "k1",
      SERVICE_AUTHORIZATION_SERVER_URL: "u",
      SERVICE_TOKEN_AUDIENCE: "aud",
      [`X${hostileTitle}`]: "v",
    });
    const result = await fake.cli(["clients", "get", "k1", "--cluster", "c1"], directory);
    expect(result.exitCode).toBe(exitCodes.ok);
    expect(result.stdout).not.toContain("\u001b");
    expect(result.stdout).toContain("X\\u001b]0;owned\\u0007=v");
  });
});

describe("error messages built from the server's text are one line", () => {
  it("backups status --wait: a state holding a line break", async () => {
    fake.answer("GET /actuator/backups/5", {
      backupId: 5,
      state: `FAILED${forgedLine}`,
      failureReason: null,
      partitionCount: 0,
      details: [],
    });
    const result = await fake.cli(["backups", "status", "5", "--wait"], directory);
    expect(result.exitCode).toBe(exitCodes.failure);
    expect(result.stderr).toBe("error: backup 5 ended FAILED\\u000aerror: forged line\n");
  });

  it("clusters create: the choices resolveParameter lists", () => {
    const plans = [{ uuid: "p1", name: `small${forgedLine}` }];
    expect(() => resolveParameter(plans, "huge", "--plan")).toThrow(
      '--plan "huge" matches none of: small\\u000aerror: forged line (p1)',
    );
  });
});
