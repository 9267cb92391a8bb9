import { Type } from "typebox";
import { principalOf } from "../../../auth/authenticate.js";
import { clusterClientPermissions, clusterClientsScope } from "../../../auth/scopes.js";
import { problemSchema, standardErrorResponses } from "../../../http/schemas.js";
import type { HttpServer } from "../../../http/server.js";
import { pathParameter } from "../activity/recording.js";
import { clientNameSchema } from "../client-names.js";
import { clusterParameters } from "../cluster-directory.js";
import type { ClusterClientService } from "./service.js";

const clientParameters = Type.Object(
  {
    clusterId: clusterParameters.properties.clusterId,
    clientId: Type.String({ pattern: "^[A-Za-z0-9._~-]{1,128}$", description: "Client id of the API client." }),
  },
  { additionalProperties: false },
);

const permissionsSchema = Type.Array(Type.Enum(clusterClientPermissions), {
  description: `What the client's tokens may do on the cluster: ${clusterClientPermissions.join(", ")}.`,
});

const createBody = Type.Object(
  {
    clientName: clientNameSchema("the cluster"),
    permissions: Type.Optional(
      Type.Array(Type.Enum(clusterClientPermissions), {
        minItems: 1,
        maxItems: clusterClientPermissions.length,
        uniqueItems: true,
        description: `Permissions of the client: ${clusterClientPermissions.join(", ")} (default: gateway).`,
      }),
    ),
  },
  { additionalProperties: false },
);

const clusterClientSchema = Type.Object(
  { clientId: Type.String(), name: Type.String(), permissions: permissionsSchema },
  { additionalProperties: false },
);

const linksSchema = Type.Object(
  { gateway: Type.String(), management: Type.String(), oauth: Type.String() },
  { additionalProperties: false },
);

const createdSchema = Type.Object(
  {
    uuid: Type.String(),
    clientId: Type.String(),
    clientSecret: Type.String({ description: "The client's secret: shown in this answer only, never again." }),
    name: Type.String(),
    permissions: permissionsSchema,
    audience: Type.String({ description: "The audience to request the client's tokens for." }),
    links: linksSchema,
  },
  { additionalProperties: false },
);

const connectionDetailsSchema = Type.Object(
  {
    name: Type.String(),
    SERVICE_ADDRESS: Type.String({ description: "Base URL of the cluster's gateway." }),
    SERVICE_CLIENT_ID: Type.String(),
    SERVICE_AUTHORIZATION_SERVER_URL: Type.String({ description: "Token endpoint to request tokens at." }),
    SERVICE_TOKEN_AUDIENCE: Type.String({ description: "Audience to request tokens for." }),
  },
  { additionalProperties: false, description: "Environment variables a client application needs (not the secret)." },
);

/** Routes of `/clusters/{clusterId}/clients`: thin wrappers over `ClusterClientService`. */
export function clusterClientRoutes(server: HttpServer, clusterClients: ClusterClientService): void {
  const config = { scopes: [clusterClientsScope] };
  server.get(
    "/clusters/:clusterId/clients",
    {
      config,
      schema: {
        tags: ["Cluster API clients"],
        summary: "List the API clients of a cluster",
        params: clusterParameters,
        response: { 200: Type.Array(clusterClientSchema), ...standardErrorResponses },
      },
    },
    async (request) => await clusterClients.list(principalOf(request).organizationId, request.params.clusterId),
  );
  server.post(
    "/clusters/:clusterId/clients",
    {
      // Recorded by the new client's id, known once it exists; never with its secret.
      config: { ...config, activity: { entity: "cluster-client", auditType: "c" } },
      schema: {
        tags: ["Cluster API clients"],
        summary: "Create an API client of a cluster; the answer holds its secret, which is never shown again",
        params: clusterParameters,
        body: createBody,
        response: { 200: createdSchema, 409: problemSchema, ...standardErrorResponses },
      },
    },
    async (request, reply) => {
      const created = await clusterClients.create(
        principalOf(request).organizationId,
        request.params.clusterId,
        request.body,
      );
      request.activityOutcome = { entityId: created.clientId };
      // The secret must not linger in a cache on the way.
      return reply.header("cache-control", "no-store").send(created);
    },
  );
  server.get(
    "/clusters/:clusterId/clients/:clientId",
    {
      config,
      schema: {
        tags: ["Cluster API clients"],
        summary: "Connection details of a cluster API client: the environment variables a client application needs",
        params: clientParameters,
        response: { 200: connectionDetailsSchema, ...standardErrorResponses },
      },
    },
    async (request) =>
      await clusterClients.connectionDetails(
        principalOf(request).organizationId,
        request.params.clusterId,
        request.params.clientId,
      ),
  );
  server.delete(
    "/clusters/:clusterId/clients/:clientId",
    {
      config: {
        ...config,
        activity: { entity: "cluster-client", auditType: "d", entityId: pathParameter("clientId") },
      },
      schema: {
        tags: ["Cluster API clients"],
        summary: "Delete a cluster API client; the cluster's gateway refuses its tokens from then on",
        params: clientParameters,
        response: { 204: Type.Null(), ...standardErrorResponses },
      },
    },
    async (request, reply) => {
      await clusterClients.delete(
        principalOf(request).organizationId,
        request.params.clusterId,
        request.params.clientId,
      );
      return reply.code(204).send(null);
    },
  );
}
