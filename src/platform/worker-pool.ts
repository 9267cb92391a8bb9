import { readlinkSync } from "node:fs";
import { availableParallelism, getPriority, setPriority } from "node:os";
import { parentPort, type TransferListItem, type Worker, workerData } from "node:worker_threads";
import { type ErrorKind, type ProblemExtensions, ServiceError } from "../http/errors.js";
import { startThread } from "../threads/start-thread.js";

/**
 * Functions a worker module offers, by name. Each takes one input and answers one result, both of which cross the
 * thread boundary by structured cloning (plain data, strings, typed arrays; no class instances or functions).
 */
export type TaskFunctions = Record<string, (input: never) => unknown>;

/** The input of the task `Name`. */
export type TaskInput<Tasks extends TaskFunctions, Name extends keyof Tasks> = Parameters<Tasks[Name]>[0];

/** The result of the task `Name`, once it has run. */
export type TaskResult<Tasks extends TaskFunctions, Name extends keyof Tasks> = Awaited<ReturnType<Tasks[Name]>>;

/** How a task is submitted. */
export interface TaskOptions {
  /** Buffers of the input that are moved to the worker, not copied. */
  transferList?: readonly TransferListItem[];
  /** The size of the input (its contents' bytes), which the queue's memory bound counts. */
  inputBytes?: number;
}

/** Runs tasks by name: in worker threads (`WorkerPool`) or on the calling thread (`inlineTaskRunner`). */
export interface TaskRunner<Tasks extends TaskFunctions> {
  /** Runs the task `name` with `input` and answers its result. */
  run<Name extends keyof Tasks & string>(
    name: Name,
    input: TaskInput<Tasks, Name>,
    options?: TaskOptions,
  ): Promise<TaskResult<Tasks, Name>>;

  /**
   * Throws the 503 that `run` would answer if a task of `inputBytes` were submitted now. Callers check it before work
   * that only a task can use (reading a large body, loading large inputs), so that a full queue costs them nothing.
   */
  assertCapacity(inputBytes?: number): void;
}

/** Buffers of task results that are moved to the caller's thread rather than copied (see `transferResult`). */
const resultTransfers = new WeakMap<object, TransferListItem[]>();

/**
 * Marks buffers of a task's result to be moved to the caller's thread instead of copied, and answers the result. A
 * moved buffer is unusable in the worker afterwards, so only buffers made for the result may be named.
 */
export function transferResult<Result extends object>(result: Result, transferList: TransferListItem[]): Result {
  resultTransfers.set(result, transferList);
  return result;
}

/**
 * A runner that calls the task functions on the calling thread. It answers exactly what a `WorkerPool` over the
 * same functions answers; services built without a pool (tools, unit tests of the services) use it.
 */
export function inlineTaskRunner<Tasks extends TaskFunctions>(tasks: Tasks): TaskRunner<Tasks> {
  return {
    async run<Name extends keyof Tasks & string>(
      name: Name,
      input: TaskInput<Tasks, Name>,
    ): Promise<TaskResult<Tasks, Name>> {
      const task = tasks[name] as unknown as (input: unknown) => Promise<TaskResult<Tasks, Name>>;
      return await task(input);
    },
    assertCapacity() {
      // The calling thread takes every task.
    },
  };
}

/** Workers a pool starts at most by default: one core stays with the event loop, and there is at least one. */
export function defaultWorkerThreads(): number {
  return Math.max(1, availableParallelism() - 1);
}

/** A task request, from the pool to a worker. */
interface TaskRequest {
  taskId: number;
  name: string;
  input: unknown;
}

/** Why a task failed, as it crosses from the worker to the pool. */
type TaskFailure =
  | {
      serviceError: {
        kind: ErrorKind;
        detail: string;
        extensions: ProblemExtensions | undefined;
        headers: Record<string, string>;
      };
    }
  | { message: string };

/** A message from a worker to the pool. */
type WorkerMessage =
  | { kind: "ready" }
  | { kind: "result"; taskId: number; result: unknown }
  | { kind: "failure"; taskId: number; failure: TaskFailure };

/** Longest error message of an unexpected failure that is passed on (and may be logged), in characters. */
const failureMessageCharacters = 500;

