import { Type } from "typebox";
import { principalOf } from "../../../auth/authenticate.js";
import { standardErrorResponses } from "../../../http/schemas.js";
import type { HttpServer } from "../../../http/server.js";

const infoSchema = Type.Object(
  {
    version: Type.Literal("v1"),
    authorizedOrganization: Type.String({ format: "uuid" }),
    createPermission: Type.Boolean(),
    readPermission: Type.Boolean(),
    updatePermission: Type.Boolean(),
    deletePermission: Type.Boolean(),
  },
  { additionalProperties: false },
);

/** `GET /api/v1/info`: the API version, the caller's organization and its four permissions. */
export function infoRoutes(server: HttpServer): void {
  server.get(
    "/api/v1/info",
    {
      schema: {
        tags: ["Info"],
        summary: "The API version and the caller's permissions",
        response: { 200: infoSchema, ...standardErrorResponses },
      },
    },
    async (request) => {
      const { scopes, organizationId } = principalOf(request);
      return {
        version: "v1" as const,
        authorizedOrganization: organizationId,
        createPermission: scopes.has("modeler:create"),
        readPermission: scopes.has("modeler:read"),
        updatePermission: scopes.has("modeler:update"),
        deletePermission: scopes.has("modeler:delete"),
      };
    },
  );
}
