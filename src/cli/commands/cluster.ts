/**
 * `flowplane cluster status|scale|cancel`: the cluster management API from the command line, with a live progress
 * display. For the local cluster of `flowplane start` (its brokers file in the data directory), `scale` also runs
 * the spec's recommended sequence itself: it starts the new broker processes before the change, and stops the
 * removed brokers and deletes their data once the change completed.
 */
import { existsSync } from "node:fs";
import { join, resolve } from "node:path";
import { type Command, InvalidArgumentError } from "commander";
import { brokerHasStarted } from "../../client/broker-health.js";
import {
  brokerDelta,
  ClusterManagementClient,
  type ClusterPatch,
  type ClusterStatus,
  gatewayAudience,
  type ScaleResponse,
} from "../../client/cluster.js";
import { requireClusterManagementUrl } from "../../client/environment.js";
import { ApiError } from "../../client/errors.js";
import { MAX_BROKER_ID, MAX_PARTITION_COUNT } from "../../cluster/topology/distribution.js";
import {
  addLocalBrokers,
  BROKERS_FILE_NAME,
  readLocalBrokers,
  readLocalGateway,
  removeLocalBrokers,
} from "../../platform/provisioner/local-brokers.js";
import { monotonicNowMs } from "../../time/monotonic.js";
import { formatClusterStatus, formatPlan, formatProgressLine } from "../cluster-display.js";
import { type CliIo, CommandFailure, Interrupted, UsageError } from "../io.js";
import { ProgressLines } from "../progress-lines.js";
import { sleepUnlessInterrupted } from "../sleep.js";
import { printable, printableJson } from "../terminal-text.js";
import { clientEnvironmentHelp, clusterManagementUrlHelp, createClientContext } from "./client-context.js";

interface CommonOptions {
  json?: boolean;
  audience: string;
}

interface ScaleOptions extends CommonOptions {
  brokers?: number;
  add?: number[];
  remove?: number[];
  partitions?: number;
  replicationFactor?: number;
  dryRun?: boolean;
  force?: boolean;
  watch?: boolean;
  dataDirectory?: string;
  clusterId?: string;
  local: boolean;
}

/** How often a watched change is polled. */
const POLL_INTERVAL_MS = 500;

/** Longest wait for new local broker processes to come up and be seen by the coordinator. */
const NEW_BROKERS_TIMEOUT_MS = 60_000;

const clusterEnvironmentHelp = `${clientEnvironmentHelp}
${clusterManagementUrlHelp}
  SERVICE_DATA_DIRECTORY            data directory of a local cluster (default ./data)`;

/**
 * A parser of a whole-number option from 1 to `maximum`. The API refuses more as well, but naming its own field
 * (`body/brokers/count must be <= 1024`) rather than the option the user typed.
 */
export function countOption(maximum: number): (value: string) => number {
  return (value) => {
    const count = value.trim();
    if (!/^\d+$/.test(count) || Number(count) < 1 || Number(count) > maximum) {
      throw new InvalidArgumentError(`It must be a whole number from 1 to ${maximum}.`);
    }
    return Number(count);
  };
}

/** Parses a number of brokers, or a replication factor (one replica per broker at most). */
export const parseBrokerCount = countOption(MAX_BROKER_ID + 1);

/** Parses a partition count. */
export const parsePartitionCount = countOption(MAX_PARTITION_COUNT);

/** Parses comma-separated broker ids, each from 0 to MAX_BROKER_ID and named once. */
export function parseIds(value: string): number[] {
  const ids = value.split(",").map((item) => item.trim());
  if (!ids.every((id) => /^\d+$/.test(id) && Number(id) <= MAX_BROKER_ID)) {
    throw new InvalidArgumentError(`It must be comma-separated broker ids from 0 to ${MAX_BROKER_ID}, e.g. 3,4.`);
  }
  const numbers = ids.map(Number);
  const repeated = numbers.find((id, position) => numbers.indexOf(id) !== position);
  if (repeated !== undefined) throw new InvalidArgumentError(`It names broker ${repeated} twice.`);
  return numbers;
}

