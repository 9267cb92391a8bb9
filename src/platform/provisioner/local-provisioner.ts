/**
 * The built-in provisioner of region `local`: every cluster runs as child processes of the platform's process
 * (`startLocalCluster`), with one directory per cluster under the data directory (`<data>/clusters/<cluster id>`;
 * the primary cluster, the one `flowplane start` has always run, keeps `<data>/cluster`, so an installation of an
 * earlier version keeps its data where it is). A cluster's directory, its gateway's ports and its brokers' ports
 * are recorded in the store when it is first launched, so a restarted platform launches it at the same addresses.
 *
 * The brokers file in the cluster's directory stays the desired set of brokers while the cluster runs (what
 * `flowplane cluster scale` edits, local-brokers.ts); the store's copy of the brokers' ports follows it at every
 * launch and stop, and the file is written again from the store if it went missing.
 *
 * The actions on one cluster (prepare, launch, stop, removal, restore, adding and removing brokers) run one at a
 * time, in the order they were asked for (`serialized`); a cluster's start goes on in the background once launched.
 */
import { existsSync, readFileSync, renameSync, rmSync } from "node:fs";
import { basename, dirname, join, resolve } from "node:path";
import type { Kysely } from "kysely";
import type { Logger } from "pino";
import {
  type AccessPolicy,
  openAccessPolicy,
  serializeAccessPolicy,
  withWritesPaused,
} from "../../auth/access-policy.js";
import { ownPrivateDirectory, replacePrivateFile, syncDirectory } from "../../files/private-files.js";
import type { PlatformDatabase } from "../store/schema.js";
import { BROKERS_DIRECTORY_NAME } from "./child-environment.js";
import {
  addLocalBrokers,
  BROKERS_FILE_NAME,
  brokerPorts,
  freePorts,
  type LocalBrokerPorts,
  readLocalBrokers,
  removeLocalBrokers,
  replaceBrokerPort,
  writeLocalBrokers,
} from "./local-brokers.js";
import {
  type LocalCluster,
  type LocalClusterChildEvent,
  type LocalClusterOptions,
  localBrokerSettings,
  PORT_IN_USE_RETRIES,
  startLocalCluster,
} from "./local-cluster.js";
import { runRestoreCommand } from "./local-restore.js";
import type { LogFileLimits } from "./log-rotation.js";
import { brokerProcessName, defaultCommand, PortInUseError, portNotChosenAgainError } from "./managed-child.js";
import type {
  ClusterEndpoints,
  ClusterProcessExit,
  ClusterSpecification,
  ProvisionedBroker,
  ProvisionedState,
  Provisioner,
  RestoreTarget,
} from "./provisioner.js";
import {
  DEFAULT_DATA_HOLDER_WAIT_MS,
  DISCARDED_BROKERS_DIRECTORY_NAME,
  PREVIOUS_BROKERS_DIRECTORY_NAME,
  PREVIOUS_BROKERS_FILE_NAME,
  putBackInterruptedRestore,
  RESTORE_CONFIGURATION_FILE_NAME,
} from "./restore-layout.js";
import { reconcileWritesPause, resumeWrites } from "./writes-pause.js";

/** Name of the access policy file in a cluster's directory. */
export const ACCESS_POLICY_FILE_NAME = "access-policy.json";

/**
 * Longest a committed restore waits for its cluster's gateway to take writes again before it ends anyway, and how often
 * the pause of one whose policy file could not be written is tried again.
 */
const DEFAULT_WRITES_RESUME = { waitMs: 10_000, retryMs: 5_000 } as const;

/** Name of the folder of a cluster's backup store, in the cluster's directory. */
const BACKUPS_DIRECTORY_NAME = "backups";

/** Name of the folder of the clusters other than the primary one. */
export const CLUSTERS_DIRECTORY_NAME = "clusters";

/** Options of the local provisioner. */
export interface LocalProvisionerOptions {
  database: Kysely<PlatformDatabase>;
  /** flowplane's data directory. */
  dataDirectory: string;
  /** Interface every part listens on (default 127.0.0.1). */
  host?: string;
  /** Configured ports of the primary cluster's gateway (0: a free port, chosen once and recorded). */
  primaryGatewayPort: number;
  primaryManagementPort: number;
  /** The platform's issuer URL: gateways verify tokens against its JWKS. */
  issuerUrl: string;
  /** Audience of gateway tokens (configuration `audiences.gateway`). */
  gatewayAudience?: string;
  /**
   * Lifetime of the platform's tokens (configuration `token.lifetimeSeconds`): how long a gateway keeps verifying with
   * the last key set it fetched while the platform cannot be reached.
   */
  tokenLifetimeSeconds?: number;
  /** Origins of the platform's web console, which every gateway allows for cross-origin calls (comma-separated). */
  allowedOrigins?: string;
  logLevel?: string;
  /** Environment the children inherit before the provisioner's settings (default: this process's). */
  environment?: Readonly<Record<string, string | undefined>>;
  /** The flowplane command line to run children with (tests); default this installation's. */
  command?: { entry: string; nodeArguments: readonly string[] };
  readyTimeoutMs?: number;
  stopTimeoutMs?: number;
  /**
   * Longest putting an interrupted restore's previous data back waits for processes of an earlier start that still
   * hold the brokers' data before it refuses to launch the cluster (default: the orphan deadline and a margin).
   */
  dataHolderWaitMs?: number;
  /**
   * How long a committed restore waits for its cluster's gateway to take writes again (default 10 s), and how often a
   * policy file that could not be written then is tried again (default 5 s).
   */
  writesResume?: { waitMs: number; retryMs: number };
  /** How large the clusters' log files may grow and how many older copies are kept (default 64 MiB and 3). */
  logFileLimits?: LogFileLimits;
  logger: Logger;
}

