import { describe, expect, it } from "vitest";
import { backoffDelayMs } from "../../../src/cluster/transport/backoff.js";

const options = { initialBackoffMs: 100, maxBackoffMs: 1000 };

describe("backoffDelayMs", () => {
  it("doubles the ceiling per failure up to the maximum", () => {
    const highest = (failures: number) => backoffDelayMs(failures, options, () => 0.999_999);
    expect([1, 2, 3, 4, 5, 50].map(highest)).toEqual([100, 200, 400, 800, 1000, 1000]);
  });

  it("draws from the upper half of the ceiling", () => {
    expect(backoffDelayMs(3, options, () => 0)).toBe(200);
    expect(backoffDelayMs(3, options, () => 0.5)).toBe(300);
  });

  it("rejects a failure count below one", () => {
    expect(() => backoffDelayMs(0, options, () => 0)).toThrow(/consecutiveFailures/);
  });
});