function createClusterClient(io: CliIo, options: CommonOptions): ClusterManagementClient {
  return clusterClientWithUrl(io, options).client;
}

/** The client of the cluster management API and the URL it calls. */
function clusterClientWithUrl(
  io: CliIo,
  options: CommonOptions,
): { client: ClusterManagementClient; managementUrl: string } {
  const { settings, tokenProvider } = createClientContext(io);
  const managementUrl = requireClusterManagementUrl(settings);
  const client = new ClusterManagementClient({ baseUrl: managementUrl, tokenProvider, audience: options.audience });
  return { client, managementUrl };
}

/** "broker 3" or "brokers 3, 4". */
function brokerIds(ids: readonly number[]): string {
  return `${ids.length === 1 ? "broker" : "brokers"} ${ids.join(", ")}`;
}

/**
 * Where the command looked for a local cluster (`searched`, null with --no-local) and the cluster's directory when
 * one is there (`found`, its brokers file): the first cluster's `cluster/`, or with --cluster-id the directory of that
 * cluster of the Administration API. A usage error when --data-directory names a directory holding none, or
 * when that cluster's gateway answered elsewhere than `managementUrl` at its last start: the command would start and
 * stop the broker processes of one cluster while it changes another.
 */
function localClusterDirectory(
  io: CliIo,
  options: ScaleOptions,
  managementUrl: string,
): { found: string | null; searched: string | null } {
  if (!options.local) return { found: null, searched: null };
  const dataDirectory = resolve(options.dataDirectory ?? io.environment.SERVICE_DATA_DIRECTORY ?? "data");
  if (
    options.clusterId !== undefined &&
    !/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(options.clusterId)
  ) {
    throw new UsageError("--cluster-id must be a cluster's id (a UUID, see flowplane clusters list)");
  }
  const clusterDirectory =
    options.clusterId === undefined
      ? join(dataDirectory, "cluster")
      : join(dataDirectory, "clusters", options.clusterId.toLowerCase());
  if (!existsSync(join(clusterDirectory, BROKERS_FILE_NAME))) {
    // Given with --data-directory, a directory without a local cluster is a mistake. SERVICE_DATA_DIRECTORY or the
    // default ./data are where the command looks on every call, and it may well be meant for a cluster elsewhere,
    // whose brokers it does not start.
    if (options.dataDirectory !== undefined) {
      throw new UsageError(
        `no local cluster in ${clusterDirectory} (it has no ${BROKERS_FILE_NAME}): give the data directory of ` +
          "flowplane start, or leave --data-directory out to only call the API",
      );
    }
    return { found: null, searched: clusterDirectory };
  }
  const recorded = readLocalGateway(clusterDirectory)?.managementUrl;
  if (recorded !== undefined && !sameEndpoint(recorded, managementUrl)) {
    throw new UsageError(
      `the local cluster in ${clusterDirectory} has its management API at ${recorded}, but the command calls ` +
        `${managementUrl} (SERVICE_CLUSTER_MANAGEMENT_URL): give that cluster's --cluster-id (flowplane clusters ` +
        "list), or --no-local to only call the API",
    );
  }
  return { found: clusterDirectory, searched: clusterDirectory };
}

/**
 * Whether two URLs name the same host and port: the same name, or two names of this machine's loopback interface
 * (`localhost`, 127.0.0.0/8, `::1`), which is where a local cluster listens.
 */
function sameEndpoint(left: string, right: string): boolean {
  const endpoint = (url: string) => {
    const parsed = new URL(url);
    const host = parsed.hostname.toLowerCase().replace(/^\[|\]$/g, "");
    const loopback = host === "localhost" || host === "::1" || /^127\.\d+\.\d+\.\d+$/.test(host);
    const port = parsed.port !== "" ? parsed.port : parsed.protocol === "https:" ? "443" : "80";
    return { host: loopback ? "loopback" : host, port };
  };
  const [first, second] = [endpoint(left), endpoint(right)];
  return first.host === second.host && first.port === second.port;
}

