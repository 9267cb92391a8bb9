import { randomUUID } from "node:crypto";
import { systemClock } from "../../src/auth/clock.js";
import { ClientSecretHasher } from "../../src/platform/issuer/client-secrets.js";
import { ClientService } from "../../src/platform/issuer/clients.js";
import { openStore } from "../../src/platform/store/database.js";
import type { TestPlatform } from "./platform.js";

/** Client credentials as a test holds them. */
export interface TestClient {
  clientId: string;
  clientSecret: string;
}

/** Creates a client of the test platform's organization with exactly `scopes`, through a second store handle. */
export async function createTestClient(platform: TestPlatform, scopes: readonly string[]): Promise<TestClient> {
  const store = await openStore({ url: "", dataDirectory: platform.dataDirectory });
  try {
    const clients = new ClientService({
      database: store.database,
      hasher: await ClientSecretHasher.open(store.database, store.secrets),
      clock: systemClock,
    });
    const { client, secret } = await clients.create({
      organizationId: platform.organizationId,
      // Names are unique per organization; tests may create several clients of the same scopes.
      name: `test client ${scopes.join(" ")} ${randomUUID()}`,
      scopes,
    });
    return { clientId: client.clientId, clientSecret: secret };
  } finally {
    await store.close();
  }
}

/** Creates a second organization with a client holding `scopes`, through a second store handle. */
export async function createOtherOrganizationClient(
  platform: TestPlatform,
  scopes: readonly string[],
): Promise<TestClient & { organizationId: string }> {
  const store = await openStore({ url: "", dataDirectory: platform.dataDirectory });
  try {
    const organizationId = randomUUID();
    await store.database
      .insertInto("organizations")
      .values({ id: organizationId, name: "other", created_at: new Date().toISOString() })
      .execute();
    const clients = new ClientService({
      database: store.database,
      hasher: await ClientSecretHasher.open(store.database, store.secrets),
      clock: systemClock,
    });
    const { client, secret } = await clients.create({ organizationId, name: "other org", scopes });
    return { organizationId, clientId: client.clientId, clientSecret: secret };
  } finally {
    await store.close();
  }
}

/** Requests an access token from the platform's token endpoint; throws when the platform refuses. */
export async function requestToken(
  platform: Pick<TestPlatform, "url">,
  client: TestClient,
  audience: string,
  scope?: string,
): Promise<string> {
  const response = await fetch(`${platform.url}/oauth/token`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({
      grant_type: "client_credentials",
      audience,
      client_id: client.clientId,
      client_secret: client.clientSecret,
      ...(scope === undefined ? {} : { scope }),
    }),
  });
  const body = (await response.json()) as { access_token?: string; error?: string };
  if (response.status !== 200 || body.access_token === undefined) {
    throw new Error(`token request failed with ${response.status}: ${JSON.stringify(body)}`);
  }
  return body.access_token;
}

/** Asks the platform for an administration token the way a client application does: the answer's status, body and `Retry-After`. */
export async function tokenEndpointAnswer(platform: Pick<TestPlatform, "url" | "adminClient">) {
  const response = await fetch(`${platform.url}/oauth/token`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({
      grant_type: "client_credentials",
      audience: "admin-api",
      client_id: platform.adminClient.clientId,
      client_secret: platform.adminClient.clientSecret,
    }),
  });
  return { status: response.status, body: await response.json(), retryAfter: response.headers.get("retry-after") };
}
