import { type Command, InvalidArgumentError } from "commander";
import { isScopeValue, type ScopeValue, scopeValues } from "../../auth/scopes.js";
import { adminAudience, type OrganizationClient } from "../../client/admin.js";
import type { CliIo } from "../io.js";
import { alignedTable } from "../table.js";
import { printable, printableJson } from "../terminal-text.js";
import { clientEnvironmentHelp, createAdminClient } from "./client-context.js";

interface OrganizationClientsOptions {
  json?: boolean;
  audience?: string;
}

function collectScope(value: string, previous: ScopeValue[] | undefined): ScopeValue[] {
  if (!isScopeValue(value)) throw new InvalidArgumentError(`allowed scopes: ${scopeValues.join(", ")}`);
  return [...(previous ?? []), value];
}

/** Renders organization API clients as an aligned text table, one client per line. */
export function formatOrganizationClientTable(clients: readonly OrganizationClient[]): string {
  const rows = [
    ["CLIENT ID", "NAME", "CREATED", "SCOPES"],
    ...clients.map((client) => [client.clientId, client.name, client.created, client.scopes.join(",")].map(printable)),
  ];
  return alignedTable(rows);
}

/** Registers `flowplane organization-clients list|create|delete`, which manage the organization's API clients. */
export function registerOrganizationClientsCommands(program: Command, io: CliIo): void {
  const clients = program
    .command("organization-clients")
    .description(
      "Manage the organization's API clients (Administration API; takes a client holding every scope). The clients of one cluster are `flowplane clients`.",
    )
    .addHelpText("after", clientEnvironmentHelp);

  const audienceOption = ["--audience <audience>", "audience of the Administration API", adminAudience] as const;

  clients
    .command("list")
    .description("List the organization's API clients.")
    .option("--json", "print the clients as JSON")
    .option(...audienceOption)
    .action(async (options: OrganizationClientsOptions) => {
      const list = await createAdminClient(io, options).listOrganizationClients();
      io.stdout(`${options.json === true ? printableJson(list) : formatOrganizationClientTable(list)}\n`);
    });

  clients
    .command("create")
    .description("Create an API client of the organization and print its secret, which is shown this once.")
    .argument("<name>", "name of the client, unique in the organization")
    .requiredOption("-s, --scope <scope>", `scope to give (repeatable): ${scopeValues.join(", ")}`, collectScope)
    .option("--json", "print the created client as JSON")
    .option(...audienceOption)
    .action(async (name: string, options: OrganizationClientsOptions & { scope: ScopeValue[] }) => {
      const created = await createAdminClient(io, options).createOrganizationClient(name, options.scope);
      if (options.json === true) {
        io.stdout(`${printableJson(created)}\n`);
        return;
      }
      io.stdout(
        [
          `Created client ${printable(created.name)} of the organization with the scopes ${created.scopes.map(printable).join(", ")}.`,
          "Its secret is shown this once; keep it safe:",
          `SERVICE_CONSOLE_CLIENT_ID=${printable(created.clientId)}`,
          `SERVICE_CONSOLE_CLIENT_SECRET=${printable(created.clientSecret)}`,
          "",
        ].join("\n"),
      );
    });

  clients
    .command("delete")
    .description("Delete an API client of the organization; the platform and every gateway refuse its tokens.")
    .argument("<clientId>", "client id of the API client")
    .option("--json", "print the result as JSON")
    .option(...audienceOption)
    .action(async (clientId: string, options: OrganizationClientsOptions) => {
      await createAdminClient(io, options).deleteOrganizationClient(clientId);
      if (options.json === true) {
        io.stdout(`${printableJson({ clientId, deleted: true }, 0)}\n`);
      } else {
        io.stdout(`Deleted client ${printable(clientId)} of the organization.\n`);
      }
    });
}
