/**
 * `flowplane clusters list|create|get|delete|scale`: the organization's clusters through the Administration API (scope
 * `cluster`). Plans, channels, generations and regions are given by id or by the start of their name, as
 * `GET /clusters/parameters` lists them.
 */
import type { Command } from "commander";
import {
  type AdminClient,
  adminAudience,
  type Cluster,
  type ClusterCreation,
  type ClusterParameters,
} from "../../client/admin.js";
import type { ClusterPatch } from "../../client/cluster.js";
import { MAX_BROKERS_PER_CLUSTER, MAX_PARTITIONS } from "../../platform/admin/clusters/limits.js";
import { monotonicNowMs } from "../../time/monotonic.js";
import { formatPlan } from "../cluster-display.js";
import { type CliIo, CommandFailure, Interrupted, UsageError } from "../io.js";
import { sleepUnlessInterrupted } from "../sleep.js";
import { alignedTable } from "../table.js";
import { printable, printableJson } from "../terminal-text.js";
import { clientEnvironmentHelp, createAdminClient } from "./client-context.js";
import { countOption, parseIds } from "./cluster.js";
import { registerClusterBackupsCommands } from "./cluster-backups.js";

/** The Administration API's bounds (it runs each broker as a process): refused here under the option's name. */
const brokerCountOption = countOption(MAX_BROKERS_PER_CLUSTER);
const partitionCountOption = countOption(MAX_PARTITIONS);

interface OutputOptions {
  json?: boolean;
  audience?: string;
}

interface CreateOptions extends OutputOptions {
  plan: string;
  channel?: string;
  generation?: string;
  region?: string;
  description?: string;
  stage?: string;
  autoUpdate?: boolean;
  wait?: boolean;
}

interface ScaleOptions extends OutputOptions {
  brokers?: number;
  add?: number[];
  remove?: number[];
  partitions?: number;
  replicationFactor?: number;
  dryRun?: boolean;
}

/** Stage labels a cluster may carry. */
const stageLabels = ["dev", "test", "stage", "prod"] as const;

/** Longest wait of `create --wait` for the cluster to be Healthy. */
const WAIT_TIMEOUT_MS = 180_000;

/** How often `create --wait` asks for the cluster's status. */
const WAIT_INTERVAL_MS = 500;

/**
 * The one entry of `entries` whose id is `value` or whose name starts with it (case-insensitive); a usage error
 * listing the choices otherwise.
 */
export function resolveParameter<Entry extends { uuid: string; name: string }>(
  entries: readonly Entry[],
  value: string,
  flag: string,
): Entry {
  const byId = entries.find((entry) => entry.uuid === value);
  if (byId !== undefined) return byId;
  const wanted = value.trim().toLowerCase();
  const matches = entries.filter((entry) => wanted !== "" && entry.name.toLowerCase().startsWith(wanted));
  if (matches.length === 1) return matches[0] as Entry;
  const choices = entries.map((entry) => `${entry.name} (${entry.uuid})`).join("; ");
  // The choices are the server's names: one line, so that a name cannot forge further lines of the message.
  throw new UsageError(
    printable(
      `${flag} ${JSON.stringify(value)} ${matches.length === 0 ? "matches none" : "matches several"} of: ${choices}`,
    ),
  );
}

/** The creation body from the options, with ids resolved against the parameters. */
export function creationFromOptions(
  name: string,
  options: CreateOptions,
  parameters: ClusterParameters,
): ClusterCreation {
  const plan = resolveParameter(parameters.clusterPlanTypes, options.plan, "--plan");
  const channel =
    options.channel === undefined
      ? parameters.channels[0]
      : resolveParameter(parameters.channels, options.channel, "--channel");
  if (channel === undefined) throw new CommandFailure("the platform offers no channel");
  const generation =
    options.generation === undefined
      ? channel.defaultGeneration
      : resolveParameter(channel.allowedGenerations, options.generation, "--generation");
  const region =
    options.region === undefined
      ? parameters.regions[0]
      : resolveParameter(parameters.regions, options.region, "--region");
  if (region === undefined) throw new CommandFailure("the platform offers no region");
  if (options.stage !== undefined && !(stageLabels as readonly string[]).includes(options.stage)) {
    throw new UsageError(`--stage must be one of ${stageLabels.join(", ")}`);
  }
  return {
    name,
    planTypeId: plan.uuid,
    channelId: channel.uuid,
    generationId: generation.uuid,
    regionId: region.uuid,
    ...(options.description === undefined ? {} : { description: options.description }),
    ...(options.stage === undefined ? {} : { stageLabel: options.stage as (typeof stageLabels)[number] }),
    ...(options.autoUpdate === undefined ? {} : { autoUpdate: options.autoUpdate }),
  };
}

