import { randomUUID } from "node:crypto";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { maximumFolderDepth } from "../../../../src/platform/modeler/paths.js";
import { creationColumns } from "../../../../src/platform/modeler/records.js";
import { databaseKinds } from "../../../support/databases.js";
import { type ModelerFixture, openModelerFixture } from "../support.js";

describe.each(databaseKinds)("FolderService and ProjectService on %s", (kind) => {
  let fixture: ModelerFixture;
  let projectId: string;

  beforeEach(async () => {
    fixture = await openModelerFixture(kind);
    projectId = (await fixture.services.projects.create(fixture.organizationId, fixture.actor, "Project")).id;
  });
  afterEach(async () => await fixture.close());

  function createFolder(name: string, location: { projectId?: string; parentId?: string | null }) {
    return fixture.services.folders.create(fixture.organizationId, fixture.actor, { name, ...location });
  }

  it("nests folders and lists the content of projects and folders", async () => {
    const top = await createFolder("Top", { projectId });
    const inner = await createFolder("Inner", { parentId: top.id });
    expect(inner).toMatchObject({ projectId, parentId: top.id, name: "Inner" });
    const file = await fixture.services.files.create(fixture.organizationId, fixture.actor, {
      name: "f",
      content: "{}",
      fileType: "form",
      folderId: inner.id,
    });
    const project = await fixture.services.projects.get(fixture.organizationId, projectId);
    expect(project.metadata.name).toBe("Project");
    expect(project.content.folders.map((folder) => folder.id)).toEqual([top.id]);
    expect(project.content.files).toEqual([]);
    const folder = await fixture.services.folders.get(fixture.organizationId, inner.id);
    expect(folder.content.files.map((item) => item.simplePath)).toEqual(["Project/Top/Inner/f"]);
    expect(file.canonicalPath.map((segment) => segment.name)).toEqual(["Project", "Top", "Inner"]);
  });

  it("refuses a parent of another project than the one given, and a missing location", async () => {
    const other = await fixture.services.projects.create(fixture.organizationId, fixture.actor, "Other");
    const top = await createFolder("Top", { projectId });
    await expect(createFolder("x", { projectId: other.id, parentId: top.id })).rejects.toMatchObject({ status: 400 });
    await expect(createFolder("x", {})).rejects.toMatchObject({ status: 400 });
  });

  it("moves a folder with its subtree to another project, never into itself", async () => {
    const { folders, files, projects } = fixture.services;
    const other = await projects.create(fixture.organizationId, fixture.actor, "Other");
    const top = await createFolder("Top", { projectId });
    const inner = await createFolder("Inner", { parentId: top.id });
    const deepest = await createFolder("Deepest", { parentId: inner.id });
    const file = await files.create(fixture.organizationId, fixture.actor, {
      name: "f",
      content: "{}",
      fileType: "form",
      folderId: deepest.id,
    });
    await expect(
      folders.update(fixture.organizationId, fixture.actor, top.id, { parentId: deepest.id }),
    ).rejects.toMatchObject({
      status: 400,
      message: expect.stringContaining("into itself"),
    });
    await expect(
      folders.update(fixture.organizationId, fixture.actor, top.id, { parentId: top.id }),
    ).rejects.toMatchObject({
      status: 400,
    });
    const moved = await folders.update(fixture.organizationId, fixture.actor, top.id, {
      projectId: other.id,
      name: "Moved",
    });
    expect(moved).toMatchObject({ projectId: other.id, parentId: null, name: "Moved" });
    expect((await folders.get(fixture.organizationId, deepest.id)).metadata.projectId).toBe(other.id);
    expect((await files.get(fixture.organizationId, file.id)).metadata).toMatchObject({
      projectId: other.id,
      simplePath: "Other/Moved/Inner/Deepest/f",
    });
    const lifted = await folders.update(fixture.organizationId, fixture.actor, deepest.id, { parentId: null });
    expect(lifted).toMatchObject({ projectId: other.id, parentId: null });
  });

  it("moves a folder with more subfolders on one level than a statement binds values", async () => {
    const { folders, files, projects } = fixture.services;
    const other = await projects.create(fixture.organizationId, fixture.actor, "Other");
    const wide = await createFolder("Wide", { projectId });
    const elsewhere = await createFolder("Elsewhere", { projectId: other.id });
    // 33,000 subfolders: more than SQLite binds in one statement (32,766), inserted as the service would, in batches.
    const subfolderCount = 33_000;
    const subfolderIds = Array.from({ length: subfolderCount }, () => randomUUID());
    const timestamp = new Date(0).toISOString();
    for (let start = 0; start < subfolderCount; start += 1_000) {
      await fixture.store.database
        .insertInto("modeler_folders")
        .values(
          subfolderIds.slice(start, start + 1_000).map((id, offset) => ({
            id,
            organization_id: fixture.organizationId,
            name: `Sub ${start + offset}`,
            name_folded: `sub ${start + offset}`,
            project_id: projectId,
            parent_id: wide.id,
            ...creationColumns(fixture.actor, timestamp),
          })),
        )
        .execute();
    }
    const lastId = subfolderIds[subfolderCount - 1] as string;
    const file = await files.create(fixture.organizationId, fixture.actor, {
      name: "f",
      content: "{}",
      fileType: "form",
      folderId: lastId,
    });
    const moved = await folders.update(fixture.organizationId, fixture.actor, wide.id, { parentId: elsewhere.id });
    expect(moved).toMatchObject({ projectId: other.id, parentId: elsewhere.id });
    expect((await folders.get(fixture.organizationId, lastId)).metadata.projectId).toBe(other.id);
    expect((await files.get(fixture.organizationId, file.id)).metadata).toMatchObject({
      projectId: other.id,
      simplePath: `Other/Elsewhere/Wide/Sub ${subfolderCount - 1}/f`,
    });
    const stillInProject = await fixture.store.database
      .selectFrom("modeler_folders")
      .select((query) => query.fn.countAll<number>().as("count"))
      .where("organization_id", "=", fixture.organizationId)
      .where("project_id", "=", projectId)
      .executeTakeFirstOrThrow();
    expect(Number(stillInProject.count)).toBe(0);
    // Its subfolders cannot be its new parent: the check looks through all of them.
    await expect(
      folders.update(fixture.organizationId, fixture.actor, wide.id, { parentId: lastId }),
    ).rejects.toMatchObject({ status: 400, message: expect.stringContaining("into itself") });
  });

  it("nests folders at most 100 levels deep by a create or a move, and still reads a deeper tree a store holds", async () => {
    const { folders, files } = fixture.services;
    const chain = [await createFolder("level 1", { projectId })];
    for (let level = 2; level <= maximumFolderDepth; level++) {
      chain.push(await createFolder(`level ${level}`, { parentId: chain.at(-1)?.id ?? null }));
    }
    const deepest = chain.at(-1)?.id as string;
    await expect(createFolder("one too deep", { parentId: deepest })).rejects.toMatchObject({
      status: 400,
      message: `Folders nest at most ${maximumFolderDepth} levels deep.`,
    });
    // A folder with one subfolder moves to where its subfolder would be one level too deep, but not below that.
    const pair = await createFolder("pair", { projectId });
    await createFolder("pair's child", { parentId: pair.id });
    const fits = chain[maximumFolderDepth - 3]?.id as string;
    const tooDeep = chain[maximumFolderDepth - 2]?.id as string;
    await expect(
      folders.update(fixture.organizationId, fixture.actor, pair.id, { parentId: tooDeep }),
    ).rejects.toMatchObject({
      status: 400,
    });
    await folders.update(fixture.organizationId, fixture.actor, pair.id, { parentId: fits });

    // An earlier version let trees grow to 1,000 levels: one deeper than 100 is still read whole.
    const above = [await createFolder("above 1", { projectId })];
    for (const level of [2, 3])
      above.push(await createFolder(`above ${level}`, { parentId: above.at(-1)?.id ?? null }));
    await fixture.store.database
      .updateTable("modeler_folders")
      .set({ parent_id: above.at(-1)?.id as string })
      .where("id", "=", chain[0]?.id as string)
      .execute();
    const file = await files.create(fixture.organizationId, fixture.actor, {
      name: "deep",
      content: "{}",
      fileType: "form",
      folderId: deepest,
    });
    expect(file.canonicalPath).toHaveLength(1 + 3 + maximumFolderDepth);
    expect((await files.get(fixture.organizationId, file.id)).metadata.canonicalPath.at(-1)?.name).toBe(
      `level ${maximumFolderDepth}`,
    );
  });

  it("never lets concurrent moves form a cycle", async () => {
    const { folders } = fixture.services;
    const left = await createFolder("Left", { projectId });
    const right = await createFolder("Right", { projectId });
    const outcomes = await Promise.allSettled([
      folders.update(fixture.organizationId, fixture.actor, left.id, { parentId: right.id }),
      folders.update(fixture.organizationId, fixture.actor, right.id, { parentId: left.id }),
    ]);
    expect(outcomes.filter((outcome) => outcome.status === "fulfilled")).toHaveLength(1);
    const rejected = outcomes.find((outcome) => outcome.status === "rejected");
    expect((rejected as PromiseRejectedResult).reason).toMatchObject({ status: 400 });
    const parents = [
      (await folders.get(fixture.organizationId, left.id)).metadata.parentId,
      (await folders.get(fixture.organizationId, right.id)).metadata.parentId,
    ];
    expect(parents.filter((parent) => parent === null)).toHaveLength(1);
  });

  it("deletes folders and projects only when empty (409 otherwise)", async () => {
    const { folders, projects } = fixture.services;
    const top = await createFolder("Top", { projectId });
    const inner = await createFolder("Inner", { parentId: top.id });
    await expect(folders.delete(fixture.organizationId, top.id)).rejects.toMatchObject({ status: 409 });
    await expect(projects.delete(fixture.organizationId, projectId)).rejects.toMatchObject({ status: 409 });
    await folders.delete(fixture.organizationId, inner.id);
    await folders.delete(fixture.organizationId, top.id);
    await projects.delete(fixture.organizationId, projectId);
    await expect(projects.get(fixture.organizationId, projectId)).rejects.toMatchObject({ status: 404 });
    await expect(folders.delete(fixture.organizationId, top.id)).rejects.toMatchObject({ status: 404 });
  });

  it("renames projects and keeps organizations apart", async () => {
    const { projects, folders } = fixture.services;
    fixture.advanceClock(1_000);
    const renamed = await projects.rename(fixture.organizationId, fixture.actor, projectId, "Renamed");
    expect(renamed).toMatchObject({
      name: "Renamed",
      updated: "2024-03-14T12:00:01.000Z",
      created: "2024-03-14T12:00:00.000Z",
    });
    await expect(projects.get(fixture.otherOrganizationId, projectId)).rejects.toMatchObject({ status: 404 });
    await expect(projects.rename(fixture.otherOrganizationId, fixture.actor, projectId, "x")).rejects.toMatchObject({
      status: 404,
    });
    await expect(
      folders.create(fixture.otherOrganizationId, fixture.actor, { name: "x", projectId }),
    ).rejects.toMatchObject({ status: 404 });
  });
});
