import { Type } from "typebox";
import { principalOf } from "../../../auth/authenticate.js";
import { problemSchema, standardErrorResponses } from "../../../http/schemas.js";
import type { HttpServer } from "../../../http/server.js";
import type { ActivityService } from "../activity/service.js";
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

/** Routes of `/members`: thin wrappers over `MemberService`; every change is recorded in `activity`. */
export function memberRoutes(server: HttpServer, members: MemberService, activity: ActivityService): void {
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
      config: { scopes: ["members"] },
      schema: {
        tags: ["Members"],
        summary: "Invite a member, or change the roles of an existing one",
        params: emailParameters,
        body: rolesBody,
        response: { 204: Type.Null(), 409: problemSchema, ...standardErrorResponses },
      },
    },
    async (request, reply) => {
      const { organizationId, clientId } = principalOf(request);
      const outcome = await members.inviteOrChangeRoles(organizationId, request.params.email, request.body.orgRoles);
      await activity.record({
        organizationId,
        entity: "member",
        entityId: normalizeEmail(request.params.email),
        auditType: outcome === "invited" ? "c" : "u",
        userId: clientId,
      });
      return reply.code(204).send(null);
    },
  );
  server.delete(
    "/members/:email",
    {
      config: { scopes: ["members"] },
      schema: {
        tags: ["Members"],
        summary: "Remove a member (the owner cannot be removed)",
        params: emailParameters,
        response: { 204: Type.Null(), 409: problemSchema, ...standardErrorResponses },
      },
    },
    async (request, reply) => {
      const { organizationId, clientId } = principalOf(request);
      await members.remove(organizationId, request.params.email);
      await activity.record({
        organizationId,
        entity: "member",
        entityId: normalizeEmail(request.params.email),
        auditType: "d",
        userId: clientId,
      });
      return reply.code(204).send(null);
    },
  );
}
