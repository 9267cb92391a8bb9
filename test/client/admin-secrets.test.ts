import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AdminClient } from "../../src/client/admin.js";
import { ApiError } from "../../src/client/errors.js";
import { TokenProvider } from "../../src/client/token-provider.js";
import { createClusterAccessFixture } from "../platform/admin/cluster-access-support.js";
import { startTestPlatform, type TestPlatform } from "../support/platform.js";

let platform: TestPlatform;
let admin: AdminClient;
const clusterId = randomUUID();

beforeAll(async () => {
  const access = createClusterAccessFixture();
  platform = await startTestPlatform({}, { clusterAccess: access.options });
  access.addCluster(platform.organizationId, clusterId);
  const tokenProvider = new TokenProvider({
    credentials: { oauthUrl: `${platform.url}/oauth/token`, ...platform.adminClient },
  });
  admin = new AdminClient({ baseUrl: `${platform.url}/admin`, tokenProvider });
});

afterAll(async () => {
  await platform?.close();
});

describe("AdminClient connector secrets", () => {
  it("creates, lists, updates and deletes the secrets of a cluster", async () => {
    await admin.createSecret(clusterId, "SMTP_PASSWORD", "p@ss/word?");
    await admin.createSecret(clusterId, "API_KEY", "k");
    expect(await admin.listSecrets(clusterId)).toEqual({ API_KEY: "k", SMTP_PASSWORD: "p@ss/word?" });
    await admin.updateSecret(clusterId, "API_KEY", "k2");
    await admin.deleteSecret(clusterId, "SMTP_PASSWORD");
    expect(await admin.listSecrets(clusterId)).toEqual({ API_KEY: "k2" });
  });

  it("raises ApiError with the problem's status for 409 and 404", async () => {
    await admin.createSecret(clusterId, "ONCE", "1");
    await expect(admin.createSecret(clusterId, "ONCE", "2")).rejects.toMatchObject({ status: 409 });
    const missing = await admin.deleteSecret(clusterId, "NEVER").catch((error: unknown) => error);
    expect(missing).toBeInstanceOf(ApiError);
    expect(missing).toMatchObject({ status: 404 });
    await expect(admin.listSecrets(randomUUID())).rejects.toMatchObject({ status: 404 });
  });
});