/** Renders clusters as an aligned text table, one cluster per line. */
export function formatClusterTable(clusters: readonly Cluster[]): string {
  const rows = [
    ["ID", "NAME", "STATUS", "PLAN", "GATEWAY"],
    ...clusters.map((cluster) =>
      [cluster.uuid, cluster.name, cluster.status.ready, cluster.planType.name, cluster.links.gateway].map(printable),
    ),
  ];
  return alignedTable(rows);
}

/** Renders one cluster as `field: value` lines. */
export function formatCluster(cluster: Cluster): string {
  const lines: [string, string][] = [
    ["id", cluster.uuid],
    ["name", cluster.name],
    ["description", cluster.description ?? ""],
    ["stage", cluster.stageLabel ?? ""],
    ["status", `${cluster.status.ready} (gateway ${cluster.status.gatewayStatus})`],
    ["plan", cluster.planType.name],
    ["channel", cluster.channel.name],
    ["generation", cluster.generation.name],
    ["region", cluster.region.name],
    ["created", cluster.created],
    ["owner", cluster.ownerId],
    ["gateway", cluster.links.gateway],
    ["management", cluster.links.management],
    ["token URL", cluster.links.oauth],
  ];
  return lines.map(([field, value]) => `${field}: ${printable(value)}`).join("\n");
}

/** Polls the cluster until it is Healthy; fails after the bound or when the user interrupts. */
async function waitUntilHealthy(client: AdminClient, clusterId: string, io: CliIo): Promise<Cluster> {
  const deadlineMs = monotonicNowMs() + WAIT_TIMEOUT_MS;
  for (;;) {
    const cluster = await client.getCluster(clusterId);
    if (cluster.status.ready === "Healthy") return cluster;
    if (io.shutdownSignal.aborted) throw new Interrupted(`stopped waiting; cluster ${clusterId} is still starting`);
    if (monotonicNowMs() > deadlineMs) {
      throw new Error(
        `cluster ${clusterId} was not Healthy within ${WAIT_TIMEOUT_MS / 1000} s (status ${printable(cluster.status.ready)})`,
      );
    }
    await sleepUnlessInterrupted(WAIT_INTERVAL_MS, io.shutdownSignal);
  }
}

/** The body of `POST /clusters/{clusterId}/scale` from the options of `flowplane clusters scale`. */
export function clusterScalePatch(options: ScaleOptions): ClusterPatch {
  if (options.brokers !== undefined && (options.add !== undefined || options.remove !== undefined)) {
    throw new UsageError("give either --brokers or --add/--remove, not both");
  }
  if ((options.partitions === undefined) !== (options.replicationFactor === undefined)) {
    throw new UsageError(
      "give --partitions and --replication-factor together, as the Administration API takes them (today's values: " +
        "flowplane cluster status, with SERVICE_CLUSTER_MANAGEMENT_URL set to the management link flowplane clusters get shows)",
    );
  }
  const patch: ClusterPatch = {};
  if (options.brokers !== undefined) patch.brokers = { count: options.brokers };
  else if (options.add !== undefined || options.remove !== undefined) {
    patch.brokers = {
      ...(options.add === undefined ? {} : { add: options.add }),
      ...(options.remove === undefined ? {} : { remove: options.remove }),
    };
  }
  if (options.partitions !== undefined && options.replicationFactor !== undefined) {
    patch.partitions = { count: options.partitions, replicationFactor: options.replicationFactor };
  }
  if (patch.brokers === undefined && patch.partitions === undefined) {
    throw new UsageError(
      "say what to change: --brokers N, --add ids, --remove ids, or --partitions N --replication-factor N",
    );
  }
  return patch;
}

