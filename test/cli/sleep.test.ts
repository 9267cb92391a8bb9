import { getEventListeners } from "node:events";
import { describe, expect, it } from "vitest";
import { sleepUnlessInterrupted } from "../../src/cli/sleep.js";

describe("sleepUnlessInterrupted", () => {
  it("leaves no listener on the signal after each pause, however many pauses share it", async () => {
    const controller = new AbortController();
    for (let pause = 0; pause < 20; pause += 1) await sleepUnlessInterrupted(1, controller.signal);
    expect(getEventListeners(controller.signal, "abort")).toHaveLength(0);
  });

  it("ends at once, without an error, when the signal aborts", async () => {
    const controller = new AbortController();
    const startedMs = performance.now();
    const pause = sleepUnlessInterrupted(60_000, controller.signal);
    controller.abort();
    await pause;
    expect(performance.now() - startedMs).toBeLessThan(1_000);
    await sleepUnlessInterrupted(60_000, controller.signal);
    expect(performance.now() - startedMs).toBeLessThan(1_000);
  });
});
