import type { FastifyRequest } from "fastify";
import { Type } from "typebox";
import { principalOf } from "../../../auth/authenticate.js";
import { clusterScope } from "../../../auth/scopes.js";
import { invalidRequest } from "../../../http/errors.js";
import { describedPattern, problemSchema, standardErrorResponses } from "../../../http/schemas.js";
import type { HttpServer } from "../../../http/server.js";
import { pathParameter } from "../activity/recording.js";
import { clusterParameters } from "../cluster-directory.js";
import { MONITORING_USERNAME_PATTERN, type MonitoringService } from "./service.js";

const clientParameters = Type.Object(
  {
    clusterId: clusterParameters.properties.clusterId,
    uuid: Type.String({ format: "uuid", description: "Id of the monitoring client." }),
  },
  { additionalProperties: false },
);

const credentialsSchema = Type.Object(
  {
    uuid: Type.String(),
    username: Type.String(),
    password: Type.String({ description: "HTTP Basic password; shown in this answer only." }),
  },
  { additionalProperties: false },
);

const clientSchema = Type.Object(
  { uuid: Type.String(), username: Type.String(), created: Type.String({ format: "date-time" }) },
  { additionalProperties: false },
);

/**
 * Refuses a body on a route that takes none. Such routes declare no body schema so that the empty JSON body some
 * clients send is accepted; anything but nothing or `{}` is refused, as an unknown field would be.
 */
function refuseBody(request: FastifyRequest): void {
  const { body } = request;
  if (body === undefined || body === null) return;
  if (typeof body === "object" && !Array.isArray(body) && Object.keys(body).length === 0) return;
  throw invalidRequest("body must be empty: this operation takes no body");
}

/** Routes of `/clusters/{clusterId}/monitoring…`: thin wrappers over `MonitoringService`. */
export function monitoringRoutes(server: HttpServer, monitoring: MonitoringService): void {
  const scopes = { scopes: [clusterScope] };
  const clientChange = (auditType: "u" | "d") => ({
    ...scopes,
    activity: { entity: "monitoring-client", auditType, entityId: pathParameter("uuid") },
  });
  server.get(
    "/clusters/:clusterId/monitoring",
    {
      config: scopes,
      schema: {
        tags: ["Monitoring"],
        summary: "Tell whether the cluster's metrics are protected",
        params: clusterParameters,
        response: {
          200: Type.Object({ active: Type.Boolean() }, { additionalProperties: false }),
          ...standardErrorResponses,
        },
      },
    },
    async (request) => ({
      active: await monitoring.isActive(principalOf(request).organizationId, request.params.clusterId),
    }),
  );
  for (const [method, active] of [
    ["POST", true],
    ["DELETE", false],
  ] as const) {
    server.route({
      method,
      url: "/clusters/:clusterId/monitoring",
      config: {
        ...scopes,
        activity: { entity: "cluster-monitoring", auditType: "u", entityId: pathParameter("clusterId") },
      },
      schema: {
        tags: ["Monitoring"],
        summary: active
          ? "Activate protected metrics: /actuator/prometheus then requires a monitoring client's credentials"
          : "Deactivate protected metrics (the monitoring clients are kept)",
        params: clusterParameters,
        response: { 204: Type.Null(), ...standardErrorResponses },
      },
      handler: async (request, reply) => {
        refuseBody(request);
        await monitoring.setActive(principalOf(request).organizationId, request.params.clusterId, active);
        return reply.code(204).send(null);
      },
    });
  }
  server.get(
    "/clusters/:clusterId/monitoring/clients",
    {
      config: scopes,
      schema: {
        tags: ["Monitoring"],
        summary: "List the cluster's monitoring clients (never with passwords)",
        params: clusterParameters,
        response: { 200: Type.Array(clientSchema), ...standardErrorResponses },
      },
    },
    async (request) => await monitoring.listClients(principalOf(request).organizationId, request.params.clusterId),
  );
  server.post(
    "/clusters/:clusterId/monitoring/clients",
    {
      config: { ...scopes, activity: { entity: "monitoring-client", auditType: "c" } },
      schema: {
        tags: ["Monitoring"],
        summary: "Create a monitoring client with a generated password, shown in this answer only",
        params: clusterParameters,
        body: Type.Object(
          {
            username: Type.String({
              pattern: describedPattern(
                MONITORING_USERNAME_PATTERN,
                "be 1 to 128 letters, digits or . _ @ + -, starting with a letter or digit",
              ),
              description:
                "1 to 128 letters, digits or . _ @ + -, starting with a letter or digit; unique per cluster.",
            }),
          },
          { additionalProperties: false },
        ),
        response: { 200: credentialsSchema, 409: problemSchema, ...standardErrorResponses },
      },
    },
    async (request) => {
      const created = await monitoring.createClient(
        principalOf(request).organizationId,
        request.params.clusterId,
        request.body.username,
      );
      request.activityOutcome = { entityId: created.uuid };
      return created;
    },
  );
  server.post(
    "/clusters/:clusterId/monitoring/clients/:uuid/rotate",
    {
      config: clientChange("u"),
      schema: {
        tags: ["Monitoring"],
        summary: "Replace a monitoring client's password with a new generated one, shown in this answer only",
        params: clientParameters,
        response: { 200: credentialsSchema, ...standardErrorResponses },
      },
    },
    async (request) => {
      refuseBody(request);
      return await monitoring.rotatePassword(
        principalOf(request).organizationId,
        request.params.clusterId,
        request.params.uuid,
      );
    },
  );
  server.delete(
    "/clusters/:clusterId/monitoring/clients/:uuid",
    {
      config: clientChange("d"),
      schema: {
        tags: ["Monitoring"],
        summary: "Delete a monitoring client",
        params: clientParameters,
        response: { 204: Type.Null(), ...standardErrorResponses },
      },
    },
    async (request, reply) => {
      refuseBody(request);
      await monitoring.deleteClient(principalOf(request).organizationId, request.params.clusterId, request.params.uuid);
      return reply.code(204).send(null);
    },
  );
}
