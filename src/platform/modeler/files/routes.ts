import type { FastifyReply, FastifyRequest } from "fastify";
import { Type } from "typebox";
import { principalOf } from "../../../auth/authenticate.js";
import { modelerCreateScope, modelerReadScope, modelerUpdateScope } from "../../../auth/scopes.js";
import { problemSchema, standardErrorResponses } from "../../../http/schemas.js";
import type { HttpServer } from "../../../http/server.js";
import { maximumContentBytes } from "../content.js";
import { fileMetadataSchema, fileTypeSchema } from "../metadata-schemas.js";
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

const folderSchema = Type.Union([identifier, Type.Null()], {
  description: "Folder to place it in; null (or absent with projectId) for the project's top level.",
});

const contentSchema = Type.String({
  description: `The file's content, at most ${maximumContentBytes} bytes (10 MiB) as UTF-8: BPMN or DMN XML with a Definitions root, or a JSON object (serialized) for forms and connector templates. Stored and returned byte for byte.`,
});

const fileSearchBody = searchRequestSchema(
  {
    id: Type.Optional(identifier),
    name: Type.Optional(nameFilterSchema),
    projectId: Type.Optional(identifier),
    folderId: Type.Optional(folderSchema),
    type: Type.Optional(fileTypeSchema),
    revision: Type.Optional(Type.Integer({ minimum: 1 })),
    ...auditFilterProperties,
  },
  ["id", "name", "projectId", "type", "revision", ...auditSortFields],
);

/** Options of `fileRoutes`. */
export interface FileRouteOptions {
  /** Body limit of the routes carrying content (larger than the platform's default, which suits other routes). */
  bodyLimitBytes: number;
}

/**
 * Bodies larger than this are refused unread (503) while the worker pool's queue is full: reading and parsing a
 * body of megabytes is work on the event loop, wasted when its content could not be validated anyway.
 */
const bodyReadOnlyWithCapacityBytes = 64 * 1024;

/** Routes of `/api/v1/files`. */
export function fileRoutes(server: HttpServer, services: ModelerServices, options: FileRouteOptions): void {
  const { files, clients, tasks } = services;
  // After authentication (an installAuthentication hook of the enclosing context), before the body is read. A
  // body without a declared length may be of any size, so it counts as large; its size is then known only once read.
  const refuseLargeBodyWithoutCapacity = async (request: FastifyRequest, reply: FastifyReply) => {
    const declaredBytes = Number(request.headers["content-length"] ?? Number.POSITIVE_INFINITY);
    if (declaredBytes <= bodyReadOnlyWithCapacityBytes) return;
    try {
      tasks.assertCapacity(Number.isFinite(declaredBytes) ? declaredBytes : 0);
    } catch (error) {
      // Closing the connection after the answer stops the client from sending the rest of a body nobody reads;
      // kept open, the server would have to receive and discard it to read the next request.
      reply.header("connection", "close");
      throw error;
    }
  };
  const limitNote = `Request bodies up to ${options.bodyLimitBytes} bytes (JSON escaping may double XML); content up to ${maximumContentBytes} bytes, else 413. Content is validated on worker threads; when they are all busy and their queue is full, the answer is 503 with Retry-After.`;
  server.post(
    "/api/v1/files",
    {
      bodyLimit: options.bodyLimitBytes,
      onRequest: refuseLargeBodyWithoutCapacity,
      config: { scopes: [modelerCreateScope] },
      schema: {
        tags: ["Files"],
        summary: "Create a file with content validated for its type",
        description: `Give projectId, folderId or both (they must agree). ${limitNote}`,
        body: Type.Object(
          {
            name: nameSchema,
            content: contentSchema,
            fileType: fileTypeSchema,
            projectId: Type.Optional(identifier),
            folderId: Type.Optional(folderSchema),
          },
          { additionalProperties: false },
        ),
        response: { 200: fileMetadataSchema, ...standardErrorResponses },
      },
    },
    async (request) => {
      const principal = principalOf(request);
      return await files.create(principal.organizationId, await actorOf(principal, clients), request.body);
    },
  );
  server.get(
    "/api/v1/files/:id",
    {
      config: { scopes: [modelerReadScope] },
      schema: {
        tags: ["Files"],
        summary: "Read a file's metadata and content",
        params: idParameters,
        response: {
          200: Type.Object({ metadata: fileMetadataSchema, content: Type.String() }, { additionalProperties: false }),
          ...standardErrorResponses,
        },
      },
    },
    async (request) => await files.get(principalOf(request).organizationId, request.params.id),
  );
  server.patch(
    "/api/v1/files/:id",
    {
      bodyLimit: options.bodyLimitBytes,
      onRequest: refuseLargeBodyWithoutCapacity,
      config: { scopes: [modelerUpdateScope] },
      schema: {
        tags: ["Files"],
        summary: "Rename, move and/or replace the content of a file (optimistic concurrency)",
        description: `revision must be the file's current revision, else 409; success increments it. ${limitNote}`,
        params: idParameters,
        body: Type.Object(
          {
            revision: Type.Integer({ minimum: 1 }),
            name: Type.Optional(nameSchema),
            content: Type.Optional(contentSchema),
            projectId: Type.Optional(identifier),
            folderId: Type.Optional(folderSchema),
          },
          { additionalProperties: false },
        ),
        response: { 200: fileMetadataSchema, 409: problemSchema, ...standardErrorResponses },
      },
    },
    async (request) => {
      const principal = principalOf(request);
      const actor = await actorOf(principal, clients);
      return await files.update(principal.organizationId, actor, request.params.id, request.body);
    },
  );
  deleteRoute(server, {
    path: "/api/v1/files/:id",
    tag: "Files",
    summary: "Delete a file and its milestones",
    mayConflict: false,
    remove: (organizationId, id) => files.delete(organizationId, id),
  });
  searchRoute(server, {
    path: "/api/v1/files/search",
    tag: "Files",
    summary: "Search files (metadata only)",
    body: fileSearchBody,
    item: fileMetadataSchema,
    search: (organizationId, request) => files.search(organizationId, request),
  });
}
