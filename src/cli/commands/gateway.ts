import type { Command } from "commander";
import { loadConfiguration } from "../../config/load.js";
import { watchSupervisor } from "../../platform/provisioner/supervision.js";
import type { CliIo } from "../io.js";
import { collectRepeated, settingAssignments, stopReason } from "../server-command.js";

interface GatewayCommandOptions {
  config?: string;
  port?: string;
  managementPort?: string;
  contactPoints?: string;
  set?: string[];
}

/** Turns the gateway options into configuration flags keyed like `service.gateway.port`. */
export function gatewayConfigurationFlags(options: GatewayCommandOptions): Record<string, string> {
  const flags = settingAssignments(options.set, "service.gateway.port=8080");
  // The dedicated flags win over --set, being the more specific way of saying the same thing.
  if (options.port !== undefined) flags["service.gateway.port"] = options.port;
  if (options.managementPort !== undefined) flags["service.management.port"] = options.managementPort;
  if (options.contactPoints !== undefined) flags["service.gateway.contactPoints"] = options.contactPoints;
  return flags;
}

async function runGateway(options: GatewayCommandOptions, io: CliIo): Promise<void> {
  const configuration = loadConfiguration({
    environment: io.environment,
    configFile: options.config,
    flags: gatewayConfigurationFlags(options),
  });
  // Loaded lazily so that client commands do not pay for the gateway's modules.
  const { startGateway } = await import("../../cluster/gateway/index.js");
  // Started by the local cluster's supervisor: when it is gone (even killed with SIGKILL), stop as on SIGTERM.
  const supervisor = watchSupervisor(io.environment);
  try {
    const gateway = await startGateway(configuration, io.logger === undefined ? {} : { logger: io.logger });
    io.stdout(`flowplane gateway listening at ${gateway.url} (management API at ${gateway.managementUrl})\n`);
    if ((await stopReason(io.shutdownSignal, supervisor)) === "supervisor") {
      io.stdout("flowplane gateway: the process that started it is gone; stopping\n");
    }
    io.stdout("flowplane gateway shutting down\n");
    await gateway.close();
    io.stdout("flowplane gateway stopped\n");
  } finally {
    supervisor?.stop();
  }
}

/** Registers `flowplane gateway`, which runs a cluster's gateway (REST and management APIs) until interrupted. */
export function registerGatewayCommand(program: Command, io: CliIo): void {
  program
    .command("gateway")
    .description("Start a cluster gateway: REST API (/v2, topology and messages) and management API (/actuator).")
    .option("-c, --config <file>", "YAML configuration file (keys like service.gateway.port)")
    .option("-p, --port <port>", "port of the REST API (service.gateway.port)")
    .option("--management-port <port>", "port of the management API (service.management.port)")
    .option("--contact-points <list>", "host:port cluster addresses of brokers (service.gateway.contactPoints)")
    .option(
      "--set <key=value>",
      "any setting by its key, e.g. service.gateway.requestTimeoutMs=5000 (repeatable)",
      collectRepeated,
    )
    .addHelpText(
      "after",
      "\nRequired: SERVICE_CLUSTER_SECRET or SERVICE_CLUSTER_SECRET_FILE, the secret of the brokers' cluster.\nPrecedence: flags win over the configuration file, which wins over SERVICE_* environment variables.\nCtrl-C or SIGTERM stops the gateway cleanly; started by `flowplane start` (FLOWPLANE_SUPERVISOR=ipc and an IPC\nchannel), it also stops when that exits.",
    )
    .action((options: GatewayCommandOptions) => runGateway(options, io));
}
