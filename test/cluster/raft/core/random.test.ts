import { describe, expect, it } from "vitest";
import { SeededRandom } from "../../../../src/cluster/raft/core/random.js";

describe("seeded random source", () => {
  it("the same seed gives the same sequence; another seed another", () => {
    const draw = (seed: number): number[] => {
      const random = new SeededRandom(seed);
      return Array.from({ length: 8 }, () => random.nextInt(1_000_000));
    };
    expect(draw(7)).toEqual(draw(7));
    expect(draw(7)).not.toEqual(draw(8));
  });

  it("stays within bounds and covers them", () => {
    const random = new SeededRandom(1);
    const seen = new Set<number>();
    for (let draw = 0; draw < 1_000; draw++) {
      const value = random.nextInt(10);
      expect(value).toBeGreaterThanOrEqual(0);
      expect(value).toBeLessThan(10);
      seen.add(value);
    }
    expect(seen.size).toBe(10);
    expect(() => random.nextInt(0)).toThrow();
  });
});
