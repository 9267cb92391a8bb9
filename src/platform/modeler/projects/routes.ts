import { Type } from "typebox";
import { principalOf } from "../../../auth/authenticate.js";
import { modelerCreateScope, modelerReadScope, modelerUpdateScope } from "../../../auth/scopes.js";
import { standardErrorResponses } from "../../../http/schemas.js";
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
} from "../schemas.js";
import type { ModelerServices } from "../services.js";
import { deleteRoute, searchRoute } from "../standard-routes.js";

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
  deleteRoute(server, {
    path: "/api/v1/projects/:id",
    tag: "Projects",
    summary: "Delete an empty project (409 while it holds folders or files)",
    mayConflict: true,
    remove: (organizationId, id) => projects.delete(organizationId, id),
  });
  searchRoute(server, {
    path: "/api/v1/projects/search",
    tag: "Projects",
    summary: "Search projects",
    body: projectSearchBody,
    item: projectMetadataSchema,
    search: (organizationId, request) => projects.search(organizationId, request),
  });
}