interface RunningEntry {
  state: ProvisionedState;
  /** How each child last ended unexpectedly, by process name, kept until it runs again. */
  readonly crashes: Map<string, { exitCode: number | null; signal: string | null }>;
  /** The crashes whose restart is pending, by process name, in the order they happened. */
  readonly restarting: Map<string, ClusterProcessExit>;
  /** Settles when the start has ended, ready or failed. */
  started: Promise<void>;
  /** Why the start failed, while the cluster stays failed. */
  failure: string | undefined;
  cluster: LocalCluster | undefined;
  /** Aborts a start that is still waiting for readiness. */
  abort: AbortController;
}

interface Placement {
  directory: string;
  gatewayPort: number;
  managementPort: number;
}

/** The ports of the cluster's gateway, which no broker of it may be given. */
function gatewayPortsOf(placement: Placement): Set<number> {
  return new Set([placement.gatewayPort, placement.managementPort]);
}

/** Runs clusters as local child processes; see the module comment. */
export class LocalProvisioner implements Provisioner {
  readonly region = "local";
  /** Interface every cluster's processes listen on, and the host of their links. */
  readonly host: string;
  private readonly running = new Map<string, RunningEntry>();
  private readonly processExitListeners: ((exit: ClusterProcessExit) => void)[] = [];
  /** Restores under way, by cluster: launching such a cluster waits for the restore, removing it waits for its end. */
  private readonly restoring = new Map<string, Promise<void>>();
  /**
   * Why a cluster's writes are paused, for each cluster whose restore started the restored cluster and has not
   * committed yet. Every policy file this provisioner writes carries it, and every other launch clears it.
   */
  private readonly writesPaused = new Map<string, string>();
  /**
   * The end of the latest lifecycle action queued for each cluster (launch, stop, removal, restore, adding or
   * removing brokers): they run one after the other per cluster, since each reads and moves the cluster's data and
   * processes across awaits. Two launches at once started two sets of processes (one never stopped), and two put
   * the previous data of an interrupted restore back twice, deleting it the second time.
   */
  private readonly lifecycle = new Map<string, Promise<unknown>>();
  /** Clusters removed since this provisioner started: an action queued behind the removal refuses to run. */
  private readonly removed = new Set<string>();
  private closed = false;

  constructor(private readonly options: LocalProvisionerOptions) {
    this.host = options.host ?? "127.0.0.1";
  }

  /** The directory a cluster is given on its first launch. */
  private directoryFor(specification: ClusterSpecification): string {
    const dataDirectory = resolve(this.options.dataDirectory);
    return specification.primary
      ? join(dataDirectory, "cluster")
      : join(dataDirectory, CLUSTERS_DIRECTORY_NAME, specification.clusterId);
  }

  /**
   * Where a cluster recorded at `recordedDirectory` is now: its place under the configured data directory. A data
   * directory moved or copied elsewhere keeps its clusters inside it, so a cluster always runs where the data
   * directory now is, never at the path recorded when it was elsewhere (which started it anew and empty there, or,
   * for a copy, drove the original installation's brokers).
   */
  private currentDirectory(recordedDirectory: string, clusterId: string): string {
    const dataDirectory = resolve(this.options.dataDirectory);
    const secondary =
      basename(recordedDirectory) === clusterId && basename(dirname(recordedDirectory)) === CLUSTERS_DIRECTORY_NAME;
    return secondary ? join(dataDirectory, CLUSTERS_DIRECTORY_NAME, clusterId) : join(dataDirectory, "cluster");
  }

  private async recordedPlacement(clusterId: string): Promise<Placement | undefined> {
    const row = await this.options.database
      .selectFrom("local_cluster_placements")
      .select(["directory", "gateway_port", "management_port"])
      .where("cluster_id", "=", clusterId)
      .executeTakeFirst();
    if (row === undefined) return undefined;
    const directory = this.currentDirectory(row.directory, clusterId);
    if (directory !== row.directory) {
      this.options.logger.warn(
        { clusterId, recordedDirectory: row.directory, directory },
        "the data directory moved since the cluster was placed: it runs in the data directory as it is now",
      );
      await this.options.database
        .updateTable("local_cluster_placements")
        .set({ directory })
        .where("cluster_id", "=", clusterId)
        .execute();
    }
    return { directory, gatewayPort: row.gateway_port, managementPort: row.management_port };
  }

  /**
   * Every port recorded for a cluster, stopped ones included: a stopped cluster's ports are free for the system but
   * it listens there again when woken, so no other cluster may be given one of them.
   */
  private async recordedPorts(): Promise<Set<number>> {
    const { database } = this.options;
    const placements = await database
      .selectFrom("local_cluster_placements")
      .select(["gateway_port", "management_port"])
      .execute();
    const brokers = await database
      .selectFrom("local_cluster_brokers")
      .select(["cluster_port", "management_port"])
      .execute();
    return new Set([
      ...placements.flatMap((row) => [row.gateway_port, row.management_port]),
      ...brokers.flatMap((row) => [row.cluster_port, row.management_port]),
    ]);
  }