/** Registers `flowplane clusters list|create|get|delete|scale`. */
export function registerClustersCommands(program: Command, io: CliIo): void {
  const clusters = program
    .command("clusters")
    .description("Create, list and delete the organization's clusters (Administration API, scope cluster).")
    .addHelpText("after", clientEnvironmentHelp);

  clusters
    .command("list")
    .description("List the organization's clusters with their status.")
    .option("--json", "print the clusters as JSON")
    .option("--audience <audience>", "audience of the Administration API", adminAudience)
    .action(async (options: OutputOptions) => {
      const list = await createAdminClient(io, options).listClusters();
      io.stdout(options.json === true ? `${printableJson(list)}\n` : `${formatClusterTable(list)}\n`);
    });

  clusters
    .command("create")
    .description("Create a cluster; the platform starts its brokers and gateway.")
    .argument("<name>", "name of the cluster")
    .option("--plan <plan>", "plan type, by id or the start of its name (development, standard, large)", "standard")
    .option("--channel <channel>", "channel, by id or name (default: the first)")
    .option("--generation <generation>", "generation, by id or name (default: the channel's default)")
    .option("--region <region>", "region, by id or name (default: local)")
    .option("--description <text>", "description of the cluster")
    .option("--stage <label>", `stage label: ${stageLabels.join(", ")}`)
    .option("--auto-update", "follow the channel's default generation")
    .option("--wait", "wait until the cluster is Healthy")
    .option("--json", "print the result as JSON")
    .option("--audience <audience>", "audience of the Administration API", adminAudience)
    .action(async (name: string, options: CreateOptions) => {
      const client = createAdminClient(io, options);
      const creation = creationFromOptions(name, options, await client.clusterParameters());
      const clusterId = await client.createCluster(creation);
      if (options.wait === true) {
        const cluster = await waitUntilHealthy(client, clusterId, io);
        io.stdout(options.json === true ? `${printableJson(cluster)}\n` : `${formatCluster(cluster)}\n`);
        return;
      }
      io.stdout(
        options.json === true
          ? `${printableJson({ clusterId }, 0)}\n`
          : `Created cluster ${printable(clusterId)}; it is starting (flowplane clusters get ${printable(clusterId)}).\n`,
      );
    });

  clusters
    .command("get")
    .description("Show a cluster: its status, plan, generation and links.")
    .argument("<clusterId>", "id of the cluster")
    .option("--json", "print the cluster as JSON")
    .option("--audience <audience>", "audience of the Administration API", adminAudience)
    .action(async (clusterId: string, options: OutputOptions) => {
      const cluster = await createAdminClient(io, options).getCluster(clusterId);
      io.stdout(options.json === true ? `${printableJson(cluster)}\n` : `${formatCluster(cluster)}\n`);
    });

  clusters
    .command("delete")
    .description("Delete a cluster: its processes stop and its data is removed.")
    .argument("<clusterId>", "id of the cluster")
    .option("--json", "print the result as JSON")
    .option("--audience <audience>", "audience of the Administration API", adminAudience)
    .action(async (clusterId: string, options: OutputOptions) => {
      await createAdminClient(io, options).deleteCluster(clusterId);
      io.stdout(
        options.json === true
          ? `${printableJson({ clusterId, deleted: true }, 0)}\n`
          : `Deleted cluster ${printable(clusterId)}.\n`,
      );
    });

  clusters
    .command("scale")
    .description(
      "Change a cluster's brokers, partitions or replication factor: the platform starts the brokers it adds first, and stops the brokers it removes (deleting their data) once the change completed.",
    )
    .argument("<clusterId>", "id of the cluster")
    .option("--brokers <count>", "the new number of brokers (ids 0..count-1)", brokerCountOption)
    .option("--add <ids>", "broker ids to add, e.g. 3,4", parseIds)
    .option("--remove <ids>", "broker ids to remove, e.g. 4", parseIds)
    .option(
      "--partitions <count>",
      "the new partition count (experimental; never lower), with --replication-factor",
      partitionCountOption,
    )
    .option("--replication-factor <count>", "replicas per partition, with --partitions", brokerCountOption)
    .option("--dry-run", "show the plan, start and change nothing")
    .option("--json", "print the API's answer as JSON")
    .option("--audience <audience>", "audience of the Administration API", adminAudience)
    .action(async (clusterId: string, options: ScaleOptions) => {
      const patch = clusterScalePatch(options);
      const dryRun = options.dryRun === true;
      const answer = await createAdminClient(io, options).scaleCluster(clusterId, patch, { dryRun });
      if (options.json === true) {
        io.stdout(`${printableJson(answer)}\n`);
        return;
      }
      io.stdout(formatPlan(answer, dryRun));
      if (!dryRun && answer.plannedChanges.length > 0) {
        io.stdout(
          `Follow it with: flowplane cluster status --watch (SERVICE_CLUSTER_MANAGEMENT_URL=<links.management of flowplane clusters get ${printable(clusterId)}>)\n`,
        );
      }
    });

  registerClusterBackupsCommands(clusters, io);
}
