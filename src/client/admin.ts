import { type Static, Type } from "typebox";
import { type ApiClientOptions, ApiTransport } from "./api.js";

/** Roles a member can be given through the API (`owner` exists but cannot be assigned). */
export const assignableRoles = [
  "admin",
  "developer",
  "operationsengineer",
  "analyst",
  "taskuser",
  "visitor",
  "modeler",
] as const;

/** One role a member can be given through the API. */
export type AssignableRole = (typeof assignableRoles)[number];

/** Schema of a member of the organization as the Administration API returns it. */
export const memberSchema = Type.Object({
  name: Type.String(),
  email: Type.String(),
  roles: Type.Array(Type.String()),
  invitePending: Type.Boolean(),
});

/** A member of the organization. */
export type Member = Static<typeof memberSchema>;

const memberListSchema = Type.Array(memberSchema);

/** The default audience of the Administration API. */
export const adminAudience = "admin-api";

/** Typed client of the Administration API (members so far); every call needs a token with the `members` scope. */
export class AdminClient {
  private readonly transport: ApiTransport;

  /** Creates a client for the Administration API at `options.baseUrl` (e.g. `http://localhost:8088/admin`). */
  constructor(options: ApiClientOptions) {
    this.transport = new ApiTransport(options, adminAudience);
  }

  /** Lists the members of the organization. */
  async listMembers(): Promise<Member[]> {
    return (await this.transport.sendForJson("GET", "/members", memberListSchema)) as Member[];
  }

  /** Invites `email` with `roles`; if it is already a member, replaces its roles instead. */
  async inviteMember(email: string, roles: readonly string[]): Promise<void> {
    await this.transport.send("POST", `/members/${encodeURIComponent(email)}`, { orgRoles: roles });
  }

  /** Replaces the roles of an existing member (the same call as an invitation, by the API's design). */
  async changeMemberRoles(email: string, roles: readonly string[]): Promise<void> {
    await this.inviteMember(email, roles);
  }

  /** Removes a member; throws `ApiError` with status 404 if `email` is not a member. */
  async removeMember(email: string): Promise<void> {
    await this.transport.send("DELETE", `/members/${encodeURIComponent(email)}`);
  }
}
