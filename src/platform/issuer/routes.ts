import formBody from "@fastify/formbody";
import type {} from "@fastify/swagger";
import type { FastifyPluginAsync } from "fastify";
import { Type } from "typebox";
import { scopeValues } from "../../auth/scopes.js";
import { requestAddress } from "../../http/request-address.js";
import type { HttpServer } from "../../http/server.js";
import type { SigningKeyService } from "./signing-keys.js";
import { parseTokenRequest, type TokenService } from "./token-service.js";

/** Path of the token endpoint. */
export const tokenPath = "/oauth/token";
/** Path of the published key set. */
export const jwksPath = "/.well-known/jwks.json";
/** Paths of the issuer metadata (OpenID Connect discovery and RFC 8414 name the same document differently). */
export const discoveryPaths = ["/.well-known/openid-configuration", "/.well-known/oauth-authorization-server"] as const;

/** Options of `issuerRoutes`: the services built by `createIssuerServices`. */
export interface IssuerRoutesOptions {
  tokens: TokenService;
  signingKeys: SigningKeyService;
  /**
   * Largest accepted token request body, form or JSON (default 16 KiB, a hundred times what a request with long ids
   * and every scope takes); larger ones are `invalid_request`.
   */
  bodyLimitBytes?: number;
}

const tag = "Token issuer";

const tokenRequestSchema = Type.Object(
  {
    grant_type: Type.String({ description: "Always `client_credentials`.", examples: ["client_credentials"] }),
    audience: Type.String({ description: "The API the token is for, e.g. `admin-api`." }),
    client_id: Type.Optional(Type.String({ description: "Client id (or send HTTP Basic credentials instead)." })),
    client_secret: Type.Optional(
      Type.String({ description: "Client secret (or send HTTP Basic credentials instead)." }),
    ),
    scope: Type.Optional(
      Type.String({ description: "Space-separated scopes narrowing the client's scopes; never widens them." }),
    ),
  },
  // RFC 6749 §3.2: the server must ignore parameters it does not know.
  { additionalProperties: true },
);

const tokenResponseSchema = Type.Object(
  {
    access_token: Type.String({ description: "The signed JWT." }),
    expires_in: Type.Integer({ description: "Seconds until the token expires." }),
    refresh_expires_in: Type.Literal(0),
    token_type: Type.Literal("Bearer"),
    "not-before-policy": Type.Literal(0),
    scope: Type.String({ description: "Space-separated granted scopes." }),
  },
  { additionalProperties: false },
);

const oauthErrorSchema = Type.Object(
  {
    error: Type.String({ description: "RFC 6749 §5.2 error code (or `slow_down` when rate limited)." }),
    error_description: Type.String(),
  },
  { description: "RFC 6749 error body." },
);

const jwksSchema = Type.Object({
  keys: Type.Array(
    Type.Object(
      {
        kty: Type.Optional(Type.String()),
        kid: Type.Optional(Type.String()),
        alg: Type.Optional(Type.String()),
        use: Type.Optional(Type.String()),
      },
      { additionalProperties: true },
    ),
  ),
});

const metadataSchema = Type.Object({
  issuer: Type.String(),
  token_endpoint: Type.String(),
  jwks_uri: Type.String(),
  grant_types_supported: Type.Array(Type.String()),
  token_endpoint_auth_methods_supported: Type.Array(Type.String()),
  scopes_supported: Type.Array(Type.String()),
  response_types_supported: Type.Array(Type.String()),
});

/** Seconds the key set may be cached; verifiers refetch sooner when they meet an unknown `kid`. */
const jwksMaxAgeSeconds = 300;
/** Seconds the issuer metadata may be cached. */
const metadataMaxAgeSeconds = 3600;

/**
 * The token issuer's routes: `POST /oauth/token`, the JWKS and the two discovery documents. Register it with
 * `server.register(issuerRoutes, services)`; the form-body parser is installed only inside this plugin.
 */
export const issuerRoutes: FastifyPluginAsync<IssuerRoutesOptions> = async (instance, options) => {
  const server = instance as unknown as HttpServer;
  const bodyLimitBytes = options.bodyLimitBytes ?? 16 * 1024;
  await server.register(formBody, { bodyLimit: bodyLimitBytes });
  const { tokens, signingKeys } = options;

  server.post(
    tokenPath,
    {
      config: { errorFormat: "oauth" },
      bodyLimit: bodyLimitBytes,
      // Shape errors are answered by parseTokenRequest with RFC 6749 wording rather than validator messages.
      attachValidation: true,
      schema: {
        tags: [tag],
        summary: "Request an access token (client credentials grant)",
        description:
          "Client credentials in the body or as HTTP Basic (RFC 6749 §2.3.1), never both. Rate limited per source " +
          "address; past the limit the answer is 429 with Retry-After and `slow_down`. When the platform's database " +
          "cannot serve, 503 with Retry-After and `temporarily_unavailable`.",
        security: [],
        consumes: ["application/x-www-form-urlencoded", "application/json"],
        body: tokenRequestSchema,
        response: {
          200: tokenResponseSchema,
          400: oauthErrorSchema,
          401: oauthErrorSchema,
          429: oauthErrorSchema,
          503: oauthErrorSchema,
        },
      },
      // Before the body is read, so malformed and oversized requests count against the limit too.
      onRequest: async (request) => {
        await tokens.limitAddress(requestAddress(request));
      },
    },
    async (request, reply) => {
      const parameters = parseTokenRequest(request.body, request.headers.authorization);
      const response = await tokens.issue(parameters, requestAddress(request));
      return reply.header("cache-control", "no-store").header("pragma", "no-cache").send(response);
    },
  );

  server.get(
    jwksPath,
    {
      schema: {
        tags: [tag],
        summary: "Public keys that verify access tokens (JWKS)",
        security: [],
        response: { 200: jwksSchema },
      },
    },
    async (_request, reply) => {
      const keySet = await signingKeys.publicKeySet();
      return reply.header("cache-control", `public, max-age=${jwksMaxAgeSeconds}`).send(keySet);
    },
  );

  const metadata = {
    issuer: tokens.issuerUrl,
    token_endpoint: `${tokens.issuerUrl}${tokenPath}`,
    jwks_uri: `${tokens.issuerUrl}${jwksPath}`,
    grant_types_supported: ["client_credentials"],
    token_endpoint_auth_methods_supported: ["client_secret_post", "client_secret_basic"],
    scopes_supported: [...scopeValues],
    // No authorization endpoint exists, so no response type is supported.
    response_types_supported: [],
  };
  for (const path of discoveryPaths) {
    server.get(
      path,
      {
        schema: {
          tags: [tag],
          summary: "Issuer metadata (OpenID Connect discovery / RFC 8414)",
          security: [],
          response: { 200: metadataSchema },
        },
      },
      async (_request, reply) =>
        reply.header("cache-control", `public, max-age=${metadataMaxAgeSeconds}`).send(metadata),
    );
  }
};
