import { describe, expect, it } from "vitest";
import { RepeatedWarnings } from "../../src/http/repeated-warnings.js";

/** A `RepeatedWarnings` on a clock the test moves. */
function warningsOnClock(windowMs: number): { warnings: RepeatedWarnings; advance: (ms: number) => void } {
  let nowMs = 1_000;
  return {
    warnings: new RepeatedWarnings({ windowMs, now: () => nowMs }),
    advance: (ms) => {
      nowMs += ms;
    },
  };
}

describe("RepeatedWarnings", () => {
  it("logs the first warning of a kind, holds back its repeats within the window, and counts them in the next", () => {
    const { warnings, advance } = warningsOnClock(10_000);
    expect(warnings.admit("unavailable")).toBe(0);
    for (let repeat = 0; repeat < 500; repeat += 1) {
      advance(19);
      expect(warnings.admit("unavailable")).toBeNull();
    }
    // 500 × 19 ms = 9,500 ms: still inside the window; the window is measured from the last line logged.
    advance(499);
    expect(warnings.admit("unavailable")).toBeNull();
    advance(1);
    expect(warnings.admit("unavailable")).toBe(501);
    // The count starts again with the line that named it.
    advance(10_000);
    expect(warnings.admit("unavailable")).toBe(0);
  });

  it("keeps a window per kind", () => {
    const { warnings, advance } = warningsOnClock(10_000);
    expect(warnings.admit("unavailable")).toBe(0);
    expect(warnings.admit("gatewayTimeout")).toBe(0);
    expect(warnings.admit("unavailable")).toBeNull();
    advance(5_000);
    expect(warnings.admit("badGateway")).toBe(0);
    expect(warnings.admit("gatewayTimeout")).toBeNull();
    advance(5_000);
    expect(warnings.admit("unavailable")).toBe(1);
    expect(warnings.admit("gatewayTimeout")).toBe(1);
    expect(warnings.admit("badGateway")).toBeNull();
  });

  it("holds nothing back with a window of 0, and refuses a window that is no duration", () => {
    const { warnings } = warningsOnClock(0);
    expect([warnings.admit("unavailable"), warnings.admit("unavailable"), warnings.admit("unavailable")]).toEqual([
      0, 0, 0,
    ]);
    expect(() => new RepeatedWarnings({ windowMs: -1, now: () => 0 })).toThrow(RangeError);
    expect(() => new RepeatedWarnings({ windowMs: Number.NaN, now: () => 0 })).toThrow(RangeError);
  });

  it("tracks a bounded number of kinds, forgetting the oldest first", () => {
    const { warnings } = warningsOnClock(10_000);
    expect(warnings.admit("kind 0")).toBe(0);
    expect(warnings.admit("kind 0")).toBeNull();
    for (let kind = 1; kind < 256; kind += 1) expect(warnings.admit(`kind ${kind}`)).toBe(0);
    // 256 kinds tracked: one more forgets kind 0, whose next warning is logged as a first again.
    expect(warnings.admit("kind 256")).toBe(0);
    expect(warnings.admit("kind 0")).toBe(0);
    // Re-tracking kind 0 forgot kind 1, the oldest then; kind 255 is still tracked.
    expect(warnings.admit("kind 1")).toBe(0);
    expect(warnings.admit("kind 255")).toBeNull();
  });
});
