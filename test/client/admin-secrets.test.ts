import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AdminClient } from "../../src/client/admin.js";
import { ApiError } from "../../src/client/errors.js";
import { TokenProvider } from "../../src/client/token-provider.js";
import {
  type ConnectorSecretsServer,
  startConnectorSecretsServer,
} from "../platform/admin/connector-secrets/support.js";

let server: ConnectorSecretsServer;
let admin: AdminClient;

beforeAll(async () => {
  server = await startConnectorSecretsServer();
  const tokenProvider = new TokenProvider({
    credentials: { oauthUrl: `${server.url}/oauth/token`, ...server.adminClient },
  });
  admin = new AdminClient({ baseUrl: `${server.url}/admin`, tokenProvider });
});

afterAll(async () => {
  await server?.close();
});

describe("AdminClient connector secrets", () => {
  it("creates, lists, updates and deletes the secrets of a cluster", async () => {
    await admin.createSecret(server.clusterId, "SMTP_PASSWORD", "p@ss/word?");
    await admin.createSecret(server.clusterId, "API_KEY", "k");
    expect(await admin.listSecrets(server.clusterId)).toEqual({ API_KEY: "k", SMTP_PASSWORD: "p@ss/word?" });
    await admin.updateSecret(server.clusterId, "API_KEY", "k2");
    await admin.deleteSecret(server.clusterId, "SMTP_PASSWORD");
    expect(await admin.listSecrets(server.clusterId)).toEqual({ API_KEY: "k2" });
  });

  it("raises ApiError with the problem's status for 409 and 404", async () => {
    await admin.createSecret(server.clusterId, "ONCE", "1");
    await expect(admin.createSecret(server.clusterId, "ONCE", "2")).rejects.toMatchObject({ status: 409 });
    const missing = await admin.deleteSecret(server.clusterId, "NEVER").catch((error: unknown) => error);
    expect(missing).toBeInstanceOf(ApiError);
    expect(missing).toMatchObject({ status: 404 });
    await expect(admin.listSecrets(randomUUID())).rejects.toMatchObject({ status: 404 });
  });
});
