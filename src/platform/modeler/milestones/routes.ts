import { Type } from "typebox";
import { principalOf } from "../../../auth/authenticate.js";
import { modelerCreateScope, modelerReadScope, modelerUpdateScope } from "../../../auth/scopes.js";
import { invalidRequest, ServiceError } from "../../../http/errors.js";
import { problemSchema, standardErrorResponses } from "../../../http/schemas.js";
import type { HttpServer } from "../../../http/server.js";
import { fileMetadataSchema, milestoneMetadataSchema } from "../metadata-schemas.js";
import { actorOf } from "../records.js";
import {
  auditFilterProperties,
  auditSortFields,
  identifier,
  idParameters,
  nameFilterSchema,
  nameSchema,
  searchRequestSchema,
} from "../schemas.js";
import type { ModelerServices } from "../services.js";
import { deleteRoute, searchRoute } from "../standard-routes.js";
import { diffLinkLifetimeMs } from "./diff-links.js";

const uuidPattern = "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}";

const comparisonParameters = Type.Object(
  {
    comparison: Type.String({
      pattern: `^${uuidPattern}\\.\\.\\.${uuidPattern}$`,
      description: "Two milestone ids separated by '...': the diff goes from the first to the second.",
    }),
  },
  { additionalProperties: false },
);

const milestoneSearchBody = searchRequestSchema(
  {
    id: Type.Optional(identifier),
    name: Type.Optional(nameFilterSchema),
    fileId: Type.Optional(identifier),
    ...auditFilterProperties,
  },
  ["id", "name", "fileId", ...auditSortFields],
);

/** Splits `a...b` (already checked by the schema) into its two milestone ids. */
function splitComparison(comparison: string): [string, string] {
  const [from, to] = comparison.split("...");
  if (from === undefined || to === undefined) throw invalidRequest("Give two milestone ids separated by '...'.");
  return [from.toLowerCase(), to.toLowerCase()];
}

/** Routes of `/api/v1/milestones` that need a token. */
export function milestoneRoutes(server: HttpServer, services: ModelerServices): void {
  const { milestones, clients } = services;
  server.post(
    "/api/v1/milestones",
    {
      config: { scopes: [modelerCreateScope] },
      schema: {
        tags: ["Milestones"],
        summary: "Freeze a file's current content as a milestone",
        body: Type.Object({ name: nameSchema, fileId: identifier }, { additionalProperties: false }),
        response: { 200: milestoneMetadataSchema, ...standardErrorResponses },
      },
    },
    async (request) => {
      const principal = principalOf(request);
      return await milestones.create(principal.organizationId, await actorOf(principal, clients), request.body);
    },
  );
  server.get(
    "/api/v1/milestones/:id",
    {
      config: { scopes: [modelerReadScope] },
      schema: {
        tags: ["Milestones"],
        summary: "Read a milestone and the content it froze",
        params: idParameters,
        response: {
          200: Type.Object(
            { metadata: milestoneMetadataSchema, content: Type.String() },
            { additionalProperties: false },
          ),
          ...standardErrorResponses,
        },
      },
    },
    async (request) => await milestones.get(principalOf(request).organizationId, request.params.id),
  );
  server.patch(
    "/api/v1/milestones/:id",
    {
      config: { scopes: [modelerUpdateScope] },
      schema: {
        tags: ["Milestones"],
        summary: "Rename a milestone",
        params: idParameters,
        body: Type.Object({ name: nameSchema }, { additionalProperties: false }),
        response: { 200: milestoneMetadataSchema, ...standardErrorResponses },
      },
    },
    async (request) => {
      const principal = principalOf(request);
      const actor = await actorOf(principal, clients);
      return await milestones.rename(principal.organizationId, actor, request.params.id, request.body.name);
    },
  );
  deleteRoute(server, {
    path: "/api/v1/milestones/:id",
    tag: "Milestones",
    summary: "Delete a milestone",
    mayConflict: false,
    remove: (organizationId, id) => milestones.delete(organizationId, id),
  });
  server.post(
    "/api/v1/milestones/:id/restore",
    {
      config: { scopes: [modelerUpdateScope] },
      schema: {
        tags: ["Milestones"],
        summary: "Restore the milestone's content into its file as a new revision",
        params: idParameters,
        response: { 200: fileMetadataSchema, ...standardErrorResponses },
      },
    },
    async (request) => {
      const principal = principalOf(request);
      const actor = await actorOf(principal, clients);
      return await milestones.restore(principal.organizationId, actor, request.params.id);
    },
  );
  searchRoute(server, {
    path: "/api/v1/milestones/search",
    tag: "Milestones",
    summary: "Search milestones",
    body: milestoneSearchBody,
    item: milestoneMetadataSchema,
    search: (organizationId, request) => milestones.search(organizationId, request),
  });
  server.get(
    "/api/v1/milestones/compare/:comparison",
    {
      config: { scopes: [modelerReadScope] },
      schema: {
        tags: ["Milestones"],
        summary: "Get a link to the diff between two milestones",
        description: `The answer's url serves a unified diff (text/plain) from the first milestone's content to the second's. The link needs no token: it is signed, bound to the two milestones, and expires ${diffLinkLifetimeMs / 60_000} minutes after it was issued.`,
        params: comparisonParameters,
        response: {
          200: Type.Object({ url: Type.String({ format: "uri" }) }, { additionalProperties: false }),
          ...standardErrorResponses,
        },
      },
    },
    async (request) => {
      const [from, to] = splitComparison(request.params.comparison);
      return await milestones.compare(principalOf(request).organizationId, from, to);
    },
  );
}

