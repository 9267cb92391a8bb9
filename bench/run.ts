/**
 * Benchmark runner: `npm run bench -- <name>` runs `bench/<name>/index.ts`, whose exported `run()` does the work.
 * Benchmarks are discovered by folder, so adding one means adding a folder with an `index.ts`; without a name the
 * runner lists what it found.
 */
import { readdir, stat } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

/** What every `bench/<name>/index.ts` exports. */
interface BenchmarkModule {
  run(): Promise<void>;
}

const benchDirectory = dirname(fileURLToPath(import.meta.url));

async function isFile(path: string): Promise<boolean> {
  try {
    return (await stat(path)).isFile();
  } catch {
    return false;
  }
}

/** Names of the folders under bench/ that contain an index.ts. */
async function availableBenchmarks(): Promise<string[]> {
  const folders = await readdir(benchDirectory, { withFileTypes: true });
  const names: string[] = [];
  for (const folder of folders) {
    if (folder.isDirectory() && (await isFile(join(benchDirectory, folder.name, "index.ts")))) {
      names.push(folder.name);
    }
  }
  return names.sort();
}

function isBenchmarkModule(value: unknown): value is BenchmarkModule {
  return typeof value === "object" && value !== null && typeof (value as { run?: unknown }).run === "function";
}

async function main(argv: readonly string[]): Promise<number> {
  const available = await availableBenchmarks();
  const name = argv[0];
  if (name === undefined) {
    console.log("usage: npm run bench -- <name>");
    console.log(`available benchmarks: ${available.join(", ") || "(none)"}`);
    return 0;
  }
  if (!available.includes(name)) {
    console.error(`unknown benchmark "${name}"; available benchmarks: ${available.join(", ") || "(none)"}`);
    return 2;
  }
  const module: unknown = await import(pathToFileURL(join(benchDirectory, name, "index.ts")).href);
  if (!isBenchmarkModule(module)) {
    console.error(`bench/${name}/index.ts does not export a run() function`);
    return 2;
  }
  await module.run();
  return 0;
}

process.exitCode = await main(process.argv.slice(2));
