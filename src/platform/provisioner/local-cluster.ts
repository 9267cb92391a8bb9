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
 */
import { type ChildProcess, spawn } from "node:child_process";
import { closeSync, existsSync, openSync, readFileSync, rmSync } from "node:fs";
import { dirname, extname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import type { Logger } from "pino";
import { configurationLeaves } from "../../config/load.js";
import { ownPrivateDirectory, privateFileMode } from "../../files/private-files.js";
import { ensureLocalClusterSecret } from "./cluster-secret.js";
import { brokerPorts, freePort, type LocalBrokerPorts, readLocalBrokers } from "./local-brokers.js";

/** Options of `startLocalCluster`. */
export interface LocalClusterOptions {
  /** flowplane's data directory; the cluster lives in its `cluster/` folder unless `clusterDirectory` says. */
  dataDirectory: string;
  /** The cluster's own directory (brokers file, brokers' data, logs, secret); default `<dataDirectory>/cluster`. */
  clusterDirectory?: string;
  /** The access policy file the gateway enforces (setting `service.gateway.accessPolicyFile`); none when absent. */
  accessPolicyFile?: string;
  /** Port of the gateway's REST API (0: a free port, chosen at every start). */
  gatewayPort: number;
  /** Port of the gateway's management API (0: a free port, chosen at every start). */
  managementPort: number;
  /** The platform's issuer URL: the gateway verifies tokens against its JWKS. */
  issuerUrl: string;
  /** Audience of gateway tokens (configuration `audiences.gateway`); the child's own default when absent. */
  gatewayAudience?: string;
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
  /** Starts a broker again (after it stopped or was killed), with the same environment as at first. */
  restartBroker(nodeId: number): Promise<void>;
  /** Stops every child: SIGTERM, a bounded wait, then SIGKILL for stragglers. */
  close(): Promise<void>;
}

/** Node.js options that make sense only for this process: code to evaluate, debugger ports, test runners, watchers. */
const OWN_OPTIONS_WITH_VALUE = new Set(["-e", "--eval", "-p", "--print"]);

/**
 * The Node.js options of this process a child should get too (module loaders such as tsx, memory limits), without
 * those that would make the child do something else (evaluate this process's code, wait on the same debugger port).
 */
export function childNodeArguments(execArgv: readonly string[]): string[] {
  const kept: string[] = [];
  for (let index = 0; index < execArgv.length; index += 1) {
    const argument = execArgv[index] as string;
    if (OWN_OPTIONS_WITH_VALUE.has(argument)) {
      index += 1;
      continue;
    }
    if (/^--(inspect|debug|test|watch|input-type|eval|print)/.test(argument)) continue;
    kept.push(argument);
  }
  return kept;
}

/** The flowplane command line next to this module: `cli/main.js` in dist, `cli/main.ts` (under tsx) in sources. */
export function defaultCommand(): { entry: string; nodeArguments: string[] } {
  const here = fileURLToPath(import.meta.url);
  const extension = extname(here);
  const entry = resolve(dirname(here), "..", "..", "cli", `main${extension}`);
  const nodeArguments = childNodeArguments(process.execArgv);
  if (extension === ".ts" && !nodeArguments.some((argument) => argument.includes("tsx"))) {
    nodeArguments.push("--import", "tsx");
  }
  return { entry, nodeArguments };
}

/**
 * Sets a setting in a child's environment under its documented variable name and removes its other spellings, so
 * a value inherited from the parent under another spelling cannot win over it.
 */
function setSetting(environment: Record<string, string | undefined>, key: string, value: string | number): void {
  const leaf = configurationLeaves().find((candidate) => candidate.key === key);
  if (leaf === undefined) throw new Error(`invariant violated: ${key} is a configuration key`);
  for (const name of leaf.environmentVariables) delete environment[name];
  environment[leaf.environmentVariable] = String(value);
}

/** Settings only the platform reads that carry secrets: children never inherit them. */
const platformSecretSettings = ["service.secrets.key", "service.bootstrap.clientSecret", "service.database.url"];

/** Removes every spelling of a setting from a child's environment. */
function removeSetting(environment: Record<string, string | undefined>, key: string): void {
  const leaf = configurationLeaves().find((candidate) => candidate.key === key);
  if (leaf === undefined) throw new Error(`invariant violated: ${key} is a configuration key`);
  for (const name of leaf.environmentVariables) delete environment[name];
}

/** Resolves when the process has exited (at once if it already has). */
function exited(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolveExit) => child.once("exit", () => resolveExit()));
}

