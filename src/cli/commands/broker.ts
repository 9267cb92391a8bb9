import type { Command } from "commander";
import pino from "pino";
import { loadConfiguration } from "../../config/load.js";
import { watchSupervisor } from "../../platform/provisioner/supervision.js";
import type { CliIo } from "../io.js";
import { collectRepeated, settingAssignments, stopReason } from "../server-command.js";

interface BrokerCommandOptions {
  config?: string;
  dataDirectory?: string;
  set?: string[];
}

/** Turns the broker options into configuration flags keyed like `service.broker.cluster.nodeId`. */
export function brokerConfigurationFlags(options: BrokerCommandOptions): Record<string, string> {
  const flags = settingAssignments(options.set, "service.broker.cluster.nodeId=1");
  if (options.dataDirectory !== undefined) flags["service.dataDirectory"] = options.dataDirectory;
  return flags;
}

async function runBroker(options: BrokerCommandOptions, io: CliIo): Promise<void> {
  const configuration = loadConfiguration({
    environment: io.environment,
    configFile: options.config,
    flags: brokerConfigurationFlags(options),
  });
  // Loaded lazily so that client commands do not pay for the broker's modules (LMDB, Raft).
  const { Broker, brokerOptionsFromConfiguration } = await import("../../cluster/broker/index.js");
  const { platformVersion } = await import("../../platform/version.js");
  const logger =
    io.logger ?? pino({ name: "flowplane-broker", level: configuration.log.level }, pino.destination({ fd: 2 }));
  // Started by the local cluster's supervisor: when it is gone (even killed with SIGKILL), stop as on SIGTERM.
  const supervisor = watchSupervisor(io.environment);
  try {
    const broker = await Broker.start(
      brokerOptionsFromConfiguration(configuration, { logger, version: platformVersion }),
    );
    const address = broker.clusterAddress;
    io.stdout(
      `flowplane broker ${broker.nodeId} listening: cluster ${address.host}:${address.port}, management ${broker.managementUrl}, data ${broker.dataDirectory}\n`,
    );
    if ((await stopReason(io.shutdownSignal, supervisor)) === "supervisor") {
      logger.warn("the process that started this broker is gone; stopping");
    }
    io.stdout(`flowplane broker ${broker.nodeId} shutting down\n`);
    await broker.close();
    io.stdout(`flowplane broker ${broker.nodeId} stopped\n`);
  } finally {
    supervisor?.stop();
  }
}

/** Registers `flowplane broker`, which runs one broker of a workflow-engine cluster until interrupted. */
export function registerBrokerCommand(program: Command, io: CliIo): void {
  program
    .command("broker")
    .description("Start one broker of a workflow-engine cluster (settings under service.broker.*).")
    .option("-c, --config <file>", "YAML configuration file (keys like service.broker.cluster.nodeId)")
    .option("--data-directory <directory>", "where local data is kept (service.dataDirectory)")
    .option(
      "--set <key=value>",
      "any setting by its key, e.g. service.broker.cluster.nodeId=1 (repeatable)",
      collectRepeated,
    )
    .addHelpText(
      "after",
      [
        "",
        "Environment: SERVICE_BROKER_CLUSTER_NODEID, _CLUSTERSIZE, _PARTITIONSCOUNT, _REPLICATIONFACTOR,",
        "_INITIALCONTACTPOINTS (host:port,… of running brokers), _CLUSTERPORT, SERVICE_BROKER_DATA_DIRECTORY,",
        "SERVICE_BROKER_MANAGEMENT_PORT. Flags win over the configuration file, which wins over the environment.",
        "Required: SERVICE_CLUSTER_SECRET or SERVICE_CLUSTER_SECRET_FILE, the secret shared by every broker and",
        "gateway of the cluster (generate one with `openssl rand -base64 32`).",
        "Ctrl-C or SIGTERM stops the broker cleanly; its data directory holds broker.pid while it runs.",
        "Started by `flowplane start` (FLOWPLANE_SUPERVISOR=ipc and an IPC channel), it also stops when that exits.",
      ].join("\n"),
    )
    .action((options: BrokerCommandOptions) => runBroker(options, io));
}