function describeFailure(error: unknown): TaskFailure {
  if (error instanceof ServiceError) {
    return {
      serviceError: { kind: error.kind, detail: error.detail, extensions: error.extensions, headers: error.headers },
    };
  }
  const message = error instanceof Error ? error.message : String(error);
  return { message: message.slice(0, failureMessageCharacters) };
}

/** What a pool tells the workers it starts. */
interface PoolWorkerData {
  /** How much the worker thread's nice value is raised above the one it started with. */
  niceness: number;
}

/**
 * Raises this thread's nice value by `niceness` (lowering its scheduling priority). On Linux a thread has its own
 * nice value, set through its thread id, which `/proc/thread-self` names; elsewhere, or when the system refuses,
 * the thread keeps the process's.
 */
function lowerThreadPriority(niceness: number): void {
  try {
    const systemThreadId = Number(readlinkSync("/proc/thread-self").split("/").at(-1));
    if (!Number.isInteger(systemThreadId) || systemThreadId <= 0) return;
    setPriority(systemThreadId, Math.min(19, getPriority(systemThreadId) + niceness));
  } catch {
    // Not Linux, or not permitted: the worker competes with the event loop at the same priority.
  }
}

/**
 * Answers the pool's task requests in a worker thread with `tasks`; a worker module calls it once. Typed errors
 * (`ServiceError`) reach the caller as the same typed errors; any other failure reaches it as an internal error.
 */
export function serveTasks(tasks: TaskFunctions): void {
  const port = parentPort;
  if (port === null) throw new Error("serveTasks runs in a worker thread started by a WorkerPool");
  const { niceness } = workerData as PoolWorkerData;
  if (niceness > 0) lowerThreadPriority(niceness);
  port.on("message", (request: TaskRequest) => {
    void (async () => {
      try {
        if (!Object.hasOwn(tasks, request.name)) throw new Error(`the worker has no task named ${request.name}`);
        const task = tasks[request.name] as unknown as (input: unknown) => unknown;
        const result = await task(request.input);
        const transferList = typeof result === "object" && result !== null ? resultTransfers.get(result) : undefined;
        port.postMessage({ kind: "result", taskId: request.taskId, result } satisfies WorkerMessage, transferList);
      } catch (error) {
        port.postMessage({
          kind: "failure",
          taskId: request.taskId,
          failure: describeFailure(error),
        } satisfies WorkerMessage);
      }
    })();
  });
  port.postMessage({ kind: "ready" } satisfies WorkerMessage);
}

/** The error a caller receives for a failure that crossed from a worker. */
function failureError(failure: TaskFailure, taskName: string): Error {
  if ("serviceError" in failure) {
    const { kind, detail, extensions, headers } = failure.serviceError;
    return new ServiceError(kind, detail, { headers, ...(extensions === undefined ? {} : { extensions }) });
  }
  return new Error(`the worker task ${taskName} failed: ${failure.message}`);
}

/** Where a pool reports what went wrong with its workers (a pino logger fits). */
export interface WorkerPoolLogger {
  warn(details: object, message: string): void;
  error(details: object, message: string): void;
}

/** Options of `WorkerPool`. */
export interface WorkerPoolOptions {
  /** The module every worker runs; it calls `serveTasks` with the tasks it offers. */
  workerModule: URL;
  /** Workers started at most (default `defaultWorkerThreads()`). */
  threads?: number;
  /** Tasks that may wait while every worker is busy; a task beyond them is refused with 503 (default 64). */
  queueLength?: number;
  /**
   * Input bytes that may wait while every worker is busy; a task beyond them is refused with 503 (default 256 MiB).
   * Many small tasks may wait, but only a few of the largest.
   */
  queueBytes?: number;
  /** Longest a task may run; past it its worker is terminated and replaced, and the task refused (default 30 s). */
  taskTimeLimitMs?: number;
  /** The `Retry-After` of a refusal because the queue is full (default 1). */
  retryAfterSeconds?: number;
  /**
   * How much higher the nice value of the workers is than the process's, where threads have their own (Linux;
   * default 10, 0 leaves it). The scheduler then gives a core to the event loop first whenever it has work, so
   * answers that need no worker do not wait for a worker that computes.
   */
  workerNiceness?: number;
  /**
   * Largest heap of each worker in MiB (V8's old generation; default: V8's own). A task that needs more stops its
   * worker, and is refused with 503 like a pool out of memory.
   */
  workerHeapMegabytes?: number;
  logger?: WorkerPoolLogger;
}

