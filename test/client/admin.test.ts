import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AdminClient } from "../../src/client/admin.js";
import { ApiError } from "../../src/client/errors.js";
import { TokenProvider } from "../../src/client/token-provider.js";
import { startTestPlatform, type TestPlatform } from "../support/platform.js";

let platform: TestPlatform;
let admin: AdminClient;

beforeAll(async () => {
  platform = await startTestPlatform();
  const tokenProvider = new TokenProvider({
    credentials: { oauthUrl: `${platform.url}/oauth/token`, ...platform.adminClient },
  });
  admin = new AdminClient({ baseUrl: `${platform.url}/admin`, tokenProvider });
});

afterAll(async () => {
  await platform?.close();
});

describe("AdminClient members", () => {
  it("lists the owner created on first start", async () => {
    const members = await admin.listMembers();
    expect(members.some((member) => member.roles.includes("owner") && !member.invitePending)).toBe(true);
  });

  it("invites, changes roles and removes a member", async () => {
    await admin.inviteMember("ada@example.com", ["developer", "analyst"]);
    let ada = (await admin.listMembers()).find((member) => member.email === "ada@example.com");
    expect(ada).toMatchObject({ invitePending: true });
    expect([...(ada?.roles ?? [])].sort()).toEqual(["analyst", "developer"]);

    await admin.changeMemberRoles("ada@example.com", ["admin"]);
    ada = (await admin.listMembers()).find((member) => member.email === "ada@example.com");
    expect(ada?.roles).toEqual(["admin"]);

    await admin.removeMember("ada@example.com");
    expect((await admin.listMembers()).some((member) => member.email === "ada@example.com")).toBe(false);
  });

  it("raises ApiError carrying the problem document", async () => {
    const error = await admin.removeMember("nobody@example.com").catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(ApiError);
    const apiError = error as ApiError;
    expect(apiError.status).toBe(404);
    expect(apiError.problem).toMatchObject({ status: 404, instance: "/admin/members/nobody%40example.com" });
    expect(apiError.type).toMatch(/^urn:flowplane:problem:/);
    expect(apiError.detail).toContain("nobody@example.com");

    const invalid = await admin.inviteMember("not-an-email", ["developer"]).catch((caught: unknown) => caught);
    expect(invalid).toBeInstanceOf(ApiError);
    expect(invalid).toMatchObject({ status: 400 });
  });

  it("answers 401 as ApiError when the token is for another API", async () => {
    const tokenProvider = new TokenProvider({
      credentials: { oauthUrl: `${platform.url}/oauth/token`, ...platform.adminClient },
    });
    const wrongAudience = new AdminClient({ baseUrl: `${platform.url}/admin`, tokenProvider, audience: "modeler-api" });
    const error = await wrongAudience.listMembers().catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(ApiError);
    expect((error as ApiError).status).toBe(401);
  });
});
