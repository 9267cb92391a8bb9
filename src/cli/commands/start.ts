import type { Command } from "commander";
import { loadConfiguration } from "../../config/load.js";
import type { RunningPlatform } from "../../platform/platform.js";
import type { CliIo } from "../io.js";
import { collectRepeated, settingAssignments, waitForAbort } from "../server-command.js";
import { printable } from "../terminal-text.js";

interface StartOptions {
  config?: string;
  port?: string;
  dataDirectory?: string;
  databaseUrl?: string;
  set?: string[];
}

/** Turns the start options into configuration flags keyed like `service.platform.port`. */
export function configurationFlags(options: StartOptions): Record<string, string> {
  const flags = settingAssignments(options.set, "service.platform.port=8088");
  // The dedicated flags win over --set, being the more specific way of saying the same thing.
  if (options.port !== undefined) flags["service.platform.port"] = options.port;
  if (options.dataDirectory !== undefined) flags["service.dataDirectory"] = options.dataDirectory;
  if (options.databaseUrl !== undefined) flags["service.database.url"] = options.databaseUrl;
  return flags;
}

/** Quotes a value for a POSIX shell when it contains anything beyond the characters that never need quoting. */
function shellQuote(value: string): string {
  return /^[A-Za-z0-9._~:/@%+=-]+$/.test(value) ? value : `'${value.replaceAll("'", "'\\''")}'`;
}

/** Runs the platform, and for `start` the local cluster beside it, until the shutdown signal. */
async function runPlatform(options: StartOptions, io: CliIo, withCluster: boolean): Promise<void> {
  const configuration = loadConfiguration({
    environment: io.environment,
    configFile: options.config,
    flags: configurationFlags(options),
  });
  // Loaded lazily so that client commands such as `token` do not pay for the server's modules.
  const { startPlatform } = await import("../../platform/platform.js");
  let bootstrapCredentials: { clientId: string; clientSecret: string } | undefined;
  // Without a logger from the caller the platform logs to standard output at the configured level.
  if (withCluster) {
    const ignored = clusterShapeSettings(configuration);
    if (ignored.length > 0) {
      io.stderr(
        `flowplane start: ${ignored.join(", ")} ${ignored.length === 1 ? "applies" : "apply"} to \`flowplane broker\` ` +
          "only: the clusters of `flowplane start` take the shape of their plan (the first one 3 brokers, 3 partitions, " +
          "replication factor 3); change a running cluster's shape with `flowplane cluster scale`\n",
      );
    }
    // The clusters' shapes are printed once they run: after the first start they are whatever scaling made them.
    io.stdout("starting the platform and its clusters…\n");
  }
  const platform = await startPlatform(configuration, {
    logger: io.logger,
    onBootstrapCredentials: (credentials) => {
      bootstrapCredentials = credentials;
    },
    ...(withCluster ? { localClusters: { environment: io.environment } } : {}),
  });
  io.stdout(`flowplane platform listening at ${platform.url} (organization ${platform.organizationId})\n`);
  // Behind a proxy, clients must use the public URL; otherwise the address it listens at is the one that works.
  const clientUrl = configuration.platform.publicUrl === "" ? platform.url : platform.issuerUrl.replace(/\/+$/, "");
  if (clientUrl !== platform.url) io.stdout(`public URL ${clientUrl}\n`);
  if (platform.consoleUrl !== null) io.stdout(`web console at ${clientUrl}/console/\n`);
  if (bootstrapCredentials !== undefined) {
    io.stdout(
      [
        "",
        "An administration client holding every scope was created. Store its secret now: it is not shown again.",
        `  export SERVICE_CONSOLE_CLIENT_ID=${shellQuote(bootstrapCredentials.clientId)}`,
        `  export SERVICE_CONSOLE_CLIENT_SECRET=${shellQuote(bootstrapCredentials.clientSecret)}`,
        `  export SERVICE_OAUTH_URL=${shellQuote(`${clientUrl}/oauth/token`)}`,
        "",
        "",
      ].join("\n"),
    );
  }
  if (withCluster) {
    try {
      await describeClusters(platform, io);
    } catch (error) {
      await platform.close();
      throw error;
    }
  }
  await waitForAbort(io.shutdownSignal);
  io.stdout("flowplane shutting down\n");
  // The platform stops its clusters first: their gateways verify tokens against its keys until the end.
  await platform.close();
  io.stdout("flowplane stopped\n");
}

