import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestPlatform, type TestPlatform } from "../../../support/platform.js";
import { createTestClient, requestToken } from "../../../support/tokens.js";

describe("Administration API /members over HTTP", () => {
  let platform: TestPlatform;
  let adminToken: string;

  beforeAll(async () => {
    platform = await startTestPlatform();
    adminToken = await requestToken(platform, platform.adminClient, "admin-api");
  });
  afterAll(async () => await platform.close());

  function call(method: string, path: string, token: string | null, body?: unknown): Promise<Response> {
    return fetch(`${platform.url}/admin${path}`, {
      method,
      headers: {
        ...(token === null ? {} : { authorization: `Bearer ${token}` }),
        ...(body === undefined ? {} : { "content-type": "application/json" }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
  }

  it("lists the owner created on first start (endpoint 2)", async () => {
    const response = await call("GET", "/members", adminToken);
    expect(response.status).toBe(200);
    expect(await response.json()).toContainEqual({
      name: "owner",
      email: "owner@flowplane.local",
      roles: ["owner"],
      invitePending: false,
    });
  });

  it("invites, changes roles and removes a member", async () => {
    expect((await call("POST", "/members/ana@example.com", adminToken, { orgRoles: ["developer"] })).status).toBe(204);
    let members = (await (await call("GET", "/members", adminToken)).json()) as {
      email: string;
      roles: string[];
      invitePending: boolean;
    }[];
    expect(members.find((member) => member.email === "ana@example.com")).toMatchObject({
      roles: ["developer"],
      invitePending: true,
    });
    expect(
      (await call("POST", "/members/ana@example.com", adminToken, { orgRoles: ["admin", "analyst"] })).status,
    ).toBe(204);
    members = (await (await call("GET", "/members", adminToken)).json()) as typeof members;
    expect(members.find((member) => member.email === "ana@example.com")?.roles).toEqual(["admin", "analyst"]);
    expect((await call("DELETE", "/members/ana@example.com", adminToken)).status).toBe(204);
    const again = await call("DELETE", "/members/ana@example.com", adminToken);
    expect(again.status).toBe(404);
    expect(again.headers.get("content-type")).toContain("application/problem+json");
  });

  it("takes a DELETE with a content type and no body, as the reference SDK sends it, and refuses an empty POST body", async () => {
    for (const [email, contentType] of [
      ["json@example.com", "application/json"],
      ["text@example.com", "text/plain"],
    ] as const) {
      expect((await call("POST", `/members/${email}`, adminToken, { orgRoles: ["developer"] })).status).toBe(204);
      const removed = await fetch(`${platform.url}/admin/members/${email}`, {
        method: "DELETE",
        headers: { authorization: `Bearer ${adminToken}`, "content-type": contentType },
      });
      expect(removed.status, contentType).toBe(204);
    }
    const emptyInvite = await fetch(`${platform.url}/admin/members/empty@example.com`, {
      method: "POST",
      headers: { authorization: `Bearer ${adminToken}`, "content-type": "application/json" },
    });
    expect(emptyInvite.status).toBe(400);
    expect(((await emptyInvite.json()) as { type: string }).type).toBe("urn:flowplane:problem:malformed-body");
  });

  it("answers 400 naming the problem for an invalid email, an unknown role and the owner role", async () => {
    const badEmail = await call("POST", "/members/not-an-email", adminToken, { orgRoles: ["admin"] });
    expect(badEmail.status).toBe(400);
    expect(((await badEmail.json()) as { detail: string }).detail).toContain("params/email");
    const badRole = await call("POST", "/members/bo@example.com", adminToken, { orgRoles: ["emperor"] });
    expect(badRole.status).toBe(400);
    const owner = await call("POST", "/members/bo@example.com", adminToken, { orgRoles: ["owner"] });
    expect(owner.status).toBe(400);
    const empty = await call("POST", "/members/bo@example.com", adminToken, { orgRoles: [] });
    expect(empty.status).toBe(400);
  });

  it("keeps the one owner: it can be neither removed nor re-roled (409)", async () => {
    expect((await call("DELETE", "/members/owner@flowplane.local", adminToken)).status).toBe(409);
    expect((await call("POST", "/members/owner@flowplane.local", adminToken, { orgRoles: ["admin"] })).status).toBe(
      409,
    );
  });

  it("requires a token (401 with a Bearer challenge) and the members scope (403 naming it)", async () => {
    const anonymous = await call("GET", "/members", null);
    expect(anonymous.status).toBe(401);
    expect(anonymous.headers.get("www-authenticate")).toBe('Bearer realm="flowplane"');
    const modelerOnly = await createTestClient(platform, ["modeler:read", "secrets"]);
    const token = await requestToken(platform, modelerOnly, "admin-api");
    const forbidden = await call("GET", "/members", token);
    expect(forbidden.status).toBe(403);
    expect(((await forbidden.json()) as { detail: string }).detail).toContain("'members'");
  });

  it("refuses a token issued for another API's audience", async () => {
    const modelerToken = await requestToken(platform, platform.adminClient, "modeler-api");
    const response = await call("GET", "/members", modelerToken);
    expect(response.status).toBe(401);
    expect(response.headers.get("www-authenticate")).toContain('error="invalid_token"');
  });
});
