import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ModelerClient } from "../../src/client/modeler.js";
import { TokenProvider } from "../../src/client/token-provider.js";
import { startTestPlatform, type TestPlatform } from "../support/platform.js";

let platform: TestPlatform;
let tokenProvider: TokenProvider;

beforeAll(async () => {
  platform = await startTestPlatform();
  tokenProvider = new TokenProvider({
    credentials: { oauthUrl: `${platform.url}/oauth/token`, ...platform.adminClient },
  });
});

afterAll(async () => {
  await platform?.close();
});

describe("ModelerClient info", () => {
  it("reports version, organization and the four permissions of the caller", async () => {
    const modeler = new ModelerClient({ baseUrl: `${platform.url}/modeler`, tokenProvider });
    expect(await modeler.info()).toEqual({
      version: "v1",
      authorizedOrganization: platform.organizationId,
      createPermission: true,
      readPermission: true,
      updatePermission: true,
      deletePermission: true,
    });
  });

  it("reports only the permissions the token's scopes grant", async () => {
    const modeler = new ModelerClient({ baseUrl: `${platform.url}/modeler`, tokenProvider, scope: "modeler:read" });
    expect(await modeler.info()).toMatchObject({
      readPermission: true,
      createPermission: false,
      updatePermission: false,
      deletePermission: false,
    });
  });
});

describe("ModelerClient resources", () => {
  const bpmn = (name: string) =>
    `<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" id="D" targetNamespace="http://x"><bpmn:process id="P" name="${name}"/></bpmn:definitions>`;

  it("creates, changes, searches and deletes projects, folders, files, milestones and collaborators", async () => {
    const modeler = new ModelerClient({ baseUrl: `${platform.url}/modeler`, tokenProvider });
    const project = await modeler.createProject("Client project");
    expect((await modeler.renameProject(project.id, "Renamed")).name).toBe("Renamed");
    const folder = await modeler.createFolder({ name: "Folder", projectId: project.id });
    const file = await modeler.createFile({
      name: "p.bpmn",
      content: bpmn("one"),
      fileType: "bpmn",
      folderId: folder.id,
    });
    expect(file).toMatchObject({ revision: 1, simplePath: "Renamed/Folder/p.bpmn", type: "bpmn" });
    expect((await modeler.getProject(project.id)).content.folders.map((item) => item.id)).toEqual([folder.id]);
    expect((await modeler.getFolder(folder.id)).content.files.map((item) => item.id)).toEqual([file.id]);
    const first = await modeler.createMilestone(file.id, "one");
    const changed = await modeler.updateFile(file.id, { revision: 1, content: bpmn("two") });
    expect(changed.revision).toBe(2);
    await expect(modeler.updateFile(file.id, { revision: 1, name: "stale" })).rejects.toMatchObject({ status: 409 });
    const second = await modeler.createMilestone(file.id, "two");
    const diff = await modeler.readDiff(await modeler.compareMilestones(first.id, second.id));
    expect(diff).toContain('+<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" id="D"');
    expect((await modeler.restoreMilestone(first.id)).revision).toBe(3);
    expect((await modeler.getFile(file.id)).content).toBe(bpmn("one"));
    expect((await modeler.getMilestone(second.id)).content).toBe(bpmn("two"));
    expect((await modeler.renameMilestone(second.id, "2")).name).toBe("2");
    expect((await modeler.searchMilestones({ filter: { fileId: file.id } })).total).toBe(2);
    expect((await modeler.searchFiles({ filter: { name: "P.BPMN" } })).items.map((item) => item.id)).toContain(file.id);
    expect((await modeler.searchFolders({ filter: { projectId: project.id } })).total).toBe(1);
    expect((await modeler.searchProjects({ filter: { name: "renamed" }, size: 1 })).total).toBeGreaterThanOrEqual(1);
    await modeler.putCollaborator(project.id, "owner@flowplane.local", "viewer");
    expect((await modeler.searchCollaborators({ filter: { projectId: project.id } })).items).toEqual([
      { projectId: project.id, email: "owner@flowplane.local", name: "owner", role: "viewer" },
    ]);
    await modeler.removeCollaborator(project.id, "owner@flowplane.local");
    await modeler.deleteMilestone(second.id);
    await modeler.deleteFile(file.id);
    expect((await modeler.updateFolder(folder.id, { name: "Empty" })).name).toBe("Empty");
    await modeler.deleteFolder(folder.id);
    await modeler.deleteProject(project.id);
    await expect(modeler.getProject(project.id)).rejects.toMatchObject({ status: 404 });
  });
});
