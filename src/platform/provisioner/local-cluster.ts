/**
 * The local provisioner: runs one workflow-engine cluster on this machine as child processes of the flowplane
 * command line (`flowplane broker` ×N and `flowplane gateway`), configured through SERVICE_* environment variables,
 * with every file under `<dataDirectory>/cluster`. The platform never imports cluster code (DESIGN.md): it starts
 * the processes and talks to the gateway over HTTP like any other client.
 *
 * The brokers and their ports (cluster transport and management) are kept in `cluster/ports.json` (local-brokers.ts),
 * so a restart finds the same cluster at the same addresses while two flowplane instances with different data
 * directories (and gateway ports) run side by side. The file is also the desired set of brokers while the cluster
 * runs: a broker added to it is started, a broker removed from it is stopped and its data deleted (what
 * `flowplane cluster scale` does around a change).
 *
 * Every child authenticates its cluster connections with the local cluster's secret (`cluster-secret.ts`), whose
 * file the children are told in SERVICE_CLUSTER_SECRET_FILE; a secret or secret file inherited from this process's
 * environment is not passed on, so the local cluster always uses its own.
 *
 * Once the cluster is ready the children are supervised (`supervision.ts`): a child that crashes (exits with a
 * signal or a non-zero code without being asked to) is started again after a capped exponential backoff, and every
 * child stops by itself when the channel to this process closes, so killing this process leaves no orphans.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { closeSync, existsSync, openSync, readdirSync, rmSync } from "node:fs";
import { join, resolve } from "node:path";
import type { Logger } from "pino";
import { directoryHolder } from "../../files/directory-claim.js";
import { ownPrivateDirectory, privateFileMode } from "../../files/private-files.js";
import { monotonicNowMs } from "../../time/monotonic.js";
import {
  BROKER_PID_FILE_NAME,
  type BrokerSettingsContext,
  brokerDataDirectory,
  localBrokerEnvironment,
  localChildEnvironment,
  removeSetting,
  setSetting,
} from "./child-environment.js";
import { ensureLocalClusterSecret } from "./cluster-secret.js";
import {
  brokerPorts,
  freePorts,
  type LocalBrokerPorts,
  readLocalBrokers,
  replaceBrokerPort,
  writeLocalGateway,
} from "./local-brokers.js";
import { defaultLogFileLimits, type LogFileLimits, LogRotation } from "./log-rotation.js";
import {
  brokerProcessName,
  cancelRestart,
  defaultCommand,
  isRunning,
  type LocalClusterChildExit,
  type ManagedChild,
  managedChild,
  PortInUseError,
  portNotChosenAgainError,
  stopChild,
} from "./managed-child.js";
import { waitUntilReady } from "./ready-wait.js";
import { type RestartPolicy, restartDelayMs, restartPolicy } from "./supervision.js";

/** Options of `startLocalCluster`. */
export interface LocalClusterOptions {
  /** flowplane's data directory; the cluster lives in its `cluster/` folder unless `clusterDirectory` says. */
  dataDirectory: string;
  /** The cluster's own directory (brokers file, brokers' data, logs, secret); default `<dataDirectory>/cluster`. */
  clusterDirectory?: string;
  /**
   * The brokers' backup store (setting `service.backup.filesystem.basePath`); the environment's setting when absent.
   * The local provisioner gives each cluster `<cluster directory>/backups`.
   */
  backupDirectory?: string;
  /** The access policy file the gateway enforces (setting `service.gateway.accessPolicyFile`); none when absent. */
  accessPolicyFile?: string;
  /** Port of the gateway's REST API (0: a free port, chosen at every start). */
  gatewayPort: number;
  /** Port of the gateway's management API (0: a free port, chosen at every start). */
  managementPort: number;
  /**
   * Whether a port chosen here that another process took before its child listened is chosen again and the start
   * tried again (default true). A caller that records the ports it gives (the local provisioner) says false and
   * chooses again itself, so that no port is used without being recorded.
   */
  choosePortsAgain?: boolean;
  /** The platform's issuer URL: the gateway verifies tokens against its JWKS. */
  issuerUrl: string;
  /** Audience of gateway tokens (configuration `audiences.gateway`); the child's own default when absent. */
  gatewayAudience?: string;
  /**
   * Lifetime of the platform's tokens (configuration `token.lifetimeSeconds`), so that the gateway keeps the platform's
   * last key set in use as long as a token it verified may live; the child's own setting when absent.
   */
  tokenLifetimeSeconds?: number;
  /** Origins whose web pages (the platform's console) may call the gateway from a browser, comma-separated. */
  allowedOrigins?: string;
  /** Interface every part listens on (default 127.0.0.1). */
  host?: string;
  brokers?: number;
  partitions?: number;
  replicationFactor?: number;
  logger: Logger;
  /** Environment the children inherit before the provisioner's SERVICE_* settings (default: this process's). */
  environment?: Readonly<Record<string, string | undefined>>;
  /** Log level of the children (default: the `SERVICE_LOG_LEVEL` of the environment, else info). */
  logLevel?: string;
  /** Longest wait for every partition to have a leader (default 90 s). */
  readyTimeoutMs?: number;
  /** Gives up waiting for readiness when aborted (the cluster is being deleted): the children are stopped. */
  signal?: AbortSignal;
  /** Longest wait for a child to stop after SIGTERM before it is killed (default 10 s). */
  stopTimeoutMs?: number;
  /**
   * The flowplane command line to run the children with (default: this installation's `cli/main`, found next to
   * this module, with this process's Node.js options). Tests and embedders may point elsewhere.
   */
  command?: { entry: string; nodeArguments: readonly string[] };
  /**
   * Restarting children that crash once the cluster is ready: after `initialDelayMs`, doubling with every crash in a
   * row up to `maximumDelayMs`, back to `initialDelayMs` after a child ran `stableAfterMs` (default 500 ms, 30 s and
   * 60 s). A child that stops cleanly (exit code 0, e.g. after a SIGTERM sent by hand) is not restarted. `false`: a
   * crashed child stays down until `restartBroker` (tests that take brokers down on purpose).
   */
  restart?: Partial<RestartPolicy> | false;
  /** Told of every child started, exited and scheduled for a restart (for status and activity); must not throw. */
  onChildEvent?: (event: LocalClusterChildEvent) => void;
  /** How large the children's log files may grow and how many older copies are kept (default 64 MiB and 3). */
  logFileLimits?: LogFileLimits;
}

