import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { formatClusterClientTable, formatConnectionDetails } from "../../../src/cli/commands/clients.js";
import { exitCodes } from "../../../src/cli/io.js";
import type { ClusterSummary } from "../../../src/platform/admin/cluster-directory.js";
import { createClusterAccessFixture } from "../../platform/admin/cluster-access-support.js";
import { type CliFixture, startCliFixture } from "../support.js";

let fixture: CliFixture;
let cluster: ClusterSummary;
const access = createClusterAccessFixture();

beforeAll(async () => {
  fixture = await startCliFixture({ clusterAccess: access.options });
  cluster = access.addCluster(fixture.platform.organizationId, randomUUID());
});

afterAll(async () => {
  await fixture?.close();
});

describe("flowplane clients", () => {
  it("creates a client, lists it, prints its connection details and deletes it", async () => {
    const created = await fixture.cli([
      "clients",
      "create",
      "worker",
      "--cluster",
      cluster.id,
      "--permission",
      "gateway",
      "-p",
      "secrets",
      "--json",
    ]);
    expect(created.exitCode).toBe(exitCodes.ok);
    const client = JSON.parse(created.stdout) as { clientId: string; clientSecret: string; permissions: string[] };
    expect(client.permissions).toEqual(["gateway", "secrets"]);
    expect(client.clientSecret).toMatch(/^[A-Za-z0-9_-]{43}$/);

    const table = await fixture.cli(["clients", "list", "--cluster", cluster.id]);
    expect(table.exitCode).toBe(exitCodes.ok);
    expect(table.stdout.split("\n")[0]).toMatch(/^CLIENT ID\s+NAME\s+PERMISSIONS$/);
    expect(table.stdout).toContain(client.clientId);
    const json = await fixture.cli(["clients", "list", "--cluster", cluster.id, "--json"]);
    expect(JSON.parse(json.stdout)).toEqual([
      { clientId: client.clientId, name: "worker", permissions: ["gateway", "secrets"] },
    ]);

    const details = await fixture.cli(["clients", "get", client.clientId, "--cluster", cluster.id]);
    expect(details.exitCode).toBe(exitCodes.ok);
    expect(details.stdout).toContain(`SERVICE_ADDRESS=${cluster.links.gateway}\n`);
    expect(details.stdout).toContain(`SERVICE_CLIENT_ID=${client.clientId}\n`);
    expect(details.stdout).toContain(`SERVICE_AUTHORIZATION_SERVER_URL=${fixture.platform.issuerUrl}/oauth/token\n`);
    for (const output of [table.stdout, json.stdout, details.stdout]) expect(output).not.toContain(client.clientSecret);

    const deleted = await fixture.cli(["clients", "delete", client.clientId, "--cluster", cluster.id]);
    expect(deleted).toMatchObject({
      exitCode: exitCodes.ok,
      stdout: `Deleted client ${client.clientId} of cluster ${cluster.id}.\n`,
    });
    const again = await fixture.cli(["clients", "delete", client.clientId, "--cluster", cluster.id, "--json"]);
    expect(again.exitCode).toBe(exitCodes.failure);
    expect(again.stderr).toContain("HTTP 404");
    expect(again.stdout).toBe("");
  });

  it("prints the secret of a new client in text form with the variables a client application needs", async () => {
    const created = await fixture.cli(["clients", "create", "reporter", "--cluster", cluster.id]);
    expect(created.exitCode).toBe(exitCodes.ok);
    expect(created.stdout).toMatch(/^SERVICE_CLIENT_SECRET=[A-Za-z0-9_-]{43}$/m);
    expect(created.stdout).toContain(`SERVICE_ADDRESS=${cluster.links.gateway}\n`);
    expect(created.stdout).toContain("with the permissions gateway.");
  });

  it("exits 2 without --cluster or with an unknown permission, 1 for a duplicate name or an unknown cluster", async () => {
    const missing = await fixture.cli(["clients", "list"]);
    expect(missing.exitCode).toBe(exitCodes.usage);
    expect(missing.stderr).toContain("--cluster");
    const permission = await fixture.cli(["clients", "create", "x", "--cluster", cluster.id, "-p", "cluster"]);
    expect(permission.exitCode).toBe(exitCodes.usage);
    expect(permission.stderr).toContain("allowed permissions");
    expect((await fixture.cli(["clients", "create", "twice", "--cluster", cluster.id])).exitCode).toBe(exitCodes.ok);
    const duplicate = await fixture.cli(["clients", "create", "twice", "--cluster", cluster.id]);
    expect(duplicate.exitCode).toBe(exitCodes.failure);
    expect(duplicate.stderr).toContain("HTTP 400");
    const unknown = await fixture.cli(["clients", "list", "--cluster", "00000000-0000-4000-8000-000000000000"]);
    expect(unknown.exitCode).toBe(exitCodes.failure);
    expect(unknown.stderr).toContain("HTTP 404");
  });
});

describe("formatClusterClientTable and formatConnectionDetails", () => {
  it("aligns the table and shows control characters in names as escapes", () => {
    const table = formatClusterClientTable([
      { clientId: "abc", name: "A\u001b[2J", permissions: ["gateway", "secrets"] },
      { clientId: "longer-id", name: "B", permissions: ["gateway"] },
    ]);
    expect(table.split("\n")).toEqual([
      "CLIENT ID  NAME        PERMISSIONS",
      "abc        A\\u001b[2J  gateway,secrets",
      "longer-id  B           gateway",
    ]);
  });

  it("prints connection details as an environment file", () => {
    expect(
      formatConnectionDetails({
        name: "worker\n",
        SERVICE_ADDRESS: "http://gateway:8080",
        SERVICE_CLIENT_ID: "abc",
        SERVICE_AUTHORIZATION_SERVER_URL: "http://issuer/oauth/token",
        SERVICE_TOKEN_AUDIENCE: "gateway-api",
      }).split("\n"),
    ).toEqual([
      "# worker\\u000a",
      "SERVICE_ADDRESS=http://gateway:8080",
      "SERVICE_CLIENT_ID=abc",
      "SERVICE_AUTHORIZATION_SERVER_URL=http://issuer/oauth/token",
      "SERVICE_TOKEN_AUDIENCE=gateway-api",
    ]);
  });
});
