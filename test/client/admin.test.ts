import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AdminClient } from "../../src/client/admin.js";
import { ApiError } from "../../src/client/errors.js";
import { ModelerClient } from "../../src/client/modeler.js";
import { TokenCacheFile } from "../../src/client/token-cache.js";
import { TokenProvider } from "../../src/client/token-provider.js";
import { startTestPlatform } from "../support/platform.js";
import { countingDispatcher } from "./support.js";

let platform: Awaited<ReturnType<typeof startTestPlatform>>;
let tokenProvider: TokenProvider;
let admin: AdminClient;
let temporaryDirectory: string;

beforeAll(async () => {
  platform = await startTestPlatform({
    "service.rateLimit.burst": 10_000,
    "service.rateLimit.refillPerSecond": 10_000,
  });
  tokenProvider = new TokenProvider({
    credentials: { oauthUrl: `${platform.url}/oauth/token`, ...platform.adminClient },
  });
  admin = new AdminClient({ baseUrl: `${platform.url}/admin`, tokenProvider });
  temporaryDirectory = await mkdtemp(join(tmpdir(), "flowplane-admin-client-"));
});

afterAll(async () => {
  await platform?.close();
  if (temporaryDirectory !== undefined) await rm(temporaryDirectory, { recursive: true, force: true });
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
    expect(apiError.problem.status).toBe(404);
    expect(apiError.type).toMatch(/\S/);
    expect(apiError.detail).toMatch(/\S/);

    const invalid = await admin.inviteMember("not-an-email", ["developer"]).catch((caught: unknown) => caught);
    expect(invalid).toMatchObject({ status: 400 });
  });

  it("replaces a cached token the API refuses and retries once", async () => {
    const cacheFile = join(temporaryDirectory, "tokens.json");
    const oauthUrl = `${platform.url}/oauth/token`;
    const nowMs = Date.now();
    await new TokenCacheFile(cacheFile).write(
      { oauthUrl, clientId: platform.adminClient.clientId, audience: "admin-api", scope: "" },
      {
        accessToken: "a.refused.token",
        tokenType: "Bearer",
        scope: "members",
        audience: "admin-api",
        issuedAtMs: nowMs,
        expiresAtMs: nowMs + 3_600_000,
        refreshAtMs: nowMs + 3_000_000,
      },
      nowMs,
    );
    const counter = countingDispatcher();
    const client = new AdminClient({
      baseUrl: `${platform.url}/admin`,
      tokenProvider: new TokenProvider({ credentials: { oauthUrl, ...platform.adminClient }, cacheFile }),
      http: { dispatcher: counter.dispatcher },
    });
    const members = await client.listMembers();
    expect(members.length).toBeGreaterThan(0);
    // The refused call and the successful one; the token request goes through the provider's own transport.
    expect(counter.count()).toBe(2);
    await counter.close();
  });

  it("answers 401 as ApiError when even a new token is refused by the wrong API", async () => {
    const wrongAudience = new AdminClient({ baseUrl: `${platform.url}/admin`, tokenProvider, audience: "modeler-api" });
    const error = await wrongAudience.listMembers().catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(ApiError);
    expect((error as ApiError).status).toBe(401);
  });
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
