import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { formatMemberTable } from "../../../src/cli/commands/members.js";
import { exitCodes } from "../../../src/cli/io.js";
import { type CliFixture, startCliFixture } from "../support.js";

let fixture: CliFixture;

beforeAll(async () => {
  fixture = await startCliFixture();
});

afterAll(async () => {
  await fixture?.close();
});

describe("flowplane members", () => {
  it("lists members as a table and as JSON", async () => {
    const table = await fixture.cli(["members", "list"]);
    expect(table.exitCode).toBe(exitCodes.ok);
    expect(table.stdout.split("\n")[0]).toMatch(/^EMAIL\s+NAME\s+ROLES\s+INVITE PENDING$/);
    expect(table.stdout).toContain("owner");

    const json = await fixture.cli(["members", "list", "--json"]);
    const members = JSON.parse(json.stdout) as { roles: string[] }[];
    expect(members.some((member) => member.roles.includes("owner"))).toBe(true);
  });

  it("invites, changes roles and removes a member", async () => {
    const invited = await fixture.cli([
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

    const changed = await fixture.cli(["members", "invite", "grace@example.com", "-r", "admin"]);
    expect(changed.exitCode).toBe(exitCodes.ok);
    const listed = await fixture.cli(["members", "list", "--json"]);
    const members = JSON.parse(listed.stdout) as { email: string; roles: string[]; invitePending: boolean }[];
    expect(members.find((member) => member.email === "grace@example.com")).toMatchObject({
      roles: ["admin"],
      invitePending: true,
    });

    const removed = await fixture.cli(["members", "remove", "grace@example.com"]);
    expect(removed).toMatchObject({ exitCode: exitCodes.ok, stdout: "Removed member grace@example.com.\n" });

    const again = await fixture.cli(["members", "remove", "grace@example.com", "--json"]);
    expect(again.exitCode).toBe(exitCodes.failure);
    expect(again.stderr).toContain("HTTP 404");
    expect(again.stdout).toBe("");
  });

  it("exits 2 for a role that cannot be assigned or a missing role", async () => {
    const owner = await fixture.cli(["members", "invite", "x@example.com", "--role", "owner"]);
    expect(owner.exitCode).toBe(exitCodes.usage);
    expect(owner.stderr).toContain("allowed roles");
    const none = await fixture.cli(["members", "invite", "x@example.com"]);
    expect(none.exitCode).toBe(exitCodes.usage);
    expect(none.stderr).toContain("--role");
  });

  it("exits 1 with the problem document's detail for an invalid email", async () => {
    const result = await fixture.cli(["members", "invite", "not-an-email", "--role", "developer"]);
    expect(result.exitCode).toBe(exitCodes.failure);
    expect(result.stderr).toContain("HTTP 400");
  });

  it("exits 3 when the client cannot authenticate", async () => {
    const result = await fixture.cli(["members", "list"], {
      ...fixture.clientEnvironment,
      SERVICE_CONSOLE_CLIENT_SECRET: "wrong-secret-wrong-secret-wrong-secret",
      SERVICE_CONSOLE_TOKEN_CACHE_FILE: "none",
    });
    expect(result.exitCode).toBe(exitCodes.authentication);
  });

  it("talks to SERVICE_ADMIN_URL when it is set", async () => {
    const result = await fixture.cli(["members", "list"], {
      ...fixture.clientEnvironment,
      SERVICE_ADMIN_URL: "http://127.0.0.1:1/admin",
    });
    expect(result.exitCode).toBe(exitCodes.failure);
    expect(result.stderr).toContain("http://127.0.0.1:1/admin/members");
  });
});

describe("formatMemberTable", () => {
  it("aligns every column to its widest cell", () => {
    const table = formatMemberTable([
      { email: "a@example.com", name: "A", roles: ["admin", "developer"], invitePending: true },
      { email: "longer.name@example.com", name: "Longer Name", roles: ["owner"], invitePending: false },
    ]);
    expect(table.split("\n")).toEqual([
      "EMAIL                    NAME         ROLES            INVITE PENDING",
      "a@example.com            A            admin,developer  yes",
      "longer.name@example.com  Longer Name  owner            no",
    ]);
  });

  it("shows control characters in names as escapes and aligns by what is shown", () => {
    const table = formatMemberTable([
      { email: "a@example.com", name: "A\u001b[2J", roles: ["admin"], invitePending: false },
      { email: "b@example.com", name: "B", roles: ["owner"], invitePending: false },
    ]);
    expect(table.split("\n")).toEqual([
      "EMAIL          NAME        ROLES  INVITE PENDING",
      "a@example.com  A\\u001b[2J  admin  no",
      "b@example.com  B           owner  no",
    ]);
  });
});
