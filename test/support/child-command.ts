/**
 * The flowplane command line that tests run as child processes (brokers, gateways, supervised restores).
 *
 * Under tsx every child compiles and loads the sources through a module loader again, which costs it about as much
 * processor time as the rest of its start, and a run starts several hundred children on a machine of two cores. The
 * global setup therefore transpiles `src` once per run into `test-build/` (with esbuild, as tsx itself does, without
 * a type check) and names the copy's entry in an environment variable that the run's workers inherit. Children of that
 * run start from the copy, which is never older than the run; a run without the global setup (a file of the
 * `own-process` project alone), or whose sources do not transpile, starts them under tsx as before.
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";
import { childNodeArguments, defaultCommand } from "../../src/platform/provisioner/index.js";

/** Where the copy goes: beside `src`, so that paths relative to a module (package.json, the console) still hold. */
const buildDirectory = fileURLToPath(new URL("../../test-build/", import.meta.url));
const sourceDirectory = fileURLToPath(new URL("../../src/", import.meta.url));
/** Set by `buildChildCommand` in the run's main process; workers and their children inherit it. */
const ENTRY_VARIABLE = "FLOWPLANE_TEST_CHILD_ENTRY";
/** Node.js options whose value names a module to load first. */
const MODULE_OPTIONS = new Set(["--import", "--require", "-r", "--loader", "--experimental-loader"]);

/** A command line as the local cluster and provisioner take it. */
export interface ChildCommand {
  entry: string;
  nodeArguments: string[];
}

/**
 * Transpiles every module of `src` into `test-build/` and makes it this run's child command. Only files whose content
 * changed are written, each through a temporary file and a rename, so that children of another run reading the copy
 * never see a file half written; files no module produces any more are removed. Sources that do not transpile leave
 * the children under tsx, where they fail as they would have, instead of stopping the run or a watch session.
 */
export async function buildChildCommand(): Promise<void> {
  const entryPoints = readdirSync(sourceDirectory, { recursive: true, encoding: "utf8" })
    .filter((name) => name.endsWith(".ts"))
    .map((name) => join(sourceDirectory, name));
  let outputFiles: { path: string; contents: Uint8Array }[];
  try {
    ({ outputFiles } = await build({
      entryPoints,
      outbase: sourceDirectory,
      outdir: buildDirectory,
      format: "esm",
      platform: "node",
      target: "node20",
      sourcemap: "linked",
      logLevel: "silent",
      write: false,
    }));
  } catch (error) {
    delete process.env[ENTRY_VARIABLE];
    console.warn(`[flowplane tests] src did not transpile, children start under tsx: ${(error as Error).message}`);
    return;
  }
  const produced = new Set<string>();
  for (const file of outputFiles) {
    produced.add(file.path);
    const unchanged = existsSync(file.path) && Buffer.from(file.contents).equals(readFileSync(file.path));
    if (unchanged) continue;
    mkdirSync(dirname(file.path), { recursive: true });
    const temporary = `${file.path}.${process.pid}.partial`;
    writeFileSync(temporary, file.contents);
    renameSync(temporary, file.path);
  }
  for (const name of readdirSync(buildDirectory, { recursive: true, encoding: "utf8" })) {
    const path = join(buildDirectory, name);
    if (/\.js(\.map)?$/.test(name) && !produced.has(path)) rmSync(path, { force: true });
  }
  process.env[ENTRY_VARIABLE] = join(buildDirectory, "cli", "main.js");
}

/** Whether a module loaded first by a Node.js option is tsx, which the copy does not need. */
function isTsx(module: string): boolean {
  return module === "tsx" || module.startsWith("tsx/") || module.includes(`node_modules/tsx/`);
}

/** `argumentList` without the options that load tsx, in both their `--import tsx` and `--import=tsx` forms. */
function withoutTsx(argumentList: readonly string[]): string[] {
  const kept: string[] = [];
  for (let index = 0; index < argumentList.length; index += 1) {
    const argument = argumentList[index] as string;
    const next = argumentList[index + 1];
    if (MODULE_OPTIONS.has(argument) && next !== undefined && isTsx(next)) {
      index += 1;
      continue;
    }
    const [option, value] = argument.split("=", 2);
    if (option !== undefined && MODULE_OPTIONS.has(option) && value !== undefined && isTsx(value)) continue;
    kept.push(argument);
  }
  return kept;
}

/** The command line children of this run should start: the run's transpiled copy, or the sources under tsx. */
export function childCommand(): ChildCommand {
  const entry = process.env[ENTRY_VARIABLE];
  if (entry === undefined || entry === "") return defaultCommand();
  // The source maps make a child's stack traces name the sources' lines.
  return { entry, nodeArguments: [...withoutTsx(childNodeArguments(process.execArgv)), "--enable-source-maps"] };
}