  /**
   * The cluster's place, recorded on the first call: its directory and its gateway's ports (none recorded for another
   * cluster). The primary cluster follows the configured ports whenever they are set (the operator may change them
   * between starts).
   */
  private async place(specification: ClusterSpecification): Promise<Placement> {
    const { database } = this.options;
    const recorded = await this.recordedPlacement(specification.clusterId);
    const configuredGateway = specification.primary ? this.options.primaryGatewayPort : 0;
    const configuredManagement = specification.primary ? this.options.primaryManagementPort : 0;
    if (recorded !== undefined) {
      const wanted = {
        ...recorded,
        gatewayPort: configuredGateway === 0 ? recorded.gatewayPort : configuredGateway,
        managementPort: configuredManagement === 0 ? recorded.managementPort : configuredManagement,
      };
      if (wanted.gatewayPort !== recorded.gatewayPort || wanted.managementPort !== recorded.managementPort) {
        await database
          .updateTable("local_cluster_placements")
          .set({ gateway_port: wanted.gatewayPort, management_port: wanted.managementPort })
          .where("cluster_id", "=", specification.clusterId)
          .execute();
      }
      return wanted;
    }
    // Two ports that differ from each other and from the configured ones: the system may hand out a port twice.
    const [freeGateway, freeManagement] = await freePorts(
      this.host,
      2,
      new Set([
        ...(await this.recordedPorts()),
        ...[configuredGateway, configuredManagement].filter((port) => port !== 0),
      ]),
    );
    if (freeGateway === undefined || freeManagement === undefined) {
      throw new Error("invariant violated: freePorts returns the count asked for");
    }
    const placement: Placement = {
      directory: this.directoryFor(specification),
      gatewayPort: configuredGateway === 0 ? freeGateway : configuredGateway,
      managementPort: configuredManagement === 0 ? freeManagement : configuredManagement,
    };
    await database
      .insertInto("local_cluster_placements")
      .values({
        cluster_id: specification.clusterId,
        directory: placement.directory,
        gateway_port: placement.gatewayPort,
        management_port: placement.managementPort,
      })
      .onConflict((conflict) => conflict.column("cluster_id").doNothing())
      .execute();
    // Another launch of the same cluster may have recorded its place first: the recorded one wins.
    return (await this.recordedPlacement(specification.clusterId)) ?? placement;
  }

  /** Makes the store's copy of the brokers' ports match the brokers file. */
  private async recordBrokers(clusterId: string, brokers: readonly LocalBrokerPorts[]): Promise<void> {
    await this.options.database.transaction().execute(async (transaction) => {
      await transaction.deleteFrom("local_cluster_brokers").where("cluster_id", "=", clusterId).execute();
      if (brokers.length === 0) return;
      await transaction
        .insertInto("local_cluster_brokers")
        .values(
          brokers.map((broker) => ({
            cluster_id: clusterId,
            node_id: broker.nodeId,
            cluster_port: broker.clusterPort,
            management_port: broker.managementPort,
          })),
        )
        .execute();
    });
  }

  /**
   * The brokers of the cluster: the brokers file when there is one; otherwise the ports the store recorded
   * (written back to the file), or free ports other than the gateway's and those recorded for other clusters for a
   * first launch (`chosen` true).
   */
  private async brokersOf(
    clusterId: string,
    placement: Placement,
    brokerCount: number,
  ): Promise<{ brokers: LocalBrokerPorts[]; chosen: boolean }> {
    const { directory } = placement;
    let chosen = false;
    if (readLocalBrokers(directory) === null) {
      const recorded = await this.options.database
        .selectFrom("local_cluster_brokers")
        .select(["node_id", "cluster_port", "management_port"])
        .where("cluster_id", "=", clusterId)
        .orderBy("node_id")
        .execute();
      if (recorded.length > 0) {
        writeLocalBrokers(directory, {
          brokers: recorded.map((row) => ({
            nodeId: row.node_id,
            clusterPort: row.cluster_port,
            managementPort: row.management_port,
          })),
        });
      } else {
        chosen = true;
      }
    }
    const ports = await brokerPorts(
      directory,
      this.host,
      brokerCount,
      chosen ? new Set([...gatewayPortsOf(placement), ...(await this.recordedPorts())]) : gatewayPortsOf(placement),
    );
    await this.recordBrokers(clusterId, ports.brokers);
    return { brokers: [...ports.brokers], chosen };
  }

  /** Records the cluster's place without starting it (idempotent), so its policy can be delivered first. */
  async prepare(specification: ClusterSpecification): Promise<void> {
    await this.serialized(specification.clusterId, async () => {
      const placement = await this.place(specification);
      ownPrivateDirectory(placement.directory);
    });
  }

  /**
   * Runs `action` once every lifecycle action queued for `clusterId` before it has ended, and before any queued after
   * it; refuses it when the cluster was removed meanwhile.
   */
  private serialized<Result>(clusterId: string, action: () => Promise<Result>): Promise<Result> {
    const previous = this.lifecycle.get(clusterId) ?? Promise.resolve();
    const run = previous
      .catch(() => undefined)
      .then(() => {
        if (this.removed.has(clusterId)) throw new Error(`cluster ${clusterId} was deleted`);
        return action();
      });
    const settled = run.catch(() => undefined);
    this.lifecycle.set(clusterId, settled);
    // The map forgets a cluster once its last queued action ended.
    void settled.then(() => {
      if (this.lifecycle.get(clusterId) === settled) this.lifecycle.delete(clusterId);
    });
    return run;
  }

