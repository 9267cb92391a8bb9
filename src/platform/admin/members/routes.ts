import type { FastifyRequest } from "fastify";
import { Type } from "typebox";
import { principalOf } from "../../../auth/authenticate.js";
import { problemSchema, standardErrorResponses } from "../../../http/schemas.js";
import type { HttpServer } from "../../../http/server.js";
import { assignableRoles, memberRoles } from "./roles.js";
import { type MemberService, normalizeEmail } from "./service.js";

const memberSchema = Type.Object(
  {
    name: Type.String(),
    email: Type.String(),
    roles: Type.Array(Type.Enum(memberRoles)),
    invitePending: Type.Boolean(),
  },
  { additionalProperties: false },
);

const emailParameters = Type.Object(
  { email: Type.String({ format: "email", maxLength: 254, description: "Email address of the member." }) },
  { additionalProperties: false },
);

const rolesBody = Type.Object(
  {
    orgRoles: Type.Array(Type.Enum(assignableRoles), {
      minItems: 1,
      uniqueItems: true,
      description: `Roles to hold: any of ${assignableRoles.join(", ")} (owner cannot be assigned).`,
    }),
  },
  { additionalProperties: false },
);

/** The member a request names, as the activity log records it. */
function memberOf(request: FastifyRequest): string {
  return normalizeEmail((request.params as { email: string }).email);
}

/** Routes of `/members`: thin wrappers over `MemberService`. */
export function memberRoutes(server: HttpServer, members: MemberService): void {
  server.get(
    "/members",
    {
      config: { scopes: ["members"] },
      schema: {
        tags: ["Members"],
        summary: "List the organization's members",
        response: { 200: Type.Array(memberSchema), ...standardErrorResponses },
      },
    },
    async (request) => await members.list(principalOf(request).organizationId),
  );
  server.post(
    "/members/:email",
    {
      config: { scopes: ["members"], activity: { entity: "member", auditType: "u", entityId: memberOf } },
      schema: {
        tags: ["Members"],
        summary: "Invite a member, or change the roles of an existing one",
        params: emailParameters,
        body: rolesBody,
        response: { 204: Type.Null(), 409: problemSchema, ...standardErrorResponses },
      },
    },
    async (request, reply) => {
      const { organizationId } = principalOf(request);
      const outcome = await members.inviteOrChangeRoles(organizationId, request.params.email, request.body.orgRoles);
      request.activityOutcome = { auditType: outcome === "invited" ? "c" : "u" };
      return reply.code(204).send(null);
    },
  );
  server.delete(
    "/members/:email",
    {
      config: { scopes: ["members"], activity: { entity: "member", auditType: "d", entityId: memberOf } },
      schema: {
        tags: ["Members"],
        summary: "Remove a member (the owner cannot be removed)",
        params: emailParameters,
        response: { 204: Type.Null(), 409: problemSchema, ...standardErrorResponses },
      },
    },
    async (request, reply) => {
      await members.remove(principalOf(request).organizationId, request.params.email);
      return reply.code(204).send(null);
    },
  );
}
