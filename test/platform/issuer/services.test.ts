import { afterEach, describe, expect, it } from "vitest";
import { installAuthentication, principalOf } from "../../../src/auth/authenticate.js";
import { TokenVerificationError } from "../../../src/auth/verifier.js";
import {
  createIssuerServices,
  createPlatformVerifier,
  issuerUrlFromConfiguration,
} from "../../../src/platform/issuer/services.js";
import { databaseKinds } from "../../support/databases.js";
import { type IssuerFixture, openSecondHandle, startIssuer, testConfiguration } from "./support.js";

describe("issuer URL", () => {
  it("is the public URL without a trailing slash, or localhost with the platform port", () => {
    expect(issuerUrlFromConfiguration(testConfiguration())).toBe("http://localhost:8088");
    expect(issuerUrlFromConfiguration(testConfiguration(), 4321)).toBe("http://localhost:4321");
    const configured = testConfiguration({ "service.platform.publicUrl": "https://id.example/" });
    expect(issuerUrlFromConfiguration(configured)).toBe("https://id.example");
  });
});

describe.each(databaseKinds)("issuer services with the platform's own verifier (%s)", (kind) => {
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });

  async function issuerWithClient(
    beforeReady?: Parameters<typeof startIssuer>[2],
  ): Promise<{ issuer: IssuerFixture; token: () => Promise<string> }> {
    const issuer = await startIssuer(kind, { "service.rateLimit.burst": 1000 }, beforeReady);
    cleanups.push(() => issuer.close());
    const { client, secret } = await issuer.services.clients.create({
      organizationId: issuer.organizationId,
      name: "console",
      scopes: ["members"],
    });
    const token = async () => {
      const response = await issuer.server.inject({
        method: "POST",
        url: "/oauth/token",
        payload: {
          grant_type: "client_credentials",
          audience: "admin-api",
          client_id: client.clientId,
          client_secret: secret,
        },
      });
      expect(response.statusCode, response.body).toBe(200);
      return (response.json() as { access_token: string }).access_token;
    };
    return { issuer, token };
  }

  it("verifies issued tokens in process and guards a route with them", async () => {
    const { issuer, token } = await issuerWithClient(async (server, services, clock) => {
      const verifier = createPlatformVerifier(services, "admin-api", clock.now);
      await server.register(
        async (guarded) => {
          installAuthentication(guarded, { verifier });
          guarded.get("/members", { config: { scopes: ["members"] } }, async (request) => ({
            organizationId: principalOf(request).organizationId,
          }));
        },
        { prefix: "/admin" },
      );
    });
    const response = await issuer.server.inject({
      method: "GET",
      url: "/admin/members",
      headers: { authorization: `Bearer ${await token()}` },
    });
    expect(response.statusCode, response.body).toBe(200);
    expect(response.json()).toEqual({ organizationId: issuer.organizationId });

    const modelerVerifier = createPlatformVerifier(issuer.services, "modeler-api", issuer.clock.now);
    await expect(modelerVerifier.verify(await token())).rejects.toBeInstanceOf(TokenVerificationError);
  });

  it("accepts tokens signed after another replica rotated the key, and old tokens until they expire", async () => {
    const { issuer, token } = await issuerWithClient();
    const handle = await openSecondHandle(issuer.database);
    cleanups.push(() => handle.close());
    const replica = await createIssuerServices({
      store: handle,
      configuration: issuer.configuration,
      clock: issuer.clock.now,
    });
    const replicaVerifier = createPlatformVerifier(replica, "admin-api", issuer.clock.now);
    const before = await token();
    expect((await replicaVerifier.verify(before)).organizationId).toBe(issuer.organizationId);

    await issuer.services.signingKeys.rotate();
    const after = await token();
    // The replica has not re-read the keys yet: the unknown kid makes it reload once, then the token verifies.
    expect((await replicaVerifier.verify(after)).clientId).toBeDefined();
    expect((await replicaVerifier.verify(before)).clientId).toBeDefined();
  });
});
