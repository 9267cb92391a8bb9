import type { FastifyRequest } from "fastify";
import { Type } from "typebox";
import { principalOf } from "../../../auth/authenticate.js";
import { secretsScope } from "../../../auth/scopes.js";
import { describedPattern, problemSchema, standardErrorResponses } from "../../../http/schemas.js";
import type { HttpServer } from "../../../http/server.js";
import { clusterParameters } from "../cluster-directory.js";
import { type ConnectorSecretService, defaultConnectorSecretLimits, secretNamePattern } from "./service.js";

const secretNameSchema = Type.String({
  pattern: describedPattern(secretNamePattern, "be 1 to 49 characters of A-Z, a-z, 0-9 and _"),
  description: "Name of the secret: 1 to 49 characters of A-Z, a-z, 0-9 and _.",
});

// The byte limit of UTF-8 is checked by the service; no value of more characters than that can fit in it.
const secretValueSchema = Type.String({
  minLength: 1,
  maxLength: defaultConnectorSecretLimits.valueMaxBytes,
  description: `The secret's value: at most ${defaultConnectorSecretLimits.valueMaxBytes} bytes of UTF-8.`,
});

const secretParameters = Type.Object(
  { clusterId: clusterParameters.properties.clusterId, secretName: secretNameSchema },
  { additionalProperties: false },
);

/** The activity log names a secret by its cluster and name, never by anything of its value. */
function secretIdentity(request: FastifyRequest): string {
  const { clusterId, secretName } = request.params as { clusterId: string; secretName?: string };
  const name = secretName ?? (request.body as { secretName: string }).secretName;
  return `${clusterId}/${name}`;
}

const secretListSchema = Type.Record(Type.String(), Type.String(), {
  description: "Every secret of the cluster, by name.",
});

/** Routes of `/clusters/{clusterId}/secrets`: thin wrappers over `ConnectorSecretService`. */
export function connectorSecretRoutes(server: HttpServer, secrets: ConnectorSecretService): void {
  server.get(
    "/clusters/:clusterId/secrets",
    {
      config: { scopes: [secretsScope] },
      schema: {
        tags: ["Connector secrets"],
        summary: "List the cluster's connector secrets with their values",
        params: clusterParameters,
        response: { 200: secretListSchema, ...standardErrorResponses },
      },
    },
    async (request, reply) => {
      const list = await secrets.list(principalOf(request).organizationId, request.params.clusterId);
      // The answer holds secret values: no cache along the way may keep a copy.
      reply.header("cache-control", "no-store");
      return list;
    },
  );
  server.post(
    "/clusters/:clusterId/secrets",
    {
      config: {
        scopes: [secretsScope],
        activity: { entity: "connector-secret", auditType: "c", entityId: secretIdentity },
      },
      schema: {
        tags: ["Connector secrets"],
        summary: "Create a connector secret (409 when the name exists)",
        params: clusterParameters,
        body: Type.Object(
          { secretName: secretNameSchema, secretValue: secretValueSchema },
          { additionalProperties: false },
        ),
        response: { 204: Type.Null(), 409: problemSchema, ...standardErrorResponses },
      },
    },
    async (request, reply) => {
      await secrets.create(
        principalOf(request).organizationId,
        request.params.clusterId,
        request.body.secretName,
        request.body.secretValue,
      );
      return reply.code(204).send(null);
    },
  );
  server.put(
    "/clusters/:clusterId/secrets/:secretName",
    {
      config: {
        scopes: [secretsScope],
        activity: { entity: "connector-secret", auditType: "u", entityId: secretIdentity },
      },
      schema: {
        tags: ["Connector secrets"],
        summary: "Replace the value of a connector secret",
        params: secretParameters,
        body: Type.Object({ secretValue: secretValueSchema }, { additionalProperties: false }),
        response: { 204: Type.Null(), ...standardErrorResponses },
      },
    },
    async (request, reply) => {
      await secrets.update(
        principalOf(request).organizationId,
        request.params.clusterId,
        request.params.secretName,
        request.body.secretValue,
      );
      return reply.code(204).send(null);
    },
  );
  server.delete(
    "/clusters/:clusterId/secrets/:secretName",
    {
      config: {
        scopes: [secretsScope],
        activity: { entity: "connector-secret", auditType: "d", entityId: secretIdentity },
      },
      schema: {
        tags: ["Connector secrets"],
        summary: "Delete a connector secret",
        params: secretParameters,
        response: { 204: Type.Null(), ...standardErrorResponses },
      },
    },
    async (request, reply) => {
      await secrets.remove(principalOf(request).organizationId, request.params.clusterId, request.params.secretName);
      return reply.code(204).send(null);
    },
  );
}