/** The PATCH body of the scale options, given the cluster as it is. */
export function scalePatch(options: ScaleOptions, status: ClusterStatus): ClusterPatch {
  const brokerFlags = [options.brokers !== undefined, options.add !== undefined || options.remove !== undefined];
  if (brokerFlags.every(Boolean)) throw new UsageError("give either --brokers or --add/--remove, not both");
  const patch: ClusterPatch = {};
  if (options.brokers !== undefined) patch.brokers = { count: options.brokers };
  else if (options.add !== undefined || options.remove !== undefined) {
    patch.brokers = {
      ...(options.add === undefined ? {} : { add: options.add }),
      ...(options.remove === undefined ? {} : { remove: options.remove }),
    };
  }
  if (options.partitions !== undefined || options.replicationFactor !== undefined) {
    const counts = new Map<number, number>();
    for (const broker of status.brokers) {
      for (const partition of broker.partitions) counts.set(partition.id, (counts.get(partition.id) ?? 0) + 1);
    }
    const currentReplicationFactor = counts.size === 0 ? 1 : Math.min(...counts.values());
    patch.partitions = {
      count: options.partitions ?? counts.size,
      replicationFactor: options.replicationFactor ?? currentReplicationFactor,
    };
  }
  if (patch.brokers === undefined && patch.partitions === undefined) {
    throw new UsageError(
      "say what to change: --brokers N, --add ids, --remove ids, --partitions N or --replication-factor N",
    );
  }
  return patch;
}

/** Whether the API refused the change because a broker to add is not reachable yet (it may still be starting). */
function refusedAsNotReachable(error: unknown): error is ApiError {
  return error instanceof ApiError && error.status === 400 && /not running and reachable/.test(error.detail);
}

/**
 * Polls the change until it ends, showing its progress: on a terminal one line rewritten in place, elsewhere a line
 * whenever it moves on (and every few seconds). Returns the final status.
 */
async function watchChange(
  client: ClusterManagementClient,
  changeId: number,
  io: CliIo,
  json: boolean,
): Promise<ClusterStatus> {
  const progress = new ProgressLines(io, io.stdoutIsTerminal === true && !json);
  // Bounded by the change ending, or by the user (Ctrl-C aborts the shutdown signal).
  for (;;) {
    const status = await client.status();
    const ended =
      status.lastChange !== undefined && status.lastChange.id >= changeId && status.pendingChange?.id !== changeId;
    if (!json) {
      const line = `change ${changeId}: ${ended ? printable(status.lastChange?.status ?? "") : formatProgressLine(status)}`;
      progress.show(line, ended);
    }
    if (ended) return status;
    if (io.shutdownSignal.aborted) {
      progress.interrupt();
      throw new Interrupted(`stopped watching; change ${changeId} goes on (see flowplane cluster status)`);
    }
    await sleepUnlessInterrupted(POLL_INTERVAL_MS, io.shutdownSignal);
  }
}

/** Waits until the new local brokers have started (their health says RUNNING, not only that they listen). */
async function waitForBrokers(clusterDirectory: string, ids: readonly number[], io: CliIo): Promise<void> {
  const entries = (readLocalBrokers(clusterDirectory)?.brokers ?? []).filter((entry) => ids.includes(entry.nodeId));
  const deadlineMs = monotonicNowMs() + NEW_BROKERS_TIMEOUT_MS;
  for (const entry of entries) {
    for (;;) {
      if (await brokerHasStarted(`http://127.0.0.1:${entry.managementPort}`, 1_000)) break;
      if (io.shutdownSignal.aborted) {
        throw new Interrupted(`stopped waiting for broker ${entry.nodeId}; the brokers started go on`);
      }
      if (monotonicNowMs() > deadlineMs) {
        throw new Error(
          `broker ${entry.nodeId} did not start within ${NEW_BROKERS_TIMEOUT_MS / 1000} s; is flowplane start running?`,
        );
      }
      await sleepUnlessInterrupted(250, io.shutdownSignal);
    }
  }
}

