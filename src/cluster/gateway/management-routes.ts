/**
 * The cluster management API on the gateway's management port (spec/cluster-management.md, endpoints 4–6 and the
 * single-operation routes): change the brokers, partitions and replication factor of the running cluster, watch
 * the change, cancel it. Routes are thin: they check the shape of the request, send it to the coordinator
 * (coordinator-client.ts), which plans against its own configuration, and map the answer. The monitoring response
 * adds, for the operation running now, the progress its broker reports (attempts, last error, bytes, time left).
 */
import { type Static, Type } from "typebox";
import { clusterScope } from "../../auth/scopes.js";
import { ServiceError } from "../../http/errors.js";
import { problemSchema } from "../../http/schemas.js";
import type { HttpServer } from "../../http/server.js";
import type {
  ClusterChangeCommand,
  ClusterChangeResponse,
  ClusterStatusResponse,
  OperationProgress,
} from "../broker/protocol.js";
import { decodeConfiguration, MAX_BROKER_ID, MAX_PARTITION_COUNT, toConfigurationDocument } from "../topology/index.js";
import type { CoordinatorClient } from "./coordinator-client.js";
import type { TopologyCache } from "./topology-cache.js";
import type { TopologyView } from "./topology-view.js";

/*
 * Every number of a request is bounded here, so that the coordinator is handed only what it can plan (it checks again
 * and names what is wrong): a broker count became a list of that many ids, and a billion of them took the broker's
 * memory. Numbers the bounds leave to the planner (a negative id in the broker list, a replication factor above the
 * broker count) get its clearer reasons.
 */
/** Most brokers a cluster can have: ids 0..MAX_BROKER_ID. */
const MAX_BROKERS = MAX_BROKER_ID + 1;
/** Highest election priority a replica may be given (a 32-bit integer, as clients of the reference product send). */
const MAX_PRIORITY = 2 ** 31 - 1;

const brokerIdSchema = Type.Integer({ minimum: 0, maximum: MAX_BROKER_ID, description: "A broker id (0, 1, 2, …)." });
const partitionIdSchema = Type.Integer({
  minimum: 1,
  maximum: MAX_PARTITION_COUNT,
  description: "A partition id (from 1).",
});
const replicationFactorSchema = Type.Integer({ minimum: 1, maximum: MAX_BROKERS });
const brokerIdListSchema = (description: string) =>
  Type.Array(Type.Integer({ minimum: -MAX_BROKERS, maximum: MAX_BROKER_ID }), { maxItems: MAX_BROKERS, description });

const dryRunQuery = {
  dryRun: Type.Optional(Type.Boolean({ default: false, description: "Plan and simulate the change, record nothing." })),
};
const forceQuery = {
  force: Type.Optional(
    Type.Boolean({
      default: false,
      description:
        "Remove brokers that are gone for good without moving their partitions (partitions keep fewer replicas; data only they held is lost).",
    }),
  ),
};

const operationSchema = Type.Object(
  {
    operation: Type.String(),
    brokerId: Type.Integer(),
    partitionId: Type.Optional(Type.Integer()),
    priority: Type.Optional(Type.Integer()),
    brokers: Type.Optional(Type.Array(Type.Integer())),
  },
  { additionalProperties: true },
);
const brokerEntrySchema = Type.Object({}, { additionalProperties: true, description: "A broker entry of the spec." });

const scaleResponseSchema = Type.Object({
  changeId: Type.Integer({ description: "Poll GET /actuator/cluster until lastChange has this id." }),
  currentTopology: Type.Array(brokerEntrySchema),
  plannedChanges: Type.Array(operationSchema),
  expectedTopology: Type.Array(brokerEntrySchema),
});

const monitoringResponseSchema = Type.Object(
  {
    version: Type.Integer(),
    brokers: Type.Array(brokerEntrySchema),
    lastChange: Type.Optional(Type.Object({}, { additionalProperties: true })),
    earlierChanges: Type.Optional(
      Type.Array(Type.Object({}, { additionalProperties: true }), {
        description: "The changes that ended before lastChange, newest first (at most 9).",
      }),
    ),
    pendingChange: Type.Optional(
      Type.Object({}, { additionalProperties: true, description: "Present while a change runs, with its progress." }),
    ),
    routing: Type.Object({}, { additionalProperties: true }),
    changesBlockedBy: Type.Optional(
      Type.String({ description: "Present while a backup is in progress: no change starts until it ends." }),
    ),
  },
  { additionalProperties: true },
);

const changeErrors = {
  400: problemSchema,
  401: problemSchema,
  403: problemSchema,
  409: problemSchema,
  502: problemSchema,
  503: problemSchema,
  504: problemSchema,
} as const;

