import { Type } from "typebox";
import { principalOf } from "../../../auth/authenticate.js";
import { clusterScope } from "../../../auth/scopes.js";
import { scaleResponseSchema } from "../../../client/cluster.js";
import { ServiceError } from "../../../http/errors.js";
import { problemSchema, standardErrorResponses } from "../../../http/schemas.js";
import type { HttpServer } from "../../../http/server.js";
import { clusterStatuses } from "../../provisioner/health-monitor.js";
import { pathParameter } from "../activity/recording.js";
import { visibleNamePattern } from "../client-names.js";
import { clusterParameters } from "./parameters.js";
import { type ClusterScalingService, MAX_BROKER_ID, MAX_BROKERS_PER_CLUSTER, MAX_PARTITIONS } from "./scaling.js";
import { type ClusterService, stageLabels } from "./service.js";

/** Longest cluster name, in characters. */
export const maxClusterNameLength = 100;

/** Longest cluster description, in characters. */
export const maxClusterDescriptionLength = 1_000;

const reference = Type.Object({ uuid: Type.String(), name: Type.String() }, { additionalProperties: false });
const status = Type.Enum(clusterStatuses);

const clusterSchema = Type.Object(
  {
    uuid: Type.String(),
    name: Type.String(),
    description: Type.Optional(Type.String()),
    stageLabel: Type.Optional(Type.Enum(stageLabels)),
    ownerId: Type.String(),
    created: Type.String({ format: "date-time" }),
    autoUpdate: Type.Boolean(),
    channel: reference,
    generation: reference,
    region: reference,
    planType: reference,
    status: Type.Object(
      {
        ready: status,
        gatewayStatus: status,
        reason: Type.Optional(
          Type.String({ description: "Why the cluster is not Healthy, e.g. a broker being restarted after a crash." }),
        ),
      },
      { additionalProperties: false },
    ),
    links: Type.Object(
      {
        gateway: Type.String({ description: "Base URL of the cluster's REST gateway (/v2/...)." }),
        management: Type.String({ description: "Base URL of the cluster's management API (/actuator/...)." }),
        oauth: Type.String({ description: "Token endpoint for the cluster's clients." }),
        console: Type.String(),
      },
      { additionalProperties: false },
    ),
    ipallowlist: Type.Array(Type.Object({ ip: Type.String(), description: Type.String() })),
  },
  { additionalProperties: false },
);

const generationSchema = Type.Object({ uuid: Type.String(), name: Type.String() }, { additionalProperties: false });

const parametersSchema = Type.Object(
  {
    channels: Type.Array(
      Type.Object(
        {
          uuid: Type.String(),
          name: Type.String(),
          defaultGeneration: generationSchema,
          allowedGenerations: Type.Array(generationSchema),
        },
        { additionalProperties: false },
      ),
    ),
    clusterPlanTypes: Type.Array(reference),
    regions: Type.Array(reference),
  },
  { additionalProperties: false },
);

const clusterIdParameters = Type.Object(
  { clusterId: Type.String({ format: "uuid", description: "Id of the cluster." }) },
  { additionalProperties: false },
);

const parameterId = (description: string) => Type.String({ minLength: 1, maxLength: 64, description });
// As a client's name: none of its characters invisible or rearranging what is shown, so that two clusters that look
// alike in the console or the CLI are alike.
const name = Type.String({ minLength: 1, maxLength: maxClusterNameLength, pattern: visibleNamePattern });
const description = Type.String({ maxLength: maxClusterDescriptionLength });

const creationBody = Type.Object(
  {
    name,
    planTypeId: parameterId("A plan type of GET /clusters/parameters."),
    channelId: parameterId("A channel of GET /clusters/parameters."),
    generationId: parameterId("A generation the channel allows."),
    regionId: parameterId("A region of GET /clusters/parameters."),
    description: Type.Optional(description),
    stageLabel: Type.Optional(Type.Enum(stageLabels)),
    autoUpdate: Type.Optional(Type.Boolean()),
  },
  { additionalProperties: false },
);

const changeBody = Type.Object(
  {
    name: Type.Optional(name),
    description: Type.Optional(description),
    stageLabel: Type.Optional(Type.Enum(stageLabels)),
  },
  { additionalProperties: false, minProperties: 1 },
);

const clusterScopes = { scopes: [clusterScope] };

/** Route configuration of a change to the cluster its path names: the scope, and its activity entry. */
const clusterChange = (auditType: "c" | "u" | "d") => ({
  scopes: [clusterScope],
  activity: { entity: "cluster", auditType, entityId: pathParameter("clusterId") },
});