async function scale(io: CliIo, options: ScaleOptions): Promise<void> {
  const { client, managementUrl } = clusterClientWithUrl(io, options);
  // Checked before anything is asked or started.
  const local = localClusterDirectory(io, options, managementUrl);
  const clusterDirectory = local.found;
  const json = options.json === true;
  const status = await client.status();
  if (status.pendingChange !== undefined && options.dryRun !== true) {
    throw new CommandFailure(
      `change ${status.pendingChange.id} is in progress; wait for it (flowplane cluster status) or cancel it (flowplane cluster cancel)`,
    );
  }
  const patch = scalePatch(options, status);
  const { added, removed } = brokerDelta(
    patch,
    status.brokers.map((broker) => broker.id),
  );
  const say = (text: string): void => {
    if (!json) io.stdout(text);
  };
  if (clusterDirectory !== null && options.dryRun !== true && added.length > 0) {
    say(`starting ${brokerIds(added)} of the local cluster in ${clusterDirectory}\n`);
    await addLocalBrokers(clusterDirectory, "127.0.0.1", added);
    await waitForBrokers(clusterDirectory, added, io);
  }
  let response: ScaleResponse;
  // The coordinator learns of a new broker by gossip a moment after it starts: a bounded retry covers it.
  for (let attempt = 0; ; attempt += 1) {
    try {
      response = await client.patch(patch, { dryRun: options.dryRun === true, force: options.force === true });
      break;
    } catch (error) {
      if (clusterDirectory === null && local.searched !== null && refusedAsNotReachable(error)) {
        throw new CommandFailure(
          `${error.detail} (HTTP 400). This command starts new brokers only for a local cluster, and found none in ` +
            `${local.searched}: run it where the data directory of flowplane start is, give --data-directory, or ` +
            "start the brokers the API names yourself (flowplane broker)",
        );
      }
      if (clusterDirectory === null || !refusedAsNotReachable(error) || attempt >= NEW_BROKERS_TIMEOUT_MS / 500)
        throw error;
      await sleepUnlessInterrupted(500, io.shutdownSignal);
    }
  }
  // With --json the answers are printed as they come, one document after the other: the plan, then (when the
  // command follows the change) the monitoring answer it ended on.
  if (json) io.stdout(`${printableJson(response)}\n`);
  say(formatPlan(response, options.dryRun === true));
  if (options.dryRun === true || response.plannedChanges.length === 0) return;
  if (json && options.watch !== true && clusterDirectory === null) return;
  if (removed.length > 0 && clusterDirectory === null) {
    say(
      `Keep ${brokerIds(removed)} running until change ${response.changeId} completes: their partitions move away first. ` +
        "Stopping one earlier stalls the change, and a partition left with a single replica can lose data. " +
        "Then stop them and delete their data.\n",
    );
  }
  if (options.watch !== true && clusterDirectory === null) {
    say(`Follow it with: flowplane cluster status --watch\n`);
    return;
  }
  const final = await watchChange(client, response.changeId, io, json);
  if (json) io.stdout(`${printableJson(final)}\n`);
  if (final.lastChange?.status !== "COMPLETED") {
    // The status is the server's text: one line, so that it cannot forge further lines of the message.
    throw new Error(printable(`change ${response.changeId} ended ${final.lastChange?.status ?? "unknown"}`));
  }
  if (clusterDirectory !== null && removed.length > 0) {
    removeLocalBrokers(clusterDirectory, removed);
    say(
      `${brokerIds(removed)} left the cluster; the local cluster stops ${removed.length === 1 ? "it and deletes its" : "them and deletes their"} data\n`,
    );
  }
}