const patchBodySchema = Type.Object(
  {
    brokers: Type.Optional(
      Type.Object(
        {
          add: Type.Optional(brokerIdListSchema("Broker ids to add.")),
          remove: Type.Optional(brokerIdListSchema("Broker ids to remove.")),
          count: Type.Optional(
            Type.Integer({
              minimum: 0,
              maximum: MAX_BROKERS,
              description: "The new number of brokers: ids 0..count-1.",
            }),
          ),
        },
        { additionalProperties: false },
      ),
    ),
    partitions: Type.Optional(
      Type.Object(
        {
          count: Type.Integer({
            minimum: 1,
            maximum: MAX_PARTITION_COUNT,
            description: "The new partition count (experimental; never lower than today's).",
          }),
          replicationFactor: replicationFactorSchema,
        },
        { additionalProperties: false },
      ),
    ),
  },
  { additionalProperties: false },
);

/** Maps the coordinator's refusal to its problem document. */
function refusal(answer: { status: 400 | 404 | 409; detail: string }): ServiceError {
  switch (answer.status) {
    case 400:
      return new ServiceError("invalidRequest", answer.detail);
    case 404:
      return new ServiceError("notFound", answer.detail);
    case 409:
      return new ServiceError("conflict", answer.detail);
  }
}

/**
 * The monitoring response: the coordinator's configuration as the spec's document, and with the running operation
 * the progress its broker reported in the gateway's latest topology round, or, when that broker did not answer the
 * round it was asked in, `waitingFor` saying so (a change stalled on a broker cut off by the network showed nothing
 * for 37 s).
 */
function monitoringDocument(
  answer: ClusterStatusResponse,
  view: TopologyView | undefined,
): Static<typeof monitoringResponseSchema> {
  const progress = view?.changeProgress ?? new Map<number, OperationProgress>();
  if (answer.outcome !== "status") {
    if (answer.outcome === "refused") throw refusal(answer);
    throw new ServiceError("badGateway", "The coordinator answered the request as if it were not the coordinator.");
  }
  const configurationDocument = toConfigurationDocument(decodeConfiguration(answer.configuration));
  const blocking = answer.blockingBackup ?? null;
  // Said only while it holds: a backup in progress keeps any change from starting (409).
  const document = blocking === null ? configurationDocument : { ...configurationDocument, changesBlockedBy: blocking };
  const pending = document.pendingChange;
  if (pending === undefined) return document;
  const running = pending.pending[0];
  const report = [...progress.values()].find(
    (candidate) =>
      candidate.changeId === pending.id &&
      running !== undefined &&
      candidate.operation.operation === running.operation &&
      candidate.operation.brokerId === running.brokerId &&
      candidate.operation.partitionId === running.partitionId,
  );
  if (report === undefined) {
    // Only a broker the round asked and did not hear from: one just added is asked from the next round on.
    if (running === undefined || view === undefined || !view.silent.has(running.brokerId)) return document;
    const waitingFor =
      `broker ${running.brokerId}, which applies the running operation ${running.operation}, does not answer this ` +
      `gateway; the change goes on once it is reachable again, or DELETE /actuator/cluster/changes/${pending.id} ` +
      "cancels it";
    return { ...document, pendingChange: { ...pending, waitingFor } };
  }
  const { changeId: _changeId, ...shown } = report;
  return { ...document, pendingChange: { ...pending, progress: shown } };
}

function plannedChange(answer: ClusterChangeResponse): Static<typeof scaleResponseSchema> {
  if (answer.outcome === "planned") return answer.change;
  if (answer.outcome === "refused") throw refusal(answer);
  throw new ServiceError("badGateway", "The coordinator answered the request as if it were not the coordinator.");
}

