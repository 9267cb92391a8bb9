import { Type } from "typebox";
import { principalOf } from "../../../auth/authenticate.js";
import { invalidRequest } from "../../../http/errors.js";
import { describedPattern, standardErrorResponses } from "../../../http/schemas.js";
import type { HttpServer } from "../../../http/server.js";
import { csvDocument } from "./csv.js";
import { type ActivityEntry, type ActivityService, defaultActivityLimit, maxActivityLimit } from "./service.js";

const entrySchema = Type.Object(
  {
    service: Type.String({ description: "The API the change went through." }),
    orgId: Type.String({ format: "uuid" }),
    auditType: Type.Union([Type.Literal("c"), Type.Literal("r"), Type.Literal("u"), Type.Literal("d")], {
      description: "Created, read, updated or deleted.",
    }),
    entity: Type.String({ description: "The kind of resource changed, e.g. member." }),
    entityId: Type.String({ description: "Which resource: its id or name (never a secret value)." }),
    userId: Type.String({ description: "The API client that made the change." }),
    timestamp: Type.Integer({
      minimum: 0,
      description: "When the change was made, in milliseconds since 1970-01-01 UTC.",
    }),
    audit: Type.String({ description: "The change in words: what was done to which resource." }),
  },
  { additionalProperties: false },
);

const activityQuery = Type.Object(
  {
    limit: Type.Integer({
      minimum: 1,
      maximum: maxActivityLimit,
      default: defaultActivityLimit,
      description: `How many entries to answer, newest first (at most ${maxActivityLimit}).`,
    }),
    since: Type.Optional(
      Type.Union(
        [
          Type.String({ format: "date-time" }),
          Type.String({
            pattern: describedPattern("^[0-9]{1,16}$", "be milliseconds since 1970 (at most 16 digits)"),
            description: "Milliseconds since 1970-01-01 UTC.",
          }),
        ],
        {
          description:
            "Only entries recorded at or after this instant: an ISO 8601 date-time, or milliseconds since 1970 as entries carry them.",
        },
      ),
    ),
  },
  { additionalProperties: false },
);

/** The columns of the CSV answer, in the order of the JSON answer's fields. */
const csvColumns = ["service", "orgId", "auditType", "entity", "entityId", "userId", "timestamp", "audit"] as const;

/** Reads `since` (a date-time or a count of milliseconds, by the schema) as an instant. */
function sinceInstant(since: string | undefined): Date | undefined {
  if (since === undefined) return undefined;
  const instant = new Date(/^[0-9]+$/.test(since) ? Number(since) : since);
  if (Number.isNaN(instant.getTime())) throw invalidRequest("querystring/since is not an instant that can be read.");
  return instant;
}

/** Routes of `/activity`: any valid token of the organization reads its own entries. */
export function activityRoutes(server: HttpServer, activity: ActivityService): void {
  const read = async (organizationId: string, query: { limit: number; since?: string }): Promise<ActivityEntry[]> => {
    const since = sinceInstant(query.since);
    return await activity.list(organizationId, { limit: query.limit, ...(since === undefined ? {} : { since }) });
  };
  server.get(
    "/activity/json",
    {
      schema: {
        tags: ["Activity"],
        summary: "Changes made through this API, newest first",
        description: "Any valid token of the organization may read them, whatever its scopes.",
        querystring: activityQuery,
        response: { 200: Type.Array(entrySchema), ...standardErrorResponses },
      },
    },
    async (request) => await read(principalOf(request).organizationId, request.query),
  );
  server.get(
    "/activity/csv",
    {
      schema: {
        tags: ["Activity"],
        summary: "Changes made through this API, newest first, as CSV",
        description: `RFC 4180 CSV with a header row (${csvColumns.join(",")}) and CRLF line ends. A value starting with =, +, -, @, a tab or a CR is written with a leading ' so that spreadsheets take it as text.`,
        querystring: activityQuery,
        response: {
          200: { description: "The entries as CSV.", content: { "text/csv": { schema: Type.String() } } },
          ...standardErrorResponses,
        },
      },
    },
    async (request, reply) => {
      const entries = await read(principalOf(request).organizationId, request.query);
      const csv = csvDocument(
        csvColumns,
        entries.map((entry) => csvColumns.map((column) => String(entry[column]))),
      );
      return reply.type("text/csv; charset=utf-8; header=present").send(csv);
    },
  );
}
