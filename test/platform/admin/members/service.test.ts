import { randomUUID } from "node:crypto";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { ServiceError } from "../../../../src/http/errors.js";
import { MemberService, maximumMembers } from "../../../../src/platform/admin/members/service.js";
import { openStore, type Store } from "../../../../src/platform/store/database.js";
import { createTestDatabase, databaseKinds, type TestDatabase } from "../../../support/databases.js";

describe.each(databaseKinds)("MemberService on %s", (kind) => {
  let testDatabase: TestDatabase;
  let store: Store;
  let members: MemberService;
  const organizationId = randomUUID();

  beforeEach(async () => {
    testDatabase = await createTestDatabase(kind);
    store = await openStore({ url: testDatabase.url, dataDirectory: testDatabase.dataDirectory });
    const timestamp = new Date(0).toISOString();
    await store.database
      .insertInto("organizations")
      .values({ id: organizationId, name: "o", created_at: timestamp })
      .execute();
    await store.database
      .insertInto("members")
      .values({
        organization_id: organizationId,
        email: "owner@example.com",
        name: "owner",
        roles: JSON.stringify(["owner"]),
        invite_pending: 0,
        created_at: timestamp,
        updated_at: timestamp,
      })
      .execute();
    members = new MemberService(store.database);
  });

  afterEach(async () => {
    await store.close();
    await testDatabase.drop();
  });

  it("invites a new member with a pending invitation and sorted, unique roles", async () => {
    expect(
      await members.inviteOrChangeRoles(organizationId, "Dev@Example.com", ["developer", "admin", "developer"]),
    ).toBe("invited");
    expect(await members.list(organizationId)).toEqual([
      { name: "dev", email: "dev@example.com", roles: ["admin", "developer"], invitePending: true },
      { name: "owner", email: "owner@example.com", roles: ["owner"], invitePending: false },
    ]);
  });

  it("refuses a new member beyond the organization's bound with 409, and still changes an existing one's roles", async () => {
    const timestamp = new Date(0).toISOString();
    // The owner and maximumMembers − 1 others: full.
    const rows = Array.from({ length: maximumMembers - 1 }, (_, index) => ({
      organization_id: organizationId,
      email: `member${index}@example.com`,
      name: `member${index}`,
      roles: JSON.stringify(["visitor"]),
      invite_pending: 1,
      created_at: timestamp,
      updated_at: timestamp,
    }));
    for (let start = 0; start < rows.length; start += 500) {
      await store.database
        .insertInto("members")
        .values(rows.slice(start, start + 500))
        .execute();
    }
    await expect(
      members.inviteOrChangeRoles(organizationId, "one-more@example.com", ["visitor"]),
    ).rejects.toMatchObject({
      kind: "conflict",
      message: expect.stringContaining(`${maximumMembers} members, the most it may have`),
    });
    expect(await members.inviteOrChangeRoles(organizationId, "member1@example.com", ["developer"])).toBe("updated");
  });

  it("changes the roles of an existing member, matching the email case-insensitively", async () => {
    await members.inviteOrChangeRoles(organizationId, "dev@example.com", ["developer"]);
    expect(await members.inviteOrChangeRoles(organizationId, "DEV@example.com", ["analyst"])).toBe("updated");
    const dev = (await members.list(organizationId)).find((member) => member.email === "dev@example.com");
    expect(dev?.roles).toEqual(["analyst"]);
  });

  it("refuses to change the owner's roles or remove the owner", async () => {
    await expect(members.inviteOrChangeRoles(organizationId, "owner@example.com", ["admin"])).rejects.toMatchObject({
      kind: "conflict",
    });
    await expect(members.remove(organizationId, "owner@example.com")).rejects.toBeInstanceOf(ServiceError);
    expect((await members.list(organizationId)).map((member) => member.email)).toContain("owner@example.com");
  });

  it("removes a member, and answers not-found for a stranger", async () => {
    await members.inviteOrChangeRoles(organizationId, "dev@example.com", ["developer"]);
    await members.remove(organizationId, "dev@example.com");
    expect(await members.isMember(organizationId, "dev@example.com")).toBe(false);
    await expect(members.remove(organizationId, "dev@example.com")).rejects.toMatchObject({ kind: "notFound" });
  });

  it("keeps organizations apart", async () => {
    await members.inviteOrChangeRoles(organizationId, "dev@example.com", ["developer"]);
    expect(await members.list(randomUUID())).toEqual([]);
  });
});
