/**
 * Starting worker threads from both forms of the code: the compiled product (`.js`) and the sources (`.ts`, run under
 * tsx by tests, benchmarks and the command line). Shared by the platform and the cluster, which may not import each
 * other.
 */
import { Worker, type WorkerOptions } from "node:worker_threads";

/**
 * Starts a thread running `module`. A compiled module runs as it is. A `.ts` module cannot be loaded by a worker of
 * Node.js 20 by itself, because module hooks registered with `--import` do not reach worker threads; such a worker
 * registers tsx first.
 */
export function startThread(module: URL, options: Omit<WorkerOptions, "eval"> = {}): Worker {
  if (!module.pathname.endsWith(".ts")) return new Worker(module, options);
  const tsxApi = import.meta.resolve("tsx/esm/api");
  const bootstrap = `import(${JSON.stringify(tsxApi)}).then((api) => { api.register(); return import(${JSON.stringify(module.href)}); });`;
  return new Worker(bootstrap, { ...options, eval: true });
}