/** Registers `flowplane cluster status|scale|cancel`. */
export function registerClusterCommands(program: Command, io: CliIo): void {
  const cluster = program
    .command("cluster")
    .description("Resize the running cluster and watch the change (cluster management API, scope cluster).")
    .addHelpText("after", clusterEnvironmentHelp);

  cluster
    .command("status")
    .description("Show the brokers and their partitions, the last change and the running one with its progress.")
    .option("--json", "print the API's answer as JSON")
    .option("--watch", "follow the running change until it ends")
    .option("--audience <audience>", "audience of gateway tokens", gatewayAudience)
    .action(async (options: CommonOptions & { watch?: boolean }) => {
      const client = createClusterClient(io, options);
      const status = await client.status();
      if (options.watch === true && status.pendingChange !== undefined) {
        const final = await watchChange(client, status.pendingChange.id, io, options.json === true);
        if (options.json === true) io.stdout(`${printableJson(final)}\n`);
        else io.stdout(formatClusterStatus(final));
        return;
      }
      io.stdout(options.json === true ? `${printableJson(status)}\n` : formatClusterStatus(status));
    });

  cluster
    .command("scale")
    .description(
      "Change the brokers, partitions or replication factor. With the local cluster of flowplane start, new brokers are started first and removed ones stopped (and their data deleted) after the change.",
    )
    .option("--brokers <count>", "the new number of brokers (ids 0..count-1)", parseBrokerCount)
    .option("--add <ids>", "broker ids to add, e.g. 3,4", parseIds)
    .option("--remove <ids>", "broker ids to remove, e.g. 4", parseIds)
    .option("--partitions <count>", "the new partition count (experimental; never lower)", parsePartitionCount)
    .option("--replication-factor <count>", "replicas per partition", parseBrokerCount)
    .option("--dry-run", "show the plan, change nothing")
    .option(
      "--force",
      "remove brokers that are gone for good without moving their partitions (data only they held is lost)",
    )
    .option("--watch", "follow the change until it ends (always done for the local cluster)")
    .option("--json", "print the API's answers as JSON")
    .option(
      "--data-directory <directory>",
      "data directory of the local cluster (default SERVICE_DATA_DIRECTORY or ./data)",
    )
    .option(
      "--cluster-id <id>",
      "a cluster created through the Administration API, whose broker processes to start and stop (default: the first cluster); point SERVICE_CLUSTER_MANAGEMENT_URL at its management link",
    )
    .option("--no-local", "never start or stop local broker processes, even if a local cluster is found")
    .option("--audience <audience>", "audience of gateway tokens", gatewayAudience)
    .action((options: ScaleOptions) => scale(io, options));

  cluster
    .command("cancel")
    .description("Cancel the running change (operations already applied stay applied).")
    .argument("[changeId]", "the change to cancel (default: the one in progress)")
    .option("--json", "print the API's answer as JSON")
    .option("--audience <audience>", "audience of gateway tokens", gatewayAudience)
    .action(async (changeIdText: string | undefined, options: CommonOptions) => {
      const client = createClusterClient(io, options);
      let changeId: number;
      if (changeIdText === undefined) {
        const pending = (await client.status()).pendingChange;
        if (pending === undefined) throw new CommandFailure("no change is in progress; there is nothing to cancel");
        changeId = pending.id;
      } else {
        if (!/^\d+$/.test(changeIdText))
          throw new UsageError(`change id ${JSON.stringify(changeIdText)} is not a number`);
        changeId = Number(changeIdText);
      }
      const status = await client.cancel(changeId);
      io.stdout(
        options.json === true
          ? `${printableJson(status)}\n`
          : `Change ${changeId} cancelled; operations already applied stay applied.\n${formatClusterStatus(status)}`,
      );
    });
}
