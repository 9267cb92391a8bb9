import { once } from "node:events";
import { describe, expect, it } from "vitest";
import { startThread } from "../../src/threads/start-thread.js";

describe("startThread", () => {
  it("runs a TypeScript module in a worker thread, with its workerData", async () => {
    const worker = startThread(new URL("./echo-worker.ts", import.meta.url), { workerData: { greeting: "ready" } });
    try {
      expect(await once(worker, "message")).toEqual(["ready"]);
      worker.postMessage(21);
      expect(await once(worker, "message")).toEqual([42]);
    } finally {
      await worker.terminate();
    }
  });
});
