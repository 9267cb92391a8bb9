import { readdirSync, statSync } from "node:fs";
import { join, relative } from "node:path";

/** The permission bits of `path` (e.g. 0o600). */
export function modeOf(path: string): number {
  return statSync(path).mode & 0o777;
}

/**
 * Every directory and file under `root` (root included) with its permission bits written in octal, keyed by the
 * path relative to `root`, so a test can compare a whole tree at once and see which entry is too wide.
 */
export function treeModes(root: string): Record<string, string> {
  const modes: Record<string, string> = {};
  const visit = (path: string): void => {
    const stats = statSync(path);
    modes[relative(root, path) || "."] = (stats.mode & 0o777).toString(8);
    if (stats.isDirectory()) for (const name of readdirSync(path)) visit(join(path, name));
  };
  visit(root);
  return modes;
}

/** Entries of `treeModes(root)` that are not owner-only: directories other than 0700, files other than 0600. */
export function entriesOpenToOthers(root: string): Record<string, string> {
  const open: Record<string, string> = {};
  for (const [path, mode] of Object.entries(treeModes(root))) {
    const isDirectory = statSync(join(root, path)).isDirectory();
    if (mode !== (isDirectory ? "700" : "600")) open[path] = mode;
  }
  return open;
}
