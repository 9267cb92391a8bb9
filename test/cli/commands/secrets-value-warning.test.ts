/** `secrets create|update --value` puts the secret in the process list: the command says so on standard error. */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { exitCodes } from "../../../src/cli/io.js";
import { type FakePlatform, startFakePlatform } from "../fake-platform.js";

let fake: FakePlatform;
let directory: string;

beforeAll(async () => {
  fake = await startFakePlatform();
  directory = await mkdtemp(join(tmpdir(), "flowplane-secrets-warning-"));
  for (const route of ["POST /admin/clusters/c1/secrets", "PUT /admin/clusters/c1/secrets/DB_PASSWORD"]) {
    fake.routes.set(route, (_request, response) => {
      response.writeHead(204);
      response.end();
    });
  }
});

afterAll(async () => {
  await fake?.close();
  await rm(directory, { recursive: true, force: true });
});

describe("secrets create|update --value", () => {
  it("warns on standard error, naming --value-file and --value-from-env, and still does what was asked", async () => {
    for (const verb of ["create", "update"]) {
      const result = await fake.cli(
        ["secrets", verb, "DB_PASSWORD", "--cluster", "c1", "--value", "hunter2"],
        directory,
      );
      expect(result.exitCode).toBe(exitCodes.ok);
      expect(result.stderr).toMatch(/^warning: --value .*process list.*--value-file.*--value-from-env/);
      expect(result.stderr).not.toContain("hunter2");
      expect(result.stdout).not.toContain("warning");
    }
  });

  it("says nothing with --value-from-env", async () => {
    const result = await fake.cli(
      ["secrets", "create", "DB_PASSWORD", "--cluster", "c1", "--value-from-env", "MY_SECRET"],
      directory,
      { environment: { MY_SECRET: "hunter2" } },
    );
    expect(result.exitCode).toBe(exitCodes.ok);
    expect(result.stderr).toBe("");
  });
});
