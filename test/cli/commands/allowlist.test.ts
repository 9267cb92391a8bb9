import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { formatAllowlistTable, parseAllowlistArgument } from "../../../src/cli/commands/allowlist.js";
import { exitCodes } from "../../../src/cli/io.js";
import { type ClusterAccessFixture, createClusterAccessFixture } from "../../platform/admin/cluster-access-support.js";
import { type CliFixture, startCliFixture } from "../support.js";

let fixture: CliFixture;
let access: ClusterAccessFixture;
const clusterId = randomUUID();

beforeAll(async () => {
  access = createClusterAccessFixture();
  fixture = await startCliFixture({ clusterAccess: access.options });
  access.addCluster(fixture.platform.organizationId, clusterId);
});

afterAll(async () => {
  await fixture?.close();
});

describe("flowplane allowlist", () => {
  it("sets entries with descriptions and reads them back as a table and as JSON", async () => {
    const set = await fixture.cli([
      "allowlist",
      "set",
      "--cluster",
      clusterId,
      "192.0.2.0/24=office network",
      "10.0.0.0/8,2001:db8::/32",
    ]);
    expect(set).toMatchObject({
      exitCode: exitCodes.ok,
      stdout: `The allowlist of cluster ${clusterId} now holds 2 entries.\n`,
    });
    const table = await fixture.cli(["allowlist", "get", "--cluster", clusterId]);
    expect(table.stdout.split("\n").slice(0, 3)).toEqual([
      "IP                        DESCRIPTION",
      "192.0.2.0/24              office network",
      "10.0.0.0/8,2001:db8::/32",
    ]);
    const json = await fixture.cli(["allowlist", "get", "--cluster", clusterId, "--json"]);
    expect(JSON.parse(json.stdout)).toEqual([
      { ip: "192.0.2.0/24", description: "office network" },
      { ip: "10.0.0.0/8,2001:db8::/32", description: "" },
    ]);
  });

  it("empties the list only with --allow-everyone", async () => {
    const missing = await fixture.cli(["allowlist", "set", "--cluster", clusterId]);
    expect(missing.exitCode).toBe(exitCodes.usage);
    expect(missing.stderr).toContain("--allow-everyone");
    const both = await fixture.cli(["allowlist", "set", "--cluster", clusterId, "--allow-everyone", "192.0.2.1"]);
    expect(both.exitCode).toBe(exitCodes.usage);
    const emptied = await fixture.cli(["allowlist", "set", "--cluster", clusterId, "--allow-everyone", "--json"]);
    expect(emptied).toMatchObject({ exitCode: exitCodes.ok, stdout: "[]\n" });
    const shown = await fixture.cli(["allowlist", "get", "--cluster", clusterId]);
    expect(shown.stdout).toBe("The allowlist is empty: every address may connect.\n");
  });

  it("exits 1 with the platform's detail naming an invalid range, and 2 without --cluster", async () => {
    const invalid = await fixture.cli(["allowlist", "set", "--cluster", clusterId, "192.0.2.1", "10.0.0.0/33=bad"]);
    expect(invalid.exitCode).toBe(exitCodes.failure);
    expect(invalid.stderr).toContain("body/ipallowlist/1/ip");
    expect(invalid.stderr).toContain("10.0.0.0/33");
    expect(invalid.stderr).toContain("HTTP 400");
    const unknown = await fixture.cli(["allowlist", "get", "--cluster", randomUUID()]);
    expect(unknown.exitCode).toBe(exitCodes.failure);
    expect(unknown.stderr).toContain("HTTP 404");
    expect((await fixture.cli(["allowlist", "get"])).exitCode).toBe(exitCodes.usage);
  });

  it("splits an argument at its first '=' and escapes control characters in the table", () => {
    expect(parseAllowlistArgument(" 192.0.2.1 = a=b ")).toEqual({ ip: "192.0.2.1", description: "a=b" });
    expect(formatAllowlistTable([{ ip: "192.0.2.1", description: "\u001b[31mred" }])).not.toContain("\u001b");
  });
});
