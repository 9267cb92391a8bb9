import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { DiffLinkSigner, diffLinkLifetimeMs } from "../../../../src/platform/modeler/milestones/diff-links.js";
import { MilestoneService } from "../../../../src/platform/modeler/milestones/service.js";
import { databaseKinds } from "../../../support/databases.js";
import { bpmnDocument, type ModelerFixture, openModelerFixture } from "../support.js";

describe.each(databaseKinds)("MilestoneService on %s", (kind) => {
  let fixture: ModelerFixture;
  let fileId: string;

  beforeEach(async () => {
    fixture = await openModelerFixture(kind);
    const project = await fixture.services.projects.create(fixture.organizationId, fixture.actor, "P");
    fileId = (
      await fixture.services.files.create(fixture.organizationId, fixture.actor, {
        name: "order",
        content: bpmnDocument("first"),
        fileType: "bpmn",
        projectId: project.id,
      })
    ).id;
  });
  afterEach(async () => await fixture.close());

  function grantOf(url: string) {
    const parsed = new URL(url);
    const comparison = parsed.pathname.split("/").at(-2) ?? "";
    const [from = "", to = ""] = comparison.split("...");
    return {
      grant: {
        organizationId: parsed.searchParams.get("organization") ?? "",
        fromMilestoneId: from,
        toMilestoneId: to,
        expiresAtMs: Number(parsed.searchParams.get("expires")),
      },
      signature: parsed.searchParams.get("signature") ?? "",
    };
  }

  it("freezes content, restores it as a new revision, renames and deletes", async () => {
    const { milestones, files } = fixture.services;
    const milestone = await milestones.create(fixture.organizationId, fixture.actor, { name: "v1", fileId });
    expect(milestone).toMatchObject({ name: "v1", fileId, createdBy: fixture.actor });
    await files.update(fixture.organizationId, fixture.actor, fileId, { revision: 1, content: bpmnDocument("second") });
    expect((await milestones.get(fixture.organizationId, milestone.id)).content).toBe(bpmnDocument("first"));
    const { file: restored } = await milestones.restore(fixture.organizationId, fixture.actor, milestone.id);
    expect(restored.revision).toBe(3);
    expect((await files.get(fixture.organizationId, fileId)).content).toBe(bpmnDocument("first"));
    expect((await milestones.rename(fixture.organizationId, fixture.actor, milestone.id, "release")).name).toBe(
      "release",
    );
    await milestones.delete(fixture.organizationId, milestone.id);
    await expect(milestones.get(fixture.organizationId, milestone.id)).rejects.toMatchObject({ status: 404 });
    await expect(
      milestones.create(fixture.otherOrganizationId, fixture.actor, { name: "x", fileId }),
    ).rejects.toMatchObject({
      status: 404,
    });
  });

  it("refuses with 409 a diff of contents that differ in more lines than the limit", async () => {
    const { milestones, files } = fixture.services;
    const first = await milestones.create(fixture.organizationId, fixture.actor, { name: "first", fileId });
    await files.update(fixture.organizationId, fixture.actor, fileId, {
      revision: 1,
      content: bpmnDocument("second").replace('id="StartEvent_1"', 'id="Start"'),
    });
    const second = await milestones.create(fixture.organizationId, fixture.actor, { name: "second", fileId });
    const strict = new MilestoneService({
      database: fixture.store.database,
      diffLinks: await DiffLinkSigner.open(fixture.store.database, fixture.store.secrets, () =>
        Date.parse("2024-03-14T12:00:00.000Z"),
      ),
      baseUrl: "http://platform.test/modeler",
      diffMaxEditLength: 1,
    });
    const { url } = await strict.compare(fixture.organizationId, first.id, second.id);
    const { grant, signature } = grantOf(url);
    await expect(strict.diff(grant, signature)).rejects.toMatchObject({ status: 409 });
    expect(await fixture.services.milestones.diff(grant, signature)).toContain('+    <bpmn:startEvent id="Start" />');
  });

  it("compares through a signed link that serves a unified diff until it expires", async () => {
    const { milestones, files } = fixture.services;
    const first = await milestones.create(fixture.organizationId, fixture.actor, { name: "first", fileId });
    await files.update(fixture.organizationId, fixture.actor, fileId, { revision: 1, content: bpmnDocument("second") });
    const second = await milestones.create(fixture.organizationId, fixture.actor, { name: "second", fileId });
    const { url } = await milestones.compare(fixture.organizationId, first.id, second.id);
    expect(
      url.startsWith(`http://platform.test/modeler/api/v1/milestones/compare/${first.id}...${second.id}/diff?`),
    ).toBe(true);
    const { grant, signature } = grantOf(url);
    const diff = await milestones.diff(grant, signature);
    expect(diff).toContain(`--- milestone first (${first.id})`);
    expect(diff).toContain('-  <bpmn:process id="Process_1" name="first" isExecutable="true">');
    expect(diff).toContain('+  <bpmn:process id="Process_1" name="second" isExecutable="true">');
    await expect(milestones.diff({ ...grant, toMilestoneId: first.id }, signature)).rejects.toMatchObject({
      status: 403,
      code: "link-not-valid",
      title: "The signed link is not valid or has expired",
    });
    await expect(
      milestones.diff({ ...grant, organizationId: fixture.otherOrganizationId }, signature),
    ).rejects.toMatchObject({
      status: 403,
    });
    // The signature's last character with a bit flipped that base64url decoding ignores: the same bytes, another text.
    const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    const respelled = `${signature.slice(0, -1)}${alphabet[alphabet.indexOf(signature.slice(-1)) ^ 1]}`;
    expect(Buffer.from(respelled, "base64url").equals(Buffer.from(signature, "base64url"))).toBe(true);
    await expect(milestones.diff(grant, respelled)).rejects.toMatchObject({ status: 403, code: "link-not-valid" });
    fixture.advanceClock(diffLinkLifetimeMs);
    await expect(milestones.diff(grant, signature)).rejects.toMatchObject({
      status: 403,
      code: "link-not-valid",
      message: expect.stringContaining("expired"),
    });
    await expect(milestones.compare(fixture.otherOrganizationId, first.id, second.id)).rejects.toMatchObject({
      status: 404,
    });
  });
});
