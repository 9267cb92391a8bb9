import { Type } from "typebox";
import { principalOf } from "../../../auth/authenticate.js";
import { modelerCreateScope, modelerDeleteScope, modelerReadScope, modelerUpdateScope } from "../../../auth/scopes.js";
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
        createPermission: scopes.has(modelerCreateScope),
        readPermission: scopes.has(modelerReadScope),
        updatePermission: scopes.has(modelerUpdateScope),
        deletePermission: scopes.has(modelerDeleteScope),
      };
    },
  );
}