  /** Launching a cluster whose restore runs does nothing: the restore starts it when it is done. */
  async launch(specification: ClusterSpecification): Promise<void> {
    if (this.restoring.has(specification.clusterId)) return;
    await this.serialized(specification.clusterId, async () => {
      if (this.restoring.has(specification.clusterId)) return;
      const placement = await this.recordedPlacement(specification.clusterId);
      if (placement !== undefined) await this.putBack(placement.directory, this.options.logger);
      await this.launchCluster(specification);
    });
  }

  /** Puts back what an interrupted restore of the cluster in `clusterDirectory` left (`putBackInterruptedRestore`). */
  private async putBack(clusterDirectory: string, logger: Logger): Promise<void> {
    await putBackInterruptedRestore(
      clusterDirectory,
      logger,
      this.options.dataHolderWaitMs ?? DEFAULT_DATA_HOLDER_WAIT_MS,
    );
  }

  private async launchCluster(specification: ClusterSpecification): Promise<void> {
    if (this.closed) throw new Error("the local provisioner is closed");
    const { clusterId } = specification;
    const existing = this.running.get(clusterId);
    if (existing !== undefined && (existing.state === "starting" || existing.state === "running")) return;
    const placement = await this.place(specification);
    ownPrivateDirectory(placement.directory);
    const { brokers, chosen } = await this.brokersOf(clusterId, placement, specification.shape.brokers);
    // The cluster's first launch: every port it has was chosen free by this provisioner (bar the configured ones of
    // the primary cluster), and none was used yet, so one another process took since can be chosen again.
    const chosenPorts = new Set<number>();
    if (chosen) {
      for (const broker of brokers) chosenPorts.add(broker.clusterPort).add(broker.managementPort);
      if (!specification.primary || this.options.primaryGatewayPort === 0) chosenPorts.add(placement.gatewayPort);
      if (!specification.primary || this.options.primaryManagementPort === 0) chosenPorts.add(placement.managementPort);
    }
    const policyFile = join(placement.directory, ACCESS_POLICY_FILE_NAME);
    if (!existsSync(policyFile)) {
      replacePrivateFile(policyFile, serializeAccessPolicy(openAccessPolicy(clusterId, specification.organizationId)));
    }
    // A pause an interrupted restore left in the file ends here; the restore's own launch starts with its pause.
    reconcileWritesPause(policyFile, this.writesPaused.get(clusterId));
    const abort = new AbortController();
    const entry: RunningEntry = {
      state: "starting",
      crashes: new Map(),
      restarting: new Map(),
      started: Promise.resolve(),
      failure: undefined,
      cluster: undefined,
      abort,
    };
    this.running.set(clusterId, entry);
    const logger = this.options.logger.child({ clusterId });
    entry.started = this.startCluster(specification, placement, entry, chosenPorts, logger).then(
      (cluster) => {
        entry.cluster = cluster;
        entry.state = "running";
      },
      (error: unknown) => {
        entry.state = abort.signal.aborted ? "stopped" : "failed";
        if (!abort.signal.aborted) {
          entry.failure = error instanceof Error ? error.message : String(error);
          logger.error({ err: error }, "the cluster could not be started; wake it to try again");
        }
      },
    );
  }

  /**
   * Starts the cluster's processes and waits for readiness. When a child could not listen on a port this launch chose
   * (`chosenPorts`), another process took it after it was found free: the port is chosen again and recorded, and the
   * cluster started again, a few times at most.
   */
  private async startCluster(
    specification: ClusterSpecification,
    placement: Placement,
    entry: RunningEntry,
    chosenPorts: Set<number>,
    logger: Logger,
  ): Promise<LocalCluster> {
    for (let retries = 0; ; retries += 1) {
      try {
        return await startLocalCluster({
          ...this.clusterOptions(specification, placement, logger),
          // Ports are chosen again here, where they are recorded: the cluster keeps them at its next launch.
          choosePortsAgain: false,
          signal: entry.abort.signal,
          onChildEvent: (event) => this.childEvent(specification.clusterId, entry, event),
        });
      } catch (error) {
        const retry =
          error instanceof PortInUseError &&
          chosenPorts.has(error.port) &&
          retries < PORT_IN_USE_RETRIES &&
          !entry.abort.signal.aborted &&
          !this.closed;
        if (!retry) throw error;
        let replacement: number;
        try {
          replacement = await this.replacePort(specification.clusterId, placement, error.port);
        } catch (failure) {
          throw portNotChosenAgainError(error, failure);
        }
        // Stopped or closed while the port was chosen again: nothing is started any more.
        if (entry.abort.signal.aborted || this.closed) throw error;
        chosenPorts.add(replacement);
        logger.warn(
          { process: error.processName, port: error.port, replacement },
          `another process took the ${error.purpose} ${error.port} chosen for ${error.processName} before it started; starting the cluster again with port ${replacement}`,
        );
      }
    }
  }

