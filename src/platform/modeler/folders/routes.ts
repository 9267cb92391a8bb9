import { Type } from "typebox";
import { principalOf } from "../../../auth/authenticate.js";
import { modelerCreateScope, modelerReadScope, modelerUpdateScope } from "../../../auth/scopes.js";
import { standardErrorResponses } from "../../../http/schemas.js";
import type { HttpServer } from "../../../http/server.js";
import { containerContentSchema, folderMetadataSchema } from "../metadata-schemas.js";
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

const parentSchema = Type.Union([identifier, Type.Null()], {
  description: "Folder to place it in; null (or absent with projectId) for the project's top level.",
});

const folderSearchBody = searchRequestSchema(
  {
    id: Type.Optional(identifier),
    name: Type.Optional(nameFilterSchema),
    projectId: Type.Optional(identifier),
    parentId: Type.Optional(parentSchema),
    ...auditFilterProperties,
  },
  ["id", "name", "projectId", ...auditSortFields],
);

/** Routes of `/api/v1/folders`. */
export function folderRoutes(server: HttpServer, services: ModelerServices): void {
  const { folders, clients } = services;
  server.post(
    "/api/v1/folders",
    {
      config: { scopes: [modelerCreateScope] },
      schema: {
        tags: ["Folders"],
        summary: "Create a folder in a project or inside another folder",
        description: "Give projectId, parentId or both (they must agree).",
        body: Type.Object(
          { name: nameSchema, projectId: Type.Optional(identifier), parentId: Type.Optional(parentSchema) },
          { additionalProperties: false },
        ),
        response: { 200: folderMetadataSchema, ...standardErrorResponses },
      },
    },
    async (request) => {
      const principal = principalOf(request);
      return await folders.create(principal.organizationId, await actorOf(principal, clients), request.body);
    },
  );
  server.get(
    "/api/v1/folders/:id",
    {
      config: { scopes: [modelerReadScope] },
      schema: {
        tags: ["Folders"],
        summary: "Read a folder and the folders and files directly inside it",
        params: idParameters,
        response: {
          200: Type.Object(
            { metadata: folderMetadataSchema, content: containerContentSchema },
            { additionalProperties: false },
          ),
          ...standardErrorResponses,
        },
      },
    },
    async (request) => await folders.get(principalOf(request).organizationId, request.params.id),
  );
  server.patch(
    "/api/v1/folders/:id",
    {
      config: { scopes: [modelerUpdateScope] },
      schema: {
        tags: ["Folders"],
        summary: "Rename and/or move a folder with its content",
        description:
          "parentId moves it into another folder (of any project), null to its project's top level; projectId alone moves it to that project's top level. A folder cannot move into itself or its subfolders.",
        params: idParameters,
        body: Type.Object(
          {
            name: Type.Optional(nameSchema),
            projectId: Type.Optional(identifier),
            parentId: Type.Optional(parentSchema),
          },
          { additionalProperties: false, minProperties: 1 },
        ),
        response: { 200: folderMetadataSchema, ...standardErrorResponses },
      },
    },
    async (request) => {
      const principal = principalOf(request);
      const actor = await actorOf(principal, clients);
      return await folders.update(principal.organizationId, actor, request.params.id, request.body);
    },
  );
  deleteRoute(server, {
    path: "/api/v1/folders/:id",
    tag: "Folders",
    summary: "Delete an empty folder (409 while it holds folders or files)",
    mayConflict: true,
    remove: (organizationId, id) => folders.delete(organizationId, id),
  });
  searchRoute(server, {
    path: "/api/v1/folders/search",
    tag: "Folders",
    summary: "Search folders",
    body: folderSearchBody,
    item: folderMetadataSchema,
    search: (organizationId, request) => folders.search(organizationId, request),
  });
}
