/**
 * The benchmark's peer: oidc-provider configured like the flowplane token issuer (client-credentials grant,
 * client_secret_post, JWT access tokens for one resource server, signed with RS256 on an RSA-2048 key or ES256 on a
 * P-256 key). Run as a child process: `node --import tsx bench/token/peer-server.ts <RS256|ES256> <id> <secret> <resource>`;
 * prints `{"url": …}` once it listens on 127.0.0.1.
 */
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { exportJWK, generateKeyPair } from "jose";
import Provider from "oidc-provider";

async function main(): Promise<void> {
  const [algorithm, clientId, clientSecret, resource] = process.argv.slice(2);
  if (
    (algorithm !== "RS256" && algorithm !== "ES256") ||
    clientId === undefined ||
    clientSecret === undefined ||
    resource === undefined
  ) {
    throw new Error("usage: peer-server.ts <RS256|ES256> <client id> <client secret> <resource indicator URI>");
  }
  const { privateKey } = await generateKeyPair(algorithm, { extractable: true, modulusLength: 2048 });
  const jwk = { ...(await exportJWK(privateKey)), alg: algorithm, use: "sig", kid: `peer-${algorithm}` };
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  const issuer = `http://127.0.0.1:${port}`;
  const provider = new Provider(issuer, {
    jwks: { keys: [jwk] },
    clients: [
      {
        client_id: clientId,
        client_secret: clientSecret,
        grant_types: ["client_credentials"],
        redirect_uris: [],
        response_types: [],
        token_endpoint_auth_method: "client_secret_post",
        id_token_signed_response_alg: algorithm,
        scope: "members",
      },
    ],
    scopes: ["members"],
    ttl: { ClientCredentials: 86_400 },
    features: {
      devInteractions: { enabled: false },
      clientCredentials: { enabled: true },
      resourceIndicators: {
        enabled: true,
        defaultResource: async () => resource,
        useGrantedResource: async () => false,
        getResourceServerInfo: async (_context: unknown, resourceIndicator: string) => {
          if (resourceIndicator !== resource) throw new Error(`unknown resource ${resourceIndicator}`);
          return {
            scope: "members",
            audience: "admin-api",
            accessTokenTTL: 86_400,
            accessTokenFormat: "jwt",
            jwt: { sign: { alg: algorithm } },
          };
        },
      },
    },
  });
  server.on("request", provider.callback());
  process.stdout.write(`${JSON.stringify({ url: issuer })}\n`);
  process.on("SIGTERM", () => {
    server.closeAllConnections();
    server.close(() => process.exit(0));
  });
}

await main();