  /** Gives the gateway or the broker that was to listen on `port` another free port, recorded like the first. */
  private async replacePort(clusterId: string, placement: Placement, port: number): Promise<number> {
    const recorded = await this.recordedPorts();
    const brokerPort = await replaceBrokerPort(
      placement.directory,
      this.host,
      port,
      new Set([...gatewayPortsOf(placement), ...recorded]),
    );
    if (brokerPort !== undefined) {
      await this.recordBrokers(clusterId, readLocalBrokers(placement.directory)?.brokers ?? []);
      return brokerPort;
    }
    const brokers = readLocalBrokers(placement.directory)?.brokers ?? [];
    const taken = new Set([
      ...recorded,
      ...gatewayPortsOf(placement),
      ...brokers.flatMap((broker) => [broker.clusterPort, broker.managementPort]),
    ]);
    const [replacement] = await freePorts(this.host, 1, taken);
    if (replacement === undefined) throw new Error("invariant violated: freePorts returns the count asked for");
    if (placement.gatewayPort === port) placement.gatewayPort = replacement;
    else if (placement.managementPort === port) placement.managementPort = replacement;
    else throw new Error(`invariant violated: port ${port} is none of cluster ${clusterId}'s`);
    await this.options.database
      .updateTable("local_cluster_placements")
      .set({ gateway_port: placement.gatewayPort, management_port: placement.managementPort })
      .where("cluster_id", "=", clusterId)
      .execute();
    return replacement;
  }

  /** What `startLocalCluster` is given for the cluster, bar what belongs to one start (abort signal, listener). */
  private clusterOptions(
    specification: ClusterSpecification,
    placement: Placement,
    logger: Logger,
  ): LocalClusterOptions {
    return {
      dataDirectory: this.options.dataDirectory,
      clusterDirectory: placement.directory,
      accessPolicyFile: join(placement.directory, ACCESS_POLICY_FILE_NAME),
      // Each cluster keeps its backups in its own directory: clusters never see each other's backups (whose ids
      // would collide), and deleting a cluster deletes them.
      backupDirectory: join(placement.directory, BACKUPS_DIRECTORY_NAME),
      gatewayPort: placement.gatewayPort,
      managementPort: placement.managementPort,
      issuerUrl: this.options.issuerUrl,
      host: this.host,
      brokers: specification.shape.brokers,
      partitions: specification.shape.partitions,
      replicationFactor: specification.shape.replicationFactor,
      logger,
      ...(this.options.gatewayAudience === undefined ? {} : { gatewayAudience: this.options.gatewayAudience }),
      ...(this.options.tokenLifetimeSeconds === undefined
        ? {}
        : { tokenLifetimeSeconds: this.options.tokenLifetimeSeconds }),
      ...(this.options.allowedOrigins === undefined ? {} : { allowedOrigins: this.options.allowedOrigins }),
      ...(this.options.logLevel === undefined ? {} : { logLevel: this.options.logLevel }),
      ...(this.options.environment === undefined ? {} : { environment: this.options.environment }),
      ...(this.options.command === undefined ? {} : { command: this.options.command }),
      ...(this.options.readyTimeoutMs === undefined ? {} : { readyTimeoutMs: this.options.readyTimeoutMs }),
      ...(this.options.stopTimeoutMs === undefined ? {} : { stopTimeoutMs: this.options.stopTimeoutMs }),
      ...(this.options.logFileLimits === undefined ? {} : { logFileLimits: this.options.logFileLimits }),
    };
  }

  /**
   * Restores the cluster from backup `backupId` into `target`: stops it, moves its brokers' data and brokers file
   * aside, runs `flowplane restore --cluster-configuration` for every member (side by side) with the broker's own
   * environment, and starts it. Once the restored cluster is ready the restore is committed (the previous data renamed
   * to be discarded), `onRestored` awaited and the previous data deleted (at best effort; when `onRestored` throws it
   * is kept, so the platform's next start learns from `restoreCommitted` that the restore was committed); when
   * anything fails before the commit, the previous data and brokers are put back and the cluster started again before
   * the error is thrown. A platform that stops in between puts them back at the cluster's next launch, once no
   * process of the interrupted restore holds the brokers' data any more.
   */
  async restore(
    specification: ClusterSpecification,
    backupId: bigint,
    target: RestoreTarget,
    onRestored?: () => Promise<void>,
  ): Promise<void> {
    const { clusterId } = specification;
    if (this.restoring.has(clusterId)) throw new Error(`a restore of cluster ${clusterId} runs already`);
    const restore = this.serialized(clusterId, () =>
      this.restoreCluster(specification, backupId, target, onRestored),
    ).finally(() => this.restoring.delete(clusterId));
    this.restoring.set(clusterId, restore);
    await restore;
  }