/** What a pool has done so far, for tests and metrics. */
export interface WorkerPoolStatistics {
  /** Workers the pool may run at once. */
  threads: number;
  /** Workers started since the pool was made (replacements included). */
  startedWorkers: number;
  /** Workers alive now. */
  liveWorkers: number;
  /** Workers running a task now. */
  busyWorkers: number;
  /** Tasks waiting for a worker now. */
  queuedTasks: number;
  /** Tasks a worker answered, with a result or an error. */
  completedTasks: number;
  /** Input bytes of the tasks waiting now. */
  queuedBytes: number;
  /** Tasks refused because the queue was full (`assertCapacity` refusals included). */
  refusedTasks: number;
  /** Tasks stopped at the time limit (each terminated its worker). */
  timedOutTasks: number;
}

interface PendingTask {
  taskId: number;
  name: string;
  input: unknown;
  transferList: readonly TransferListItem[];
  inputBytes: number;
  resolve(result: unknown): void;
  reject(error: unknown): void;
}

interface PoolWorker {
  thread: Worker;
  /** Whether the worker has loaded its module and serves tasks. */
  ready: boolean;
  task: PendingTask | undefined;
  timeLimit: NodeJS.Timeout | undefined;
  /** The uncaught error that is about to stop the worker, if any. */
  failure: Error | undefined;
}

/**
 * Runs CPU-heavy tasks in worker threads so that the event loop keeps answering other requests meanwhile. Workers
 * start when tasks need them, up to `threads`, each running one task at a time; they live until `close`. At most
 * `queueLength` tasks of at most `queueBytes` of input in all wait while all workers are busy, and a task beyond
 * them is refused at once with a 503 and `Retry-After`, so a burst costs memory and waiting time in proportion to
 * the queue, not to the burst. A task that
 * runs longer than `taskTimeLimitMs` is refused with a 503 and its worker terminated (a task cannot be interrupted
 * any other way) and replaced by a fresh one when the next task needs it.
 */
export class WorkerPool<Tasks extends TaskFunctions> implements TaskRunner<Tasks> {
  private readonly workerModule: URL;
  private readonly threads: number;
  private readonly queueLength: number;
  private readonly queueBytes: number;
  private readonly taskTimeLimitMs: number;
  private readonly retryAfterSeconds: number;
  private readonly workerNiceness: number;
  private readonly workerHeapMegabytes: number | undefined;
  private readonly logger: WorkerPoolLogger | undefined;
  private readonly workers = new Set<PoolWorker>();
  private readonly queue: PendingTask[] = [];
  private queuedBytes = 0;
  /** Workers being terminated, which `close` waits for. */
  private readonly terminations = new Set<Promise<unknown>>();
  private closing = false;
  private nextTaskId = 1;
  private startedWorkers = 0;
  private completedTasks = 0;
  private refusedTasks = 0;
  private timedOutTasks = 0;

  constructor(options: WorkerPoolOptions) {
    this.workerModule = options.workerModule;
    this.threads = options.threads ?? defaultWorkerThreads();
    this.queueLength = options.queueLength ?? 64;
    this.queueBytes = options.queueBytes ?? 256 * 1024 * 1024;
    this.taskTimeLimitMs = options.taskTimeLimitMs ?? 30_000;
    this.retryAfterSeconds = options.retryAfterSeconds ?? 1;
    this.workerNiceness = options.workerNiceness ?? 10;
    this.workerHeapMegabytes = options.workerHeapMegabytes;
    this.logger = options.logger;
    if (!Number.isInteger(this.threads) || this.threads < 1) {
      throw new Error(`a worker pool needs at least one thread, got ${this.threads}`);
    }
    if (!Number.isInteger(this.queueLength) || this.queueLength < 0) {
      throw new Error(`a worker pool's queue length must be a whole number, got ${this.queueLength}`);
    }
    if (!(this.taskTimeLimitMs > 0)) throw new Error(`a task time limit must be positive, got ${this.taskTimeLimitMs}`);
  }

