/**
 * Shared body of the real-driver simulation test files (replica-simulation-N.test.ts): each file runs its own range of
 * seeds, so vitest's worker pool runs the files in parallel. Seeds are grouped into tests of `SEEDS_PER_TEST`.
 *
 * Each group also checks its own coverage: a harness that silently stopped crashing replicas, tearing journal tails,
 * restarting them, changing the membership, promoting learners, removing and destroying replicas, holding membership
 * requests until their change took hold, forcing reconfigurations, installing snapshots, or (checked over a file's
 * whole range, being rarer) losing acknowledged snapshot chunks in a crash, delivering snapshot chunks damaged on the
 * way or having members reject whole snapshots would pass every safety
 * check while testing nothing, so each of those must happen at least a stated number of times per seed on average
 * (about half of what the harness does today: over seeds 1..600 the lowest group of 50 stays well above every
 * minimum; DEVELOPERS.md has the rates).
 */
import { describe, expect, it } from "vitest";
import { REPLICA_COVERAGE_KEYS, type ReplicaCoverage, runReplicaSeed } from "./replica-cluster.js";

/** Steps of injected faults per seed, as on the command line. */
const CHAOS_TICKS = 1000;
const SEEDS_PER_TEST = 50;
/** A group of 50 seeds takes 3–5 s alone on the development machine; the margin covers a loaded one. */
const TEST_TIMEOUT_MS = 300_000;

/** Least average per seed of each fault and change the harness injects (at `CHAOS_TICKS`). */
const MINIMUM_PER_SEED: ReplicaCoverage = {
  crashes: 6,
  tornWrites: 0.3,
  restarts: 1.5,
  membershipChanges: 2.5,
  learnersPromoted: 0.4,
  replicasRemoved: 0.35,
  priorityChanges: 1,
  heldRequestsAnsweredDone: 1,
  forcedReconfigurations: 0.15,
  snapshotsInstalled: 1.5,
  // Too few per group of seeds to hold each group to a minimum: held to minimums over a file's whole range instead
  // (`MINIMUM_PER_RANGE`).
  acknowledgedChunksLost: 0,
  damagedChunksDelivered: 0,
  damagedChunksReported: 0,
  snapshotsRejected: 0,
};

/** Least count over a file's whole range of seeds, for faults too rare to count per group. */
const MINIMUM_PER_RANGE: Partial<ReplicaCoverage> = {
  acknowledgedChunksLost: 1,
  // Per 100 seeds: about 45-80 chunks delivered damaged, 33-65 reported, 3-8 snapshots rejected.
  damagedChunksDelivered: 20,
  damagedChunksReported: 15,
  snapshotsRejected: 2,
};

/** Defines the tests for seeds [firstSeed, firstSeed + count). */
export function describeReplicaSeedRange(firstSeed: number, count: number): void {
  describe(`real-driver simulation seeds ${firstSeed}..${firstSeed + count - 1}`, () => {
    const rangeCoverage = Object.fromEntries(REPLICA_COVERAGE_KEYS.map((key) => [key, 0])) as Record<
      keyof ReplicaCoverage,
      number
    >;
    for (let start = firstSeed; start < firstSeed + count; start += SEEDS_PER_TEST) {
      const end = Math.min(firstSeed + count, start + SEEDS_PER_TEST);
      it(
        `seeds ${start}..${end - 1} keep every safety and liveness property`,
        async () => {
          const failures: string[] = [];
          const coverage = Object.fromEntries(REPLICA_COVERAGE_KEYS.map((key) => [key, 0])) as Record<
            keyof ReplicaCoverage,
            number
          >;
          for (let seed = start; seed < end; seed += 1) {
            const result = await runReplicaSeed(seed, { chaosTicks: CHAOS_TICKS });
            for (const key of REPLICA_COVERAGE_KEYS) {
              coverage[key] += result[key];
              rangeCoverage[key] += result[key];
            }
            for (const violation of result.violations) {
              failures.push(
                `seed ${seed}: ${violation}\n  replay: npm run simulate -- --replicas --seed ${seed} --chaos-ticks ${CHAOS_TICKS}`,
              );
            }
          }
          expect(failures, failures.join("\n")).toEqual([]);
          for (const key of REPLICA_COVERAGE_KEYS) {
            const minimum = Math.ceil(MINIMUM_PER_SEED[key] * (end - start));
            expect(coverage[key], `${key} over seeds ${start}..${end - 1}`).toBeGreaterThanOrEqual(minimum);
          }
        },
        TEST_TIMEOUT_MS,
      );
    }
    // Runs after the groups above (a file's tests run in order).
    it(`seeds ${firstSeed}..${firstSeed + count - 1} together inject the rarer faults`, () => {
      for (const [key, minimum] of Object.entries(MINIMUM_PER_RANGE) as [keyof ReplicaCoverage, number][]) {
        expect(rangeCoverage[key], `${key} over seeds ${firstSeed}..${firstSeed + count - 1}`).toBeGreaterThanOrEqual(
          minimum,
        );
      }
    });
  });
}