  private async restoreCluster(
    specification: ClusterSpecification,
    backupId: bigint,
    target: RestoreTarget,
    onRestored: (() => Promise<void>) | undefined,
  ): Promise<void> {
    const { clusterId } = specification;
    const placement = await this.recordedPlacement(clusterId);
    if (placement === undefined) throw new Error(`cluster ${clusterId} was never started; there is nothing to restore`);
    const logger = this.options.logger.child({ clusterId, backupId });
    // What an interrupted restore left goes back first (a running cluster has nothing aside: its launch put it back),
    // so that the brokers listed below are the cluster's, not those an interrupted restore left in the brokers file.
    await this.putBack(placement.directory, logger);
    // Checked before anything stops: a member the provisioner does not run could not be restored.
    const members = new Set(target.brokerIds);
    const { brokers: runs } = await this.brokersOf(clusterId, placement, specification.shape.brokers);
    const unknown = [...members].filter((nodeId) => !runs.some((broker) => broker.nodeId === nodeId));
    if (members.size === 0) throw new Error("the cluster's configuration lists no broker; nothing was changed");
    if (unknown.length > 0) {
      throw new Error(
        `the cluster's configuration lists brokers ${[...members].join(", ")}, and the provisioner runs no broker ${unknown.join(", ")}; nothing was changed`,
      );
    }
    await this.stopCluster(clusterId);
    const brokersDirectory = join(placement.directory, BROKERS_DIRECTORY_NAME);
    const previousDirectory = join(placement.directory, PREVIOUS_BROKERS_DIRECTORY_NAME);
    const discardedDirectory = join(placement.directory, DISCARDED_BROKERS_DIRECTORY_NAME);
    const configurationFile = join(placement.directory, RESTORE_CONFIGURATION_FILE_NAME);
    // Everything up to and including the commit is undone by the put-back (in the catch, or at the next launch), so
    // no step that throws leaves the cluster stopped without its data, and none leaves it half committed.
    try {
      // The brokers file as it was, saved (durably) before any data moves: the put-back restores it whenever the
      // data is aside.
      replacePrivateFile(
        join(placement.directory, PREVIOUS_BROKERS_FILE_NAME),
        readFileSync(join(placement.directory, BROKERS_FILE_NAME), "utf8"),
      );
      if (existsSync(brokersDirectory)) renameSync(brokersDirectory, previousDirectory);
      else ownPrivateDirectory(previousDirectory);
      // Synced before the brokers file changes: after a power loss, the data is aside whenever the file says so.
      syncDirectory(placement.directory);
      // Brokers that run but are not members (a completed scale-down or a cancelled scale-up whose cleanup has not
      // run yet) are not restored and do not start with the restored cluster: were they started with empty data, one
      // counted among the founding brokers by its settings could take the first configuration while the members are
      // still starting. Their data and ports stay aside with the rest and go only once the restore is committed.
      const leaving = runs.map((broker) => broker.nodeId).filter((nodeId) => !members.has(nodeId));
      if (leaving.length > 0) {
        logger.info({ brokers: leaving }, "brokers that are not members of the cluster's configuration are removed");
        removeLocalBrokers(placement.directory, leaving);
      }
      replacePrivateFile(configurationFile, target.configurationDocument);
      const brokers = await localBrokerSettings(this.clusterOptions(specification, placement, logger));
      // The brokers restore side by side: each rebuilds the partitions it hosts on its own, and every one of them
      // ends (succeeded or refused) before the outcome is decided, so no restore still writes while the previous
      // data is put back.
      const outcomes = await Promise.allSettled(
        brokers.map(async (broker) => {
          ownPrivateDirectory(broker.dataDirectory);
          await runRestoreCommand({
            command: this.options.command ?? defaultCommand(),
            backupId,
            broker,
            configurationFile,
            logFile: join(placement.directory, "logs", `restore-${broker.nodeId}.log`),
          });
          logger.info({ nodeId: broker.nodeId }, "broker restored from the backup");
        }),
      );
      rmSync(configurationFile, { force: true });
      const refused = outcomes.find((outcome) => outcome.status === "rejected");
      if (refused !== undefined) throw refused.reason;
      // Until the commit, a failure puts the previous data back and every write the restored cluster took would be
      // lost with it; reads may go on.
      this.writesPaused.set(clusterId, `it is being restored from backup ${backupId}`);
      await this.launchCluster(specification);
      if ((await this.whenStarted(clusterId)) === undefined) {
        throw new Error("the restored cluster did not become ready; see its logs");
      }
      // The commit, the last step here: one rename, after which nothing puts the previous data back. Should it
      // throw, the previous data is still aside and putting it back is right.
      renameSync(previousDirectory, discardedDirectory);
    } catch (error) {
      logger.error({ err: error }, "the restore failed; putting the cluster's previous data back");
      try {
        await this.stopCluster(clusterId);
      } finally {
        // Only once the restored cluster is stopped: a policy delivered while it still ran must keep its writes
        // paused. The launch below writes the file without the pause.
        this.writesPaused.delete(clusterId);
      }
      // Should this throw, the cluster stays stopped with its previous data aside, and its next launch puts it back.
      await this.putBack(placement.directory, logger);
      await this.launchCluster(specification);
      // The restore ends once the cluster runs on its previous data again (or its start failed, which the
      // cluster's status then tells).
      await this.whenStarted(clusterId);
      throw error;
    }
    // Committed: nothing below may undo the restore or report it failed. Each step is taken at best effort, and the
    // put-back of the cluster's next launch deletes what was left to delete.
    const afterCommit = (step: string, work: () => void): void => {
      try {
        work();
      } catch (error) {
        logger.error({ err: error, step }, "a step after the restore's commit failed; the restored data stays");
      }
    };
    // Durable before the restore is recorded COMPLETED: a power loss must not bring back the previous data of a
    // restore the store calls completed.
    afterCommit("syncing the commit", () => syncDirectory(placement.directory));
    // The saved brokers file is stale from now on.
    afterCommit("deleting the saved brokers file", () =>
      rmSync(join(placement.directory, PREVIOUS_BROKERS_FILE_NAME), { force: true }),
    );
    // The restore ends once its cluster takes writes, so that whoever waited for it can write at once.
    this.writesPaused.delete(clusterId);
    await this.resumeWritesAfterRestore(clusterId, placement, logger);
    try {
      await onRestored?.();
    } catch (error) {
      // The previous data stays renamed to be discarded: that tells the platform's next start that this restore was
      // committed, which its record could not say.
      logger.error({ err: error }, "the restore is committed and could not be recorded; its next start records it");
      throw error;
    }
    afterCommit("deleting the previous data", () => rmSync(discardedDirectory, { recursive: true, force: true }));
  }

