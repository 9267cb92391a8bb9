import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { maximumContentBytes } from "../../../../src/platform/modeler/content.js";
import { databaseKinds, reportSkippedPostgres } from "../../../support/databases.js";
import { bpmnDocument, dmnDocument, type ModelerFixture, openModelerFixture } from "../support.js";

reportSkippedPostgres();

describe.each(databaseKinds)("FileService on %s", (kind) => {
  let fixture: ModelerFixture;
  let projectId: string;

  beforeEach(async () => {
    fixture = await openModelerFixture(kind);
    projectId = (await fixture.services.projects.create(fixture.organizationId, fixture.actor, "Orders/2024")).id;
  });
  afterEach(async () => await fixture.close());

  it("creates a file of each type at revision 1 with its paths and audit fields", async () => {
    const { files } = fixture.services;
    const folder = await fixture.services.folders.create(fixture.organizationId, fixture.actor, {
      name: "a\\b",
      projectId,
    });
    const created = await files.create(fixture.organizationId, fixture.actor, {
      name: "order.bpmn",
      content: bpmnDocument(),
      fileType: "bpmn",
      folderId: folder.id,
    });
    expect(created).toMatchObject({
      name: "order.bpmn",
      projectId,
      folderId: folder.id,
      revision: 1,
      type: "bpmn",
      simplePath: "Orders\\/2024/a\\\\b/order.bpmn",
      canonicalPath: [
        { id: projectId, name: "Orders/2024" },
        { id: folder.id, name: "a\\b" },
      ],
      created: "2024-03-14T12:00:00.000Z",
      createdBy: fixture.actor,
      updatedBy: fixture.actor,
    });
    for (const [fileType, content] of [
      ["dmn", dmnDocument()],
      ["form", '{"components": []}'],
      ["connector_template", '{"name": "REST", "properties": []}'],
    ] as const) {
      const file = await files.create(fixture.organizationId, fixture.actor, {
        name: fileType,
        content,
        fileType,
        projectId,
      });
      expect(file).toMatchObject({ type: fileType, folderId: null, simplePath: `Orders\\/2024/${fileType}` });
    }
  });

  it.each([
    ["bpmn", "not xml at all", /not a valid BPMN document/],
    ["bpmn", dmnDocument(), /not a valid BPMN document/],
    ["bpmn", bpmnDocument().replace("<bpmn:startEvent", "<bpmn:startEvnt"), /unknown type <bpmn:StartEvnt>/],
    ["bpmn", bpmnDocument().replace('id="StartEvent_1"', 'id="Process_1"'), /duplicate ID <Process_1>/],
    ["dmn", bpmnDocument(), /not a valid DMN document/],
    ["form", "[1, 2]", /must be a JSON object, not an array/],
    ["form", "{broken", /must be a JSON object/],
    ["connector_template", "null", /not null/],
    ["form", '{"a": "\u0000"}', /U\+0000/],
  ] as const)("refuses invalid %s content (%#)", async (fileType, content, detail) => {
    await expect(
      fixture.services.files.create(fixture.organizationId, fixture.actor, { name: "x", content, fileType, projectId }),
    ).rejects.toMatchObject({ status: 400, message: expect.stringMatching(detail) });
  });

  it("refuses content above the size limit with 413", async () => {
    const content = `{"padding": "${"x".repeat(maximumContentBytes)}"}`;
    await expect(
      fixture.services.files.create(fixture.organizationId, fixture.actor, {
        name: "x",
        content,
        fileType: "form",
        projectId,
      }),
    ).rejects.toMatchObject({ status: 413 });
  });

  it("stores content byte for byte, unicode and large content included", async () => {
    const content = `{"title": "Grüße — 日本語 — 🚀", "padding": "${"αβγ".repeat(1_000_000)}", "crlf": "a\\r\\nb"}\r\n`;
    const file = await fixture.services.files.create(fixture.organizationId, fixture.actor, {
      name: "big form",
      content,
      fileType: "form",
      projectId,
    });
    const read = await fixture.services.files.get(fixture.organizationId, file.id);
    expect(Buffer.from(read.content, "utf8").equals(Buffer.from(content, "utf8"))).toBe(true);
  });

  it("changes a file only from its current revision and increments it", async () => {
    const { files } = fixture.services;
    const file = await files.create(fixture.organizationId, fixture.actor, {
      name: "order",
      content: bpmnDocument("v1"),
      fileType: "bpmn",
      projectId,
    });
    fixture.advanceClock(60_000);
    const changed = await files.update(fixture.organizationId, fixture.actor, file.id, {
      revision: 1,
      content: bpmnDocument("v2"),
      name: "order v2",
    });
    expect(changed).toMatchObject({ revision: 2, name: "order v2", updated: "2024-03-14T12:01:00.000Z" });
    expect(changed.created).toBe("2024-03-14T12:00:00.000Z");
    await expect(
      files.update(fixture.organizationId, fixture.actor, file.id, { revision: 1, name: "stale" }),
    ).rejects.toMatchObject({ status: 409 });
    expect((await files.get(fixture.organizationId, file.id)).content).toBe(bpmnDocument("v2"));
    await expect(
      files.update(fixture.organizationId, fixture.actor, file.id, { revision: 2, content: "<broken" }),
    ).rejects.toMatchObject({ status: 400 });
  });

  it("lets exactly one of concurrent changes from the same revision win", async () => {
    const { files } = fixture.services;
    const file = await files.create(fixture.organizationId, fixture.actor, {
      name: "race",
      content: "{}",
      fileType: "form",
      projectId,
    });
    const attempts = await Promise.allSettled(
      Array.from({ length: 8 }, (_, index) =>
        files.update(fixture.organizationId, fixture.actor, file.id, { revision: 1, content: `{"winner": ${index}}` }),
      ),
    );
    const won = attempts.filter((attempt) => attempt.status === "fulfilled");
    const lost = attempts.filter((attempt) => attempt.status === "rejected");
    expect(won).toHaveLength(1);
    expect(lost.map((attempt) => (attempt.reason as { status: number }).status)).toEqual(Array(7).fill(409));
    const current = await files.get(fixture.organizationId, file.id);
    expect(current.metadata.revision).toBe(2);
  });

  it("moves a file between folders and projects", async () => {
    const { files, folders, projects } = fixture.services;
    const other = await projects.create(fixture.organizationId, fixture.actor, "Other");
    const folder = await folders.create(fixture.organizationId, fixture.actor, { name: "Sub", projectId: other.id });
    const file = await files.create(fixture.organizationId, fixture.actor, {
      name: "f",
      content: "{}",
      fileType: "form",
      projectId,
    });
    const moved = await files.update(fixture.organizationId, fixture.actor, file.id, {
      revision: 1,
      folderId: folder.id,
    });
    expect(moved).toMatchObject({ projectId: other.id, folderId: folder.id, simplePath: "Other/Sub/f", revision: 2 });
    const back = await files.update(fixture.organizationId, fixture.actor, file.id, { revision: 2, projectId });
    expect(back).toMatchObject({ projectId, folderId: null, simplePath: "Orders\\/2024/f" });
    await expect(
      files.update(fixture.organizationId, fixture.actor, file.id, { revision: 3, projectId, folderId: folder.id }),
    ).rejects.toMatchObject({ status: 400 });
  });

  it("deletes a file with its milestones", async () => {
    const { files, milestones } = fixture.services;
    const file = await files.create(fixture.organizationId, fixture.actor, {
      name: "f",
      content: "{}",
      fileType: "form",
      projectId,
    });
    const milestone = await milestones.create(fixture.organizationId, fixture.actor, { name: "m", fileId: file.id });
    await files.delete(fixture.organizationId, file.id);
    await expect(files.get(fixture.organizationId, file.id)).rejects.toMatchObject({ status: 404 });
    await expect(milestones.get(fixture.organizationId, milestone.id)).rejects.toMatchObject({ status: 404 });
  });

  it("hides files from other organizations", async () => {
    const { files } = fixture.services;
    const file = await files.create(fixture.organizationId, fixture.actor, {
      name: "f",
      content: "{}",
      fileType: "form",
      projectId,
    });
    await expect(files.get(fixture.otherOrganizationId, file.id)).rejects.toMatchObject({ status: 404 });
    await expect(
      files.update(fixture.otherOrganizationId, fixture.actor, file.id, { revision: 1, name: "x" }),
    ).rejects.toMatchObject({ status: 404 });
    await expect(files.delete(fixture.otherOrganizationId, file.id)).rejects.toMatchObject({ status: 404 });
    await expect(
      files.create(fixture.otherOrganizationId, fixture.actor, {
        name: "f",
        content: "{}",
        fileType: "form",
        projectId,
      }),
    ).rejects.toMatchObject({ status: 404 });
    expect((await files.search(fixture.otherOrganizationId, {})).total).toBe(0);
  });
});
