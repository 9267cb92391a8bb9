import { existsSync } from "node:fs";
import { getPriority } from "node:os";
import { threadId } from "node:worker_threads";
import { afterEach, describe, expect, it } from "vitest";
import { ServiceError } from "../../src/http/errors.js";
import { inlineTaskRunner, type TaskRunner, WorkerPool } from "../../src/platform/worker-pool.js";
import { testTasks } from "./support/worker-pool-tasks.js";

type TestTasks = typeof testTasks;

const workerModule = new URL("./support/worker-pool-worker.ts", import.meta.url);

/** A gate a `waitForGate` task blocks on until `open` is called. */
function gate(): { buffer: SharedArrayBuffer; open(): void } {
  const buffer = new SharedArrayBuffer(4);
  return {
    buffer,
    open() {
      Atomics.store(new Int32Array(buffer), 0, 1);
      Atomics.notify(new Int32Array(buffer), 0);
    },
  };
}

/** Tracks whether a promise has settled, without awaiting it. */
function tracked<T>(promise: Promise<T>): { promise: Promise<T>; settled: () => boolean } {
  let settled = false;
  const watched = promise.finally(() => {
    settled = true;
  });
  // The caller awaits `watched` later; until then a rejection must not count as unhandled.
  watched.catch(() => undefined);
  return { promise: watched, settled: () => settled };
}

/** Lets the event loop run a few turns (timers and I/O callbacks included). */
async function eventLoopTurns(count: number): Promise<void> {
  for (let turn = 0; turn < count; turn++) await new Promise((resolve) => setTimeout(resolve, 0));
}

