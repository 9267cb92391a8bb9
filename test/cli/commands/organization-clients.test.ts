import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { exitCodes } from "../../../src/cli/io.js";
import { type CliFixture, startCliFixture } from "../support.js";

let fixture: CliFixture;

beforeAll(async () => {
  fixture = await startCliFixture();
});

afterAll(async () => {
  await fixture?.close();
});

describe("flowplane organization-clients", () => {
  it("creates a client with the scopes given, lists it, and deletes it", async () => {
    const created = await fixture.cli([
      "organization-clients",
      "create",
      "CI",
      "-s",
      "modeler:read",
      "--scope",
      "members",
    ]);
    expect(created.exitCode, created.stderr).toBe(exitCodes.ok);
    const clientId = /SERVICE_CONSOLE_CLIENT_ID=(\S+)/.exec(created.stdout)?.[1];
    expect(created.stdout).toContain("with the scopes modeler:read, members.");
    expect(created.stdout).toMatch(/SERVICE_CONSOLE_CLIENT_SECRET=[A-Za-z0-9_-]{43}\n/);

    const listed = await fixture.cli(["organization-clients", "list"]);
    expect(listed.stdout.split("\n")[0]).toMatch(/^CLIENT ID +NAME +CREATED +SCOPES$/);
    expect(listed.stdout).toMatch(new RegExp(`${clientId} +CI +\\S+ +modeler:read,members\\n`));
    const json = JSON.parse((await fixture.cli(["organization-clients", "list", "--json"])).stdout) as {
      clientId: string;
    }[];
    expect(json.map((client) => client.clientId)).toContain(clientId);

    const deleted = await fixture.cli(["organization-clients", "delete", clientId ?? ""]);
    expect(deleted).toMatchObject({
      exitCode: exitCodes.ok,
      stdout: `Deleted client ${clientId} of the organization.\n`,
    });
    expect((await fixture.cli(["organization-clients", "delete", clientId ?? ""])).exitCode).toBe(exitCodes.failure);
  });

  it("refuses an unknown scope and a missing one as usage errors", async () => {
    const unknown = await fixture.cli(["organization-clients", "create", "x", "--scope", "root"]);
    expect(unknown.exitCode).toBe(exitCodes.usage);
    expect(unknown.stderr).toContain("allowed scopes: cluster, cluster-clients");
    expect((await fixture.cli(["organization-clients", "create", "x"])).exitCode).toBe(exitCodes.usage);
  });
});
