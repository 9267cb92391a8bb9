/**
 * The flowplane command line that tests run as child processes (brokers, gateways, supervised restores).
 *
 * Under tsx every child compiles and loads the sources through a module loader again, which costs it about as much
 * processor time as the rest of its start, and a run starts several hundred children on a machine of two cores. The
 * global setup therefore transpiles `src` once per run into `test-build/` (with esbuild, as tsx itself does, without
 * a type check) and names the copy's entry in an environment variable that the run's workers inherit. Children of that
 * run start from the copy, which is never older than the run; a run without the global setup (a file of the
 * `own-process` project alone) starts them under tsx as before.
 */
import { readdirSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";
import { childNodeArguments, defaultCommand } from "../../src/platform/provisioner/index.js";

/** Where the copy goes: beside `src`, so that paths relative to a module (package.json, the console) still hold. */
const buildDirectory = fileURLToPath(new URL("../../test-build/", import.meta.url));
const sourceDirectory = fileURLToPath(new URL("../../src/", import.meta.url));
/** Set by `buildChildCommand` in the run's main process; workers and their children inherit it. */
const ENTRY_VARIABLE = "FLOWPLANE_TEST_CHILD_ENTRY";

/** A command line as the local cluster and provisioner take it. */
export interface ChildCommand {
  entry: string;
  nodeArguments: string[];
}

/**
 * Transpiles every module of `src` into `test-build/` and makes it this run's child command. Files are overwritten in
 * place rather than removed first, so that another run's children still reading the copy find every module.
 */
export async function buildChildCommand(): Promise<void> {
  const entryPoints = readdirSync(sourceDirectory, { recursive: true, encoding: "utf8" })
    .filter((name) => name.endsWith(".ts"))
    .map((name) => join(sourceDirectory, name));
  await build({
    entryPoints,
    outbase: sourceDirectory,
    outdir: buildDirectory,
    format: "esm",
    platform: "node",
    target: "node20",
    sourcemap: "linked",
    logLevel: "warning",
  });
  process.env[ENTRY_VARIABLE] = join(buildDirectory, "cli", "main.js");
}

/** The command line children of this run should start: the run's transpiled copy, or the sources under tsx. */
export function childCommand(): ChildCommand {
  const entry = process.env[ENTRY_VARIABLE];
  if (entry === undefined || entry === "") return defaultCommand();
  const inherited = childNodeArguments(process.execArgv);
  // The copy needs no module loader; the source maps make a child's stack traces name the sources' lines.
  const withoutLoader = inherited.filter(
    (argument, index) =>
      !argument.includes("tsx") && !(argument === "--import" && inherited[index + 1]?.includes("tsx")),
  );
  return { entry, nodeArguments: [...withoutLoader, "--enable-source-maps"] };
}