describe("WorkerPool", () => {
  const pools: WorkerPool<TestTasks>[] = [];
  afterEach(async () => {
    for (const pool of pools.splice(0)) await pool.close();
  });

  function createPool(
    options: { threads?: number; queueLength?: number; taskTimeLimitMs?: number; workerHeapMegabytes?: number } = {},
  ) {
    const pool = new WorkerPool<TestTasks>({ workerModule, ...options });
    pools.push(pool);
    return pool;
  }

  it("starts no worker before a task needs one and answers results from another thread", async () => {
    const pool = createPool({ threads: 2 });
    expect(pool.statistics()).toMatchObject({ threads: 2, startedWorkers: 0, liveWorkers: 0 });
    const answer = await pool.run("echo", { text: "grüße ✓" });
    expect(answer.text).toBe("grüße ✓");
    expect(answer.threadId).not.toBe(threadId);
    expect(pool.statistics()).toMatchObject({ startedWorkers: 1, liveWorkers: 1, completedTasks: 1 });
  });

  it.runIf(existsSync("/proc/thread-self"))("runs workers at a lower priority than the event loop", async () => {
    expect(await createPool({ threads: 1 }).run("niceness", undefined as never)).toBe(Math.min(19, getPriority() + 10));
  });

  it("answers what the inline runner answers: results, moved buffers, typed and untyped errors", async () => {
    const runners: TaskRunner<TestTasks>[] = [createPool({ threads: 1 }), inlineTaskRunner(testTasks)];
    for (const runner of runners) {
      const encoded = await runner.run("encode", { text: "αβγ" });
      expect(Buffer.from(encoded.bytes).toString("utf8")).toBe("αβγ");
      const refused = await runner.run("refuse", { text: "this" }).catch((error: unknown) => error);
      expect(refused).toBeInstanceOf(ServiceError);
      expect(refused).toMatchObject({
        status: 400,
        code: "invalid-request",
        message: "refused this",
        extensions: { errors: [{ location: "body/text", message: "is refused" }] },
      });
      const failed = await runner.run("fail", undefined as never).catch((error: unknown) => error);
      expect(failed).toBeInstanceOf(Error);
      expect(failed).not.toBeInstanceOf(ServiceError);
      expect((failed as Error).message).toContain("something broke");
    }
  });

  it("keeps the event loop free while a task runs", async () => {
    const pool = createPool({ threads: 1 });
    const blocking = gate();
    const task = tracked(pool.run("waitForGate", { gate: blocking.buffer }));
    // The worker starts and takes the task; meanwhile this thread keeps running timers and other callbacks.
    while (pool.statistics().busyWorkers === 0) await eventLoopTurns(1);
    await eventLoopTurns(20);
    expect(task.settled()).toBe(false);
    expect(pool.statistics().busyWorkers).toBe(1);
    blocking.open();
    expect(await task.promise).toEqual({ released: true });
  });

  it("refuses a task beyond the queue with 503 and Retry-After, and runs the queued ones later", async () => {
    const pool = createPool({ threads: 1, queueLength: 1 });
    const blocking = gate();
    const running = tracked(pool.run("waitForGate", { gate: blocking.buffer }));
    while (pool.statistics().busyWorkers === 0) await eventLoopTurns(1);
    const queued = tracked(pool.run("echo", { text: "queued" }));
    const refused = await pool.run("echo", { text: "one too many" }).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(ServiceError);
    expect(refused).toMatchObject({ status: 503, code: "unavailable", headers: { "retry-after": "1" } });
    expect(pool.statistics()).toMatchObject({ refusedTasks: 1, queuedTasks: 1 });
    expect(running.settled() || queued.settled()).toBe(false);
    blocking.open();
    expect(await running.promise).toEqual({ released: true });
    expect((await queued.promise).text).toBe("queued");
  });

  it("bounds the input bytes that wait as well as the number of tasks", async () => {
    const pool = new WorkerPool<TestTasks>({ workerModule, threads: 1, queueLength: 10, queueBytes: 1_000 });
    pools.push(pool);
    const blocking = gate();
    const running = tracked(pool.run("waitForGate", { gate: blocking.buffer }, { inputBytes: 5_000 }));
    while (pool.statistics().busyWorkers === 0) await eventLoopTurns(1);
    const small = tracked(pool.run("echo", { text: "small" }, { inputBytes: 600 }));
    await expect(pool.run("echo", { text: "large" }, { inputBytes: 600 })).rejects.toMatchObject({ status: 503 });
    expect(() => pool.assertCapacity(401)).toThrow(ServiceError);
    expect(() => pool.assertCapacity(400)).not.toThrow();
    expect(pool.statistics()).toMatchObject({ queuedTasks: 1, queuedBytes: 600 });
    blocking.open();
    await running.promise;
    expect((await small.promise).text).toBe("small");
    expect(pool.statistics().queuedBytes).toBe(0);
  });

  it("terminates a task stuck past its time limit, answers 503 and serves the next task on a new worker", async () => {
    const pool = createPool({ threads: 1, taskTimeLimitMs: 300 });
    const stuck = await pool.run("spinForever", undefined as never).catch((error: unknown) => error);
    expect(stuck).toBeInstanceOf(ServiceError);
    expect(stuck).toMatchObject({ status: 503, message: expect.stringContaining("300 ms") });
    expect(pool.statistics()).toMatchObject({ timedOutTasks: 1, liveWorkers: 0 });
    expect((await pool.run("echo", { text: "after" })).text).toBe("after");
    expect(pool.statistics()).toMatchObject({ startedWorkers: 2, liveWorkers: 1 });
  });

  it("fails the task of a worker that stops by itself and replaces the worker", async () => {
    const pool = createPool({ threads: 1 });
    const lost = await pool.run("exitThread", undefined as never).catch((error: unknown) => error);
    expect((lost as Error).message).toContain("stopped");
    expect((await pool.run("echo", { text: "next" })).text).toBe("next");
    expect(pool.statistics().startedWorkers).toBe(2);
  });

  it("answers 503 with Retry-After for a task whose worker ran out of memory, and serves the next on a new worker", async () => {
    const pool = createPool({ threads: 1, workerHeapMegabytes: 32 });
    const exhausted = await pool.run("exhaustMemory", undefined as never).catch((error: unknown) => error);
    expect(exhausted).toBeInstanceOf(ServiceError);
    expect(exhausted).toMatchObject({ status: 503, message: expect.stringContaining("out of memory") });
    expect((exhausted as ServiceError).headers).toMatchObject({ "retry-after": "1" });
    expect((await pool.run("echo", { text: "after" })).text).toBe("after");
  });

  it("stops every worker on close and refuses tasks afterwards", async () => {
    const pool = createPool({ threads: 2 });
    const blocking = gate();
    const running = tracked(pool.run("waitForGate", { gate: blocking.buffer }));
    await pool.run("echo", { text: "second worker" });
    expect(pool.statistics().liveWorkers).toBe(2);
    await pool.close();
    expect(pool.statistics()).toMatchObject({ liveWorkers: 0, busyWorkers: 0, queuedTasks: 0 });
    await expect(running.promise).rejects.toMatchObject({ status: 503 });
    await expect(pool.run("echo", { text: "late" })).rejects.toMatchObject({ status: 503 });
  });
});
