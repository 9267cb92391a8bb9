import { Type } from "typebox";
import { principalOf } from "../../../auth/authenticate.js";
import { modelerDeleteScope, modelerUpdateScope } from "../../../auth/scopes.js";
import { standardErrorResponses } from "../../../http/schemas.js";
import type { HttpServer } from "../../../http/server.js";
import { identifier, nameFilterSchema, searchRequestSchema } from "../schemas.js";
import type { ModelerServices } from "../services.js";
import { searchRoute } from "../standard-routes.js";
import { collaboratorRoles } from "./service.js";

const emailSchema = Type.String({ format: "email", maxLength: 254 });
const roleSchema = Type.Enum(collaboratorRoles, { description: collaboratorRoles.join(", ") });

const collaboratorSchema = Type.Object(
  { projectId: identifier, email: Type.String(), name: Type.String(), role: roleSchema },
  { additionalProperties: false },
);

const collaboratorSearchBody = searchRequestSchema(
  {
    projectId: Type.Optional(identifier),
    email: Type.Optional(emailSchema),
    name: Type.Optional(nameFilterSchema),
    role: Type.Optional(roleSchema),
  },
  ["projectId", "email", "name", "role"],
);

/** Routes of `/api/v1/collaborators` and `/api/v1/projects/{id}/collaborators/{email}`. */
export function collaboratorRoutes(server: HttpServer, services: ModelerServices): void {
  const { collaborators } = services;
  server.put(
    "/api/v1/collaborators",
    {
      config: { scopes: [modelerUpdateScope] },
      schema: {
        tags: ["Collaborators"],
        summary: "Add a member of the organization to a project, or change their role",
        description: "The email must be a member of the organization (400 otherwise).",
        body: Type.Object(
          { email: emailSchema, projectId: identifier, role: roleSchema },
          { additionalProperties: false },
        ),
        response: { 204: Type.Null(), ...standardErrorResponses },
      },
    },
    async (request, reply) => {
      await collaborators.put(principalOf(request).organizationId, request.body);
      return reply.code(204).send(null);
    },
  );
  searchRoute(server, {
    path: "/api/v1/collaborators/search",
    tag: "Collaborators",
    summary: "Search collaborators",
    description: "Equal sort keys are ordered by project id, then email.",
    body: collaboratorSearchBody,
    item: collaboratorSchema,
    search: (organizationId, request) => collaborators.search(organizationId, request),
  });
  server.delete(
    "/api/v1/projects/:id/collaborators/:email",
    {
      config: { scopes: [modelerDeleteScope] },
      schema: {
        tags: ["Collaborators"],
        summary: "Remove a collaborator from a project",
        params: Type.Object({ id: identifier, email: emailSchema }, { additionalProperties: false }),
        response: { 204: Type.Null(), ...standardErrorResponses },
      },
    },
    async (request, reply) => {
      await collaborators.remove(principalOf(request).organizationId, request.params.id, request.params.email);
      return reply.code(204).send(null);
    },
  );
}
