/**
 * Memory the machine used lately, handed to the next measurement, so that two measurements of the same bytes start
 * from the same state of the machine's memory.
 *
 * On a virtual machine the host may provide a page of the guest's memory only when the guest first touches it, and
 * take back pages the guest leaves free (this one boots with free page reporting: `page_reporting.page_reporting_order`
 * on its kernel command line). Pages another process just freed are still provided. So a process that writes a GiB
 * into the page cache, or keeps a GiB of new memory, can take several times longer when the kernel hands it pages the
 * host must provide again than when it hands it pages freed a moment before, and which of the two it gets depends on
 * what ran before it: the same loopback TCP copy varied that much within one run of the scaling benchmark, its slow
 * runs busy copying into page cache pages (DEVELOPERS.md, "Sending a snapshot to a member that is behind").
 *
 * `recycleMemory` allocates and touches the given bytes in a process of its own, which then exits: the next
 * measurement's allocations get those pages. It answers what that took, which is itself a measurement of the machine
 * (several times longer when the memory comes from the host anew).
 */
import { spawn } from "node:child_process";
import { performance } from "node:perf_hooks";
import type { BenchmarkChildren } from "./children.js";

/** Bytes the recycling process allocates at once: large enough to be a few allocations, small enough to fit. */
const PIECE_BYTES = 256 * 1024 * 1024;

/** What recycling took: elapsed and processor time, in ms. */
export interface RecycleRun {
  readonly ms: number;
  readonly cpuMs: number;
}

/**
 * Allocates and touches `bytes` of memory in a child process tracked by `children`, and frees it when the child exits;
 * resolves once it has exited.
 */
export function recycleMemory(children: BenchmarkChildren, bytes: number): Promise<RecycleRun> {
  if (!Number.isSafeInteger(bytes) || bytes < 1) throw new Error(`cannot recycle ${bytes} bytes of memory`);
  const pieces = Math.ceil(bytes / PIECE_BYTES);
  // Each piece stays referenced until the process ends, so none is freed and handed out again to the next piece.
  const script = [
    "const held = [];",
    `for (let piece = 0; piece < ${pieces}; piece += 1) held.push(Buffer.allocUnsafeSlow(${PIECE_BYTES}).fill(1));`,
    "const cpu = process.cpuUsage();",
    "console.log(String((cpu.user + cpu.system) / 1000) + ' ' + held.length);",
  ].join("\n");
  const startedAtMs = performance.now();
  return new Promise((resolve, reject) => {
    const child = children.track(spawn(process.execPath, ["-e", script], { stdio: ["ignore", "pipe", "inherit"] }));
    let output = "";
    child.stdout?.on("data", (chunk: Buffer) => {
      output += chunk.toString("utf8");
    });
    child.once("error", reject);
    child.once("close", (code) => {
      const [cpuMs, held] = output.trim().split(" ").map(Number);
      if (code !== 0 || held !== pieces || cpuMs === undefined || !Number.isFinite(cpuMs)) {
        reject(new Error(`the process recycling memory exited with ${code}: ${output.slice(0, 200)}`));
        return;
      }
      resolve({ ms: performance.now() - startedAtMs, cpuMs });
    });
  });
}