/** Fields of every child event. */
interface LocalClusterChildEventBase {
  /** The child: `gateway` or `broker <nodeId>`. */
  process: string;
  /** The broker's node id, or undefined for the gateway. */
  nodeId: number | undefined;
  /** Automatic restarts of this child so far (restarts by `restartBroker` not counted). */
  restarts: number;
}

/** Something that happened to a child of the local cluster. */
export type LocalClusterChildEvent =
  | (LocalClusterChildEventBase & { event: "started"; pid: number | undefined })
  | (LocalClusterChildEventBase & { event: "exited"; pid: number | undefined } & Omit<LocalClusterChildExit, "atMs">)
  | (LocalClusterChildEventBase & { event: "restarting"; restartInMs: number });

/** The supervision state of one child of the local cluster. */
export interface LocalClusterChild {
  /** The child: `gateway` or `broker <nodeId>`. */
  process: string;
  /** The broker's node id, or undefined for the gateway. */
  nodeId: number | undefined;
  /** running; restarting (crashed, a restart is scheduled); stopped (not running and no restart scheduled). */
  state: "running" | "restarting" | "stopped";
  /** Process id while running. */
  pid: number | undefined;
  /** Automatic restarts so far (restarts by `restartBroker` not counted). */
  restarts: number;
  /** How it last exited, or undefined when it has not. */
  lastExit: LocalClusterChildExit | undefined;
  /** When the scheduled restart is due, in milliseconds since the epoch, or undefined. */
  restartAtMs: number | undefined;
}

/** One broker of the local cluster. */
export interface LocalBroker {
  nodeId: number;
  /** Address of its cluster transport, `host:port`. */
  clusterAddress: string;
  /** Base URL of its management API (health, metrics). */
  managementUrl: string;
  /** Its data directory (where `broker.pid` is). */
  dataDirectory: string;
  /** Its log file (standard output and error). */
  logFile: string;
  /** Process id of the running child, or undefined while it is not running. */
  pid: number | undefined;
}

