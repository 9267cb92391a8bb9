import { parentPort, workerData } from "node:worker_threads";

// A TypeScript worker (the `satisfies` needs tsx): answers its workerData and every message it gets, doubled.
const start = workerData as { greeting: string } satisfies { greeting: string };
parentPort?.postMessage(start.greeting);
parentPort?.on("message", (value: number) => parentPort?.postMessage(value * 2));
