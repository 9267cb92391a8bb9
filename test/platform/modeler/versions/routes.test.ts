import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { callWithToken } from "../../../support/http.js";
import { startTestPlatform, type TestPlatform } from "../../../support/platform.js";
import { requestToken } from "../../../support/tokens.js";
import { bpmnDocument } from "../support.js";

interface Version {
  id: string;
  name: string;
  fileId: string;
  created: string;
  updated: string;
}

describe("Modeler API /versions (the newer name of milestones) over HTTP", () => {
  let platform: TestPlatform;
  let token: string;
  let fileId: string;

  beforeAll(async () => {
    platform = await startTestPlatform();
    token = await requestToken(platform, platform.adminClient, "modeler-api");
    const project = await json<{ id: string }>(await call("POST", "/projects", { name: "versions" }));
    const file = await json<{ id: string }>(
      await call("POST", "/files", {
        name: "order.bpmn",
        content: bpmnDocument("before"),
        fileType: "bpmn",
        projectId: project.id,
      }),
    );
    fileId = file.id;
  });
  afterAll(async () => await platform.close());

  async function call(method: string, path: string, body?: unknown): Promise<Response> {
    return await callWithToken(`${platform.url}/modeler/api/v1`, token, method, path, body);
  }

  async function json<T>(response: Response, status = 200): Promise<T> {
    const text = await response.text();
    expect(response.status, text.slice(0, 500)).toBe(status);
    return JSON.parse(text) as T;
  }

  it("creates a version with a name, or named by its creation time without one", async () => {
    const named = await json<Version>(await call("POST", "/versions", { name: "approved", fileId }));
    expect(named).toMatchObject({ name: "approved", fileId });
    const unnamed = await json<Version>(await call("POST", "/versions", { fileId }));
    expect(unnamed.name).toBe(unnamed.created);
    expect(Number.isNaN(Date.parse(unnamed.name))).toBe(false);
    // Fields the platform does not keep are refused, naming the field, rather than dropped.
    const described = await call("POST", "/versions", { fileId, description: "not kept" });
    expect(described.status).toBe(400);
    expect(((await described.json()) as { detail: string }).detail).toContain("description");
    expect((await call("POST", "/versions", { name: "x", fileId: randomUUID() })).status).toBe(404);
  });

  it("reads, renames and deletes a version, which is the same resource as a milestone", async () => {
    const created = await json<Version>(await call("POST", "/versions", { name: "v", fileId }));
    const read = await json<{ metadata: Version; content: string }>(await call("GET", `/versions/${created.id}`));
    expect(read).toEqual({ metadata: created, content: bpmnDocument("before") });
    const renamed = await json<Version>(await call("PATCH", `/versions/${created.id}`, { name: "renamed" }));
    expect(renamed.name).toBe("renamed");
    const asMilestone = await json<{ metadata: Version }>(await call("GET", `/milestones/${created.id}`));
    expect(asMilestone.metadata.name).toBe("renamed");
    // The reference SDK sends its DELETE with a JSON content type and no body.
    const deleted = await fetch(`${platform.url}/modeler/api/v1/versions/${created.id}`, {
      method: "DELETE",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    });
    expect(deleted.status).toBe(204);
    // The errors name what the client asked for: a version here, a milestone through the older API.
    for (const [method, path, body] of [
      ["GET", `/versions/${created.id}`],
      ["DELETE", `/versions/${created.id}`],
      ["PATCH", `/versions/${created.id}`, { name: "gone" }],
      ["POST", `/versions/${created.id}/restore`],
      ["GET", `/versions/compare/${created.id}...${created.id}`],
    ] as const) {
      const missing = await json<{ detail: string }>(await call(method, path, body), 404);
      expect(missing.detail, `${method} ${path}`).toBe(`version '${created.id}' does not exist`);
    }
    const missingMilestone = await json<{ detail: string }>(await call("GET", `/milestones/${created.id}`), 404);
    expect(missingMilestone.detail).toBe(`milestone '${created.id}' does not exist`);
  });

  it("restores a version's content into its file as a new revision", async () => {
    const before = await json<Version>(await call("POST", "/versions", { name: "before", fileId }));
    const current = await json<{ metadata: { revision: number } }>(await call("GET", `/files/${fileId}`));
    await json(
      await call("PATCH", `/files/${fileId}`, { revision: current.metadata.revision, content: bpmnDocument("after") }),
    );
    // The restored version's metadata answers, as the reference SDK's type says; it sends `{"version": n}` too.
    const restored = await json<Version>(await call("POST", `/versions/${before.id}/restore`, { version: 1 }));
    expect(restored).toEqual(before);
    const file = await json<{ content: string; metadata: { revision: number } }>(await call("GET", `/files/${fileId}`));
    expect(file.content).toBe(bpmnDocument("before"));
    expect(file.metadata.revision).toBe(current.metadata.revision + 2);
    // No body at all, or an empty one that claims to be JSON, does the same; a body of anything else is refused
    // before anything is restored.
    expect(await json<Version>(await call("POST", `/versions/${before.id}/restore`))).toEqual(before);
    const emptyJson = await fetch(`${platform.url}/modeler/api/v1/versions/${before.id}/restore`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    });
    expect(await json<Version>(emptyJson)).toEqual(before);
    for (const body of [{ version: "one" }, { version: -1 }, { colour: "red" }]) {
      expect((await call("POST", `/versions/${before.id}/restore`, body)).status, JSON.stringify(body)).toBe(400);
    }
    const unchanged = await json<{ metadata: { revision: number } }>(await call("GET", `/files/${fileId}`));
    expect(unchanged.metadata.revision).toBe(current.metadata.revision + 4);
  });

  it("searches versions with the milestone filters", async () => {
    const marked = await json<Version>(await call("POST", "/versions", { name: "Searchable Mark", fileId }));
    const found = await json<{ items: Version[]; total: number }>(
      await call("POST", "/versions/search", { filter: { name: "searchable", fileId } }),
    );
    expect(found).toEqual({ items: [marked], total: 1 });
    expect((await call("POST", "/versions/search", { filter: { colour: "red" } })).status).toBe(400);
  });

  it("compares two versions answering {url} as JSON, a link serving the diff without a token", async () => {
    const first = await json<Version>(await call("POST", "/versions", { name: "first", fileId }));
    const current = await json<{ metadata: { revision: number } }>(await call("GET", `/files/${fileId}`));
    await json(
      await call("PATCH", `/files/${fileId}`, { revision: current.metadata.revision, content: bpmnDocument("third") }),
    );
    const second = await json<Version>(await call("POST", "/versions", { name: "second", fileId }));
    const compared = await call("GET", `/versions/compare/${first.id}...${second.id}`);
    expect(compared.headers.get("content-type")).toContain("application/json");
    const { url } = await json<{ url: string }>(compared);
    // The link is the versions API's, and its diff labels both sides as versions.
    expect(new URL(url).pathname).toBe(`/modeler/api/v1/versions/compare/${first.id}...${second.id}/diff`);
    const diff = await fetch(url);
    expect(diff.status).toBe(200);
    const text = await diff.text();
    expect(text).toContain('+  <bpmn:process id="Process_1" name="third" isExecutable="true">');
    expect(text).toContain(`--- version first (${first.id})`);
    expect(text).toContain(`+++ version second (${second.id})`);
    // The same grant under the milestones API serves the same diff labelled as milestones.
    const asMilestones = await fetch(url.replace("/api/v1/versions/", "/api/v1/milestones/"));
    expect(await asMilestones.text()).toContain(`--- milestone first (${first.id})`);
    // A link to a version deleted since names a missing version.
    expect((await call("DELETE", `/versions/${second.id}`)).status).toBe(204);
    const gone = await fetch(url);
    expect(gone.status).toBe(404);
    const { detail } = (await gone.json()) as { detail: string };
    expect(detail).toContain("version");
    expect(detail).not.toContain("milestone");
    expect((await call("GET", `/versions/compare/${first.id}...${randomUUID()}`)).status).toBe(404);
    expect((await call("GET", `/versions/compare/${first.id}..${second.id}`)).status).toBe(400);
  });

  it("documents both compare answers in the Modeler OpenAPI document", async () => {
    const document = (await (await fetch(`${platform.url}/modeler/api/v1/openapi.json`)).json()) as {
      paths: Record<string, Record<string, { responses: Record<string, { content: Record<string, unknown> }> }>>;
    };
    const answer = (path: string) => Object.keys(document.paths[path]?.get?.responses["200"]?.content ?? {});
    expect(answer("/api/v1/milestones/compare/{comparison}")).toEqual(["text/plain"]);
    expect(answer("/api/v1/versions/compare/{comparison}")).toEqual(["application/json"]);
    for (const path of ["/api/v1/versions", "/api/v1/versions/{id}", "/api/v1/versions/{id}/restore"]) {
      expect(Object.keys(document.paths[path] ?? {}).length, path).toBeGreaterThan(0);
    }
    // The version's restore takes an optional body, and says so; creating one needs its body.
    const requestBody = (path: string) =>
      (document.paths[path]?.post as { requestBody?: { required?: boolean; content: Record<string, object> } })
        ?.requestBody;
    expect(requestBody("/api/v1/versions/{id}/restore")?.required).toBe(false);
    expect(JSON.stringify(requestBody("/api/v1/versions/{id}/restore"))).not.toContain("x-flowplane");
    expect(requestBody("/api/v1/versions")?.required).toBe(true);
  });
});