/** The route serving diffs through signed links; registered where no token is required. */
export function milestoneDiffRoutes(server: HttpServer, services: ModelerServices): void {
  const { milestones, diffLinkRateLimiter } = services;
  server.get(
    "/api/v1/milestones/compare/:comparison/diff",
    {
      // Before anything else, so that forged links and links to missing milestones count against the limit too.
      onRequest: async (request) => {
        const decision = await diffLinkRateLimiter.consume(request.ip);
        if (!decision.allowed) {
          throw new ServiceError("tooManyRequests", "Too many diff-link requests from this address; retry later.", {
            headers: { "retry-after": String(decision.retryAfterSeconds) },
          });
        }
      },
      schema: {
        tags: ["Milestones"],
        summary: "Read the unified diff between two milestones through a signed link",
        description:
          "No token: the link from GET /api/v1/milestones/compare/{a}...{b} carries its own authorization (organization, expiry and signature), and expires. A forged or expired link is a 403. Contents that differ in more lines than the platform computes diffs for are a 409. Requests are limited per source address (429 with Retry-After beyond), and a diff waiting for a busy server is a 503 with Retry-After.",
        security: [],
        params: comparisonParameters,
        querystring: Type.Object(
          {
            organization: identifier,
            expires: Type.Integer({ minimum: 0, description: "Expiry of the link, epoch milliseconds." }),
            signature: Type.String({ pattern: "^[A-Za-z0-9_-]{43}$" }),
          },
          { additionalProperties: false },
        ),
        response: {
          // Served as the UTF-8 bytes the diff was cached as, which Fastify sends without serializing.
          200: Type.Unsafe<Buffer>({ type: "string", description: "Unified diff, text/plain; charset=utf-8." }),
          400: problemSchema,
          403: problemSchema,
          404: problemSchema,
          409: problemSchema,
          429: problemSchema,
          503: problemSchema,
        },
      },
    },
    async (request, reply) => {
      const [from, to] = splitComparison(request.params.comparison);
      const diff = await milestones.diffBody(
        {
          organizationId: request.query.organization,
          fromMilestoneId: from,
          toMilestoneId: to,
          expiresAtMs: request.query.expires,
        },
        request.query.signature,
      );
      return reply.type("text/plain; charset=utf-8").send(diff);
    },
  );
}
