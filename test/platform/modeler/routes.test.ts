import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestPlatform, type TestPlatform } from "../../support/platform.js";
import { createOtherOrganizationClient, createTestClient, requestToken } from "../../support/tokens.js";
import { bpmnDocument } from "./support.js";

const allScopes = ["modeler:create", "modeler:read", "modeler:update", "modeler:delete"];

describe("Modeler API over HTTP", () => {
  let platform: TestPlatform;
  let token: string;

  beforeAll(async () => {
    platform = await startTestPlatform();
    token = await requestToken(platform, platform.adminClient, "modeler-api");
  });
  afterAll(async () => await platform.close());

  async function call(method: string, path: string, body?: unknown, bearer: string | null = token): Promise<Response> {
    return await fetch(`${platform.url}/modeler/api/v1${path}`, {
      method,
      headers: {
        ...(bearer === null ? {} : { authorization: `Bearer ${bearer}` }),
        ...(body === undefined ? {} : { "content-type": "application/json" }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
  }

  async function json<T>(response: Response, status = 200): Promise<T> {
    const text = await response.text();
    expect(response.status, text.slice(0, 500)).toBe(status);
    return JSON.parse(text) as T;
  }

  async function createProject(name: string): Promise<{ id: string }> {
    return await json(await call("POST", "/projects", { name }));
  }

  async function createFile(projectId: string, name = "order.bpmn", content = bpmnDocument()) {
    return await json<{ id: string; revision: number; simplePath: string }>(
      await call("POST", "/files", { name, content, fileType: "bpmn", projectId }),
    );
  }

  it("creates, reads, changes and searches projects, folders and files", async () => {
    const project = await json<{ id: string; createdBy: { name: string; email: string } }>(
      await call("POST", "/projects", { name: "HTTP project" }),
    );
    expect(project.createdBy).toEqual({
      name: "Administration (created on first start)",
      email: `${platform.adminClient.clientId}@clients.invalid`,
    });
    const folder = await json<{ id: string }>(
      await call("POST", "/folders", { name: "Folder/One", projectId: project.id }),
    );
    const file = await json<{ id: string; simplePath: string; canonicalPath: unknown[] }>(
      await call("POST", "/files", {
        name: "f.form",
        content: '{"components":[]}',
        fileType: "form",
        folderId: folder.id,
      }),
    );
    expect(file.simplePath).toBe("HTTP project/Folder\\/One/f.form");
    const projectView = await json<{ content: { folders: { id: string }[]; files: unknown[] } }>(
      await call("GET", `/projects/${project.id}`),
    );
    expect(projectView.content.folders.map((item) => item.id)).toEqual([folder.id]);
    const fileView = await json<{ metadata: { revision: number }; content: string }>(
      await call("GET", `/files/${file.id}`),
    );
    expect(fileView).toMatchObject({ metadata: { revision: 1 }, content: '{"components":[]}' });
    const patched = await json<{ revision: number; name: string }>(
      await call("PATCH", `/files/${file.id}`, { revision: 1, name: "renamed.form" }),
    );
    expect(patched).toMatchObject({ revision: 2, name: "renamed.form" });
    const search = await json<{ items: { id: string }[]; total: number }>(
      await call("POST", "/files/search", {
        filter: { name: "RENAMED", projectId: project.id, updated: ">=2000-01-01||/y" },
        sort: [{ field: "updated", direction: "DESC" }],
        page: 0,
        size: 5,
      }),
    );
    expect(search).toMatchObject({ total: 1, items: [{ id: file.id }] });
    expect((await call("DELETE", `/folders/${folder.id}`)).status).toBe(409);
    expect((await call("DELETE", `/files/${file.id}`)).status).toBe(204);
    expect((await call("DELETE", `/folders/${folder.id}`)).status).toBe(204);
    expect((await call("DELETE", `/projects/${project.id}`)).status).toBe(204);
    const gone = await call("GET", `/projects/${project.id}`);
    expect(gone.status).toBe(404);
    expect(gone.headers.get("content-type")).toContain("application/problem+json");
  });

  it("answers 400 problem documents for invalid content, unknown search fields and bad dates", async () => {
    const project = await createProject("validation");
    const invalid = await call("POST", "/files", {
      name: "bad",
      content: "<bpmn:definitions",
      fileType: "bpmn",
      projectId: project.id,
    });
    const problem = await json<{ detail: string }>(invalid, 400);
    expect(problem.detail).toContain("not a valid BPMN document");
    for (const body of [
      { filter: { colour: "red" } },
      { sort: [{ field: "colour", direction: "ASC" }] },
      { size: 51 },
      { page: -1 },
      { filter: { created: "last tuesday" } },
      { unknown: true },
    ]) {
      const response = await call("POST", "/projects/search", body);
      expect(response.status, JSON.stringify(body)).toBe(400);
      expect(response.headers.get("content-type")).toContain("application/problem+json");
    }
    expect((await call("GET", "/files/not-a-uuid")).status).toBe(400);
    expect((await call("POST", "/folders", { name: "orphan" })).status).toBe(400);
  });

  it("refuses names holding control characters for projects, folders, files and milestones, created or renamed", async () => {
    const project = await createProject(`names ${randomUUID()}`);
    const file = await createFile(project.id, "named.bpmn");
    const milestone = await json<{ id: string }>(await call("POST", "/milestones", { name: "m", fileId: file.id }));
    const named = "tab\tinside";
    for (const [method, path, body] of [
      ["POST", "/projects", { name: named }],
      ["PATCH", `/projects/${project.id}`, { name: named }],
      ["POST", "/folders", { name: named, projectId: project.id }],
      ["POST", "/files", { name: named, content: bpmnDocument(), fileType: "bpmn", projectId: project.id }],
      ["PATCH", `/files/${file.id}`, { name: named, revision: file.revision }],
      ["POST", "/milestones", { name: named, fileId: file.id }],
      ["PATCH", `/milestones/${milestone.id}`, { name: named }],
    ] as const) {
      const refused = await json<{ detail: string }>(await call(method, path, body), 400);
      expect(refused.detail, `${method} ${path}`).toBe("name must not contain control characters; it holds U+0009.");
    }
  });

  it("lets exactly one of parallel PATCHes from the same revision win; the rest get 409", async () => {
    const project = await createProject("race");
    const file = await createFile(project.id);
    const responses = await Promise.all(
      Array.from({ length: 10 }, (_, index) =>
        call("PATCH", `/files/${file.id}`, { revision: 1, content: bpmnDocument(`writer ${index}`) }),
      ),
    );
    const statuses = responses.map((response) => response.status).sort();
    expect(statuses).toEqual([200, ...Array(9).fill(409)]);
    const current = await json<{ metadata: { revision: number } }>(await call("GET", `/files/${file.id}`));
    expect(current.metadata.revision).toBe(2);
  });

  it("stores large unicode content byte for byte and refuses content above 10 MiB with 413", async () => {
    const project = await createProject("large");
    // Attribute quotes double in JSON, so this body is larger than its 6 MiB of content.
    const tasks = Array.from(
      { length: 80_000 },
      (_, index) => `    <bpmn:task id="Task_${index}" name="Schritt ${index} — 日本語 ✓" />`,
    ).join("\n");
    const content = bpmnDocument().replace(
      '<bpmn:startEvent id="StartEvent_1" />',
      `<bpmn:startEvent id="StartEvent_1" />\n${tasks}`,
    );
    expect(Buffer.byteLength(content)).toBeGreaterThan(5 * 1024 * 1024);
    const file = await createFile(project.id, "large.bpmn", content);
    const read = await json<{ content: string }>(await call("GET", `/files/${file.id}`));
    expect(Buffer.from(read.content).equals(Buffer.from(content))).toBe(true);
    const tooLarge = await call("POST", "/files", {
      name: "huge",
      content: JSON.stringify({ padding: "x".repeat(10 * 1024 * 1024) }),
      fileType: "form",
      projectId: project.id,
    });
    expect(tooLarge.status).toBe(413);
    expect(tooLarge.headers.get("content-type")).toContain("application/problem+json");
  });

  it("serves milestone diffs through signed links that need no token", async () => {
    const project = await createProject("diffs");
    const file = await createFile(project.id, "order.bpmn", bpmnDocument("before"));
    const first = await json<{ id: string }>(await call("POST", "/milestones", { name: "before", fileId: file.id }));
    await json(await call("PATCH", `/files/${file.id}`, { revision: 1, content: bpmnDocument("after") }));
    const second = await json<{ id: string }>(await call("POST", "/milestones", { name: "after", fileId: file.id }));
    // The 8.8 API answers the link itself as plain text; the reference SDK reads it that way.
    const compared = await call("GET", `/milestones/compare/${first.id}...${second.id}`);
    expect(compared.status).toBe(200);
    expect(compared.headers.get("content-type")).toBe("text/plain; charset=utf-8");
    const url = await compared.text();
    expect(url).toMatch(/^http:\/\/[^/]+\/modeler\/api\/v1\/milestones\/compare\/[^?]+\/diff\?/);
    const diff = await fetch(url);
    expect(diff.status).toBe(200);
    expect(diff.headers.get("content-type")).toContain("text/plain");
    const text = await diff.text();
    expect(text).toContain('+  <bpmn:process id="Process_1" name="after" isExecutable="true">');
    const tampered = new URL(url);
    tampered.searchParams.set("expires", String(Number(tampered.searchParams.get("expires")) + 1));
    const forged = await fetch(tampered);
    expect(forged.status).toBe(403);
    expect(forged.headers.get("content-type")).toContain("application/problem+json");
    const restored = await json<{ revision: number }>(await call("POST", `/milestones/${first.id}/restore`));
    expect(restored.revision).toBe(3);
    const content = await json<{ content: string }>(await call("GET", `/files/${file.id}`));
    expect(content.content).toBe(bpmnDocument("before"));
    expect((await call("GET", `/milestones/compare/${first.id}...${randomUUID()}`)).status).toBe(404);
  });

  it("manages collaborators among the organization's members", async () => {
    const project = await createProject("team");
    const added = await call("PUT", "/collaborators", {
      email: "owner@flowplane.local",
      projectId: project.id,
      role: "editor",
    });
    expect(added.status).toBe(204);
    const stranger = await call("PUT", "/collaborators", {
      email: "x@example.com",
      projectId: project.id,
      role: "editor",
    });
    expect(stranger.status).toBe(400);
    const badRole = await call("PUT", "/collaborators", {
      email: "owner@flowplane.local",
      projectId: project.id,
      role: "king",
    });
    expect(badRole.status).toBe(400);
    const found = await json<{ items: unknown[]; total: number }>(
      await call("POST", "/collaborators/search", { filter: { projectId: project.id } }),
    );
    expect(found).toEqual({
      items: [{ projectId: project.id, email: "owner@flowplane.local", name: "owner", role: "editor" }],
      total: 1,
    });
    expect((await call("DELETE", `/projects/${project.id}/collaborators/owner%40flowplane.local`)).status).toBe(204);
    expect((await call("DELETE", `/projects/${project.id}/collaborators/owner%40flowplane.local`)).status).toBe(404);
  });

  it("refuses each operation without its permission (403) and reports permissions in info", async () => {
    const project = await createProject("permissions");
    const file = await createFile(project.id);
    const milestone = await json<{ id: string }>(await call("POST", "/milestones", { name: "m", fileId: file.id }));
    const requests: Record<string, [string, string, unknown?][]> = {
      "modeler:create": [
        ["POST", "/projects", { name: "x" }],
        ["POST", "/folders", { name: "x", projectId: project.id }],
        ["POST", "/files", { name: "x", content: "{}", fileType: "form", projectId: project.id }],
        ["POST", "/milestones", { name: "x", fileId: file.id }],
        ["POST", "/versions", { fileId: file.id }],
      ],
      "modeler:read": [
        ["GET", `/projects/${project.id}`],
        ["GET", `/files/${file.id}`],
        ["POST", "/projects/search", {}],
        ["POST", "/files/search", {}],
        ["POST", "/folders/search", {}],
        ["POST", "/milestones/search", {}],
        ["POST", "/collaborators/search", {}],
        ["GET", `/milestones/compare/${milestone.id}...${milestone.id}`],
        ["GET", `/versions/${milestone.id}`],
        ["POST", "/versions/search", {}],
        ["GET", `/versions/compare/${milestone.id}...${milestone.id}`],
      ],
      "modeler:update": [
        ["PATCH", `/projects/${project.id}`, { name: "y" }],
        ["PATCH", `/files/${file.id}`, { revision: 1, name: "y" }],
        ["PATCH", `/milestones/${milestone.id}`, { name: "y" }],
        ["POST", `/milestones/${milestone.id}/restore`],
        ["PATCH", `/versions/${milestone.id}`, { name: "z" }],
        ["POST", `/versions/${milestone.id}/restore`],
        ["PUT", "/collaborators", { email: "owner@flowplane.local", projectId: project.id, role: "viewer" }],
      ],
      "modeler:delete": [
        ["DELETE", `/files/${file.id}`],
        ["DELETE", `/milestones/${milestone.id}`],
        ["DELETE", `/versions/${milestone.id}`],
        ["DELETE", `/projects/${project.id}`],
      ],
    };
    for (const [missing, calls] of Object.entries(requests)) {
      const client = await createTestClient(
        platform,
        allScopes.filter((scope) => scope !== missing),
      );
      const limited = await requestToken(platform, client, "modeler-api");
      const info = await json<Record<string, boolean>>(await call("GET", "/info", undefined, limited));
      expect(Object.values(info).filter((value) => value === false)).toHaveLength(1);
      for (const [method, path, body] of calls) {
        const response = await call(method, path, body, limited);
        expect(response.status, `${method} ${path} without ${missing}`).toBe(403);
      }
    }
    // The same calls succeed with every permission (the file and milestone still exist).
    expect((await call("GET", `/files/${file.id}`)).status).toBe(200);
  });

  it("hides every resource from other organizations (404)", async () => {
    const project = await createProject("private");
    const file = await createFile(project.id);
    const folder = await json<{ id: string }>(await call("POST", "/folders", { name: "F", projectId: project.id }));
    const milestone = await json<{ id: string }>(await call("POST", "/milestones", { name: "m", fileId: file.id }));
    const other = await requestToken(platform, await createOtherOrganizationClient(platform, allScopes), "modeler-api");
    for (const path of [
      `/projects/${project.id}`,
      `/files/${file.id}`,
      `/folders/${folder.id}`,
      `/milestones/${milestone.id}`,
    ]) {
      expect((await call("GET", path, undefined, other)).status, path).toBe(404);
      expect((await call("DELETE", path, undefined, other)).status, path).toBe(404);
    }
    expect((await call("PATCH", `/files/${file.id}`, { revision: 1, name: "x" }, other)).status).toBe(404);
    expect(
      (await call("POST", "/files", { name: "x", content: "{}", fileType: "form", projectId: project.id }, other))
        .status,
    ).toBe(404);
    const search = await json<{ total: number }>(await call("POST", "/files/search", {}, other));
    expect(search.total).toBe(0);
  });
});