/**
 * Waits for the first cluster's start to end and says where each of its parts listens (the platform launched it,
 * and every other cluster of the organization, as child processes).
 */
async function describeClusters(platform: RunningPlatform, io: CliIo): Promise<void> {
  const clusterId = platform.primaryClusterId;
  const provisioner = platform.provisioner;
  if (provisioner === undefined) return;
  const others = (await platform.clusters.list(platform.organizationId)).filter((entry) => entry.uuid !== clusterId);
  if (clusterId === undefined) {
    io.stdout("the first cluster was deleted; create clusters with: flowplane clusters create\n");
  } else {
    const cluster = await provisioner.whenStarted(clusterId);
    if (cluster === undefined) {
      const directory = await provisioner.directoryOf(clusterId);
      const failure = provisioner.startFailure(clusterId);
      // A start's failure names the log file to read when there is one; it is not said twice.
      throw new Error(
        failure === undefined
          ? `the local cluster could not be started; see the logs in ${directory ?? "its directory"}/logs`
          : `the local cluster could not be started (${failure})`,
      );
    }
    io.stdout(
      [
        `cluster ${clusterId} (the first cluster; flowplane clusters list shows every cluster)`,
        `cluster gateway at ${cluster.gatewayUrl} (topology: ${cluster.gatewayUrl}/v2/topology)`,
        `cluster management API at ${cluster.managementUrl} (resize with: flowplane cluster scale)`,
        `cluster secret in ${cluster.clusterSecretFile} (brokers and gateways on other machines need a copy)`,
        `${cluster.brokers.length} brokers:`,
        ...cluster.brokers.map(
          (broker) =>
            `  broker ${broker.nodeId}: cluster ${broker.clusterAddress}, management ${broker.managementUrl}, data ${broker.dataDirectory}, log ${broker.logFile}`,
        ),
        "",
      ].join("\n"),
    );
  }
  for (const other of others) {
    io.stdout(
      `cluster ${other.uuid} (${printable(other.name)}): gateway at ${other.links.gateway}, management API at ${other.links.management}\n`,
    );
  }
}

function addPlatformOptions(command: Command, io: CliIo, withCluster: boolean): Command {
  return command
    .option("-c, --config <file>", "YAML configuration file (keys like service.platform.port)")
    .option("-p, --port <port>", "port of the platform (service.platform.port)")
    .option("--data-directory <directory>", "where local data is kept (service.dataDirectory)")
    .option("--database-url <url>", "sqlite:<file> or postgres://… (service.database.url)")
    .option(
      "--set <key=value>",
      "any setting by its key, e.g. service.rateLimit.burst=10 (repeatable)",
      collectRepeated,
    )
    .addHelpText(
      "after",
      "\nPrecedence: flags win over the configuration file, which wins over SERVICE_* environment variables.\nCtrl-C or SIGTERM stops the platform cleanly.",
    )
    .action((options: StartOptions) => runPlatform(options, io, withCluster));
}

/**
 * Registers `flowplane start` (the platform and a local cluster of child processes) and `flowplane platform` (the
 * platform alone); both run until interrupted.
 */
export function registerStartCommands(program: Command, io: CliIo): void {
  addPlatformOptions(
    program
      .command("start")
      .description(
        "Start flowplane on this machine: the platform (token issuer and APIs) and a local cluster (3 brokers at first, one gateway).",
      ),
    io,
    true,
  );
  addPlatformOptions(
    program.command("platform").description("Start only the platform (token issuer, Administration and Modeler APIs)."),
    io,
    false,
  );
}

/**
 * The settings of a broker's first cluster shape that differ from their defaults: `flowplane start` ignores them (its
 * clusters' shapes come from their plans), which it says rather than leave an operator wondering why a setting of 32
 * partitions gave 3.
 */
function clusterShapeSettings(configuration: ReturnType<typeof loadConfiguration>): string[] {
  const defaults = loadConfiguration({ environment: {} }).broker.cluster;
  const cluster = configuration.broker.cluster;
  return (["clusterSize", "partitionsCount", "replicationFactor"] as const)
    .filter((name) => cluster[name] !== defaults[name])
    .map((name) => `service.broker.cluster.${name}=${cluster[name]}`);
}
