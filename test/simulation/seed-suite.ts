/**
 * Shared body of the simulation test files: each file runs its own range of seeds, so vitest's worker pool runs
 * the files in parallel. Seeds are grouped into tests of `SEEDS_PER_TEST`, each well inside the test timeout.
 *
 * Each group also checks its own coverage: a harness that silently stopped crashing members, changing the
 * membership, promoting learners, forcing reconfigurations or installing snapshots would pass every safety check
 * while testing nothing, so each of those must happen at least a stated number of times per seed on average (about
 * half of what the harness does today).
 */
import { describe, expect, it } from "vitest";
import { runSeed } from "./cluster.js";

/** Ticks of injected faults per seed in the test suite (the command line uses the default of `runSeed`). */
export const SUITE_CHAOS_TICKS = 1000;
const SEEDS_PER_TEST = 200;

/** Least average per seed of each fault and change the harness injects (at `SUITE_CHAOS_TICKS`). */
const MINIMUM_PER_SEED = {
  crashes: 7,
  membershipChanges: 2,
  learnersPromoted: 0.4,
  forcedReconfigurations: 0.04,
  snapshotsInstalled: 1,
} as const;

type Coverage = Record<keyof typeof MINIMUM_PER_SEED, number>;

/** Defines the tests for seeds [firstSeed, firstSeed + count). */
export function describeSeedRange(firstSeed: number, count: number): void {
  describe(`simulation seeds ${firstSeed}..${firstSeed + count - 1}`, () => {
    for (let start = firstSeed; start < firstSeed + count; start += SEEDS_PER_TEST) {
      const end = Math.min(firstSeed + count, start + SEEDS_PER_TEST);
      it(`seeds ${start}..${end - 1} keep every safety and liveness property`, () => {
        const failures: string[] = [];
        const coverage: Coverage = {
          crashes: 0,
          membershipChanges: 0,
          learnersPromoted: 0,
          forcedReconfigurations: 0,
          snapshotsInstalled: 0,
        };
        for (let seed = start; seed < end; seed++) {
          const result = runSeed(seed, { chaosTicks: SUITE_CHAOS_TICKS });
          for (const key of Object.keys(coverage) as (keyof Coverage)[]) coverage[key] += result[key];
          for (const violation of result.violations) {
            failures.push(
              `seed ${seed}: ${violation}\n  replay: npm run simulate -- --seed ${seed} --chaos-ticks ${SUITE_CHAOS_TICKS}`,
            );
          }
        }
        expect(failures, failures.join("\n")).toEqual([]);
        for (const key of Object.keys(coverage) as (keyof Coverage)[]) {
          const minimum = Math.ceil(MINIMUM_PER_SEED[key] * (end - start));
          expect(coverage[key], `${key} over seeds ${start}..${end - 1}`).toBeGreaterThanOrEqual(minimum);
        }
      });
    }
  });
}
