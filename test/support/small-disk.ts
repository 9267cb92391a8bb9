/**
 * A small disk for tests of what happens when one fills up: a tmpfs mounted on a directory, which needs root (so
 * these tests run in CI, and elsewhere only as root).
 */
import { execFileSync } from "node:child_process";
import { closeSync, mkdirSync, openSync, writeSync } from "node:fs";

/** Whether this process may mount a small disk; CI runs as root, and its tests fail rather than skip. */
export const canMountSmallDisk = process.getuid?.() === 0 || process.env.CI === "true";

/** Mounts a tmpfs of `sizeMiB` at `directory` and returns what unmounts it. */
export function mountSmallDisk(directory: string, sizeMiB: number): () => void {
  mkdirSync(directory, { recursive: true });
  execFileSync("mount", ["-t", "tmpfs", "-o", `size=${sizeMiB}m,mode=0700`, "tmpfs", directory]);
  return () => execFileSync("umount", ["-l", directory]);
}

/** Fills the filesystem holding `path` with a file of zeros, until it has no space left. */
export function fillDisk(path: string): void {
  const descriptor = openSync(path, "w");
  const block = Buffer.alloc(1024 * 1024);
  try {
    for (;;) writeSync(descriptor, block);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "ENOSPC") throw error;
  } finally {
    closeSync(descriptor);
  }
}
