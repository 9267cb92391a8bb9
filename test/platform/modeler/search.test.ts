import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { escapeLike } from "../../../src/platform/modeler/search.js";
import { databaseKinds } from "../../support/databases.js";
import { type ModelerFixture, openModelerFixture } from "./support.js";

describe("escapeLike", () => {
  it("escapes the wildcards and the escape character", () => {
    expect(escapeLike("50%_off\\")).toBe("50\\%\\_off\\\\");
  });
});

describe.each(databaseKinds)("search on %s", (kind) => {
  let fixture: ModelerFixture;
  const names = ["Alpha", "beta", "GAMMA", "100% done", "under_score", "Ärger", "alphabet"];

  beforeEach(async () => {
    fixture = await openModelerFixture(kind);
    // One project per hour from 2024-03-14T12:00Z, so dates are predictable.
    for (const name of names) {
      await fixture.services.projects.create(fixture.organizationId, fixture.actor, name);
      fixture.advanceClock(3_600_000);
    }
    await fixture.services.projects.create(fixture.otherOrganizationId, fixture.actor, "Alpha elsewhere");
  });
  afterEach(async () => await fixture.close());

  function searchNames(request: Parameters<ModelerFixture["services"]["projects"]["search"]>[1]) {
    return fixture.services.projects
      .search(fixture.organizationId, request)
      .then((page) => ({ names: page.items.map((item) => item.name), total: page.total }));
  }

  it("pages with a default size of 10, in creation order by default, counting all matches", async () => {
    expect(await searchNames({})).toEqual({ names, total: 7 });
    expect(await searchNames({ size: 3, page: 1 })).toEqual({ names: names.slice(3, 6), total: 7 });
    expect(await searchNames({ size: 3, page: 5 })).toEqual({ names: [], total: 7 });
    expect(await searchNames({ size: 0 })).toEqual({ names: [], total: 7 });
  });

  it("matches names as case-insensitive substrings, with wildcards taken literally", async () => {
    expect((await searchNames({ filter: { name: "ALPHA" } })).names).toEqual(["Alpha", "alphabet"]);
    expect((await searchNames({ filter: { name: "%" } })).names).toEqual(["100% done"]);
    expect((await searchNames({ filter: { name: "_" } })).names).toEqual(["under_score"]);
    expect((await searchNames({ filter: { name: "är" } })).names).toEqual(["Ärger"]);
    expect((await searchNames({ filter: { name: "" } })).total).toBe(7);
    expect(await searchNames({ filter: { name: "alpha" }, size: 1, page: 1 })).toEqual({
      names: ["alphabet"],
      total: 2,
    });
    expect(await searchNames({ filter: { name: "alpha" }, size: 1, page: 2 })).toEqual({ names: [], total: 2 });
    expect(await searchNames({ filter: { name: "alpha" }, size: 0 })).toEqual({ names: [], total: 2 });
    expect(await searchNames({ filter: { name: "no such project" } })).toEqual({ names: [], total: 0 });
  });

  it("sorts by name (code point order) and by dates in both directions", async () => {
    expect((await searchNames({ sort: [{ field: "name", direction: "ASC" }] })).names).toEqual([
      "100% done",
      "Alpha",
      "GAMMA",
      "alphabet",
      "beta",
      "under_score",
      "Ärger",
    ]);
    expect((await searchNames({ sort: [{ field: "created", direction: "DESC" }], size: 2 })).names).toEqual([
      "alphabet",
      "Ärger",
    ]);
  });

  it("sorts the matches of a name filter like any other result", async () => {
    expect((await searchNames({ filter: { name: "a" }, sort: [{ field: "name", direction: "DESC" }] })).names).toEqual([
      "beta",
      "alphabet",
      "GAMMA",
      "Alpha",
    ]);
    const files = fixture.services.files;
    const project = await fixture.services.projects.create(fixture.organizationId, fixture.actor, "revisions");
    for (const name of ["r1", "r2", "r10"]) {
      const file = await files.create(fixture.organizationId, fixture.actor, {
        name,
        content: "{}",
        fileType: "form",
        projectId: project.id,
      });
      for (let revision = 1; revision < Number(name.slice(1)); revision++) {
        await files.update(fixture.organizationId, fixture.actor, file.id, { revision, content: "{}" });
      }
    }
    const byRevision = await files.search(fixture.organizationId, {
      filter: { name: "R" },
      sort: [{ field: "revision", direction: "ASC" }],
    });
    expect(byRevision.items.map((item) => item.revision)).toEqual([1, 2, 10]);
  });

  it("breaks ties by id so that pages never overlap", async () => {
    const all = await fixture.services.projects.search(fixture.organizationId, {
      sort: [{ field: "updated", direction: "ASC" }],
      size: 50,
    });
    // Equal sort keys: rename all to the same timestamp, then page through with size 2.
    for (const item of all.items) {
      await fixture.services.projects.rename(fixture.organizationId, fixture.actor, item.id, item.name);
    }
    const seen: string[] = [];
    for (let page = 0; page < 4; page++) {
      const result = await fixture.services.projects.search(fixture.organizationId, {
        sort: [{ field: "updated", direction: "ASC" }],
        size: 2,
        page,
      });
      seen.push(...result.items.map((item) => item.id));
    }
    expect(seen).toEqual([...all.items.map((item) => item.id)].sort());
  });

  it("filters dates with comparison prefixes and rounding", async () => {
    // Created at 12:00, 13:00, …, 18:00 on 2024-03-14.
    expect((await searchNames({ filter: { created: "2024-03-14T13:00:00.000Z" } })).names).toEqual(["beta"]);
    expect((await searchNames({ filter: { created: ">2024-03-14T16:00:00Z" } })).names).toEqual(["Ärger", "alphabet"]);
    expect((await searchNames({ filter: { created: ">=2024-03-14T16:00:00Z" } })).total).toBe(3);
    expect((await searchNames({ filter: { created: "<2024-03-14T13:00:00Z" } })).names).toEqual(["Alpha"]);
    expect((await searchNames({ filter: { created: "<=2024-03-14T13:00:00Z" } })).total).toBe(2);
    expect((await searchNames({ filter: { created: "2024-03-14T15:30:00Z||/h" } })).names).toEqual(["100% done"]);
    expect((await searchNames({ filter: { created: "2024-03-14||/d" } })).total).toBe(7);
    expect((await searchNames({ filter: { created: ">2024-03-14T12:30:00Z||/d" } })).total).toBe(0);
    expect((await searchNames({ filter: { created: "<2024-03-14T12:30:00Z||/d" } })).total).toBe(0);
    expect((await searchNames({ filter: { created: ">=2024-03-14T12:30:00+01:00||/h" } })).total).toBe(7);
    expect((await searchNames({ filter: { created: ">9999-12-31T23:59:59.999Z" } })).total).toBe(0);
    expect((await searchNames({ filter: { created: "<=9999-12-31T23:59:59.999Z||/y" } })).total).toBe(7);
    expect((await searchNames({ filter: { created: "<0000-01-01" } })).total).toBe(0);
  });

  it("combines filters and matches ids, people and other fields exactly", async () => {
    const first = (await fixture.services.projects.search(fixture.organizationId, { size: 1 })).items[0];
    expect((await searchNames({ filter: { id: first?.id } })).names).toEqual(["Alpha"]);
    expect((await searchNames({ filter: { name: "a", created: "<2024-03-14T14:00:00Z" } })).names).toEqual([
      "Alpha",
      "beta",
    ]);
    expect((await searchNames({ filter: { createdBy: { email: fixture.actor.email } } })).total).toBe(7);
    expect((await searchNames({ filter: { createdBy: { name: "someone else" } } })).total).toBe(0);
  });

  it("refuses unknown fields, unsortable fields and malformed dates with 400", async () => {
    const { projects } = fixture.services;
    await expect(projects.search(fixture.organizationId, { filter: { colour: "red" } })).rejects.toMatchObject({
      status: 400,
    });
    await expect(
      projects.search(fixture.organizationId, { sort: [{ field: "createdBy", direction: "ASC" }] }),
    ).rejects.toMatchObject({ status: 400 });
    await expect(projects.search(fixture.organizationId, { filter: { created: "last week" } })).rejects.toMatchObject({
      status: 400,
      message: expect.stringContaining("filter.created"),
    });
    await expect(projects.search(fixture.organizationId, { filter: { name: "\u0000" } })).rejects.toMatchObject({
      status: 400,
    });
    await expect(projects.search(fixture.organizationId, { size: 51 })).rejects.toMatchObject({ status: 400 });
  });

  it("searches files by type, folder and revision, with null meaning the top level", async () => {
    const { files, folders, projects } = fixture.services;
    const project = await projects.create(fixture.organizationId, fixture.actor, "Files");
    const folder = await folders.create(fixture.organizationId, fixture.actor, { name: "F", projectId: project.id });
    await files.create(fixture.organizationId, fixture.actor, {
      name: "a",
      content: "{}",
      fileType: "form",
      projectId: project.id,
    });
    const b = await files.create(fixture.organizationId, fixture.actor, {
      name: "b",
      content: "{}",
      fileType: "connector_template",
      folderId: folder.id,
    });
    await files.update(fixture.organizationId, fixture.actor, b.id, { revision: 1, name: "b2" });
    const names = async (filter: Record<string, unknown>) =>
      (await files.search(fixture.organizationId, { filter })).items.map((item) => item.name);
    expect(await names({ type: "form" })).toEqual(["a"]);
    expect(await names({ folderId: null })).toEqual(["a"]);
    expect(await names({ folderId: folder.id })).toEqual(["b2"]);
    expect(await names({ revision: 2 })).toEqual(["b2"]);
    const sorted = await files.search(fixture.organizationId, { sort: [{ field: "type", direction: "DESC" }] });
    expect(sorted.items.map((item) => item.simplePath)).toEqual(["Files/a", "Files/F/b2"]);
    const folderPage = await folders.search(fixture.organizationId, {
      filter: { parentId: null, projectId: project.id },
    });
    expect(folderPage.items.map((item) => item.name)).toEqual(["F"]);
  });
});