/** A running local cluster. */
export interface LocalCluster {
  /** Base URL of the gateway's REST API (`/v2/...`). */
  gatewayUrl: string;
  /** Base URL of the gateway's management API (`/actuator/...`). */
  managementUrl: string;
  /** The gateway's log file. */
  gatewayLogFile: string;
  /** The file holding the cluster's secret (brokers on other machines join with a copy of it). */
  clusterSecretFile: string;
  /** Process id of the running gateway, or undefined while it is not running. */
  readonly gatewayPid: number | undefined;
  /** The brokers, by node id (pid kept current; brokers added to or removed from the brokers file come and go). */
  brokers: readonly LocalBroker[];
  /**
   * Makes the running brokers match the brokers file now, rather than at the next check within a second: starts the
   * brokers it lists that do not run, and stops those it no longer lists and deletes their data. Resolves once done.
   */
  matchBrokersFile(): Promise<void>;
  /**
   * Starts a broker again (after it stopped or was killed), with the same environment as at first: at once, also
   * when an automatic restart is scheduled, and its backoff starts over. Throws while the broker is running.
   */
  restartBroker(nodeId: number): Promise<void>;
  /**
   * Starts every child that is stopped (it was stopped by hand, or crashed with no restart scheduled) and answers
   * their names: what waking a running cluster does. A child running or about to be restarted is left alone.
   */
  startStopped(): string[];
  /** The supervision state of every child: the brokers by node id, then the gateway. */
  children(): LocalClusterChild[];
  /** Stops every child: SIGTERM, a bounded wait, then SIGKILL for stragglers. */
  close(): Promise<void>;
}

/** The name of the gateway among the children of the local cluster. */
const GATEWAY_PROCESS = "gateway";

/** What the gateway's REST API port is called in errors. */
const GATEWAY_REST_PORT_PURPOSE = "REST API port";

/**
 * How many times a start chooses another port for a child that could not listen on a port the start chose itself
 * (another process took it between the choice and the child's start) before the start fails.
 */
export const PORT_IN_USE_RETRIES = 3;

/**
 * Starts (or resumes) the local cluster and resolves once the gateway reports a leader for every partition; see the
 * module comment. On failure every started child is stopped before the error is thrown. When a child could not
 * listen on a port chosen here (the gateway's ports given as 0, the brokers' on the cluster's first start), that port
 * is chosen again and the cluster started again, a few times at most (unless `choosePortsAgain` is false).
 */
export async function startLocalCluster(options: LocalClusterOptions): Promise<LocalCluster> {
  if (options.choosePortsAgain === false) return await startLocalClusterOnce(options);
  const host = options.host ?? "127.0.0.1";
  const clusterDirectory = resolve(options.clusterDirectory ?? join(options.dataDirectory, "cluster"));
  const choosesBrokerPorts = readLocalBrokers(clusterDirectory) === null;
  for (let retries = 0; ; retries += 1) {
    try {
      return await startLocalClusterOnce(options);
    } catch (error) {
      if (!(error instanceof PortInUseError) || retries >= PORT_IN_USE_RETRIES || options.signal?.aborted === true) {
        throw error;
      }
      // The gateway's ports given as 0 are chosen again by the next attempt itself.
      const gatewayPortChosen =
        error.processName === GATEWAY_PROCESS &&
        (error.purpose === GATEWAY_REST_PORT_PURPOSE ? options.gatewayPort === 0 : options.managementPort === 0);
      let brokerPortChosen = false;
      if (choosesBrokerPorts) {
        const gatewayPorts = new Set([options.gatewayPort, options.managementPort].filter((port) => port !== 0));
        try {
          brokerPortChosen = (await replaceBrokerPort(clusterDirectory, host, error.port, gatewayPorts)) !== undefined;
        } catch (failure) {
          throw portNotChosenAgainError(error, failure);
        }
      }
      if (!gatewayPortChosen && !brokerPortChosen) throw error;
      options.logger.warn(
        { process: error.processName, port: error.port },
        `another process took the ${error.purpose} ${error.port} chosen for ${error.processName} before it started; starting the cluster again with another port`,
      );
    }
  }
}

