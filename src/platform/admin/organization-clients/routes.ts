import { Type } from "typebox";
import { principalOf } from "../../../auth/authenticate.js";
import { scopeValues } from "../../../auth/scopes.js";
import { problemSchema, standardErrorResponses } from "../../../http/schemas.js";
import type { HttpServer } from "../../../http/server.js";
import { pathParameter } from "../activity/recording.js";
import { clientNameSchema } from "../client-names.js";
import type { OrganizationClientService } from "./service.js";

const scopesSchema = Type.Array(Type.Enum(scopeValues), {
  description: `Scope values the client's tokens may carry: any of ${scopeValues.join(", ")}.`,
});

const clientSchema = Type.Object(
  {
    clientId: Type.String(),
    name: Type.String(),
    scopes: scopesSchema,
    created: Type.String({ description: "When the client was created (ISO-8601)." }),
  },
  { additionalProperties: false },
);

const createBody = Type.Object(
  {
    name: clientNameSchema("the organization"),
    scopes: Type.Array(Type.Enum(scopeValues), {
      minItems: 1,
      maxItems: scopeValues.length,
      uniqueItems: true,
      description: `Scope values the client's tokens may carry: any of ${scopeValues.join(", ")}.`,
    }),
  },
  { additionalProperties: false },
);

const createdSchema = Type.Object(
  {
    clientId: Type.String(),
    clientSecret: Type.String({ description: "The client's secret: shown in this answer only, never again." }),
    name: Type.String(),
    scopes: scopesSchema,
    created: Type.String({ description: "When the client was created (ISO-8601)." }),
  },
  { additionalProperties: false },
);

const clientParameters = Type.Object(
  { clientId: Type.String({ pattern: "^[A-Za-z0-9._~-]{1,128}$", description: "Client id of the API client." }) },
  { additionalProperties: false },
);

/** Routes of `/clients`, the organization's API clients: thin wrappers over `OrganizationClientService`. */
export function organizationClientRoutes(server: HttpServer, clients: OrganizationClientService): void {
  const description = "Takes a token holding every scope.";
  server.get(
    "/clients",
    {
      schema: {
        tags: ["Organization API clients"],
        summary: "List the organization's API clients (not the clients of a cluster)",
        description,
        response: { 200: Type.Array(clientSchema), ...standardErrorResponses },
      },
    },
    async (request) => await clients.list(principalOf(request)),
  );
  server.post(
    "/clients",
    {
      // Recorded by the new client's id, known once it exists; never with its secret.
      config: { activity: { entity: "organization-client", auditType: "c" } },
      schema: {
        tags: ["Organization API clients"],
        summary: "Create an API client of the organization; the answer holds its secret, which is never shown again",
        description,
        body: createBody,
        response: { 200: createdSchema, 409: problemSchema, ...standardErrorResponses },
      },
    },
    async (request, reply) => {
      const created = await clients.create(principalOf(request), request.body);
      request.activityOutcome = { entityId: created.clientId };
      // The secret must not linger in a cache on the way.
      return reply.header("cache-control", "no-store").send(created);
    },
  );
  server.delete(
    "/clients/:clientId",
    {
      config: { activity: { entity: "organization-client", auditType: "d", entityId: pathParameter("clientId") } },
      schema: {
        tags: ["Organization API clients"],
        summary:
          "Delete an API client of the organization; the platform and every gateway refuse its tokens from then on",
        description: `${description} A client cannot delete itself (409).`,
        params: clientParameters,
        response: { 204: Type.Null(), 409: problemSchema, ...standardErrorResponses },
      },
    },
    async (request, reply) => {
      await clients.delete(principalOf(request), request.params.clientId);
      return reply.code(204).send(null);
    },
  );
}
