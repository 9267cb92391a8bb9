import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestPlatform, type TestPlatform } from "../../../support/platform.js";
import { createTestClient, requestToken } from "../../../support/tokens.js";
import { type ClusterAccessFixture, createClusterAccessFixture } from "../cluster-access-support.js";

describe("Administration API /clusters/{id}/ipallowlist over HTTP", () => {
  let platform: TestPlatform;
  let access: ClusterAccessFixture;
  let token: string;
  const clusterId = randomUUID();
  const otherOrganizationsCluster = randomUUID();

  beforeAll(async () => {
    access = createClusterAccessFixture();
    platform = await startTestPlatform({}, { clusterAccess: access.options });
    access.addCluster(platform.organizationId, clusterId);
    access.addCluster(randomUUID(), otherOrganizationsCluster);
    const client = await createTestClient(platform, ["ipallowlist"]);
    token = await requestToken(platform, client, "admin-api");
  });
  afterAll(async () => await platform.close());

  function call(method: string, path: string, body?: unknown, bearer = token): Promise<Response> {
    return fetch(`${platform.url}/admin${path}`, {
      method,
      headers: {
        authorization: `Bearer ${bearer}`,
        ...(body === undefined ? {} : { "content-type": "application/json" }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
  }

  async function storedList(): Promise<unknown> {
    const response = await call("GET", `/clusters/${clusterId}/ipallowlist`);
    expect(response.status).toBe(200);
    return ((await response.json()) as { ipallowlist: unknown }).ipallowlist;
  }

  it("replaces the list with IPv4, IPv6 and mixed entries, and tells the cluster", async () => {
    const entries = [
      { description: "office", ip: "192.0.2.0/24" },
      { description: "one host", ip: "198.51.100.7" },
      { description: "v6", ip: "2001:db8::/32" },
      { description: "mixed", ip: "10.0.0.0/8, 2001:db8:1::1,172.16.0.0/12" },
    ];
    const changesBefore = access.changes.length;
    const response = await call("PUT", `/clusters/${clusterId}/ipallowlist`, { ipallowlist: entries });
    expect(response.status).toBe(204);
    expect(await storedList()).toEqual(entries);
    expect(access.changes.slice(changesBefore)).toEqual([clusterId]);
  });

  it("accepts the older ipwhitelist spelling the reference SDK sends, description optional", async () => {
    const response = await call("PUT", `/clusters/${clusterId}/ipwhitelist`, {
      ipwhitelist: [{ description: "sdk", ip: "203.0.113.0/24" }, { ip: "::1" }],
    });
    expect(response.status).toBe(204);
    expect(await storedList()).toEqual([
      { description: "sdk", ip: "203.0.113.0/24" },
      { description: "", ip: "::1" },
    ]);
  });

  it("answers 400 naming an invalid entry, and keeps the stored list", async () => {
    await call("PUT", `/clusters/${clusterId}/ipallowlist`, {
      ipallowlist: [{ description: "kept", ip: "192.0.2.1" }],
    });
    const changesBefore = access.changes.length;
    for (const [ip, named] of [
      ["300.1.1.1", '"300.1.1.1"'],
      ["10.0.0.0/33", '"10.0.0.0/33"'],
      ["2001:db8::/129", '"2001:db8::/129"'],
      ["garbage", '"garbage"'],
      ["10.0.0.1, nonsense/8", '"nonsense/8"'],
      ["10.0.0.1,", "empty"],
    ] as const) {
      const response = await call("PUT", `/clusters/${clusterId}/ipallowlist`, {
        ipallowlist: [
          { description: "fine", ip: "192.0.2.0/24" },
          { description: "bad", ip },
        ],
      });
      expect(response.status, ip).toBe(400);
      const problem = (await response.json()) as { detail: string; errors: { location: string }[] };
      expect(problem.detail).toContain("body/ipallowlist/1/ip");
      expect(problem.detail).toContain(named);
      expect(problem.errors[0]?.location).toBe("body/ipallowlist/1/ip");
    }
    const empty = await call("PUT", `/clusters/${clusterId}/ipwhitelist`, {
      ipwhitelist: [{ description: "", ip: "" }],
    });
    expect(empty.status).toBe(400);
    expect(((await empty.json()) as { detail: string }).detail).toContain("body/ipwhitelist/0/ip");
    expect(await storedList()).toEqual([{ description: "kept", ip: "192.0.2.1" }]);
    expect(access.changes.length).toBe(changesBefore);
  });

  it("refuses unknown fields, the other spelling's body and too many entries", async () => {
    const path = `/clusters/${clusterId}/ipallowlist`;
    const unknownTop = await call("PUT", path, { ipallowlist: [], comment: "x" });
    expect(unknownTop.status).toBe(400);
    expect(((await unknownTop.json()) as { detail: string }).detail).toContain("body/comment");
    const unknownEntry = await call("PUT", path, { ipallowlist: [{ ip: "192.0.2.1", port: 80 }] });
    expect(unknownEntry.status).toBe(400);
    expect(((await unknownEntry.json()) as { detail: string }).detail).toContain("body/ipallowlist/0/port");
    expect((await call("PUT", `/clusters/${clusterId}/ipwhitelist`, { ipallowlist: [] })).status).toBe(400);
    expect((await call("PUT", path, { ipallowlist: [{ ip: 10 }] })).status).toBe(400);
    const tooMany = Array.from({ length: 1_001 }, () => ({ ip: "192.0.2.1" }));
    expect((await call("PUT", path, { ipallowlist: tooMany })).status).toBe(400);
  });

  it("accepts an empty list, which allows everyone", async () => {
    expect((await call("PUT", `/clusters/${clusterId}/ipallowlist`, { ipallowlist: [] })).status).toBe(204);
    expect(await storedList()).toEqual([]);
  });

  it("answers 404 for another organization's cluster and an unknown one, on both spellings", async () => {
    for (const id of [otherOrganizationsCluster, randomUUID()]) {
      expect((await call("PUT", `/clusters/${id}/ipallowlist`, { ipallowlist: [] })).status).toBe(404);
      expect((await call("PUT", `/clusters/${id}/ipwhitelist`, { ipwhitelist: [] })).status).toBe(404);
      expect((await call("GET", `/clusters/${id}/ipallowlist`)).status).toBe(404);
    }
    expect((await call("PUT", "/clusters/bad%20id/ipallowlist", { ipallowlist: [] })).status).toBe(400);
  });

  it("requires the ipallowlist scope to change the list (403 naming it)", async () => {
    const clusterOnly = await requestToken(platform, await createTestClient(platform, ["cluster"]), "admin-api");
    const forbidden = await call("PUT", `/clusters/${clusterId}/ipallowlist`, { ipallowlist: [] }, clusterOnly);
    expect(forbidden.status).toBe(403);
    expect(((await forbidden.json()) as { detail: string }).detail).toContain("'ipallowlist'");
    expect((await call("PUT", `/clusters/${clusterId}/ipwhitelist`, { ipwhitelist: [] }, clusterOnly)).status).toBe(
      403,
    );
    expect((await call("GET", `/clusters/${clusterId}/ipallowlist`, undefined, clusterOnly)).status).toBe(200);
    const membersOnly = await requestToken(platform, await createTestClient(platform, ["members"]), "admin-api");
    expect((await call("GET", `/clusters/${clusterId}/ipallowlist`, undefined, membersOnly)).status).toBe(403);
  });
});

describe("a platform started without a cluster directory", () => {
  it("serves the allowlist and monitoring routes, answering 404 for every cluster", async () => {
    const platform = await startTestPlatform();
    try {
      const token = await requestToken(platform, platform.adminClient, "admin-api");
      const headers = { authorization: `Bearer ${token}`, "content-type": "application/json" };
      const put = await fetch(`${platform.url}/admin/clusters/${randomUUID()}/ipwhitelist`, {
        method: "PUT",
        headers,
        body: JSON.stringify({ ipwhitelist: [] }),
      });
      expect(put.status).toBe(404);
      expect(((await put.json()) as { detail: string }).detail).toContain("cluster");
      const monitoring = await fetch(`${platform.url}/admin/clusters/${randomUUID()}/monitoring`, {
        method: "POST",
        headers: { authorization: `Bearer ${token}` },
      });
      expect(monitoring.status).toBe(404);
      const document = (await (await fetch(`${platform.url}/admin/openapi.json`)).json()) as {
        paths: Record<string, Record<string, unknown>>;
      };
      expect(Object.keys(document.paths["/clusters/{clusterId}/ipallowlist"] ?? {}).sort()).toEqual(["get", "put"]);
      expect(Object.keys(document.paths["/clusters/{clusterId}/ipwhitelist"] ?? {})).toEqual(["put"]);
      expect(document.paths["/clusters/{clusterId}/monitoring/clients/{uuid}/rotate"]).toHaveProperty("post");
    } finally {
      await platform.close();
    }
  });
});
