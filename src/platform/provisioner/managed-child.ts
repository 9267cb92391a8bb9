/**
 * One child process of a local cluster (a broker or the gateway) as the provisioner manages it: how it is started
 * (the command line and the Node.js options it inherits), how it is stopped, and why it exited during a start.
 */
import type { ChildProcess } from "node:child_process";
import { createServer } from "node:net";
import { dirname, extname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/** How a child of the local cluster last exited. */
export interface LocalClusterChildExit {
  /** Its exit code, or null when a signal ended it. */
  exitCode: number | null;
  /** The signal that ended it, or null. */
  signal: NodeJS.Signals | null;
  /** When it exited, in milliseconds since the epoch. */
  atMs: number;
  /** How long it had run. */
  uptimeMs: number;
  /** Whether the provisioner had asked it to stop (close, a broker removed from the brokers file). */
  requested: boolean;
}

/**
 * A child of the local cluster exited during start while one of its ports was in use by another process: it could
 * not listen there. Ports chosen free a moment before can be taken by any process in between, so the provisioner
 * chooses such a port again when it chose it itself; a port the operator set or an earlier start recorded is not.
 */
export class PortInUseError extends Error {
  constructor(
    /** The child: `gateway` or `broker <nodeId>`. */
    readonly processName: string,
    /** What the port is for, e.g. `cluster port`. */
    readonly purpose: string,
    readonly host: string,
    readonly port: number,
    readonly logFile: string,
  ) {
    super(
      `${processName} of the local cluster could not listen on its ${purpose} ${host.includes(":") ? `[${host}]` : host}:${port}: another process uses that port; see ${logFile}`,
    );
    this.name = "PortInUseError";
  }
}

/**
 * The error of a start whose port was taken (`portInUse`) and could not be chosen again (`failure`): it says what
 * went wrong first, and keeps the failure as its cause.
 */
export function portNotChosenAgainError(portInUse: PortInUseError, failure: unknown): Error {
  const reason = failure instanceof Error ? failure.message : String(failure);
  return new Error(`${portInUse.message}; choosing another port failed: ${reason}`, { cause: failure });
}

/** Whether another socket listens on, or holds, `host:port` (binding it fails with EADDRINUSE). */
function portInUse(host: string, port: number): Promise<boolean> {
  return new Promise((resolveProbe) => {
    const server = createServer();
    server.once("error", (error: NodeJS.ErrnoException) => resolveProbe(error.code === "EADDRINUSE"));
    server.listen({ host, port }, () => server.close(() => resolveProbe(false)));
  });
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

/** Resolves when the process has exited (at once if it already has). */
export function exited(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolveExit) => child.once("exit", () => resolveExit()));
}

/** Stops a child: SIGTERM, then SIGKILL after `timeoutMs`. */
export async function stopChild(child: ChildProcess, timeoutMs: number): Promise<void> {
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

/** A port a child of the local cluster is told to listen on. */
export interface ChildPort {
  /** What it is for, e.g. `cluster port`. */
  purpose: string;
  port: number;
}

/** A child of the local cluster as the provisioner tracks it: how it is started, its process, its restarts. */
export interface ManagedChild {
  name: string;
  nodeId: number | undefined;
  /** The ports it listens on, looked at when it exits during start. */
  ports: readonly ChildPort[];
  arguments: string[];
  environment: Record<string, string | undefined>;
  logFile: string;
  process: ChildProcess | undefined;
  stopping: boolean;
  /** When the running process was started (`monotonicNowMs()`, for its uptime). */
  startedAtMs: number;
  /** Automatic restarts so far. */
  restarts: number;
  /** Crashes since the child last ran long enough to count as healthy: the exponent of the next backoff. */
  crashesInARow: number;
  lastExit: LocalClusterChildExit | undefined;
  restartTimer: NodeJS.Timeout | undefined;
  restartAtMs: number | undefined;
}

/** A managed child not started yet (exported for the tests of `waitUntilReady`). */
export function managedChild(
  name: string,
  nodeId: number | undefined,
  ports: readonly ChildPort[],
  environment: Record<string, string | undefined>,
  logFile: string,
): ManagedChild {
  return {
    name,
    nodeId,
    ports,
    arguments: [nodeId === undefined ? "gateway" : "broker"],
    environment,
    logFile,
    process: undefined,
    stopping: false,
    startedAtMs: 0,
    restarts: 0,
    crashesInARow: 0,
    lastExit: undefined,
    restartTimer: undefined,
    restartAtMs: undefined,
  };
}

/** Cancels the child's scheduled restart, if any. */
export function cancelRestart(child: ManagedChild): void {
  clearTimeout(child.restartTimer);
  child.restartTimer = undefined;
  child.restartAtMs = undefined;
}

/** Whether the child's process is running (spawned and not exited). */
export function isRunning(child: ManagedChild): boolean {
  const running = child.process;
  return running !== undefined && running.exitCode === null && running.signalCode === null;
}

/** The name of broker `nodeId`'s process in a local cluster's logs and child events. */
export function brokerProcessName(nodeId: number): string {
  return `broker ${nodeId}`;
}

/**
 * Why a child exited during start: a `PortInUseError` when one of its ports is held by another process (it could not
 * listen there), else an error naming its log file.
 */
export async function exitedDuringStart(host: string, child: ManagedChild): Promise<Error> {
  for (const { purpose, port } of child.ports) {
    if (await portInUse(host, port)) return new PortInUseError(child.name, purpose, host, port, child.logFile);
  }
  return new Error(`${child.name} of the local cluster exited during start; see ${child.logFile}`);
}
