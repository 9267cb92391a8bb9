/**
 * Runs simulation seeds from the command line.
 *
 *   npm run simulate -- --seed 42          replays one seed exactly
 *   npm run simulate -- --seeds 2000       runs seeds 1..2000 (add --from S to start elsewhere)
 *   --chaos-ticks T                        ticks of injected faults per seed (the test suite uses 1000)
 *   --replicas                             the simulation over the real replica driver and storage
 *                                          (replica-cluster.ts) instead of the pure core's; with --seed it prints
 *                                          the seed's history digest, with --check-replay it runs every seed twice
 *                                          and compares the digests
 *
 * Prints every failing seed with its violation and replay command, and ends with `N seeds, K violations`; the exit
 * code is 1 when K > 0.
 */
import { performance } from "node:perf_hooks";
import { parseArgs } from "node:util";
import { runSeed, type SimulationResult } from "./cluster.js";
import { runReplicaSeedsFromCommandLine } from "./replica-runner.js";

const EMPTY_RESULT: SimulationResult = {
  seed: 0,
  violations: [],
  ticks: 0,
  committedEntries: 0,
  operations: 0,
  leadersElected: 0,
  messagesSent: 0,
  membershipChanges: 0,
  forcedReconfigurations: 0,
  snapshotsInstalled: 0,
  learnersPromoted: 0,
  crashes: 0,
  restartsBehindApplied: 0,
  inconclusiveHistories: 0,
};

const { values } = parseArgs({
  options: {
    seed: { type: "string" },
    seeds: { type: "string" },
    from: { type: "string" },
    "chaos-ticks": { type: "string" },
    "stop-on-failure": { type: "boolean" },
    replicas: { type: "boolean" },
    "check-replay": { type: "boolean" },
  },
});

const parseCount = (text: string | undefined, name: string): number | undefined => {
  if (text === undefined) return undefined;
  const value = Number(text);
  if (!Number.isInteger(value) || value < 0) throw new Error(`--${name} must be a non-negative integer`);
  return value;
};

const single = parseCount(values.seed, "seed");
const count = parseCount(values.seeds, "seeds");
const from = parseCount(values.from, "from") ?? 1;
const chaosTicks = parseCount(values["chaos-ticks"], "chaos-ticks");
const seeds = single !== undefined ? [single] : Array.from({ length: count ?? 100 }, (_, position) => from + position);

if (values.replicas) {
  const violations = await runReplicaSeedsFromCommandLine({
    seeds,
    single: single !== undefined,
    ...(chaosTicks === undefined ? {} : { chaosTicks }),
    stopOnFailure: values["stop-on-failure"] === true,
    checkReplay: values["check-replay"] === true,
  });
  process.exitCode = violations > 0 ? 1 : 0;
} else {
  runCoreSeeds();
}

/** Runs `seeds` of the pure core's simulation (cluster.ts) and prints what they found. */
function runCoreSeeds(): void {
  const started = performance.now();
  let violations = 0;
  let ticks = 0;
  let committed = 0;
  let restartsBehindApplied = 0;
  const coverage = {
    membershipChanges: 0,
    learnersPromoted: 0,
    forcedReconfigurations: 0,
    snapshotsInstalled: 0,
    crashes: 0,
  };
  for (const seed of seeds) {
    let result: ReturnType<typeof runSeed>;
    try {
      result = runSeed(seed, chaosTicks === undefined ? {} : { chaosTicks });
    } catch (error) {
      // A failure of the harness itself is reported like a violation, with its seed.
      const message = error instanceof Error ? (error.stack ?? error.message) : String(error);
      result = { ...EMPTY_RESULT, seed, violations: [`harness error: ${message}`] };
    }
    ticks += result.ticks;
    committed += result.committedEntries;
    restartsBehindApplied += result.restartsBehindApplied;
    for (const key of Object.keys(coverage) as (keyof typeof coverage)[]) coverage[key] += result[key];
    if (single !== undefined) {
      console.log(
        `seed ${seed}: ${result.ticks} ticks, ${result.committedEntries} committed entries, ${result.operations} client ` +
          `operations, ${result.leadersElected} leaders, ${result.membershipChanges} membership changes, ` +
          `${result.forcedReconfigurations} forced reconfigurations, ${result.snapshotsInstalled} snapshots installed, ` +
          `${result.learnersPromoted} learners promoted, ${result.crashes} crashes, ` +
          `${result.restartsBehindApplied} restarts behind the applied index`,
      );
    }
    if (result.violations.length > 0) {
      violations++;
      for (const violation of result.violations) console.log(`seed ${seed} FAILED: ${violation}`);
      const chaos = chaosTicks === undefined ? "" : ` --chaos-ticks ${chaosTicks}`;
      console.log(`  replay: npm run simulate -- --seed ${seed}${chaos}`);
      if (values["stop-on-failure"]) {
        console.log(`first violation after ${seeds.indexOf(seed) + 1} seeds`);
        break;
      }
    }
  }
  const seconds = (performance.now() - started) / 1000;
  console.log(
    `${(seeds.length / seconds).toFixed(1)} seeds/s, ${Math.round(ticks / seconds)} ticks/s, ` +
      `${committed} committed entries in ${seconds.toFixed(1)} s, ${restartsBehindApplied} restarts behind the applied ` +
      `index`,
  );
  console.log(
    `faults and changes: ${coverage.crashes} crashes, ${coverage.membershipChanges} membership changes, ` +
      `${coverage.learnersPromoted} learners promoted, ${coverage.forcedReconfigurations} forced reconfigurations, ` +
      `${coverage.snapshotsInstalled} snapshots installed`,
  );
  console.log(`${seeds.length} seeds, ${violations} violations`);
  process.exitCode = violations > 0 ? 1 : 0;
}