/** Routes of `/clusters` and the cluster lifecycle extras: thin wrappers over `ClusterService`. */
export function clusterRoutes(server: HttpServer, clusters: ClusterService): void {
  server.get(
    "/clusters",
    {
      config: clusterScopes,
      schema: {
        tags: ["Clusters"],
        summary: "List the organization's clusters",
        response: { 200: Type.Array(clusterSchema), ...standardErrorResponses },
      },
    },
    async (request) => await clusters.list(principalOf(request).organizationId),
  );
  server.post(
    "/clusters",
    {
      // The new cluster's id is known once it is created: the handler names it.
      config: { scopes: [clusterScope], activity: { entity: "cluster", auditType: "c" } },
      schema: {
        tags: ["Clusters"],
        summary: "Create a cluster; answers at once while the provisioner starts it (status Creating, then Healthy)",
        body: creationBody,
        response: {
          200: Type.Object({ clusterId: Type.String() }, { additionalProperties: false }),
          409: problemSchema,
          ...standardErrorResponses,
        },
      },
    },
    async (request) => {
      const principal = principalOf(request);
      const created = await clusters.create(principal.organizationId, principal.clientId, request.body);
      request.activityOutcome = { entityId: created.clusterId };
      return created;
    },
  );
  server.get(
    "/clusters/parameters",
    {
      config: clusterScopes,
      schema: {
        tags: ["Clusters"],
        summary: "Plan types, channels with their generations, and regions a cluster can be created with",
        response: { 200: parametersSchema, ...standardErrorResponses },
      },
    },
    async () => clusterParameters(),
  );
  server.get(
    "/clusters/:clusterId",
    {
      config: clusterScopes,
      schema: {
        tags: ["Clusters"],
        summary: "Get a cluster",
        params: clusterIdParameters,
        response: { 200: clusterSchema, ...standardErrorResponses },
      },
    },
    async (request) => await clusters.get(principalOf(request).organizationId, request.params.clusterId),
  );
  server.patch(
    "/clusters/:clusterId",
    {
      config: clusterChange("u"),
      schema: {
        tags: ["Clusters"],
        summary: "Change a cluster's name, description or stage label",
        params: clusterIdParameters,
        body: changeBody,
        response: { 204: Type.Null(), ...standardErrorResponses },
      },
    },
    async (request, reply) => {
      await clusters.update(principalOf(request).organizationId, request.params.clusterId, request.body);
      return reply.code(204).send(null);
    },
  );
  server.delete(
    "/clusters/:clusterId",
    {
      config: clusterChange("d"),
      schema: {
        tags: ["Clusters"],
        summary: "Delete a cluster: stops its processes and removes its data",
        params: clusterIdParameters,
        response: { 204: Type.Null(), 409: problemSchema, ...standardErrorResponses },
      },
    },
    async (request, reply) => {
      await clusters.delete(principalOf(request).organizationId, request.params.clusterId);
      return reply.code(204).send(null);
    },
  );
  server.put(
    "/clusters/:clusterId/wake",
    {
      config: clusterChange("u"),
      schema: {
        tags: ["Clusters"],
        summary: "Start a cluster whose processes do not run (nothing when it runs)",
        params: clusterIdParameters,
        response: { 204: Type.Null(), 409: problemSchema, ...standardErrorResponses },
      },
    },
    async (request, reply) => {
      await clusters.wake(principalOf(request).organizationId, request.params.clusterId);
      return reply.code(204).send(null);
    },
  );
  server.put(
    "/clusters/:clusterId/upgrade",
    {
      config: clusterChange("u"),
      schema: {
        tags: ["Clusters"],
        summary: "Move a cluster to its channel's default generation (400 when it runs that one already)",
        description: "Answers the cluster and the generations it moved from and to.",
        params: clusterIdParameters,
        response: { 200: generationUpgradeSchema, 409: problemSchema, ...standardErrorResponses },
      },
    },
    async (request) => await clusters.upgrade(principalOf(request).organizationId, request.params.clusterId),
  );
  notApplicableRoutes(server);
}

const named = Type.Object({ id: Type.String(), name: Type.String() }, { additionalProperties: false });

/** What an upgrade answers: the cluster and the generations it moved from and to. */
const generationUpgradeSchema = Type.Object(
  { cluster: named, oldGeneration: named, newGeneration: named, orgId: Type.String({ format: "uuid" }) },
  { additionalProperties: false },
);

const brokerId = Type.Integer({ minimum: 0, maximum: MAX_BROKER_ID });
const brokerIds = (description: string) =>
  Type.Array(brokerId, { minItems: 1, maxItems: MAX_BROKERS_PER_CLUSTER, uniqueItems: true, description });