/** One attempt of `startLocalCluster`. */
async function startLocalClusterOnce(options: LocalClusterOptions): Promise<LocalCluster> {
  const host = options.host ?? "127.0.0.1";
  const brokerCount = options.brokers ?? 3;
  const partitionCount = options.partitions ?? 3;
  const replicationFactor = options.replicationFactor ?? 3;
  const logger = options.logger;
  const readyTimeoutMs = options.readyTimeoutMs ?? 90_000;
  const stopTimeoutMs = options.stopTimeoutMs ?? 10_000;
  const command = options.command ?? defaultCommand();
  const policy = options.restart === false ? undefined : restartPolicy(options.restart);
  const baseEnvironment = options.environment ?? process.env;
  const logLevel = options.logLevel ?? baseEnvironment.SERVICE_LOG_LEVEL ?? "info";

  const clusterDirectory = resolve(options.clusterDirectory ?? join(options.dataDirectory, "cluster"));
  const logDirectory = join(clusterDirectory, "logs");
  // Everything under cluster/ is the provisioner's own: 0700 directories, 0600 files (brokers' data and logs may
  // hold users' messages). Making cluster/ itself 0700 also closes off what earlier versions created wider.
  ownPrivateDirectory(clusterDirectory);
  ownPrivateDirectory(logDirectory);
  const clusterSecret = ensureLocalClusterSecret(clusterDirectory);
  if (clusterSecret.created) {
    logger.info({ file: clusterSecret.file }, "generated the local cluster's secret");
  }
  const configuredPorts = new Set([options.gatewayPort, options.managementPort].filter((port) => port !== 0));
  const ports = await brokerPorts(clusterDirectory, host, brokerCount, configuredPorts);
  // Ports chosen here differ from every other port of the cluster: the system may hand out a port just released.
  const [chosenGatewayPort, chosenManagementPort] =
    configuredPorts.size < 2
      ? await freePorts(
          host,
          2,
          new Set([...configuredPorts, ...ports.brokers.flatMap((entry) => [entry.clusterPort, entry.managementPort])]),
        )
      : [];
  const gatewayPort = options.gatewayPort === 0 ? chosenGatewayPort : options.gatewayPort;
  const managementPort = options.managementPort === 0 ? chosenManagementPort : options.managementPort;
  if (gatewayPort === undefined || managementPort === undefined) {
    throw new Error("invariant violated: freePorts returns the count asked for");
  }
  const contactPoints = ports.brokers.map((entry) => `${host}:${entry.clusterPort}`).join(",");
  let reconcileTimer: NodeJS.Timeout | null = null;

  const children: ManagedChild[] = [];
  const brokers: LocalBroker[] = [];
  const contactPointsOf = (entries: readonly LocalBrokerPorts[]): string =>
    entries.map((entry) => `${host}:${entry.clusterPort}`).join(",");
  const settings: BrokerSettingsContext = {
    baseEnvironment,
    logLevel,
    clusterSecretFile: clusterSecret.file,
    clusterDirectory,
    host,
    brokerCount,
    partitionCount,
    replicationFactor,
    backupDirectory: options.backupDirectory,
  };
  const childEnvironment = (): Record<string, string | undefined> => localChildEnvironment(settings);

  /** The child and the description of broker `entry`, its contact points the brokers listed now. */
  const brokerChild = (
    entry: LocalBrokerPorts,
    contactPoints: string,
  ): { child: ManagedChild; broker: LocalBroker } => {
    const dataDirectory = brokerDataDirectory(clusterDirectory, entry.nodeId);
    ownPrivateDirectory(dataDirectory);
    warnAboutRunningBroker(dataDirectory, entry.nodeId, logger);
    const environment = localBrokerEnvironment(settings, entry, contactPoints);
    const logFile = join(logDirectory, `broker-${entry.nodeId}.log`);
    return {
      child: managedChild(
        brokerProcessName(entry.nodeId),
        entry.nodeId,
        [
          { purpose: "cluster port", port: entry.clusterPort },
          { purpose: "management port", port: entry.managementPort },
        ],
        environment,
        logFile,
      ),
      broker: {
        nodeId: entry.nodeId,
        clusterAddress: `${host}:${entry.clusterPort}`,
        managementUrl: `http://${host}:${entry.managementPort}`,
        dataDirectory,
        logFile,
        pid: undefined,
      },
    };
  };
  for (const entry of ports.brokers) {
    const { child, broker } = brokerChild(entry, contactPoints);
    children.push(child);
    brokers.push(broker);
  }
  const gatewayEnvironment = childEnvironment();
  setSetting(gatewayEnvironment, "service.gateway.host", host);
  setSetting(gatewayEnvironment, "service.gateway.port", gatewayPort);
  setSetting(gatewayEnvironment, "service.management.host", host);
  setSetting(gatewayEnvironment, "service.management.port", managementPort);
  setSetting(gatewayEnvironment, "service.gateway.contactPoints", contactPoints);
  setSetting(gatewayEnvironment, "service.gateway.issuerUrl", options.issuerUrl);
  if (options.gatewayAudience !== undefined) {
    setSetting(gatewayEnvironment, "service.audiences.gateway", options.gatewayAudience);
  }
  if (options.tokenLifetimeSeconds !== undefined) {
    setSetting(gatewayEnvironment, "service.token.lifetimeSeconds", options.tokenLifetimeSeconds);
  }
  if (options.allowedOrigins !== undefined) {
    setSetting(gatewayEnvironment, "service.gateway.allowedOrigins", options.allowedOrigins);
  }
  if (options.accessPolicyFile !== undefined) {
    setSetting(gatewayEnvironment, "service.gateway.accessPolicyFile", options.accessPolicyFile);
  } else {
    removeSetting(gatewayEnvironment, "service.gateway.accessPolicyFile");
  }
  const gatewayLogFile = join(logDirectory, "gateway.log");
  const gateway = managedChild(
    GATEWAY_PROCESS,
    undefined,
    [
      { purpose: GATEWAY_REST_PORT_PURPOSE, port: gatewayPort },
      { purpose: "management port", port: managementPort },
    ],
    gatewayEnvironment,
    gatewayLogFile,
  );
  children.push(gateway);

  // Supervision starts once the cluster is ready: a child that dies during the start fails it (waitUntilReady).
  let supervising = false;
  let closed = false;
  const notify = (event: LocalClusterChildEvent): void => {
    if (options.onChildEvent === undefined) return;
    try {
      options.onChildEvent(event);
    } catch (error) {
      logger.error({ err: error, process: event.process }, "a listener of the local cluster's child events failed");
    }
  };

  /** Schedules the restart of a crashed child, the wait doubling with every crash in a row. */
  const scheduleRestart = (child: ManagedChild, activePolicy: RestartPolicy, uptimeMs: number): number => {
    if (uptimeMs >= activePolicy.stableAfterMs) child.crashesInARow = 0;
    const delayMs = restartDelayMs(activePolicy, child.crashesInARow);
    child.crashesInARow += 1;
    child.restartAtMs = Date.now() + delayMs;
    child.restartTimer = setTimeout(() => {
      child.restartTimer = undefined;
      child.restartAtMs = undefined;
      if (closed || child.stopping) return;
      child.restarts += 1;
      try {
        launch(child);
      } catch (error) {
        // Its log file could not be opened or the process not spawned: a crash like any other, retried later.
        const waitMs = scheduleRestart(child, activePolicy, 0);
        logger.error(
          { err: error, process: child.name, restartInMs: waitMs },
          `${child.name} of the local cluster could not be started; trying again in ${waitMs} ms`,
        );
      }
    }, delayMs);
    notify({
      event: "restarting",
      process: child.name,
      nodeId: child.nodeId,
      restarts: child.restarts,
      restartInMs: delayMs,
    });
    return delayMs;
  };

  const launch = (child: ManagedChild): void => {
    const logDescriptor = openSync(child.logFile, "a", privateFileMode);
    let spawned: ChildProcess;
    try {
      spawned = spawn(process.execPath, [...command.nodeArguments, command.entry, ...child.arguments], {
        env: child.environment,
        // The IPC channel closes when this process exits, however it exits: the child then stops (supervision.ts).
        stdio: ["ignore", logDescriptor, logDescriptor, "ipc"],
        // A process group of its own: Ctrl-C in a terminal reaches only this process, which then stops the
        // gateway first and the brokers after it, each once, instead of every child being signalled twice.
        detached: true,
      });
    } finally {
      // The child holds its own copy of the descriptor.
      closeSync(logDescriptor);
    }
    child.process = spawned;
    child.stopping = false;
    child.startedAtMs = monotonicNowMs();
    const broker = brokers.find((candidate) => candidate.nodeId === child.nodeId);
    if (broker !== undefined) broker.pid = spawned.pid;
    let ended = false;
    const onEnded = (code: number | null, signal: NodeJS.Signals | null): void => {
      // A failed spawn may report both an error and an exit.
      if (ended) return;
      ended = true;
      if (broker !== undefined && broker.pid === spawned.pid) broker.pid = undefined;
      const requested = child.stopping;
      const uptimeMs = monotonicNowMs() - child.startedAtMs;
      child.lastExit = { exitCode: code, signal, atMs: Date.now(), uptimeMs, requested };
      notify({
        event: "exited",
        process: child.name,
        nodeId: child.nodeId,
        restarts: child.restarts,
        pid: spawned.pid,
        exitCode: code,
        signal,
        uptimeMs,
        requested,
      });
      if (requested) return;
      const details = { process: child.name, childPid: spawned.pid, exitCode: code, signal, logFile: child.logFile };
      if (code === 0) {
        logger.info(details, `${child.name} of the local cluster stopped`);
      } else if (policy === undefined || !supervising || closed) {
        logger.error(details, `${child.name} of the local cluster exited unexpectedly; see its log file`);
      } else {
        const delayMs = scheduleRestart(child, policy, uptimeMs);
        logger.error(
          { ...details, restartInMs: delayMs, restarts: child.restarts },
          `${child.name} of the local cluster exited unexpectedly; restarting it in ${delayMs} ms; see its log file`,
        );
      }
    };
    spawned.once("exit", onEnded);
    spawned.once("error", (error) => {
      logger.error({ process: child.name, error: error.message }, `${child.name} of the local cluster failed to start`);
      if (spawned.pid === undefined) onEnded(null, null);
    });
    logger.info({ process: child.name, childPid: spawned.pid, logFile: child.logFile }, `${child.name} started`);
    notify({ event: "started", process: child.name, nodeId: child.nodeId, restarts: child.restarts, pid: spawned.pid });
  };

  // Children run in process groups of their own, so they would outlive this process if it died without closing
  // the cluster (an uncaught error, process.exit): signal them on the way out. A clean close removes the hook.
  const stopOrphans = (): void => {
    for (const child of children) {
      if (child.process !== undefined && child.process.exitCode === null) child.process.kill("SIGTERM");
    }
  };
  process.once("exit", stopOrphans);

  /**
   * Makes the running brokers match the brokers file: starts the brokers added to it, stops the brokers removed from
   * it and deletes their data (their partitions moved away first: `flowplane cluster scale` removes a broker from the
   * file only after the change that removed it from the cluster completed).
   */
  // The pass under way, shared by whoever asks meanwhile (the timer, or a caller that waits for the file to hold).
  let reconciling: Promise<void> | null = null;
  const reconcile = (): Promise<void> => {
    reconciling ??= reconcileOnce().finally(() => {
      reconciling = null;
    });
    return reconciling;
  };
  const reconcileOnce = async (): Promise<void> => {
    // A closed cluster starts nothing again.
    if (closed) return;
    let listed: readonly LocalBrokerPorts[];
    try {
      listed = readLocalBrokers(clusterDirectory)?.brokers ?? [];
    } catch (error) {
      logger.warn(
        { err: error },
        "the local cluster's brokers file could not be read; keeping the brokers as they are",
      );
      return;
    }
    const listedIds = new Set(listed.map((entry) => entry.nodeId));
    for (const entry of listed) {
      if (brokers.some((broker) => broker.nodeId === entry.nodeId)) continue;
      clearLeftoverData(brokerDataDirectory(clusterDirectory, entry.nodeId), entry.nodeId, logger);
      const { child, broker } = brokerChild(entry, contactPointsOf(listed));
      children.push(child);
      brokers.push(broker);
      brokers.sort((left, right) => left.nodeId - right.nodeId);
      logger.info({ nodeId: entry.nodeId }, `broker ${entry.nodeId} was added to the local cluster; starting it`);
      launch(child);
    }
    for (const broker of [...brokers]) {
      if (listedIds.has(broker.nodeId)) continue;
      const child = children.find((candidate) => candidate.nodeId === broker.nodeId);
      logger.info({ nodeId: broker.nodeId }, `broker ${broker.nodeId} was removed from the local cluster; stopping it`);
      if (child !== undefined) {
        child.stopping = true;
        cancelRestart(child);
        if (child.process !== undefined) await stopChild(child.process, stopTimeoutMs);
        children.splice(children.indexOf(child), 1);
      }
      brokers.splice(brokers.indexOf(broker), 1);
      rmSync(broker.dataDirectory, { recursive: true, force: true });
      logger.info({ nodeId: broker.nodeId, dataDirectory: broker.dataDirectory }, "removed broker's data deleted");
    }
  };

  const logRotation = new LogRotation(
    () => children.map((child) => child.logFile),
    options.logFileLimits ?? defaultLogFileLimits,
    logger,
  );

  const close = async (): Promise<void> => {
    if (reconcileTimer !== null) clearInterval(reconcileTimer);
    reconcileTimer = null;
    process.off("exit", stopOrphans);
    closed = true;
    for (const child of children) {
      child.stopping = true;
      cancelRestart(child);
    }
    await logRotation.close();
    // The gateway first, so it stops routing before the brokers go; then the brokers together.
    if (gateway.process !== undefined) await stopChild(gateway.process, stopTimeoutMs);
    await Promise.all(
      children
        .filter((child) => child !== gateway && child.process !== undefined)
        .map((child) => stopChild(child.process as ChildProcess, stopTimeoutMs)),
    );
    logger.info("local cluster stopped");
  };

  const gatewayUrl = `http://${host}:${gatewayPort}`;
  const managementUrl = `http://${host}:${managementPort}`;
  try {
    // Aborted while the ports were chosen (the cluster is being stopped): no child is started.
    if (options.signal?.aborted === true) throw new Error("the start of the local cluster was cancelled");
    writeLocalGateway(clusterDirectory, { managementUrl });
    // Files an earlier run left beyond the limit are renamed before any child holds them.
    await logRotation.rotateFree();
    logRotation.start();
    for (const child of children) launch(child);
    await waitUntilReady({ host, managementUrl, children, readyTimeoutMs, logger, signal: options.signal });
  } catch (error) {
    await close();
    throw error;
  }
  supervising = true;
  // A child that crashed between the last readiness check and now was not restarted by its exit handler.
  for (const child of children) {
    const exit = child.lastExit;
    if (policy === undefined || isRunning(child) || exit === undefined || exit.requested || exit.exitCode === 0)
      continue;
    if (child.restartTimer === undefined) scheduleRestart(child, policy, exit.uptimeMs);
  }
  logger.info(
    { gatewayUrl, managementUrl, brokers: brokers.map((broker) => broker.clusterAddress) },
    "local cluster ready",
  );
  reconcileTimer = setInterval(() => {
    reconcile().catch((error: unknown) => logger.error({ err: error }, "could not match the brokers file"));
  }, RECONCILE_INTERVAL_MS);
  reconcileTimer.unref();
  return {
    gatewayUrl,
    managementUrl,
    gatewayLogFile,
    clusterSecretFile: clusterSecret.file,
    get gatewayPid() {
      return isRunning(gateway) ? gateway.process?.pid : undefined;
    },
    brokers,
    async matchBrokersFile() {
      // A pass that began before the caller's write may have read the file before it: one more pass reads it after.
      await reconciling?.catch(() => undefined);
      await reconcile();
    },
    async restartBroker(nodeId) {
      const child = children.find((candidate) => candidate.nodeId === nodeId);
      if (child === undefined) throw new Error(`the local cluster has no broker ${nodeId}`);
      if (isRunning(child)) throw new Error(`broker ${nodeId} is still running (pid ${child.process?.pid})`);
      // Started by hand, so whatever made it crash was looked at: no scheduled restart, and the backoff starts over.
      cancelRestart(child);
      child.crashesInARow = 0;
      launch(child);
    },
    startStopped() {
      if (closed) return [];
      const stopped = children.filter(
        (child) => !isRunning(child) && child.restartTimer === undefined && !child.stopping,
      );
      for (const child of stopped) {
        // Started by hand, as `restartBroker` does: the backoff starts over.
        child.crashesInARow = 0;
        launch(child);
      }
      return stopped.map((child) => child.name);
    },
    children() {
      const ordered = [...children].sort(
        (left, right) => (left.nodeId ?? Number.POSITIVE_INFINITY) - (right.nodeId ?? Number.POSITIVE_INFINITY),
      );
      return ordered.map((child) => ({
        process: child.name,
        nodeId: child.nodeId,
        state: isRunning(child) ? "running" : child.restartTimer !== undefined ? "restarting" : "stopped",
        pid: isRunning(child) ? child.process?.pid : undefined,
        restarts: child.restarts,
        lastExit: child.lastExit === undefined ? undefined : { ...child.lastExit },
        restartAtMs: child.restartAtMs,
      }));
    },
    close,
  };
}

