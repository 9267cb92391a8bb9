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