  /** Runs the task in a worker; refused with 503 when the queue is full or the pool is closing. */
  run<Name extends keyof Tasks & string>(
    name: Name,
    input: TaskInput<Tasks, Name>,
    options: TaskOptions = {},
  ): Promise<TaskResult<Tasks, Name>> {
    const inputBytes = options.inputBytes ?? 0;
    try {
      this.assertCapacity(inputBytes);
    } catch (error) {
      return Promise.reject(error);
    }
    return new Promise((resolve, reject) => {
      this.queue.push({
        taskId: this.nextTaskId++,
        name,
        input,
        transferList: options.transferList ?? [],
        inputBytes,
        resolve: resolve as (result: unknown) => void,
        reject,
      });
      this.queuedBytes += inputBytes;
      this.dispatch();
    });
  }

  /** Throws the 503 that `run` would answer now for a task of `inputBytes`: the pool is closing, or its queue full. */
  assertCapacity(inputBytes = 0): void {
    if (this.closing) throw this.closingError();
    // Every worker that is not running a task (one starting, or one not started yet) takes a queued task soon;
    // only the tasks beyond those wait for a busy worker, and those are what the queue's bounds limit.
    const waitingForBusyWorkers = this.queue.length - (this.threads - this.busyWorkers());
    if (waitingForBusyWorkers < 0) return;
    if (waitingForBusyWorkers >= this.queueLength || this.queuedBytes + inputBytes > this.queueBytes) {
      this.refusedTasks += 1;
      throw new ServiceError(
        "unavailable",
        `The server is busy with other computations (${this.queue.length} waiting); retry in a moment.`,
        { headers: { "retry-after": String(this.retryAfterSeconds) } },
      );
    }
  }

  /** What the pool has done so far. */
  statistics(): WorkerPoolStatistics {
    return {
      threads: this.threads,
      startedWorkers: this.startedWorkers,
      liveWorkers: this.workers.size,
      busyWorkers: this.busyWorkers(),
      queuedTasks: this.queue.length,
      queuedBytes: this.queuedBytes,
      completedTasks: this.completedTasks,
      refusedTasks: this.refusedTasks,
      timedOutTasks: this.timedOutTasks,
    };
  }

  /** Refuses queued and running tasks with 503, terminates every worker and waits until all have stopped. */
  async close(): Promise<void> {
    this.closing = true;
    for (const task of this.takeQueue()) task.reject(this.closingError());
    for (const worker of this.workers) {
      const task = this.releaseTask(worker);
      task?.reject(this.closingError());
      this.terminate(worker);
    }
    await Promise.all(this.terminations);
  }

  /** Empties the queue and answers what it held. */
  private takeQueue(): PendingTask[] {
    this.queuedBytes = 0;
    return this.queue.splice(0);
  }

  private busyWorkers(): number {
    let busy = 0;
    for (const worker of this.workers) if (worker.task !== undefined) busy += 1;
    return busy;
  }

  private closingError(): ServiceError {
    return new ServiceError("unavailable", "The server is shutting down; retry with another instance or later.", {
      headers: { "retry-after": String(this.retryAfterSeconds) },
    });
  }

  /** Hands queued tasks to ready idle workers, and starts workers for the tasks that none could take. */
  private dispatch(): void {
    if (this.closing) return;
    let startingWorkers = 0;
    for (const worker of this.workers) {
      if (!worker.ready) {
        startingWorkers += 1;
      } else if (worker.task === undefined) {
        const task = this.queue.shift();
        if (task === undefined) return;
        this.queuedBytes -= task.inputBytes;
        this.assign(worker, task);
      }
    }
    let tasksWithoutWorker = this.queue.length - startingWorkers;
    while (tasksWithoutWorker > 0 && this.workers.size < this.threads) {
      this.startWorker();
      tasksWithoutWorker -= 1;
    }
  }

  private assign(worker: PoolWorker, task: PendingTask): void {
    worker.task = task;
    // A busy worker keeps the process alive until it answers; an idle one does not hold it open.
    worker.thread.ref();
    worker.timeLimit = setTimeout(() => this.stopAtTimeLimit(worker), this.taskTimeLimitMs);
    try {
      const request: TaskRequest = { taskId: task.taskId, name: task.name, input: task.input };
      worker.thread.postMessage(request, task.transferList);
    } catch (error) {
      // The input could not be cloned (a programming error of the caller); the worker stays usable.
      this.releaseTask(worker);
      task.reject(error);
    }
  }

