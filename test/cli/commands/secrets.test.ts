import { randomUUID } from "node:crypto";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { exitCodes } from "../../../src/cli/io.js";
import { createClusterAccessFixture } from "../../platform/admin/cluster-access-support.js";
import { type CliFixture, type CliResult, startCliFixture } from "../support.js";

let fixture: CliFixture;
const clusterId = randomUUID();
const foreignClusterId = randomUUID();

beforeAll(async () => {
  const access = createClusterAccessFixture();
  fixture = await startCliFixture({ clusterAccess: access.options });
  access.addCluster(fixture.platform.organizationId, clusterId);
  access.addCluster(randomUUID(), foreignClusterId);
});

afterAll(async () => {
  await fixture?.close();
});

function cli(argv: readonly string[], extraEnvironment: Record<string, string> = {}): Promise<CliResult> {
  return fixture.cli(argv, { ...fixture.clientEnvironment, ...extraEnvironment });
}

describe("flowplane secrets", () => {
  it("creates, lists, updates and deletes secrets of a cluster", async () => {
    const cluster = ["--cluster", clusterId];
    const valueFile = join(fixture.temporaryDirectory, "certificate.pem");
    await writeFile(valueFile, "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n");

    const created = await cli(["secrets", "create", "TLS_CERT", ...cluster, "--value-file", valueFile, "--json"]);
    expect(created.exitCode).toBe(exitCodes.ok);
    expect(JSON.parse(created.stdout)).toEqual({ clusterId: clusterId, name: "TLS_CERT", created: true });
    const fromEnvironment = await cli(
      ["secrets", "create", "DB_PASSWORD", ...cluster, "--value-from-env", "MY_DB_PASSWORD"],
      { MY_DB_PASSWORD: "from-the-environment" },
    );
    expect(fromEnvironment).toMatchObject({
      exitCode: exitCodes.ok,
      stdout: `Created the secret DB_PASSWORD of cluster ${clusterId}.\n`,
    });

    const names = await cli(["secrets", "list", ...cluster]);
    expect(names).toMatchObject({ exitCode: exitCodes.ok, stdout: "DB_PASSWORD\nTLS_CERT\n" });
    // JSON names the secrets alone too; their values only with --show-values.
    const json = await cli(["secrets", "list", ...cluster, "--json"]);
    expect(JSON.parse(json.stdout)).toEqual(["DB_PASSWORD", "TLS_CERT"]);
    const jsonWithValues = await cli(["secrets", "list", ...cluster, "--json", "--show-values"]);
    expect(JSON.parse(jsonWithValues.stdout)).toEqual({
      DB_PASSWORD: "from-the-environment",
      TLS_CERT: "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
    });

    expect((await cli(["secrets", "update", "DB_PASSWORD", ...cluster, "--value", "changed"])).exitCode).toBe(
      exitCodes.ok,
    );
    // Values come from the server: control characters are shown as escapes, never sent to the terminal.
    const shown = await cli(["secrets", "list", ...cluster, "--show-values"]);
    expect(shown.stdout).toBe(
      "DB_PASSWORD=changed\nTLS_CERT=-----BEGIN CERTIFICATE-----\\u000aMIIB\\u000a-----END CERTIFICATE-----\\u000a\n",
    );

    const deleted = await cli(["secrets", "delete", "DB_PASSWORD", ...cluster, "--json"]);
    expect(JSON.parse(deleted.stdout)).toEqual({ clusterId: clusterId, name: "DB_PASSWORD", deleted: true });
    const again = await cli(["secrets", "delete", "DB_PASSWORD", ...cluster]);
    expect(again.exitCode).toBe(exitCodes.failure);
    expect(again.stderr).toContain("HTTP 404");
  });

  it("exits 1 with the problem's detail for an existing name and an unknown cluster", async () => {
    await cli(["secrets", "create", "TWICE", "--cluster", clusterId, "--value", "1"]);
    const twice = await cli(["secrets", "create", "TWICE", "--cluster", clusterId, "--value", "2"]);
    expect(twice.exitCode).toBe(exitCodes.failure);
    expect(twice.stderr).toContain("HTTP 409");
    const unknown = await cli(["secrets", "list", "--cluster", foreignClusterId]);
    expect(unknown.exitCode).toBe(exitCodes.failure);
    expect(unknown.stderr).toContain("HTTP 404");
  });

  it("exits 2 without --cluster, without a value, with two values or an unset variable", async () => {
    expect((await cli(["secrets", "list"])).exitCode).toBe(exitCodes.usage);
    const noValue = await cli(["secrets", "create", "X", "--cluster", clusterId]);
    expect(noValue.exitCode).toBe(exitCodes.usage);
    expect(noValue.stderr).toContain("exactly one of --value-file, --value-from-env, --value");
    const twoValues = await cli([
      "secrets",
      "update",
      "X",
      "--cluster",
      clusterId,
      "--value",
      "a",
      "--value-from-env",
      "A",
    ]);
    expect(twoValues.exitCode).toBe(exitCodes.usage);
    const unset = await cli(["secrets", "create", "X", "--cluster", clusterId, "--value-from-env", "UNSET_VARIABLE"]);
    expect(unset).toMatchObject({ exitCode: exitCodes.usage, stderr: expect.stringContaining("UNSET_VARIABLE") });
  });
});
