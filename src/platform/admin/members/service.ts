import type { Kysely } from "kysely";
import { conflict, notFound } from "../../../http/errors.js";
import type { PlatformDatabase } from "../../store/schema.js";
import type { MemberRole } from "./roles.js";

/** A member as the Administration API shows it. */
export interface Member {
  name: string;
  email: string;
  roles: MemberRole[];
  invitePending: boolean;
}

/** Emails compare case-insensitively; they are stored lower-case so the primary key enforces it. */
export function normalizeEmail(email: string): string {
  return email.trim().toLowerCase();
}

/** Reads and changes the members of organizations. */
/** Most members an organization may have (its owner included): the member list is answered whole. */
export const maximumMembers = 10_000;

export class MemberService {
  constructor(
    private readonly database: Kysely<PlatformDatabase>,
    private readonly now: () => Date = () => new Date(),
  ) {}

  /** Lists the organization's members, ordered by email. */
  async list(organizationId: string): Promise<Member[]> {
    const rows = await this.database
      .selectFrom("members")
      .select(["name", "email", "roles", "invite_pending"])
      .where("organization_id", "=", organizationId)
      .orderBy("email")
      .execute();
    return rows.map((row) => ({
      name: row.name,
      email: row.email,
      roles: JSON.parse(row.roles) as MemberRole[],
      invitePending: row.invite_pending === 1,
    }));
  }

  /** Whether `email` is a member (invited or active) of the organization. */
  async isMember(organizationId: string, email: string): Promise<boolean> {
    return (await rolesOf(this.database, organizationId, normalizeEmail(email))) !== undefined;
  }

  /**
   * Invites `email` with `roles`, or replaces the roles of an existing member. The owner's roles are fixed: the
   * owner is the one member who can never lose the organization.
   */
  async inviteOrChangeRoles(
    organizationId: string,
    email: string,
    roles: readonly Exclude<MemberRole, "owner">[],
  ): Promise<"invited" | "updated"> {
    const address = normalizeEmail(email);
    const uniqueRoles = [...new Set(roles)].sort();
    const timestamp = this.now().toISOString();
    return await this.database.transaction().execute(async (transaction) => {
      const existing = await rolesOf(transaction, organizationId, address);
      if (existing === undefined) {
        // Bounded like every other collection of an organization: the member list is answered whole.
        const { count } = await transaction
          .selectFrom("members")
          .select((expression) => expression.fn.countAll<number | string | bigint>().as("count"))
          .where("organization_id", "=", organizationId)
          .executeTakeFirstOrThrow();
        if (Number(count) >= maximumMembers) {
          throw conflict(
            `The organization has ${maximumMembers} members, the most it may have; remove one before inviting another.`,
          );
        }
        await transaction
          .insertInto("members")
          .values({
            organization_id: organizationId,
            email: address,
            name: address.split("@")[0] ?? address,
            roles: JSON.stringify(uniqueRoles),
            invite_pending: 1,
            created_at: timestamp,
            updated_at: timestamp,
          })
          .execute();
        return "invited";
      }
      if (existing.includes("owner")) {
        throw conflict(`${address} is the organization's owner; the owner's roles cannot be changed.`);
      }
      await transaction
        .updateTable("members")
        .set({ roles: JSON.stringify(uniqueRoles), updated_at: timestamp })
        .where("organization_id", "=", organizationId)
        .where("email", "=", address)
        .execute();
      return "updated";
    });
  }

  /** Removes a member; the owner cannot be removed. */
  async remove(organizationId: string, email: string): Promise<void> {
    const address = normalizeEmail(email);
    await this.database.transaction().execute(async (transaction) => {
      const existing = await rolesOf(transaction, organizationId, address);
      if (existing === undefined) throw notFound("member", address);
      if (existing.includes("owner")) {
        throw conflict(`${address} is the organization's owner and cannot be removed.`);
      }
      await transaction
        .deleteFrom("members")
        .where("organization_id", "=", organizationId)
        .where("email", "=", address)
        .execute();
    });
  }
}

/** The roles of one member, or undefined when the address is not a member. */
async function rolesOf(
  database: Kysely<PlatformDatabase>,
  organizationId: string,
  address: string,
): Promise<MemberRole[] | undefined> {
  const row = await database
    .selectFrom("members")
    .select("roles")
    .where("organization_id", "=", organizationId)
    .where("email", "=", address)
    .executeTakeFirst();
  return row === undefined ? undefined : (JSON.parse(row.roles) as MemberRole[]);
}
