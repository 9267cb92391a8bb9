import type { FastifyRequest } from "fastify";
import { Type } from "typebox";
import { principalOf } from "../../../auth/authenticate.js";
import { backupsScope } from "../../../auth/scopes.js";
import { invalidRequest } from "../../../http/errors.js";
import { describedPattern, problemSchema, standardErrorResponses } from "../../../http/schemas.js";
import type { HttpServer } from "../../../http/server.js";
import { pathParameter } from "../activity/recording.js";
import { clusterParameters } from "../cluster-directory.js";
import { MAX_CRON_EXPRESSION_LENGTH } from "./cron.js";
import {
  BACKUP_ID_PATTERN,
  type BackupService,
  backupStatuses,
  MAX_KEPT_BACKUPS,
  MAX_LISTED_RESTORES,
  MIN_SCHEDULE_INTERVAL_MINUTES,
  restoreStates,
} from "./service.js";

const backupParameters = Type.Object(
  {
    clusterId: clusterParameters.properties.clusterId,
    backupId: Type.String({
      pattern: describedPattern(
        BACKUP_ID_PATTERN,
        "be a backup id: a whole number of at most 19 digits, without leading zeros",
      ),
      maxLength: 19,
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

const scheduleSchema = Type.Object(
  {
    cron: Type.String(),
    keep: Type.Integer(),
    nextRun: Type.Union([Type.String({ format: "date-time" }), Type.Null()], {
      description:
        "When the schedule takes its next backup; a time past is a run that is due, which the platform's next check (every 30 s) takes.",
    }),
    lastRun: Type.Union([Type.String({ format: "date-time" }), Type.Null()]),
    lastFailure: Type.Union([Type.String(), Type.Null()], {
      description: "Why the last run could not start a backup; null when it did.",
    }),
    lastFailureAt: Type.Union([Type.String({ format: "date-time" }), Type.Null()], {
      description:
        "When the last run failed; null when it started a backup (or failed before this version recorded the time).",
    }),
    consecutiveFailures: Type.Integer({
      minimum: 0,
      description: "How many runs in a row could not start a backup (scheduled runs and their retries).",
    }),
    retryAt: Type.Union([Type.String({ format: "date-time" }), Type.Null()], {
      description:
        "When a run that could not start a backup is tried again (after 1, 2, 4, 8, then every 15 minutes of the same scheduled run's failures); null when none failed, the retry runs now (`retrying`) or the next scheduled run comes first.",
    }),
    retrying: Type.Boolean({
      description: "Whether a run is trying again right now after the last failure.",
    }),
  },
  { additionalProperties: false },
);

const scheduleBody = Type.Object(
  {
    cron: Type.String({
      minLength: 1,
      maxLength: MAX_CRON_EXPRESSION_LENGTH,
      description: `A 5-field cron expression in UTC (minute hour day-of-month month day-of-week) whose runs are at least ${MIN_SCHEDULE_INTERVAL_MINUTES} minutes apart, e.g. "0 3 * * *".`,
    }),
    keep: Type.Integer({
      minimum: 1,
      maximum: MAX_KEPT_BACKUPS,
      description: "How many complete backups to keep: after each scheduled backup, older backups are deleted.",
    }),
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
  const scheduleActivity = (auditType: "u" | "d") => ({
    ...scopes,
    activity: { entity: "cluster-backup-schedule", auditType, entityId: pathParameter("clusterId") },
  });
  server.put(
    "/clusters/:clusterId/backups/schedule",
    {
      config: scheduleActivity("u"),
      schema: {
        tags: ["Backups"],
        summary: "Set the cluster's backup schedule (replacing any)",
        params: clusterParameters,
        body: scheduleBody,
        response: { 200: scheduleSchema, ...standardErrorResponses },
      },
    },
    async (request) => {
      const { cron, keep } = request.body;
      return await backups.setSchedule(principalOf(request).organizationId, request.params.clusterId, cron, keep);
    },
  );
  server.get(
    "/clusters/:clusterId/backups/schedule",
    {
      config: scopes,
      schema: {
        tags: ["Backups"],
        summary: "Read the cluster's backup schedule and its next run",
        params: clusterParameters,
        response: { 200: scheduleSchema, ...standardErrorResponses },
      },
    },
    async (request) => await backups.getSchedule(principalOf(request).organizationId, request.params.clusterId),
  );
  server.delete(
    "/clusters/:clusterId/backups/schedule",
    {
      config: scheduleActivity("d"),
      schema: {
        tags: ["Backups"],
        summary: "Remove the cluster's backup schedule (its backups stay)",
        params: clusterParameters,
        response: { 204: Type.Null(), ...standardErrorResponses },
      },
    },
    async (request, reply) => {
      refuseBody(request);
      await backups.deleteSchedule(principalOf(request).organizationId, request.params.clusterId);
      return reply.code(204).send(null);
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
          "Answers 202 with the restore PENDING (404 when the cluster holds no backup of that id); GET the same path until it is COMPLETED or FAILED. The cluster keeps its current shape (its brokers, partitions and replication factor as scaling left them); a backup holding another number of partitions fails in VALIDATING, naming both counts. The cluster's current data is kept until the restored cluster is ready, and put back if the restore fails. 409 while another restore runs, a configuration change is pending, a scale request is being handled or a backup is being written; 502 when the cluster's management API does not answer.",
        params: backupParameters,
        response: { 202: restoreSchema, 409: problemSchema, 502: problemSchema, ...standardErrorResponses },
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
  server.get(
    "/clusters/:clusterId/restores",
    {
      config: scopes,
      schema: {
        tags: ["Backups"],
        summary: `List the cluster's latest restores (at most ${MAX_LISTED_RESTORES}), newest first`,
        description: "A restore still PENDING, VALIDATING or IN_PROGRESS is the one running.",
        params: clusterParameters,
        response: { 200: Type.Array(restoreSchema), ...standardErrorResponses },
      },
    },
    async (request) => await backups.listRestores(principalOf(request).organizationId, request.params.clusterId),
  );
}
