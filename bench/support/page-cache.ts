/**
 * The page cache's part in a measurement that reads and writes files, so that two measurements of the same bytes
 * (a system's and `cp`'s) start from the same state:
 *
 * - Whether a file is read from memory or from the disk can change its read's cost several times over, and on a
 *   machine whose kernel pages out cold memory on its own (this one runs DAMON reclaim, which drops file pages soon
 *   after their last use) the share a run finds in memory varies from run to run. Both measurements therefore start
 *   with every file in memory (`warmPageCache`) or none (`dropPageCache`), and report what they found
 *   (`residentBytes`).
 * - Writing into memory the page cache has not used lately can cost several times what writing into recycled memory
 *   does on a virtual machine (the host provides the memory on its first touch), so the first of two otherwise equal
 *   writers can be the slower by far. Both measurements therefore start right after a scratch write of about as much
 *   as they write (`recyclePageCache`), which also shows that cost.
 *
 * `dropPageCache` needs GNU `dd` and `residentBytes` util-linux `fincore` (Linux); `warmPageCache` and
 * `recyclePageCache` work anywhere.
 */
import { spawnSync } from "node:child_process";
import { closeSync, openSync, readdirSync, unlinkSync, writeSync } from "node:fs";
import { join } from "node:path";
import { performance } from "node:perf_hooks";

/** Bytes of one write of `recyclePageCache`. */
const SCRATCH_WRITE_BYTES = 8 * 1024 * 1024;

/** How many paths one `fincore` or `cat` call takes, well below any argument-length limit. */
const PATHS_PER_CALL = 256;

/** The regular files under `directory`, at any depth, sorted. */
export function filesUnder(directory: string): string[] {
  const files: string[] = [];
  for (const entry of readdirSync(directory, { withFileTypes: true })) {
    const path = join(directory, entry.name);
    if (entry.isDirectory()) files.push(...filesUnder(path));
    else if (entry.isFile()) files.push(path);
  }
  return files.sort();
}

/** Reads every file to its end so that its pages are in memory. */
export function warmPageCache(files: readonly string[]): void {
  for (let start = 0; start < files.length; start += PATHS_PER_CALL) {
    const result = spawnSync("cat", files.slice(start, start + PATHS_PER_CALL), {
      stdio: ["ignore", "ignore", "pipe"],
    });
    if (result.status !== 0) throw new Error(`cat failed: ${result.error?.message ?? result.stderr?.toString()}`);
  }
}

/**
 * Writes every dirty page to the disk, then asks the kernel to drop the files' pages from memory (GNU `dd` with
 * `iflag=nocache count=0`, which calls `posix_fadvise(POSIX_FADV_DONTNEED)` on the whole file). Needs no privileges.
 */
export function dropPageCache(files: readonly string[]): void {
  spawnSync("sync");
  for (const file of files) {
    const result = spawnSync("dd", [`if=${file}`, "iflag=nocache", "count=0", "status=none"], {
      stdio: ["ignore", "ignore", "pipe"],
    });
    if (result.status !== 0) {
      throw new Error(`dd could not drop the cache of ${file}: ${result.error?.message ?? result.stderr?.toString()}`);
    }
  }
}

/** Bytes of `files` in memory now (util-linux `fincore`); undefined where `fincore` is missing or fails. */
export function residentBytes(files: readonly string[]): number | undefined {
  let total = 0;
  for (let start = 0; start < files.length; start += PATHS_PER_CALL) {
    const result = spawnSync(
      "fincore",
      ["--bytes", "--noheadings", "--raw", "--output", "RES", ...files.slice(start, start + PATHS_PER_CALL)],
      { encoding: "utf8" },
    );
    if (result.status !== 0 || typeof result.stdout !== "string") return undefined;
    for (const line of result.stdout.split("\n")) {
      if (line.trim() !== "") total += Number(line.trim());
    }
  }
  return total;
}

/**
 * Writes a scratch file of `bytes` in `directory` and deletes it at once, so that the next writer's pages are recycled
 * ones (see the module comment). Answers the milliseconds the scratch write took, which include any writeback the
 * kernel started meanwhile.
 */
export function recyclePageCache(directory: string, bytes: number): number {
  const path = join(directory, `page-cache-scratch-${process.pid}`);
  const block = Buffer.alloc(SCRATCH_WRITE_BYTES, 1);
  const startedAtMs = performance.now();
  const descriptor = openSync(path, "wx", 0o600);
  try {
    try {
      // Bounded: every pass writes at least one byte of a fixed total.
      for (let written = 0; written < bytes; ) {
        written += writeSync(descriptor, block, 0, Math.min(block.byteLength, bytes - written));
      }
    } finally {
      closeSync(descriptor);
    }
  } finally {
    unlinkSync(path);
  }
  return performance.now() - startedAtMs;
}
