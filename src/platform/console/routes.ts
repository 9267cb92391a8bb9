import type { FastifyReply, FastifyRequest } from "fastify";
import { Type } from "typebox";
import { notFound } from "../../http/errors.js";
import type { HttpServer } from "../../http/server.js";
import { assetNamePattern, type ConsoleFile, type ConsoleFiles } from "./files.js";

/** Where the console's pages live; every path below it that is not an asset is a page of the single-page app. */
export const consolePath = "/console/";

/**
 * The console's Content-Security-Policy: scripts, styles and every other resource from the platform itself only,
 * no inline scripts or styles, no framing, and forms that can only post back to the platform. `connectSources` adds
 * where the console's own requests may go beyond the platform (the clusters' gateways and management ports).
 */
export function consoleContentSecurityPolicy(connectSources: readonly string[]): string {
  return [
    "default-src 'none'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self'",
    "font-src 'self'",
    ["connect-src 'self'", ...connectSources].join(" "),
    "base-uri 'none'",
    "form-action 'self'",
    "frame-ancestors 'none'",
  ].join("; ");
}

/** Hashed assets never change under their name, so browsers may keep them for a year without asking again. */
const assetCacheControl = "public, max-age=31536000, immutable";

const assetParameters = Type.Object(
  { name: Type.String({ pattern: assetNamePattern, maxLength: 200, description: "File name of the asset." }) },
  { additionalProperties: false },
);

/** Whether the request asks for a page rather than JSON: browsers list text/html, API clients do not. */
export function prefersPage(request: FastifyRequest): boolean {
  const accept = request.headers.accept ?? "";
  return accept.split(",").some((range) => range.trim().toLowerCase().startsWith("text/html"));
}

/** An entity tag of a list, weak or strong; the group is the quoted opaque tag, which may itself hold commas. */
const entityTag = /(?:W\/)?("[^"]*")/g;

/**
 * Whether `If-None-Match` names the file's current representation: `*`, or a list holding its tag. The comparison is
 * weak (RFC 9110 §13.1.2 and §13.1.3), so `W/"tag"` matches the strong `"tag"` the platform sends.
 */
function notModified(request: FastifyRequest, file: ConsoleFile): boolean {
  const condition = request.headers["if-none-match"];
  if (condition === undefined) return false;
  if (condition.trim() === "*") return true;
  for (const [, opaqueTag] of condition.matchAll(entityTag)) if (opaqueTag === file.etag) return true;
  return false;
}

/** Answers the console's index page: never cached without asking, so a new build is picked up at once. */
export async function sendConsoleIndex(
  request: FastifyRequest,
  reply: FastifyReply,
  files: ConsoleFiles,
  connectSources: readonly string[],
): Promise<FastifyReply> {
  reply
    .header("cache-control", "no-cache")
    .header("etag", files.index.etag)
    .header("content-security-policy", consoleContentSecurityPolicy(connectSources))
    .header("x-content-type-options", "nosniff")
    .header("x-frame-options", "DENY")
    .header("referrer-policy", "no-referrer")
    .header("cross-origin-opener-policy", "same-origin");
  if (notModified(request, files.index)) return reply.code(304).send();
  return reply.type(files.index.contentType).send(files.index.body);
}

/**
 * Routes of the web console: `/console/assets/{name}` serves the built files (from memory), and `/console/` and every
 * other path below it answer the index page, where the console's own router takes over.
 */
export function consoleRoutes(server: HttpServer, files: ConsoleFiles, connectSources: readonly string[]): void {
  // The router ignores trailing slashes, so this one route also answers `/console/` itself.
  server.get("/console", { schema: { hide: true } }, async (request, reply) => {
    return await sendConsoleIndex(request, reply, files, connectSources);
  });
  server.get(`${consolePath}*`, { schema: { hide: true } }, async (request, reply) => {
    const path = (request.params as { "*": string })["*"];
    if (path.startsWith("assets/")) throw notFound("Console asset", path.slice("assets/".length));
    return await sendConsoleIndex(request, reply, files, connectSources);
  });
  server.get(
    `${consolePath}assets/:name`,
    { schema: { hide: true, params: assetParameters } },
    async (request, reply) => {
      const { name } = request.params;
      const file = files.assets.get(name);
      if (file === undefined) throw notFound("Console asset", name);
      reply
        .header("cache-control", assetCacheControl)
        .header("etag", file.etag)
        .header("x-content-type-options", "nosniff");
      if (notModified(request, file)) return reply.code(304).send();
      return reply.type(file.contentType).send(file.body);
    },
  );
}
