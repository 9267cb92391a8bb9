import { type Command, InvalidArgumentError } from "commander";
import { adminAudience, assignableRoles, type Member } from "../../client/admin.js";
import { type CliIo, UsageError } from "../io.js";
import { alignedTable } from "../table.js";
import { printable, printableJson } from "../terminal-text.js";
import { clientEnvironmentHelp, createAdminClient } from "./client-context.js";

interface OutputOptions {
  json?: boolean;
  audience?: string;
}

function collectRole(value: string, previous: string[] | undefined): string[] {
  if (!(assignableRoles as readonly string[]).includes(value)) {
    throw new InvalidArgumentError(`allowed roles: ${assignableRoles.join(", ")} (owner cannot be assigned)`);
  }
  return [...(previous ?? []), value];
}

/** Renders members as an aligned text table, one member per line. */
export function formatMemberTable(members: readonly Member[]): string {
  const rows = [
    ["EMAIL", "NAME", "ROLES", "INVITE PENDING"],
    ...members.map((member) =>
      [member.email, member.name, member.roles.join(","), member.invitePending ? "yes" : "no"].map(printable),
    ),
  ];
  return alignedTable(rows);
}

/** Registers `flowplane members list|invite|remove`, which manage the organization's members. */
export function registerMembersCommands(program: Command, io: CliIo): void {
  const members = program
    .command("members")
    .description("Manage the members of the organization (Administration API, scope members).")
    .addHelpText("after", clientEnvironmentHelp);

  members
    .command("list")
    .description("List the members of the organization.")
    .option("--json", "print the members as JSON")
    .option("--audience <audience>", "audience of the Administration API", adminAudience)
    .action(async (options: OutputOptions) => {
      const list = await createAdminClient(io, options).listMembers();
      if (options.json === true) {
        io.stdout(`${printableJson(list)}\n`);
      } else {
        io.stdout(`${formatMemberTable(list)}\n`);
      }
    });

  members
    .command("invite")
    .description("Invite a member, or replace the roles of an existing member.")
    .argument("<email>", "email address of the member")
    .option("-r, --role <role>", `role to give (repeatable): ${assignableRoles.join(", ")}`, collectRole)
    .option("--json", "print the result as JSON")
    .option("--audience <audience>", "audience of the Administration API", adminAudience)
    .action(async (email: string, options: OutputOptions & { role?: string[] }) => {
      const roles = options.role ?? [];
      if (roles.length === 0) throw new UsageError("give at least one --role");
      await createAdminClient(io, options).inviteMember(email, roles);
      if (options.json === true) {
        io.stdout(`${printableJson({ email, roles }, 0)}\n`);
      } else {
        io.stdout(
          `Member ${printable(email)} has the roles ${roles.join(", ")} (invited if they were not a member).\n`,
        );
      }
    });

  members
    .command("remove")
    .description("Remove a member from the organization (the owner cannot be removed).")
    .argument("<email>", "email address of the member")
    .option("--json", "print the result as JSON")
    .option("--audience <audience>", "audience of the Administration API", adminAudience)
    .action(async (email: string, options: OutputOptions) => {
      await createAdminClient(io, options).removeMember(email);
      if (options.json === true) {
        io.stdout(`${printableJson({ email, removed: true }, 0)}\n`);
      } else {
        io.stdout(`Removed member ${printable(email)}.\n`);
      }
    });
}