  /**
   * Ends the pause of a committed restore's cluster and waits, a while (`writesResume`), for its gateway to take writes.
   * A policy file that cannot be written (a full disk, right after a restore) is tried again in the background for as
   * long as the cluster runs: nothing else would end the pause. A cluster that stopped needs nothing: its next launch
   * writes the file without the pause.
   */
  private async resumeWritesAfterRestore(clusterId: string, placement: Placement, logger: Logger): Promise<void> {
    const entry = this.running.get(clusterId);
    const cluster = entry?.cluster;
    if (entry === undefined || cluster === undefined) return;
    const options = {
      policyFile: join(placement.directory, ACCESS_POLICY_FILE_NAME),
      managementUrl: cluster.managementUrl,
      stillRunning: () => !this.closed && !entry.abort.signal.aborted && this.running.get(clusterId) === entry,
    };
    const { waitMs, retryMs } = this.options.writesResume ?? DEFAULT_WRITES_RESUME;
    const result = await resumeWrites({ ...options, timeoutMs: waitMs });
    if (result.outcome !== "timed-out") return;
    if (result.writeError === undefined) {
      logger.warn(
        { waitedMs: waitMs },
        "the restored cluster's gateway still pauses writes; it takes them once it reads its access policy file",
      );
      return;
    }
    logger.error(
      { err: result.writeError, retryMs },
      "the restored cluster's access policy file could not be written, so its writes stay paused; trying again",
    );
    void resumeWrites({ ...options, timeoutMs: Number.POSITIVE_INFINITY, pollIntervalMs: retryMs }).then((retried) => {
      if (retried.outcome === "taken") logger.info("the restored cluster takes writes again");
    });
  }

  async restoreCommitted(clusterId: string): Promise<boolean> {
    const placement = await this.recordedPlacement(clusterId);
    return placement !== undefined && existsSync(join(placement.directory, DISCARDED_BROKERS_DIRECTORY_NAME));
  }

  /** Why the cluster's last start failed, while it stays failed (undefined otherwise). */
  startFailure(clusterId: string): string | undefined {
    const entry = this.running.get(clusterId);
    return entry?.state === "failed" ? entry.failure : undefined;
  }

  /** The running local cluster once its start has ended (undefined when it failed or is not launched). */
  async whenStarted(clusterId: string): Promise<LocalCluster | undefined> {
    const entry = this.running.get(clusterId);
    if (entry === undefined) return undefined;
    await entry.started;
    return entry.cluster;
  }

  async stop(clusterId: string): Promise<void> {
    await this.serialized(clusterId, () => this.stopCluster(clusterId));
  }

  private async stopCluster(clusterId: string): Promise<void> {
    const entry = this.running.get(clusterId);
    if (entry === undefined) return;
    this.running.delete(clusterId);
    entry.abort.abort();
    await entry.started;
    const cluster = entry.cluster;
    entry.cluster = undefined;
    entry.state = "stopped";
    if (cluster === undefined) return;
    await cluster.close();
    const placement = await this.recordedPlacement(clusterId);
    const listed = placement === undefined ? null : readLocalBrokers(placement.directory);
    if (listed !== null) await this.recordBrokers(clusterId, listed.brokers);
  }

  async remove(clusterId: string): Promise<void> {
    // Queued behind a restore under way (however it ends), so that it cannot start the cluster again once removed;
    // whatever is queued behind the removal refuses to run.
    await this.serialized(clusterId, async () => {
      await this.stopCluster(clusterId);
      const placement = await this.recordedPlacement(clusterId);
      if (placement !== undefined) rmSync(placement.directory, { recursive: true, force: true });
      await this.options.database.transaction().execute(async (transaction) => {
        await transaction.deleteFrom("local_cluster_brokers").where("cluster_id", "=", clusterId).execute();
        await transaction.deleteFrom("local_cluster_placements").where("cluster_id", "=", clusterId).execute();
      });
      this.removed.add(clusterId);
    });
  }

  async refresh(clusterId: string): Promise<void> {
    if (this.running.get(clusterId)?.state !== "running") return;
    const placement = await this.recordedPlacement(clusterId);
    if (placement === undefined) return;
    let listed: readonly LocalBrokerPorts[];
    try {
      listed = readLocalBrokers(placement.directory)?.brokers ?? [];
    } catch {
      // The running cluster keeps its brokers while the file is unreadable, and so does the record.
      return;
    }
    const recorded = await this.options.database
      .selectFrom("local_cluster_brokers")
      .select(["node_id", "cluster_port", "management_port"])
      .where("cluster_id", "=", clusterId)
      .orderBy("node_id")
      .execute();
    const same =
      recorded.length === listed.length &&
      recorded.every((row, index) => {
        const broker = listed[index];
        return (
          broker !== undefined &&
          broker.nodeId === row.node_id &&
          broker.clusterPort === row.cluster_port &&
          broker.managementPort === row.management_port
        );
      });
    if (!same) await this.recordBrokers(clusterId, listed);
  }

  async brokers(clusterId: string): Promise<ProvisionedBroker[]> {
    const placement = await this.recordedPlacement(clusterId);
    if (placement === undefined) return [];
    return (readLocalBrokers(placement.directory)?.brokers ?? []).map((broker) => ({
      nodeId: broker.nodeId,
      managementUrl: `http://${this.host}:${broker.managementPort}`,
    }));
  }

