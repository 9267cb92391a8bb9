import { Type } from "typebox";
import { principalOf } from "../../../auth/authenticate.js";
import { modelerCreateScope, modelerDeleteScope, modelerReadScope, modelerUpdateScope } from "../../../auth/scopes.js";
import { problemSchema, standardErrorResponses } from "../../../http/schemas.js";
import type { HttpServer } from "../../../http/server.js";
import { containerContentSchema, projectMetadataSchema } from "../metadata-schemas.js";
import { actorOf } from "../records.js";
import {
  auditFilterProperties,
  auditSortFields,
  identifier,
  idParameters,
  nameFilterSchema,
  nameSchema,
  searchRequestSchema,
  searchResponseSchema,
} from "../schemas.js";
import type { ModelerServices } from "../services.js";

const projectSearchBody = searchRequestSchema(
  { id: Type.Optional(identifier), name: Type.Optional(nameFilterSchema), ...auditFilterProperties },
  ["id", "name", ...auditSortFields],
);

/** Routes of `/api/v1/projects`. */
export function projectRoutes(server: HttpServer, services: ModelerServices): void {
  const { projects, clients } = services;
  server.post(
    "/api/v1/projects",
    {
      config: { scopes: [modelerCreateScope] },
      schema: {
        tags: ["Projects"],
        summary: "Create a project",
        body: Type.Object({ name: nameSchema }, { additionalProperties: false }),
        response: { 200: projectMetadataSchema, ...standardErrorResponses },
      },
    },
    async (request) => {
      const principal = principalOf(request);
      return await projects.create(principal.organizationId, await actorOf(principal, clients), request.body.name);
    },
  );
  server.get(
    "/api/v1/projects/:id",
    {
      config: { scopes: [modelerReadScope] },
      schema: {
        tags: ["Projects"],
        summary: "Read a project and the folders and files at its top level",
        params: idParameters,
        response: {
          200: Type.Object(
            { metadata: projectMetadataSchema, content: containerContentSchema },
            { additionalProperties: false },
          ),
          ...standardErrorResponses,
        },
      },
    },
    async (request) => await projects.get(principalOf(request).organizationId, request.params.id),
  );
  server.patch(
    "/api/v1/projects/:id",
    {
      config: { scopes: [modelerUpdateScope] },
      schema: {
        tags: ["Projects"],
        summary: "Rename a project",
        params: idParameters,
        body: Type.Object({ name: nameSchema }, { additionalProperties: false }),
        response: { 200: projectMetadataSchema, ...standardErrorResponses },
      },
    },
    async (request) => {
      const principal = principalOf(request);
      const actor = await actorOf(principal, clients);
      return await projects.rename(principal.organizationId, actor, request.params.id, request.body.name);
    },
  );
  server.delete(
    "/api/v1/projects/:id",
    {
      config: { scopes: [modelerDeleteScope] },
      schema: {
        tags: ["Projects"],
        summary: "Delete an empty project (409 while it holds folders or files)",
        params: idParameters,
        response: { 204: Type.Null(), 409: problemSchema, ...standardErrorResponses },
      },
    },
    async (request, reply) => {
      await projects.delete(principalOf(request).organizationId, request.params.id);
      return reply.code(204).send(null);
    },
  );
  server.post(
    "/api/v1/projects/search",
    {
      config: { scopes: [modelerReadScope] },
      schema: {
        tags: ["Projects"],
        summary: "Search projects",
        body: projectSearchBody,
        response: { 200: searchResponseSchema(projectMetadataSchema), ...standardErrorResponses },
      },
    },
    async (request) => await projects.search(principalOf(request).organizationId, request.body),
  );
}
