import type { FastifyRequest } from "fastify";
import { Type } from "typebox";
import { principalOf } from "../../../auth/authenticate.js";
import { backupsScope } from "../../../auth/scopes.js";
import { invalidRequest } from "../../../http/errors.js";
import { problemSchema, standardErrorResponses } from "../../../http/schemas.js";
import type { HttpServer } from "../../../http/server.js";
import { pathParameter } from "../activity/recording.js";
import { clusterParameters } from "../cluster-directory.js";
import { BACKUP_ID_PATTERN, type BackupService, backupStatuses, restoreStates } from "./service.js";

const backupParameters = Type.Object(
  {
    clusterId: clusterParameters.properties.clusterId,
    backupId: Type.String({
      pattern: BACKUP_ID_PATTERN,
      maxLength: 16,
      description: "Id of the backup (its `uuid`): a non-negative integer in decimal.",
    }),
  },
  { additionalProperties: false },
);

const nullableTimestamp = Type.Union([Type.String({ format: "date-time" }), Type.Null()]);

const backupSchema = Type.Object(
  {
    uuid: Type.String({ description: "Id of the backup on the cluster's management API, in decimal." }),
    name: Type.String(),
    created: nullableTimestamp,
    completed: Type.Union([Type.String({ format: "date-time" }), Type.Null()], {
      description: "When the backup finished (Complete or Failed); null while it is in progress.",
    }),
    status: Type.Enum([...backupStatuses]),
  },
  { additionalProperties: false },
);

const restoreSchema = Type.Object(
  {
    uuid: Type.String({ format: "uuid" }),
    backupId: Type.String(),
    state: Type.Enum([...restoreStates], {
      description: "PENDING, then VALIDATING (the backup must be Complete), IN_PROGRESS, and COMPLETED or FAILED.",
    }),
    failureReason: Type.Union([Type.String(), Type.Null()]),
    created: Type.String({ format: "date-time" }),
    updated: Type.String({ format: "date-time" }),
  },
  { additionalProperties: false },
);

/** Problems a call that reaches the cluster may answer besides the standard ones. */
const clusterCallResponses = { 409: problemSchema, 502: problemSchema };

/**
 * Refuses a body on a route that takes none. Such routes declare no body schema so that the empty JSON body the
 * reference SDK may send is accepted; anything but nothing or `{}` is refused, as an unknown field would be.
 */
function refuseBody(request: FastifyRequest): void {
  const { body } = request;
  if (body === undefined || body === null) return;
  if (typeof body === "object" && !Array.isArray(body) && Object.keys(body).length === 0) return;
  throw invalidRequest("body must be empty: this operation takes no body");
}

/** Routes of `/clusters/{clusterId}/backups…`: thin wrappers over `BackupService`. */
export function backupRoutes(server: HttpServer, backups: BackupService): void {
  const scopes = { scopes: [backupsScope] };
  server.get(
    "/clusters/:clusterId/backups",
    {
      config: scopes,
      schema: {
        tags: ["Backups"],
        summary: "List the cluster's backups, newest first",
        params: clusterParameters,
        response: { 200: Type.Array(backupSchema), ...clusterCallResponses, ...standardErrorResponses },
      },
    },
    async (request) => await backups.list(principalOf(request).organizationId, request.params.clusterId),
  );
  server.post(
    "/clusters/:clusterId/backups",
    {
      config: { ...scopes, activity: { entity: "cluster-backup", auditType: "c" } },
      schema: {
        tags: ["Backups"],
        summary: "Start a backup of the cluster (every partition's state at one consistent cut)",
        description: "Answers the backup In progress; list the backups until it is Complete or Failed.",
        params: clusterParameters,
        response: { 200: backupSchema, ...clusterCallResponses, ...standardErrorResponses },
      },
    },
    async (request) => {
      refuseBody(request);
      const backup = await backups.create(principalOf(request).organizationId, request.params.clusterId);
      request.activityOutcome = { entityId: `${request.params.clusterId}/${backup.uuid}` };
      return backup;
    },
  );
  server.delete(
    "/clusters/:clusterId/backups/:backupId",
    {
      config: {
        ...scopes,
        activity: {
          entity: "cluster-backup",
          auditType: "d",
          entityId: (request) => `${pathParameter("clusterId")(request)}/${pathParameter("backupId")(request)}`,
        },
      },
      schema: {
        tags: ["Backups"],
        summary: "Delete a backup from the cluster's backup store",
        params: backupParameters,
        response: { 200: backupSchema, ...clusterCallResponses, ...standardErrorResponses },
      },
    },
    async (request) => {
      refuseBody(request);
      const { clusterId, backupId } = request.params;
      return await backups.delete(principalOf(request).organizationId, clusterId, backupId);
    },
  );
  server.post(
    "/clusters/:clusterId/backups/:backupId/restore",
    {
      config: {
        ...scopes,
        activity: {
          entity: "cluster-restore",
          auditType: "c",
          entityId: (request) => `${pathParameter("clusterId")(request)}/${pathParameter("backupId")(request)}`,
        },
      },
      schema: {
        tags: ["Backups"],
        summary: "Restore the cluster from a backup: stop it, restore every broker, start it",
        description:
          "Answers 202 with the restore PENDING; GET the same path until it is COMPLETED or FAILED. The cluster's current data is kept until the restored cluster is ready, and put back if the restore fails.",
        params: backupParameters,
        response: { 202: restoreSchema, 409: problemSchema, ...standardErrorResponses },
      },
    },
    async (request, reply) => {
      refuseBody(request);
      const { clusterId, backupId } = request.params;
      const restore = await backups.restore(principalOf(request).organizationId, clusterId, backupId);
      return reply.code(202).send(restore);
    },
  );
  server.get(
    "/clusters/:clusterId/backups/:backupId/restore",
    {
      config: scopes,
      schema: {
        tags: ["Backups"],
        summary: "Read the state of the latest restore of the cluster from this backup",
        params: backupParameters,
        response: { 200: restoreSchema, ...standardErrorResponses },
      },
    },
    async (request) => {
      const { clusterId, backupId } = request.params;
      return await backups.restoreState(principalOf(request).organizationId, clusterId, backupId);
    },
  );
}
