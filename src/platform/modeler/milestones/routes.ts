import { Type } from "typebox";
import { principalOf } from "../../../auth/authenticate.js";
import { modelerCreateScope, modelerReadScope, modelerUpdateScope } from "../../../auth/scopes.js";
import { invalidRequest, ServiceError } from "../../../http/errors.js";
import { requestAddress } from "../../../http/request-address.js";
import { describedPattern, problemSchema, standardErrorResponses } from "../../../http/schemas.js";
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
import type { MilestoneNoun } from "./service.js";

const uuidPattern = "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}";

/** The path parameter naming two milestones (or versions, `noun`) to compare. */
function comparisonParameters(noun: MilestoneNoun) {
  return Type.Object(
    {
      comparison: Type.String({
        // One message for both nouns: a pattern's message is registered once, by the pattern.
        pattern: describedPattern(
          `^${uuidPattern}\\.\\.\\.${uuidPattern}$`,
          "be two ids joined by three dots (<id>...<id>)",
        ),
        description: `Two ${noun} ids separated by '...': the diff goes from the first to the second.`,
      }),
    },
    { additionalProperties: false },
  );
}

const milestoneSearchBody = searchRequestSchema(
  {
    id: Type.Optional(identifier),
    name: Type.Optional(nameFilterSchema),
    fileId: Type.Optional(identifier),
    ...auditFilterProperties,
  },
  ["id", "name", "fileId", ...auditSortFields],
);

/** Splits `a...b` (already checked by the schema) into its two ids. */
function splitComparison(comparison: string): [string, string] {
  const [from, to] = comparison.split("...");
  if (from === undefined || to === undefined) throw invalidRequest("Give two ids separated by '...'.");
  return [from.toLowerCase(), to.toLowerCase()];
}

/**
 * One public name of milestones. The reference product's 8.9 API renamed milestones to versions; both names serve
 * the same data through the same service, and differ only where the two APIs differ.
 */
export interface MilestoneApiNaming {
  /** Where the routes live, e.g. `/api/v1/milestones`. */
  basePath: string;
  /** OpenAPI tag of the routes. */
  tag: string;
  /** The resource in route summaries and errors, singular and lower case. */
  noun: MilestoneNoun;
  /**
   * How the compare route answers the diff link: the bare URL as `text/plain` (the 8.8 API, which the reference
   * SDK reads as text) or `{"url": ...}` as JSON (the 8.9 API).
   */
  comparisonAnswer: "plainText" | "json";
  /** Whether creating may leave the name out (the 8.9 API); the creation time is the name then. */
  nameOptional: boolean;
  /**
   * What restoring answers: the file's metadata after the restore (the 8.8 API) or the restored version's own
   * metadata (the 8.9 API, whose SDK also sends `{"version": n}`, which the path's id makes redundant).
   */
  restoreAnswer: "file" | "restored";
}

/** The 8.8 API: `/api/v1/milestones`. */
const milestoneNaming: MilestoneApiNaming = {
  basePath: "/api/v1/milestones",
  tag: "Milestones",
  noun: "milestone",
  comparisonAnswer: "plainText",
  nameOptional: false,
  restoreAnswer: "file",
};

/** Routes of `/api/v1/milestones` that need a token. */
export function milestoneRoutes(server: HttpServer, services: ModelerServices): void {
  milestoneApiRoutes(server, services, milestoneNaming);
}