/** One broker of a local cluster as `flowplane restore` needs it. */
export interface LocalBrokerSettings {
  nodeId: number;
  dataDirectory: string;
  /** The environment the provisioner starts the broker with. */
  environment: Record<string, string | undefined>;
}

/**
 * The brokers of the local cluster `options` describes (the brokers file), each with the environment
 * `startLocalCluster` gives it, without starting anything: what restoring them runs with.
 */
export async function localBrokerSettings(options: LocalClusterOptions): Promise<LocalBrokerSettings[]> {
  const host = options.host ?? "127.0.0.1";
  const baseEnvironment = options.environment ?? process.env;
  const clusterDirectory = resolve(options.clusterDirectory ?? join(options.dataDirectory, "cluster"));
  const clusterSecret = ensureLocalClusterSecret(clusterDirectory);
  const brokerCount = options.brokers ?? 3;
  const gatewayPorts = new Set([options.gatewayPort, options.managementPort].filter((port) => port !== 0));
  const ports = await brokerPorts(clusterDirectory, host, brokerCount, gatewayPorts);
  const context: BrokerSettingsContext = {
    baseEnvironment,
    logLevel: options.logLevel ?? baseEnvironment.SERVICE_LOG_LEVEL ?? "info",
    clusterSecretFile: clusterSecret.file,
    clusterDirectory,
    host,
    brokerCount,
    partitionCount: options.partitions ?? 3,
    replicationFactor: options.replicationFactor ?? 3,
    backupDirectory: options.backupDirectory,
  };
  const contactPoints = ports.brokers.map((entry) => `${host}:${entry.clusterPort}`).join(",");
  return ports.brokers.map((entry) => {
    const environment = localBrokerEnvironment(context, entry, contactPoints);
    return {
      nodeId: entry.nodeId,
      dataDirectory: brokerDataDirectory(clusterDirectory, entry.nodeId),
      environment,
    };
  });
}

