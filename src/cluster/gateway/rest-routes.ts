/**
 * The gateway's REST API under `/v2` (spec/gateway.md): topology, message publication and message reads. Routes are
 * thin: they validate with their schemas and hand over to the topology cache and the message router.
 */
import { Type } from "typebox";
import { gatewayRestScopes } from "../../auth/scopes.js";
import { ServiceError } from "../../http/errors.js";
import { problemSchema, standardErrorResponses } from "../../http/schemas.js";
import type { HttpServer } from "../../http/server.js";
import { MESSAGE_LIMITS } from "../engine/index.js";
import { type MessageRouter, RETRY_AFTER_SECONDS } from "./message-router.js";
import type { TopologyCache } from "./topology-cache.js";
import type { TopologyDocument } from "./topology-view.js";

const partitionSchema = Type.Object({
  partitionId: Type.Integer(),
  role: Type.Union([Type.Literal("leader"), Type.Literal("follower"), Type.Literal("inactive")]),
  health: Type.Union([Type.Literal("healthy"), Type.Literal("unhealthy"), Type.Literal("dead")]),
});

const topologySchema = Type.Object({
  brokers: Type.Array(
    Type.Object({
      nodeId: Type.Integer(),
      host: Type.String(),
      port: Type.Integer(),
      version: Type.String(),
      partitions: Type.Array(partitionSchema),
    }),
  ),
  clusterSize: Type.Integer(),
  partitionsCount: Type.Integer(),
  replicationFactor: Type.Integer(),
  gatewayVersion: Type.String(),
  lastCompletedChangeId: Type.String({ description: 'Id of the last completed change, "-1" when none.' }),
});

/**
 * The JSON of each view's topology document, made at its first request: a view serves every request until the next
 * round, and at the replica bound its document is over a megabyte, milliseconds of the event loop to serialize. The
 * view builds the document with the schema's fields only, so `JSON.stringify` writes what the schema would.
 */
const serializedTopologies = new WeakMap<TopologyDocument, string>();

/** The topology document as JSON, serialized once per view. */
function serializedTopology(document: TopologyDocument): string {
  let body = serializedTopologies.get(document);
  if (body === undefined) {
    body = JSON.stringify(document);
    serializedTopologies.set(document, body);
  }
  return body;
}

const publicationBody = Type.Object(
  {
    name: Type.String({ minLength: 1, description: "Name of the message." }),
    correlationKey: Type.Optional(
      Type.String({ description: "Chooses the partition (hashed); without it messages are spread round robin." }),
    ),
    timeToLive: Type.Optional(
      Type.Integer({
        minimum: 0,
        maximum: MESSAGE_LIMITS.maxTimeToLiveMs,
        description: "How long the message stays buffered, in milliseconds (default 0).",
      }),
    ),
    messageId: Type.Optional(
      Type.String({ minLength: 1, description: "Unique per partition while a message with it is buffered." }),
    ),
    variables: Type.Optional(Type.Object({}, { additionalProperties: true, description: "A JSON object." })),
    tenantId: Type.Optional(Type.String({ minLength: 1, description: 'The tenant (default "<default>").' })),
  },
  { additionalProperties: false },
);

const publicationResponse = Type.Object({
  messageKey: Type.String({ description: "The message's key as a decimal string." }),
  tenantId: Type.String(),
});

const messageSchema = Type.Object(
  {
    key: Type.String(),
    partitionId: Type.Integer(),
    name: Type.String(),
    correlationKey: Type.String(),
    timeToLive: Type.Integer({ description: "Milliseconds." }),
    messageId: Type.Optional(Type.String()),
    variables: Type.Object({}, { additionalProperties: true }),
    tenantId: Type.String(),
    publishedAt: Type.String({ format: "date-time" }),
    expiresAt: Type.String({ format: "date-time" }),
  },
  { additionalProperties: false },
);

const messageKeyParameters = Type.Object(
  { messageKey: Type.String({ description: "The key `POST /v2/messages/publication` returned." }) },
  { additionalProperties: false },
);

const overloadResponses = { 502: problemSchema, 503: problemSchema, 504: problemSchema } as const;

/** Registers the `/v2` routes on a context guarded by `installAuthentication`. */
export function gatewayRoutes(server: HttpServer, topology: TopologyCache, router: MessageRouter): void {
  const config = { scopes: gatewayRestScopes };
  server.get(
    "/topology",
    {
      config,
      schema: {
        tags: ["Cluster"],
        summary: "Brokers, their partitions with role and health, and the cluster's sizes",
        response: { 200: topologySchema, ...standardErrorResponses, ...overloadResponses },
      },
    },
    async (_request, reply) => {
      // A view at most one refresh interval old is served; with none yet, ask the brokers now.
      const view = topology.current() ?? (await topology.refreshedSince());
      if (view === undefined) {
        throw new ServiceError("unavailable", "No broker of the cluster has answered the gateway yet.", {
          headers: { "retry-after": String(RETRY_AFTER_SECONDS) },
        });
      }
      const body = serializedTopology(view.document);
      return reply
        .type("application/json; charset=utf-8")
        .serializer(() => body)
        .send(view.document);
    },
  );
  server.post(
    "/messages/publication",
    {
      config,
      schema: {
        tags: ["Messages"],
        summary: "Publish a message; answered once a quorum of its partition committed it",
        body: publicationBody,
        response: { 200: publicationResponse, 409: problemSchema, ...standardErrorResponses, ...overloadResponses },
      },
    },
    async (request) => await router.publish(request.body),
  );
  server.get(
    "/messages/:messageKey",
    {
      config,
      schema: {
        tags: ["Messages"],
        summary: "Read a buffered message by its key (404 once expired)",
        params: messageKeyParameters,
        response: { 200: messageSchema, ...standardErrorResponses, ...overloadResponses },
      },
    },
    async (request) => {
      const message = await router.getMessage(request.params.messageKey);
      return {
        key: message.key,
        partitionId: message.partitionId,
        name: message.name,
        correlationKey: message.correlationKey,
        timeToLive: message.timeToLiveMs,
        ...(message.messageId === undefined ? {} : { messageId: message.messageId }),
        variables: message.variables,
        tenantId: message.tenantId,
        publishedAt: message.publishedAt,
        expiresAt: message.expiresAt,
      };
    },
  );
}
