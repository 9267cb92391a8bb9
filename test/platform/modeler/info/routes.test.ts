import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestPlatform, type TestPlatform } from "../../../support/platform.js";
import { createTestClient, requestToken } from "../../../support/tokens.js";

describe("Modeler API /api/v1/info (endpoint 3)", () => {
  let platform: TestPlatform;

  beforeAll(async () => {
    platform = await startTestPlatform();
  });
  afterAll(async () => await platform.close());

  async function info(token: string): Promise<Response> {
    return await fetch(`${platform.url}/modeler/api/v1/info`, { headers: { authorization: `Bearer ${token}` } });
  }

  it("reports version v1, the organization and all four permissions of a full client", async () => {
    const response = await info(await requestToken(platform, platform.adminClient, "modeler-api"));
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual({
      version: "v1",
      authorizedOrganization: platform.organizationId,
      createPermission: true,
      readPermission: true,
      updatePermission: true,
      deletePermission: true,
    });
  });

  it("reports exactly the modeler scopes the token holds", async () => {
    const client = await createTestClient(platform, ["modeler:read", "modeler:update"]);
    const body = (await (await info(await requestToken(platform, client, "modeler-api"))).json()) as Record<
      string,
      unknown
    >;
    expect(body).toMatchObject({
      createPermission: false,
      readPermission: true,
      updatePermission: true,
      deletePermission: false,
    });
  });

  it("follows scope narrowing at token time", async () => {
    const token = await requestToken(platform, platform.adminClient, "modeler-api", "modeler:read");
    const body = (await (await info(token)).json()) as Record<string, unknown>;
    expect(body).toMatchObject({ createPermission: false, readPermission: true, deletePermission: false });
  });

  it("refuses a token for the Administration API audience", async () => {
    const response = await info(await requestToken(platform, platform.adminClient, "admin-api"));
    expect(response.status).toBe(401);
  });
});
