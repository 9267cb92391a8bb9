import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { MemberService } from "../../../../src/platform/admin/members/service.js";
import { databaseKinds } from "../../../support/databases.js";
import { type ModelerFixture, openModelerFixture } from "../support.js";

describe.each(databaseKinds)("CollaboratorService on %s", (kind) => {
  let fixture: ModelerFixture;
  let projectId: string;

  beforeEach(async () => {
    fixture = await openModelerFixture(kind);
    projectId = (await fixture.services.projects.create(fixture.organizationId, fixture.actor, "P")).id;
    const members = new MemberService(fixture.store.database);
    await members.inviteOrChangeRoles(fixture.organizationId, "ana@example.com", ["developer"]);
    await members.inviteOrChangeRoles(fixture.organizationId, "bo@example.com", ["analyst"]);
    await members.inviteOrChangeRoles(fixture.otherOrganizationId, "eve@example.com", ["developer"]);
  });
  afterEach(async () => await fixture.close());

  it("adds members only, changes roles, searches and removes", async () => {
    const { collaborators } = fixture.services;
    const org = fixture.organizationId;
    expect(await collaborators.put(org, { email: "Ana@Example.com", projectId, role: "editor" })).toBe("added");
    expect(await collaborators.put(org, { email: "bo@example.com", projectId, role: "viewer" })).toBe("added");
    expect(await collaborators.put(org, { email: "ana@example.com", projectId, role: "project_admin" })).toBe(
      "updated",
    );
    await expect(collaborators.put(org, { email: "eve@example.com", projectId, role: "viewer" })).rejects.toMatchObject(
      {
        status: 400,
        message: expect.stringContaining("not a member"),
      },
    );
    await expect(
      collaborators.put(fixture.otherOrganizationId, { email: "eve@example.com", projectId, role: "viewer" }),
    ).rejects.toMatchObject({ status: 404 });
    expect(await collaborators.search(org, { filter: { projectId } })).toEqual({
      items: [
        { projectId, email: "ana@example.com", name: "ana", role: "project_admin" },
        { projectId, email: "bo@example.com", name: "bo", role: "viewer" },
      ],
      total: 2,
    });
    expect((await collaborators.search(org, { filter: { role: "viewer" } })).items.map((item) => item.email)).toEqual([
      "bo@example.com",
    ]);
    expect((await collaborators.search(org, { filter: { name: "AN" } })).total).toBe(1);
    expect((await collaborators.search(org, { filter: { email: "BO@example.com" } })).total).toBe(1);
    await collaborators.remove(org, projectId, "ANA@example.com");
    await expect(collaborators.remove(org, projectId, "ana@example.com")).rejects.toMatchObject({ status: 404 });
    expect((await collaborators.search(fixture.otherOrganizationId, {})).total).toBe(0);
  });

  it("removes the collaborators of a deleted project", async () => {
    await fixture.services.collaborators.put(fixture.organizationId, {
      email: "ana@example.com",
      projectId,
      role: "viewer",
    });
    await fixture.services.projects.delete(fixture.organizationId, projectId);
    expect((await fixture.services.collaborators.search(fixture.organizationId, {})).total).toBe(0);
  });
});