  /** Lists the brokers in the cluster's brokers file and has the running cluster start them. */
  async addBrokers(clusterId: string, nodeIds: readonly number[]): Promise<void> {
    await this.serialized(clusterId, async () => {
      const { placement, cluster } = await this.runningCluster(clusterId);
      await addLocalBrokers(
        placement.directory,
        this.host,
        nodeIds,
        new Set([...gatewayPortsOf(placement), ...(await this.recordedPorts())]),
      );
      await cluster.matchBrokersFile();
    });
  }

  /**
   * Takes the brokers off the cluster's brokers file and resolves once the running cluster has stopped them and
   * deleted their data, so that the same ids can be added again right after without meeting the old processes.
   */
  async removeBrokers(clusterId: string, nodeIds: readonly number[]): Promise<void> {
    await this.serialized(clusterId, async () => {
      const { placement, cluster } = await this.runningCluster(clusterId);
      removeLocalBrokers(placement.directory, nodeIds);
      await cluster.matchBrokersFile();
      // A removed broker's pending restart is no reason for the cluster to look degraded any more.
      const entry = this.running.get(clusterId);
      for (const nodeId of nodeIds) {
        entry?.restarting.delete(brokerProcessName(nodeId));
        entry?.crashes.delete(brokerProcessName(nodeId));
      }
    });
  }

  /**
   * The place of a cluster whose processes run: its brokers file is only followed while it runs (a stopped
   * cluster would start a removed broker's leftover data, or never delete it).
   */
  private async runningCluster(clusterId: string): Promise<{ placement: Placement; cluster: LocalCluster }> {
    const entry = this.running.get(clusterId);
    const placement = await this.recordedPlacement(clusterId);
    if (placement === undefined || entry?.state !== "running" || entry.cluster === undefined) {
      throw new Error(`cluster ${clusterId} does not run; its brokers can be changed only while it runs`);
    }
    return { placement, cluster: entry.cluster };
  }

  async removeForgotten(knownClusterIds: ReadonlySet<string>): Promise<void> {
    const placed = await this.options.database.selectFrom("local_cluster_placements").select("cluster_id").execute();
    for (const { cluster_id: clusterId } of placed) {
      if (knownClusterIds.has(clusterId)) continue;
      this.options.logger.warn({ clusterId }, "removing the data of a cluster whose deletion was interrupted");
      await this.remove(clusterId);
    }
  }

  async startStopped(clusterId: string): Promise<string[]> {
    const entry = this.running.get(clusterId);
    if (entry?.state !== "running" || entry.cluster === undefined) return [];
    return entry.cluster.startStopped();
  }

  state(clusterId: string): ProvisionedState {
    const entry = this.running.get(clusterId);
    if (entry === undefined) return "stopped";
    return entry.state === "running" && entry.restarting.size > 0 ? "degraded" : entry.state;
  }

  restartingProcess(clusterId: string): ClusterProcessExit | undefined {
    // The latest crash whose restart is still pending.
    return [...(this.running.get(clusterId)?.restarting.values() ?? [])].at(-1);
  }

  onProcessExit(listener: (exit: ClusterProcessExit) => void): void {
    this.processExitListeners.push(listener);
  }

  /** Follows a child's supervision: what ended unexpectedly, when it is restarted, when it runs again. */
  private childEvent(clusterId: string, entry: RunningEntry, event: LocalClusterChildEvent): void {
    if (event.event === "exited" && !event.requested) {
      entry.crashes.set(event.process, { exitCode: event.exitCode, signal: event.signal });
      return;
    }
    if (event.event === "restarting") {
      const crash = entry.crashes.get(event.process);
      const exit: ClusterProcessExit = {
        clusterId,
        process: event.process,
        exitCode: crash?.exitCode ?? null,
        signal: crash?.signal ?? null,
        restartInMs: event.restartInMs,
        restarts: event.restarts + 1,
      };
      // Deleted first, so that the map's order stays the order of the crashes.
      entry.restarting.delete(event.process);
      entry.restarting.set(event.process, exit);
      for (const listener of this.processExitListeners) listener(exit);
      return;
    }
    if (event.event === "started") {
      entry.crashes.delete(event.process);
      entry.restarting.delete(event.process);
    }
  }

  async endpoints(clusterId: string): Promise<ClusterEndpoints | undefined> {
    const placement = await this.recordedPlacement(clusterId);
    if (placement === undefined) return undefined;
    return {
      gatewayUrl: `http://${this.host}:${placement.gatewayPort}`,
      managementUrl: `http://${this.host}:${placement.managementPort}`,
    };
  }

  /** The cluster's directory, once placed. */
  async directoryOf(clusterId: string): Promise<string | undefined> {
    return (await this.recordedPlacement(clusterId))?.directory;
  }

  async applyAccessPolicy(clusterId: string, policy: AccessPolicy): Promise<void> {
    const placement = await this.recordedPlacement(clusterId);
    if (placement === undefined) {
      throw new Error(`invariant violated: cluster ${clusterId} has no place yet; prepare it before its policy`);
    }
    ownPrivateDirectory(placement.directory);
    replacePrivateFile(
      join(placement.directory, ACCESS_POLICY_FILE_NAME),
      serializeAccessPolicy(withWritesPaused(policy, this.writesPaused.get(clusterId))),
    );
  }

  async close(): Promise<void> {
    this.closed = true;
    // Not queued: closing must not wait for a restore to end (the next launch puts back what it left aside), and an
    // action queued meanwhile finds the provisioner closed.
    await Promise.all([...this.running.keys()].map((clusterId) => this.stopCluster(clusterId)));
  }
}
