import { type Command, InvalidArgumentError } from "commander";
import {
  adminAudience,
  type ClusterClient,
  type ClusterClientConnectionDetails,
  type ClusterClientPermission,
  clusterClientPermissions,
} from "../../client/admin.js";
import type { CliIo } from "../io.js";
import { alignedTable } from "../table.js";
import { printable, printableJson } from "../terminal-text.js";
import { clientEnvironmentHelp, createAdminClient } from "./client-context.js";

interface ClientsOptions {
  cluster: string;
  json?: boolean;
  audience?: string;
}

function collectPermission(value: string, previous: ClusterClientPermission[] | undefined): ClusterClientPermission[] {
  const permission = clusterClientPermissions.find((known) => known === value);
  if (permission === undefined) {
    throw new InvalidArgumentError(`allowed permissions: ${clusterClientPermissions.join(", ")}`);
  }
  return [...(previous ?? []), permission];
}

/** Renders cluster API clients as an aligned text table, one client per line. */
export function formatClusterClientTable(clients: readonly ClusterClient[]): string {
  const rows = [
    ["CLIENT ID", "NAME", "PERMISSIONS"],
    ...clients.map((client) => [client.clientId, client.name, client.permissions.join(",")].map(printable)),
  ];
  return alignedTable(rows);
}

/** Renders connection details as `NAME=value` lines, the shape of an environment file (the name as a comment). */
export function formatConnectionDetails(details: ClusterClientConnectionDetails): string {
  const { name, ...variables } = details;
  return [
    `# ${printable(name)}`,
    // The names are the server's too (the schema allows more than the known four), so both sides are escaped.
    ...Object.entries(variables).map(([variable, value]) => `${printable(variable)}=${printable(value)}`),
  ].join("\n");
}

/** Registers `flowplane clients list|create|get|delete --cluster <id>`, which manage a cluster's API clients. */
export function registerClientsCommands(program: Command, io: CliIo): void {
  const clients = program
    .command("clients")
    .description("Manage the API clients of a cluster (Administration API, scope cluster-clients).")
    .addHelpText("after", clientEnvironmentHelp);

  const clusterOption = ["--cluster <clusterId>", "id of the cluster"] as const;
  const audienceOption = ["--audience <audience>", "audience of the Administration API", adminAudience] as const;

  clients
    .command("list")
    .description("List the API clients of a cluster.")
    .requiredOption(...clusterOption)
    .option("--json", "print the clients as JSON")
    .option(...audienceOption)
    .action(async (options: ClientsOptions) => {
      const list = await createAdminClient(io, options).listClusterClients(options.cluster);
      io.stdout(`${options.json === true ? printableJson(list) : formatClusterClientTable(list)}\n`);
    });

  clients
    .command("create")
    .description("Create an API client of a cluster and print its secret, which is shown this once.")
    .argument("<name>", "name of the client, unique in the cluster")
    .requiredOption(...clusterOption)
    .option(
      "-p, --permission <permission>",
      `permission to give (repeatable): ${clusterClientPermissions.join(", ")} (default gateway)`,
      collectPermission,
    )
    .option("--json", "print the created client as JSON")
    .option(...audienceOption)
    .action(async (name: string, options: ClientsOptions & { permission?: ClusterClientPermission[] }) => {
      const created = await createAdminClient(io, options).createClusterClient(
        options.cluster,
        name,
        options.permission,
      );
      if (options.json === true) {
        io.stdout(`${printableJson(created)}\n`);
        return;
      }
      io.stdout(
        [
          `Created client ${printable(created.name)} of cluster ${printable(options.cluster)} with the permissions ${created.permissions.map(printable).join(", ")}.`,
          `Its secret is shown this once; keep it safe:`,
          `SERVICE_CLIENT_ID=${printable(created.clientId)}`,
          `SERVICE_CLIENT_SECRET=${printable(created.clientSecret)}`,
          `SERVICE_ADDRESS=${printable(created.links.gateway)}`,
          `SERVICE_TOKEN_AUDIENCE=${printable(created.audience)}`,
          `(flowplane clients get ${printable(created.clientId)} --cluster ${printable(options.cluster)} prints the rest)`,
          "",
        ].join("\n"),
      );
    });

  clients
    .command("get")
    .description("Print the connection details of a cluster API client (the environment variables it needs).")
    .argument("<clientId>", "client id of the API client")
    .requiredOption(...clusterOption)
    .option("--json", "print the details as JSON")
    .option(...audienceOption)
    .action(async (clientId: string, options: ClientsOptions) => {
      const details = await createAdminClient(io, options).getClusterClient(options.cluster, clientId);
      io.stdout(`${options.json === true ? printableJson(details) : formatConnectionDetails(details)}\n`);
    });

  clients
    .command("delete")
    .description("Delete a cluster API client; its tokens stop working at the cluster's gateway.")
    .argument("<clientId>", "client id of the API client")
    .requiredOption(...clusterOption)
    .option("--json", "print the result as JSON")
    .option(...audienceOption)
    .action(async (clientId: string, options: ClientsOptions) => {
      await createAdminClient(io, options).deleteClusterClient(options.cluster, clientId);
      if (options.json === true) {
        io.stdout(`${printableJson({ clusterId: options.cluster, clientId, deleted: true }, 0)}\n`);
      } else {
        io.stdout(`Deleted client ${printable(clientId)} of cluster ${printable(options.cluster)}.\n`);
      }
    });
}
