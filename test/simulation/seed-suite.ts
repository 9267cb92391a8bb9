/**
 * Shared body of the simulation test files: each file runs its own range of seeds, so vitest's worker pool runs
 * the files in parallel. Seeds are grouped into tests of `SEEDS_PER_TEST`, each well inside the test timeout.
 */
import { describe, expect, it } from "vitest";
import { runSeed } from "./cluster.js";

/** Ticks of injected faults per seed in the test suite (the command line uses the default of `runSeed`). */
export const SUITE_CHAOS_TICKS = 1000;
const SEEDS_PER_TEST = 200;

/** Defines the tests for seeds [firstSeed, firstSeed + count). */
export function describeSeedRange(firstSeed: number, count: number): void {
  describe(`simulation seeds ${firstSeed}..${firstSeed + count - 1}`, () => {
    for (let start = firstSeed; start < firstSeed + count; start += SEEDS_PER_TEST) {
      const end = Math.min(firstSeed + count, start + SEEDS_PER_TEST);
      it(`seeds ${start}..${end - 1} keep every safety and liveness property`, () => {
        const failures: string[] = [];
        for (let seed = start; seed < end; seed++) {
          const result = runSeed(seed, { chaosTicks: SUITE_CHAOS_TICKS });
          for (const violation of result.violations) {
            failures.push(
              `seed ${seed}: ${violation}\n  replay: npm run simulate -- --seed ${seed} --chaos-ticks ${SUITE_CHAOS_TICKS}`,
            );
          }
        }
        expect(failures, failures.join("\n")).toEqual([]);
      });
    }
  });
}