/** Registers create, get, rename, delete, restore, search and compare of milestones under `naming`'s path. */
export function milestoneApiRoutes(server: HttpServer, services: ModelerServices, naming: MilestoneApiNaming): void {
  const { milestones, clients } = services;
  const { basePath, tag, noun } = naming;
  const linkDescription = `The link needs no token: it is signed, bound to the two ${noun}s, and expires ${diffLinkLifetimeMs / 60_000} minutes after it was issued; it serves a unified diff (text/plain) from the first ${noun}'s content to the second's.`;
  server.post(
    basePath,
    {
      config: { scopes: [modelerCreateScope] },
      schema: {
        tags: [tag],
        summary: `Freeze a file's current content as a ${noun}`,
        ...(naming.nameOptional ? { description: "Without a name, the creation time (ISO 8601) names it." } : {}),
        body: Type.Object(
          { name: naming.nameOptional ? Type.Optional(nameSchema) : nameSchema, fileId: identifier },
          { additionalProperties: false },
        ),
        response: { 200: milestoneMetadataSchema, ...standardErrorResponses },
      },
    },
    async (request) => {
      const principal = principalOf(request);
      return await milestones.create(principal.organizationId, await actorOf(principal, clients), request.body);
    },
  );
  server.get(
    `${basePath}/:id`,
    {
      config: { scopes: [modelerReadScope] },
      schema: {
        tags: [tag],
        summary: `Read a ${noun} and the content it froze`,
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
    async (request) => await milestones.get(principalOf(request).organizationId, request.params.id, noun),
  );
  server.patch(
    `${basePath}/:id`,
    {
      config: { scopes: [modelerUpdateScope] },
      schema: {
        tags: [tag],
        summary: `Rename a ${noun}`,
        params: idParameters,
        body: Type.Object({ name: nameSchema }, { additionalProperties: false }),
        response: { 200: milestoneMetadataSchema, ...standardErrorResponses },
      },
    },
    async (request) => {
      const principal = principalOf(request);
      const actor = await actorOf(principal, clients);
      return await milestones.rename(principal.organizationId, actor, request.params.id, request.body.name, noun);
    },
  );
  deleteRoute(server, {
    path: `${basePath}/:id`,
    tag,
    summary: `Delete a ${noun}`,
    mayConflict: false,
    remove: (organizationId, id) => milestones.delete(organizationId, id, noun),
  });
  if (naming.restoreAnswer === "file") {
    server.post(
      `${basePath}/:id/restore`,
      {
        config: { scopes: [modelerUpdateScope] },
        schema: {
          tags: [tag],
          summary: `Restore the ${noun}'s content into its file as a new revision`,
          description: "Answers the file's metadata after the restore.",
          params: idParameters,
          response: { 200: fileMetadataSchema, ...standardErrorResponses },
        },
      },
      async (request) => {
        const principal = principalOf(request);
        const actor = await actorOf(principal, clients);
        return (await milestones.restore(principal.organizationId, actor, request.params.id, noun)).file;
      },
    );
  } else {
    server.post(
      `${basePath}/:id/restore`,
      {
        config: { scopes: [modelerUpdateScope], bodyOptional: true },
        schema: {
          tags: [tag],
          summary: `Restore the ${noun}'s content into its file as a new revision`,
          description: `Answers the restored ${noun}'s metadata. A body is optional; \`version\`, which the reference SDK sends, is accepted and not needed, since the path names the ${noun}.`,
          params: idParameters,
          body: Type.Object(
            { version: Type.Optional(Type.Integer({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER })) },
            { additionalProperties: false },
          ),
          response: { 200: milestoneMetadataSchema, ...standardErrorResponses },
        },
      },
      async (request) => {
        const principal = principalOf(request);
        const actor = await actorOf(principal, clients);
        return (await milestones.restore(principal.organizationId, actor, request.params.id, noun)).milestone;
      },
    );
  }
  searchRoute(server, {
    path: `${basePath}/search`,
    tag,
    summary: `Search ${noun}s`,
    body: milestoneSearchBody,
    item: milestoneMetadataSchema,
    search: (organizationId, request) => milestones.search(organizationId, request),
  });
  const linkAnswer =
    naming.comparisonAnswer === "json"
      ? {
          description: `Answers {"url": ...}. ${linkDescription}`,
          response: Type.Object({ url: Type.String({ format: "uri" }) }, { additionalProperties: false }),
        }
      : {
          description: `Answers the link itself as text/plain. ${linkDescription}`,
          response: {
            description: "The link to the diff.",
            content: { "text/plain": { schema: Type.String({ format: "uri" }) } },
          },
        };
  server.get(
    `${basePath}/compare/:comparison`,
    {
      config: { scopes: [modelerReadScope] },
      schema: {
        tags: [tag],
        summary: `Get a link to the diff between two ${noun}s`,
        description: linkAnswer.description,
        params: comparisonParameters(noun),
        response: { 200: linkAnswer.response, ...standardErrorResponses },
      },
    },
    async (request, reply) => {
      const [from, to] = splitComparison(request.params.comparison);
      const link = await milestones.compare(principalOf(request).organizationId, from, to, noun);
      if (naming.comparisonAnswer === "json") return link;
      return reply.type("text/plain; charset=utf-8").send(link.url);
    },
  );
}

/**
 * The route serving diffs through signed links under one API's base path (its compare route hands out links to it, and
 * its noun labels the diff's sides); registered where no token is required.
 */
export function milestoneDiffRoutes(
  server: HttpServer,
  services: ModelerServices,
  naming: MilestoneApiNaming = milestoneNaming,
): void {
  const { milestones, diffLinkRateLimiter } = services;
  const { basePath, noun, tag } = naming;
  server.get(
    `${basePath}/compare/:comparison/diff`,
    {
      // Before anything else, so that forged links and links to missing milestones count against the limit too.
      onRequest: async (request) => {
        const decision = await diffLinkRateLimiter.consume(requestAddress(request));
        if (!decision.allowed) {
          throw new ServiceError("tooManyRequests", "Too many diff-link requests from this address; retry later.", {
            headers: { "retry-after": String(decision.retryAfterSeconds) },
          });
        }
      },
      schema: {
        tags: [tag],
        summary: `Read the unified diff between two ${noun}s through a signed link`,
        description: `No token: the link from GET ${basePath}/compare/{a}...{b} carries its own authorization (organization, expiry and signature), and expires. A forged or expired link is a 403. Contents that differ in more lines than the platform computes diffs for are a 409. Requests are limited per source address (429 with Retry-After beyond), and a diff waiting for a busy server is a 503 with Retry-After.`,
        security: [],
        params: comparisonParameters(noun),
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
        noun,
      );
      return reply.type("text/plain; charset=utf-8").send(diff);
    },
  );
}