const scaleBody = Type.Object(
  {
    brokers: Type.Optional(
      Type.Object(
        {
          count: Type.Optional(
            Type.Integer({
              minimum: 1,
              maximum: MAX_BROKERS_PER_CLUSTER,
              description: "The cluster's brokers become 0..count-1 (not together with add/remove).",
            }),
          ),
          add: Type.Optional(brokerIds("Ids of brokers to add; the provisioner starts them first.")),
          remove: Type.Optional(
            brokerIds("Ids of brokers to remove; stopped and their data deleted once the change completes."),
          ),
        },
        { additionalProperties: false, minProperties: 1 },
      ),
    ),
    partitions: Type.Optional(
      Type.Object(
        {
          count: Type.Integer({
            minimum: 1,
            maximum: MAX_PARTITIONS,
            description:
              "Partition count: never fewer than today; more only with partition scaling enabled (experimental).",
          }),
          replicationFactor: Type.Integer({ minimum: 1, maximum: MAX_BROKERS_PER_CLUSTER }),
        },
        { additionalProperties: false },
      ),
    ),
  },
  { additionalProperties: false, minProperties: 1 },
);

const scaleQuery = Type.Object(
  {
    dryRun: Type.Optional(
      Type.Boolean({ description: "Plan and simulate only: nothing is started or recorded.", default: false }),
    ),
  },
  { additionalProperties: false },
);

/**
 * `POST /clusters/{clusterId}/scale`: the cluster management API's change request (its PATCH body), with the new
 * brokers' processes started by the platform first. A thin wrapper over `ClusterScalingService`.
 */
export function clusterScalingRoutes(server: HttpServer, scaling: ClusterScalingService): void {
  server.post(
    "/clusters/:clusterId/scale",
    {
      config: {
        scopes: [clusterScope],
        activity: { entity: "cluster-scaling", auditType: "u", entityId: pathParameter("clusterId") },
      },
      schema: {
        tags: ["Clusters"],
        summary: "Change a cluster's brokers, partitions or replication factor, starting the brokers it adds",
        description:
          "The body is the cluster management API's PATCH /actuator/cluster body. With dryRun=true the cluster's plan is answered and nothing is started or recorded. Otherwise the brokers the change adds are started and, once they answer, the change is sent to the cluster; the answer holds its changeId, which GET {management}/actuator/cluster follows (DELETE {management}/actuator/cluster/changes/{changeId} cancels it). Once the change has ended, brokers that are not members of the cluster any more (removed by it, or added by a change that was cancelled) are stopped and their data deleted. 409 while a change is pending or a restore of the cluster runs (a dry run as well); 400 with the cluster's reason when it refuses the change; 502 when its management API fails.",
        params: clusterIdParameters,
        querystring: scaleQuery,
        body: scaleBody,
        response: { 202: scaleResponseSchema, 409: problemSchema, 502: problemSchema, ...standardErrorResponses },
      },
    },
    async (request, reply) => {
      const dryRun = request.query.dryRun === true;
      if (dryRun) request.activityOutcome = { unchanged: true };
      const answer = await scaling.scale(principalOf(request).organizationId, request.params.clusterId, request.body, {
        dryRun,
      });
      return reply.code(202).send(answer);
    },
  );
}

/**
 * Routes of the hosted product that have no meaning for a self-hosted installation: they answer a problem
 * document saying why (never a 404 the reference SDK would take for a missing feature).
 */
function notApplicableRoutes(server: HttpServer): void {
  const notApplicable = (detail: string) => () => {
    throw new ServiceError("notApplicable", detail);
  };
  const schema = (summary: string, params?: typeof clusterIdParameters) => ({
    tags: ["Clusters"],
    summary,
    ...(params === undefined ? {} : { params }),
    response: { 501: problemSchema, ...standardErrorResponses },
  });
  server.get(
    "/meta/ip-ranges",
    // Any scope of the Administration API: the answer holds nothing of the organization.
    { config: { scopes: [] }, schema: schema("Not applicable: the hosted product's egress address ranges") },
    notApplicable(
      "flowplane is self-hosted: its clusters connect from the addresses of the machines you run them on, not from published ranges",
    ),
  );
  const secureConnectivity =
    "secure connectivity (private links into a hosted product's network) does not apply to a self-hosted installation: its clusters run in your own network; use the IP allowlist to restrict who reaches them";
  for (const method of ["GET", "POST", "DELETE"] as const) {
    server.route({
      method,
      url: "/clusters/:clusterId/secure-connectivity",
      // Never recorded (the route always fails), but a route that could change something declares its entry.
      config: method === "GET" ? clusterScopes : clusterChange(method === "POST" ? "c" : "d"),
      schema: schema("Not applicable: secure connectivity of the hosted product", clusterIdParameters),
      handler: notApplicable(secureConnectivity),
    });
  }
}
