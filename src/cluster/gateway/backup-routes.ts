/**
 * The backup API on the gateway's management port (`cluster` scope): take a backup, list them, watch one, delete one.
 * Routes are thin: they check the request's shape, send it to the coordinator (coordinator-client.ts), whose backup
 * coordinator (broker/backups.ts) applies the rules, and map its answer.
 */
import { type Static, Type } from "typebox";
import { clusterScope } from "../../auth/scopes.js";
import { ServiceError } from "../../http/errors.js";
import { int64Schema, problemSchema } from "../../http/schemas.js";
import type { HttpServer } from "../../http/server.js";
import type { BackupIdOnWire, BackupRefusal, BackupView } from "../broker/protocol.js";
import { encodedCheckpointId } from "../engine/index.js";
import type { CoordinatorClient } from "./coordinator-client.js";

const backupIdSchema = int64Schema({
  minimum: 0,
  description:
    "The backup's id: an integer from 0 to 2^63 − 1 above every earlier backup's id (never reused), exact in the body and in answers beyond 2^53 − 1.",
});

const nullableString = Type.Union([Type.String(), Type.Null()]);
const nullableInteger = Type.Union([Type.Integer(), Type.Null()]);

const backupSchema = Type.Object(
  {
    backupId: backupIdSchema,
    state: Type.Enum(["COMPLETED", "FAILED", "INCOMPLETE", "IN_PROGRESS"], {
      description:
        "COMPLETED when every partition's part is, FAILED when any part failed, INCOMPLETE when a partition has none, otherwise IN_PROGRESS.",
    }),
    failureReason: nullableString,
    partitionCount: Type.Integer(),
    details: Type.Array(
      Type.Object({
        partitionId: Type.Integer(),
        state: Type.Enum(["COMPLETED", "FAILED", "IN_PROGRESS", "MISSING"]),
        brokerId: nullableInteger,
        failureReason: nullableString,
        checkpointPosition: nullableInteger,
        createdAt: nullableString,
        lastUpdated: nullableString,
        brokerVersion: nullableString,
        sizeBytes: Type.Integer(),
      }),
    ),
  },
  { description: "A backup and its partitions' parts." },
);

/** A take's 409 may name the highest id used, as a string of digits (it may exceed 2^53 − 1). */
const conflictSchema = Type.Intersect([
  problemSchema,
  Type.Object({
    highestUsedBackupId: Type.Optional(
      Type.String({
        pattern: "^[0-9]+$",
        description:
          "On a take refused because its id is not above every used one: the highest id used (by a backup, a deleted backup or an attempted take), in digits; take an id above it.",
      }),
    ),
  }),
]);

const errors = {
  400: problemSchema,
  401: problemSchema,
  403: problemSchema,
  404: problemSchema,
  409: conflictSchema,
  502: problemSchema,
  503: problemSchema,
  504: problemSchema,
} as const;

const backupParameters = Type.Object({ backupId: backupIdSchema }, { additionalProperties: false });

/** A validated backup id (see `int64Schema`) as the coordinator takes it. */
function backupIdOnWire(backupId: bigint): BackupIdOnWire {
  return encodedCheckpointId(backupId);
}

/** Maps the coordinator's refusal to its problem document. */
function refusal(answer: BackupRefusal): ServiceError {
  if (answer.outcome === "not-coordinator") {
    return new ServiceError("badGateway", "The coordinator answered the request as if it were not the coordinator.");
  }
  switch (answer.status) {
    case 400:
      return new ServiceError("invalidRequest", answer.detail);
    case 404:
      return new ServiceError("notFound", answer.detail);
    case 409: {
      const used = answer.highestUsedBackupId;
      const valid = typeof used === "bigint" ? used >= 0n : Number.isSafeInteger(used) && (used as number) >= 0;
      return valid
        ? new ServiceError("conflict", answer.detail, { extensions: { highestUsedBackupId: String(used) } })
        : new ServiceError("conflict", answer.detail);
    }
    case 503:
      return new ServiceError("unavailable", answer.detail);
  }
}

/** A backup as the route answers it: its id a bigint, which the answer writes as its digits whatever its size. */
function answered(backup: BackupView): Static<typeof backupSchema> {
  return { ...backup, backupId: BigInt(backup.backupId) };
}

function backupOf(answer: { outcome: "backup"; backup: BackupView } | BackupRefusal): Static<typeof backupSchema> {
  if (answer.outcome === "backup") return answered(answer.backup);
  throw refusal(answer);
}

/** Registers the backup routes on a context guarded by `installAuthentication`. */
export function backupRoutes(server: HttpServer, coordinator: CoordinatorClient): void {
  const config = { scopes: [clusterScope] };

  server.post(
    "/actuator/backups",
    {
      config,
      schema: {
        tags: ["Backups"],
        summary: "Take a backup: a checkpoint through every partition's log, written by each partition's leader",
        description:
          "Answers 202 once every partition's leader has taken the checkpoint; the parts are written in the background. Poll GET /actuator/backups/{backupId} until its state is no longer IN_PROGRESS. 409 when the id is not above every earlier id, while a backup is in progress, or while a cluster change runs.",
        body: Type.Object({ backupId: backupIdSchema }, { additionalProperties: false }),
        response: { 202: backupSchema, ...errors },
      },
    },
    async (request, reply) =>
      reply
        .code(202)
        .send(
          backupOf(await coordinator.send({ type: "backup-take", backupId: backupIdOnWire(request.body.backupId) })),
        ),
  );

  server.get(
    "/actuator/backups",
    {
      config,
      schema: {
        tags: ["Backups"],
        summary: "Every backup, newest first",
        querystring: Type.Object(
          {
            summary: Type.Optional(
              Type.Boolean({
                default: false,
                description:
                  "Show of each backup only the parts that carry its earliest creation and latest update, not every " +
                  "partition's (the full list of a cluster with many partitions is large).",
              }),
            ),
          },
          { additionalProperties: false },
        ),
        response: { 200: Type.Array(backupSchema), ...errors },
      },
    },
    async (request) => {
      const answer = await coordinator.send(
        request.query.summary === true ? { type: "backup-list", summary: true } : { type: "backup-list" },
      );
      if (answer.outcome === "backups") return answer.backups.map(answered);
      throw refusal(answer);
    },
  );

  server.get(
    "/actuator/backups/:backupId",
    {
      config,
      schema: {
        tags: ["Backups"],
        summary: "One backup with the state of each partition's part",
        params: backupParameters,
        response: { 200: backupSchema, ...errors },
      },
    },
    async (request) =>
      backupOf(await coordinator.send({ type: "backup-status", backupId: backupIdOnWire(request.params.backupId) })),
  );

  server.delete(
    "/actuator/backups/:backupId",
    {
      config,
      schema: {
        tags: ["Backups"],
        summary: "Delete a backup from the backup store (409 while it is in progress)",
        params: backupParameters,
        response: { 200: backupSchema, ...errors },
      },
    },
    async (request) =>
      backupOf(await coordinator.send({ type: "backup-delete", backupId: backupIdOnWire(request.params.backupId) })),
  );
}