/** Registers the management API routes on a context guarded by `installAuthentication`. */
export function managementRoutes(server: HttpServer, coordinator: CoordinatorClient, topology: TopologyCache): void {
  const config = { scopes: [clusterScope] };
  const change = async (
    command: ClusterChangeCommand,
    dryRun: boolean | undefined,
  ): Promise<Static<typeof scaleResponseSchema>> =>
    plannedChange(await coordinator.send({ type: "cluster-change", command, dryRun: dryRun ?? false }));

  server.post(
    "/actuator/cluster/brokers",
    {
      config,
      schema: {
        tags: ["Cluster changes"],
        summary: "Scale to exactly these brokers (endpoint 4)",
        description:
          "The body lists ALL broker ids of the final cluster (integers or digit strings). With force=true it lists the brokers to keep and the others are removed without moving their partitions.",
        body: Type.Array(
          // Items are checked by the planner, which names the item and why.
          Type.Union([Type.Integer(), Type.String({ maxLength: 16 })]),
          { maxItems: MAX_BROKERS, description: "Every broker id of the final cluster." },
        ),
        querystring: Type.Object(
          {
            ...dryRunQuery,
            ...forceQuery,
            replicationFactor: Type.Optional(
              Type.Integer({
                minimum: 1,
                maximum: MAX_BROKERS,
                description: "Replicas per partition after the change (default: today's smallest).",
              }),
            ),
          },
          { additionalProperties: false },
        ),
        response: { 202: scaleResponseSchema, ...changeErrors },
      },
    },
    async (request, reply) => {
      const { dryRun, force, replicationFactor } = request.query;
      const body = await change(
        {
          kind: "brokers",
          body: request.body,
          force: force ?? false,
          ...(replicationFactor === undefined ? {} : { replicationFactor }),
        },
        dryRun,
      );
      return reply.code(202).send(body);
    },
  );

  server.patch(
    "/actuator/cluster",
    {
      config,
      schema: {
        tags: ["Cluster changes"],
        summary: "Add or remove brokers, change the partition count or replication factor (endpoint 5)",
        body: patchBodySchema,
        querystring: Type.Object({ ...dryRunQuery, ...forceQuery }, { additionalProperties: false }),
        response: { 202: scaleResponseSchema, ...changeErrors },
      },
    },
    async (request, reply) => {
      const { dryRun, force } = request.query;
      return reply.code(202).send(await change({ kind: "patch", body: request.body, force: force ?? false }, dryRun));
    },
  );

  server.get(
    "/actuator/cluster",
    {
      config,
      schema: {
        tags: ["Cluster changes"],
        summary: "The cluster configuration, the last change and the running one with its progress (endpoint 6)",
        response: {
          200: monitoringResponseSchema,
          401: problemSchema,
          403: problemSchema,
          502: problemSchema,
          503: problemSchema,
          504: problemSchema,
        },
      },
    },
    async () => monitoringDocument(await coordinator.send({ type: "cluster-status" }), topology.current()),
  );

  const dryRunOnly = Type.Object(dryRunQuery, { additionalProperties: false });
  const brokerParameters = Type.Object({ brokerId: brokerIdSchema }, { additionalProperties: false });
  server.post(
    "/actuator/cluster/brokers/:brokerId",
    {
      config,
      schema: {
        tags: ["Cluster changes"],
        summary: "Add one broker (it hosts nothing until partitions join it)",
        params: brokerParameters,
        querystring: dryRunOnly,
        response: { 202: scaleResponseSchema, ...changeErrors },
      },
    },
    async (request, reply) =>
      reply
        .code(202)
        .send(await change({ kind: "add-broker", brokerId: request.params.brokerId }, request.query.dryRun)),
  );
  server.delete(
    "/actuator/cluster/brokers/:brokerId",
    {
      config,
      schema: {
        tags: ["Cluster changes"],
        summary: "Remove one broker (400 while it still hosts partitions)",
        params: brokerParameters,
        querystring: dryRunOnly,
        response: { 202: scaleResponseSchema, ...changeErrors },
      },
    },
    async (request, reply) =>
      reply
        .code(202)
        .send(await change({ kind: "remove-broker", brokerId: request.params.brokerId }, request.query.dryRun)),
  );

  const replicaParameters = Type.Object(
    { brokerId: brokerIdSchema, partitionId: partitionIdSchema },
    { additionalProperties: false },
  );
  const priorityBody = Type.Object(
    {
      priority: Type.Integer({
        minimum: 1,
        maximum: MAX_PRIORITY,
        description: "Election priority of the new replica (≥ 1).",
      }),
    },
    { additionalProperties: false },
  );
  for (const path of [
    "/actuator/cluster/brokers/:brokerId/partitions/:partitionId",
    "/actuator/cluster/partitions/:partitionId/brokers/:brokerId",
  ]) {
    server.post(
      path,
      {
        config,
        schema: {
          tags: ["Cluster changes"],
          summary: "A replica of the partition joins the broker",
          params: replicaParameters,
          body: priorityBody,
          querystring: dryRunOnly,
          response: { 202: scaleResponseSchema, ...changeErrors },
        },
      },
      async (request, reply) => {
        const { brokerId, partitionId } = request.params;
        const command: ClusterChangeCommand = { kind: "join", brokerId, partitionId, priority: request.body.priority };
        return reply.code(202).send(await change(command, request.query.dryRun));
      },
    );
    server.delete(
      path,
      {
        config,
        schema: {
          tags: ["Cluster changes"],
          summary: "The broker's replica of the partition leaves (its data is deleted)",
          params: replicaParameters,
          querystring: dryRunOnly,
          response: { 202: scaleResponseSchema, ...changeErrors },
        },
      },
      async (request, reply) => {
        const { brokerId, partitionId } = request.params;
        return reply.code(202).send(await change({ kind: "leave", brokerId, partitionId }, request.query.dryRun));
      },
    );
  }

  server.delete(
    "/actuator/cluster/changes/:changeId",
    {
      config,
      schema: {
        tags: ["Cluster changes"],
        summary: "Cancel the running change (operations already applied stay applied)",
        params: Type.Object({ changeId: Type.Integer({ minimum: 1 }) }, { additionalProperties: false }),
        response: {
          200: monitoringResponseSchema,
          401: problemSchema,
          403: problemSchema,
          404: problemSchema,
          409: problemSchema,
          502: problemSchema,
          503: problemSchema,
          504: problemSchema,
        },
      },
    },
    async (request) =>
      monitoringDocument(
        await coordinator.send({ type: "cluster-cancel", changeId: request.params.changeId }),
        topology.current(),
      ),
  );
}