  /** Detaches the running task from its worker (clearing its time limit) and answers it. */
  private releaseTask(worker: PoolWorker): PendingTask | undefined {
    const task = worker.task;
    clearTimeout(worker.timeLimit);
    worker.timeLimit = undefined;
    worker.task = undefined;
    worker.thread.unref();
    return task;
  }

  private startWorker(): void {
    const worker: PoolWorker = {
      thread: startThread(this.workerModule, {
        workerData: { niceness: this.workerNiceness } satisfies PoolWorkerData,
        ...(this.workerHeapMegabytes === undefined
          ? {}
          : { resourceLimits: { maxOldGenerationSizeMb: this.workerHeapMegabytes } }),
      }),
      ready: false,
      task: undefined,
      timeLimit: undefined,
      failure: undefined,
    };
    worker.thread.unref();
    this.workers.add(worker);
    this.startedWorkers += 1;
    worker.thread.on("message", (message: WorkerMessage) => this.receive(worker, message));
    worker.thread.on("error", (error) => {
      worker.failure = error;
    });
    worker.thread.on("exit", (exitCode) => this.lose(worker, exitCode));
  }

  private receive(worker: PoolWorker, message: WorkerMessage): void {
    if (message.kind === "ready") {
      worker.ready = true;
    } else if (worker.task?.taskId === message.taskId) {
      const task = this.releaseTask(worker);
      this.completedTasks += 1;
      if (message.kind === "result") {
        task?.resolve(message.result);
      } else {
        task?.reject(failureError(message.failure, task.name));
      }
    }
    this.dispatch();
  }

  private stopAtTimeLimit(worker: PoolWorker): void {
    const task = this.releaseTask(worker);
    if (task === undefined) return;
    this.timedOutTasks += 1;
    this.terminate(worker);
    this.logger?.warn(
      { task: task.name, taskTimeLimitMs: this.taskTimeLimitMs },
      "a worker task ran past its time limit; its worker was terminated",
    );
    task.reject(
      new ServiceError(
        "unavailable",
        `The computation ran longer than the limit of ${this.taskTimeLimitMs} ms and was stopped.`,
      ),
    );
    this.dispatch();
  }

  /** Terminates a worker the pool gives up on; its exit is then no longer the pool's concern. */
  private terminate(worker: PoolWorker): void {
    this.workers.delete(worker);
    const termination = worker.thread.terminate().catch(() => undefined);
    this.terminations.add(termination);
    void termination.then(() => this.terminations.delete(termination));
  }

  /** A worker stopped by itself (an uncaught error, running out of memory): its task fails and it is replaced. */
  private lose(worker: PoolWorker, exitCode: number): void {
    if (!this.workers.delete(worker)) return;
    const task = this.releaseTask(worker);
    const reason = worker.failure?.message.slice(0, failureMessageCharacters) ?? `exit code ${exitCode}`;
    this.logger?.error({ task: task?.name, reason, ready: worker.ready }, "a worker thread stopped unexpectedly");
    const outOfMemory = (worker.failure as NodeJS.ErrnoException | undefined)?.code === "ERR_WORKER_OUT_OF_MEMORY";
    task?.reject(
      outOfMemory
        ? // The input was within the limits, so it is the memory the process has now that fell short (other large
          // requests at once, a small heap): answered as a 503 to retry, not as a fault of the server.
          new ServiceError(
            "unavailable",
            "The server ran out of memory for this computation; retry in a moment, or with a smaller input.",
            { headers: { "retry-after": String(this.retryAfterSeconds) } },
          )
        : new Error(`the worker running ${task.name} stopped: ${reason}`),
    );
    if (!worker.ready) {
      // A worker that cannot even load its module would fail the same way if started again: the waiting tasks
      // are answered rather than starting workers in a loop.
      for (const waiting of this.takeQueue()) waiting.reject(new Error(`a worker could not start: ${reason}`));
    }
    this.dispatch();
  }
}
