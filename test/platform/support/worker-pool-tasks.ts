/**
 * Tasks for the worker pool's tests: they answer, fail, block until released, spin forever and stop their thread,
 * so the pool's behaviour can be shown without timing assumptions. `worker-pool-worker.ts` serves them in a worker.
 */
import { readlinkSync } from "node:fs";
import { getPriority } from "node:os";
import { threadId } from "node:worker_threads";
import { invalidRequest } from "../../../src/http/errors.js";
import { transferResult } from "../../../src/platform/worker-pool.js";

/** The tasks of this module. */
export const testTasks = {
  /** Answers its input and the thread that ran it. */
  echo: (input: { text: string }) => ({ text: input.text, threadId }),
  /** Fails with a typed error (a 400 naming the input). */
  refuse: (input: { text: string }): never => {
    throw invalidRequest(`refused ${input.text}`, { errors: [{ location: "body/text", message: "is refused" }] });
  },
  /** Fails with an untyped error. */
  fail: (): never => {
    throw new Error("something broke");
  },
  /** Answers the UTF-8 bytes of its input, moving the buffer to the caller instead of copying it. */
  encode: (input: { text: string }) => {
    const bytes = new TextEncoder().encode(input.text);
    return transferResult({ bytes }, [bytes.buffer]);
  },
  /** Waits until the caller stores a non-zero value in `gate[0]`, then answers. */
  waitForGate: (input: { gate: SharedArrayBuffer }) => {
    Atomics.wait(new Int32Array(input.gate), 0, 0);
    return { released: true };
  },
  /** Never finishes. */
  spinForever: (): never => {
    for (;;) {
      // A task stuck in a loop: only terminating its thread stops it.
    }
  },
  /** Answers the nice value of the thread that runs it (Linux, where threads have their own). */
  niceness: () => getPriority(Number(readlinkSync("/proc/thread-self").split("/").at(-1))),
  /** Keeps allocating until its thread runs out of memory. */
  exhaustMemory: (): never => {
    const kept: number[][] = [];
    for (;;) kept.push(new Array(1_000_000).fill(kept.length));
  },
  /** Stops its thread as an uncaught error would. */
  exitThread: (): never => {
    process.exit(3);
  },
};