/** How often the running local cluster compares its brokers with the brokers file. */
const RECONCILE_INTERVAL_MS = 1_000;

/** Logs a warning when a broker's pid file names a live process: a broker left over from an earlier run. */
function warnAboutRunningBroker(dataDirectory: string, nodeId: number, logger: Logger): void {
  const pid = directoryHolder(dataDirectory, BROKER_PID_FILE_NAME);
  if (pid === null) return;
  logger.warn(
    { nodeId, pid, pidFile: join(dataDirectory, BROKER_PID_FILE_NAME) },
    `broker ${nodeId} may still be running from an earlier start (pid ${pid}); stop it if this start fails`,
  );
}

/**
 * Deletes what a broker of the same id left in `dataDirectory` before a broker added to the running cluster starts
 * there: an added broker starts empty, and data left there belongs to a broker that was removed (its deletion, after
 * it stopped, was cut short). Data a live process still holds is left to that process; the start then fails on it.
 */
function clearLeftoverData(dataDirectory: string, nodeId: number, logger: Logger): void {
  if (!existsSync(dataDirectory) || readdirSync(dataDirectory).length === 0) return;
  if (directoryHolder(dataDirectory, BROKER_PID_FILE_NAME) !== null) return;
  logger.warn(
    { nodeId, dataDirectory },
    `broker ${nodeId} was added, and its data directory held what a removed broker ${nodeId} left; deleting it so the broker starts empty`,
  );
  rmSync(dataDirectory, { recursive: true, force: true });
}