/** Stops a child: SIGTERM, then SIGKILL after `timeoutMs`. */
async function stopChild(child: ChildProcess, timeoutMs: number): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  child.kill("SIGTERM");
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<boolean>((resolveTimeout) => {
    timer = setTimeout(() => resolveTimeout(true), timeoutMs);
  });
  const stopped = await Promise.race([exited(child).then(() => false), timedOut]);
  clearTimeout(timer);
  if (stopped) {
    child.kill("SIGKILL");
    await exited(child);
  }
}

interface ManagedChild {
  name: string;
  arguments: string[];
  environment: Record<string, string | undefined>;
  logFile: string;
  process: ChildProcess | undefined;
  stopping: boolean;
}

/**
 * Starts (or resumes) the local cluster and resolves once the gateway reports a leader for every partition; see the
 * module comment. On failure every started child is stopped before the error is thrown.
 */
export async function startLocalCluster(options: LocalClusterOptions): Promise<LocalCluster> {
  const host = options.host ?? "127.0.0.1";
  const brokerCount = options.brokers ?? 3;
  const partitionCount = options.partitions ?? 3;
  const replicationFactor = options.replicationFactor ?? 3;
  const logger = options.logger;
  const readyTimeoutMs = options.readyTimeoutMs ?? 90_000;
  const stopTimeoutMs = options.stopTimeoutMs ?? 10_000;
  const command = options.command ?? defaultCommand();
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
  const ports = await brokerPorts(clusterDirectory, host, brokerCount);
  const gatewayPort = options.gatewayPort === 0 ? await freePort(host) : options.gatewayPort;
  const managementPort = options.managementPort === 0 ? await freePort(host) : options.managementPort;
  const contactPoints = ports.brokers.map((entry) => `${host}:${entry.clusterPort}`).join(",");
  let reconcileTimer: NodeJS.Timeout | null = null;

  const children: ManagedChild[] = [];
  const brokers: LocalBroker[] = [];
  const contactPointsOf = (entries: readonly LocalBrokerPorts[]): string =>
    entries.map((entry) => `${host}:${entry.clusterPort}`).join(",");
  const childEnvironment = (): Record<string, string | undefined> => {
    const environment: Record<string, string | undefined> = { ...baseEnvironment };
    // The platform's secrets are no business of brokers and gateways, which would only widen who can read them.
    for (const key of platformSecretSettings) removeSetting(environment, key);
    setSetting(environment, "service.log.level", logLevel);
    removeSetting(environment, "service.cluster.secret");
    setSetting(environment, "service.cluster.secretFile", clusterSecret.file);
    return environment;
  };

  /** The child and the description of broker `entry`, its contact points the brokers listed now. */
  const brokerChild = (
    entry: LocalBrokerPorts,
    contactPoints: string,
  ): { child: ManagedChild; broker: LocalBroker } => {
    const dataDirectory = join(clusterDirectory, "brokers", String(entry.nodeId));
    ownPrivateDirectory(dataDirectory);
    warnAboutRunningBroker(dataDirectory, entry.nodeId, logger);
    const environment = childEnvironment();
    setSetting(environment, "service.broker.host", host);
    setSetting(environment, "service.broker.dataDirectory", dataDirectory);
    setSetting(environment, "service.broker.managementPort", entry.managementPort);
    setSetting(environment, "service.broker.cluster.nodeId", entry.nodeId);
    // The sizes of the cluster's first start; a broker added later takes the running configuration instead.
    setSetting(environment, "service.broker.cluster.clusterSize", brokerCount);
    setSetting(environment, "service.broker.cluster.partitionsCount", partitionCount);
    setSetting(environment, "service.broker.cluster.replicationFactor", replicationFactor);
    setSetting(environment, "service.broker.cluster.initialContactPoints", contactPoints);
    setSetting(environment, "service.broker.cluster.clusterPort", entry.clusterPort);
    const logFile = join(logDirectory, `broker-${entry.nodeId}.log`);
    return {
      child: {
        name: `broker ${entry.nodeId}`,
        arguments: ["broker"],
        environment,
        logFile,
        process: undefined,
        stopping: false,
      },
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
  if (options.accessPolicyFile !== undefined) {
    setSetting(gatewayEnvironment, "service.gateway.accessPolicyFile", options.accessPolicyFile);
  } else {
    removeSetting(gatewayEnvironment, "service.gateway.accessPolicyFile");
  }
  const gatewayLogFile = join(logDirectory, "gateway.log");
  const gateway: ManagedChild = {
    name: "gateway",
    arguments: ["gateway"],
    environment: gatewayEnvironment,
    logFile: gatewayLogFile,
    process: undefined,
    stopping: false,
  };
  children.push(gateway);

  const launch = (child: ManagedChild): void => {
    const logDescriptor = openSync(child.logFile, "a", privateFileMode);
    let spawned: ChildProcess;
    try {
      spawned = spawn(process.execPath, [...command.nodeArguments, command.entry, ...child.arguments], {
        env: child.environment,
        stdio: ["ignore", logDescriptor, logDescriptor],
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
    const broker = brokers.find((candidate) => `broker ${candidate.nodeId}` === child.name);
    if (broker !== undefined) broker.pid = spawned.pid;
    spawned.once("exit", (code, signal) => {
      if (broker !== undefined && broker.pid === spawned.pid) broker.pid = undefined;
      if (child.stopping) return;
      const details = { process: child.name, childPid: spawned.pid, exitCode: code, signal, logFile: child.logFile };
      if (code === 0) logger.info(details, `${child.name} of the local cluster stopped`);
      else logger.error(details, `${child.name} of the local cluster exited unexpectedly; see its log file`);
    });
    spawned.once("error", (error) => {
      logger.error({ process: child.name, error: error.message }, `${child.name} of the local cluster failed to start`);
    });
    logger.info({ process: child.name, childPid: spawned.pid, logFile: child.logFile }, `${child.name} started`);
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
  let reconciling = false;
  const reconcile = async (): Promise<void> => {
    if (reconciling) return;
    reconciling = true;
    try {
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
        const { child, broker } = brokerChild(entry, contactPointsOf(listed));
        children.push(child);
        brokers.push(broker);
        brokers.sort((left, right) => left.nodeId - right.nodeId);
        logger.info({ nodeId: entry.nodeId }, `broker ${entry.nodeId} was added to the local cluster; starting it`);
        launch(child);
      }
      for (const broker of [...brokers]) {
        if (listedIds.has(broker.nodeId)) continue;
        const child = children.find((candidate) => candidate.name === `broker ${broker.nodeId}`);
        logger.info(
          { nodeId: broker.nodeId },
          `broker ${broker.nodeId} was removed from the local cluster; stopping it`,
        );
        if (child !== undefined) {
          child.stopping = true;
          if (child.process !== undefined) await stopChild(child.process, stopTimeoutMs);
          children.splice(children.indexOf(child), 1);
        }
        brokers.splice(brokers.indexOf(broker), 1);
        rmSync(broker.dataDirectory, { recursive: true, force: true });
        logger.info({ nodeId: broker.nodeId, dataDirectory: broker.dataDirectory }, "removed broker's data deleted");
      }
    } finally {
      reconciling = false;
    }
  };

  const close = async (): Promise<void> => {
    if (reconcileTimer !== null) clearInterval(reconcileTimer);
    reconcileTimer = null;
    process.off("exit", stopOrphans);
    for (const child of children) child.stopping = true;
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
    for (const child of children) launch(child);
    await waitUntilReady({ managementUrl, children, readyTimeoutMs, logger, signal: options.signal });
  } catch (error) {
    await close();
    throw error;
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
      const running = gateway.process;
      return running !== undefined && running.exitCode === null && running.signalCode === null
        ? running.pid
        : undefined;
    },
    brokers,
    async restartBroker(nodeId) {
      const child = children.find((candidate) => candidate.name === `broker ${nodeId}`);
      if (child === undefined) throw new Error(`the local cluster has no broker ${nodeId}`);
      if (child.process !== undefined && child.process.exitCode === null && child.process.signalCode === null) {
        throw new Error(`broker ${nodeId} is still running (pid ${child.process.pid})`);
      }
      launch(child);
    },
    close,
  };
}

/** How often the running local cluster compares its brokers with the brokers file. */
const RECONCILE_INTERVAL_MS = 1_000;

/** Logs a warning when a broker's pid file names a live process: a broker left over from an earlier run. */
function warnAboutRunningBroker(dataDirectory: string, nodeId: number, logger: Logger): void {
  const pidFile = join(dataDirectory, "broker.pid");
  if (!existsSync(pidFile)) return;
  const pid = Number(readFileSync(pidFile, "utf8").trim());
  if (!Number.isSafeInteger(pid) || pid <= 0) return;
  try {
    process.kill(pid, 0);
  } catch {
    return;
  }
  logger.warn(
    { nodeId, pid, pidFile },
    `broker ${nodeId} may still be running from an earlier start (pid ${pid}); stop it if this start fails`,
  );
}

/** Polls the gateway's readiness until every partition has a leader, failing early when a child dies. */
async function waitUntilReady(context: {
  managementUrl: string;
  children: readonly ManagedChild[];
  readyTimeoutMs: number;
  logger: Logger;
  signal: AbortSignal | undefined;
}): Promise<void> {
  const startedAtMs = Date.now();
  let lastProgressAtMs = startedAtMs;
  let lastState = "the gateway is not answering yet";
  for (;;) {
    if (context.signal?.aborted === true) throw new Error("the start of the local cluster was cancelled");
    const dead = context.children.find(
      (child) => child.process !== undefined && (child.process.exitCode !== null || child.process.signalCode !== null),
    );
    if (dead !== undefined) {
      throw new Error(`${dead.name} of the local cluster exited during start; see ${dead.logFile}`);
    }
    try {
      const response = await fetch(`${context.managementUrl}/actuator/health/readiness`, {
        signal: AbortSignal.timeout(2_000),
      });
      const body = (await response.json()) as { status?: string; components?: unknown };
      if (response.status === 200 && body.status === "UP") return;
      lastState = `readiness ${body.status ?? response.status}: ${JSON.stringify(body.components ?? {})}`;
    } catch {
      // The gateway is still starting; keep polling within the bound.
    }
    const elapsedMs = Date.now() - startedAtMs;
    if (elapsedMs > context.readyTimeoutMs) {
      throw new Error(
        `the local cluster was not ready within ${context.readyTimeoutMs} ms (${lastState}); see the logs in ${dirname(context.children[0]?.logFile ?? ".")}`,
      );
    }
    if (Date.now() - lastProgressAtMs >= 5_000) {
      lastProgressAtMs = Date.now();
      context.logger.info(
        { elapsedMs, state: lastState },
        "waiting for every partition of the local cluster to have a leader",
      );
    }
    await new Promise((resolveWait) => setTimeout(resolveWait, 250));
  }
}
