/**
 * The command line of the real-driver simulation (`npm run simulate -- --replicas ...`, see cli.ts): runs seeds one
 * after the other, prints each failing seed with its replay command, and ends with the seeds per second, the faults
 * and changes the seeds injected, and `N seeds, K violations`.
 */
import { performance } from "node:perf_hooks";
import {
  REPLICA_COVERAGE_KEYS,
  type ReplicaCoverage,
  type ReplicaSimulationResult,
  runReplicaSeed,
} from "./replica-cluster.js";

/** What to run. */
export interface ReplicaRunOptions {
  readonly seeds: readonly number[];
  /** Replaying one seed: print what it did and its history digest. */
  readonly single: boolean;
  readonly chaosTicks?: number;
  readonly stopOnFailure: boolean;
  /** Runs every seed twice and counts the seeds whose two runs took a different course. */
  readonly checkReplay: boolean;
}

/** Runs the seeds and prints the outcome; returns the number of seeds with a violation. */
export async function runReplicaSeedsFromCommandLine(options: ReplicaRunOptions): Promise<number> {
  const overrides = options.chaosTicks === undefined ? {} : { chaosTicks: options.chaosTicks };
  const replay = (seed: number): string =>
    `npm run simulate -- --replicas --seed ${seed}${options.chaosTicks === undefined ? "" : ` --chaos-ticks ${options.chaosTicks}`}`;
  const coverage = Object.fromEntries(REPLICA_COVERAGE_KEYS.map((key) => [key, 0])) as Record<
    keyof ReplicaCoverage,
    number
  >;
  let violations = 0;
  let divergent = 0;
  let ticks = 0;
  let acknowledged = 0;
  let unknownOutcomes = 0;
  let runs = 0;
  const started = performance.now();
  for (const seed of options.seeds) {
    const result = await runReplicaSeed(seed, overrides);
    runs += 1;
    ticks += result.ticks;
    acknowledged += result.acknowledged;
    unknownOutcomes += result.unknownOutcomes;
    for (const key of REPLICA_COVERAGE_KEYS) coverage[key] += result[key];
    if (options.single) console.log(describeResult(result));
    if (options.checkReplay) {
      const again = await runReplicaSeed(seed, overrides);
      if (again.historyDigest !== result.historyDigest || again.violations.join() !== result.violations.join()) {
        divergent += 1;
        console.log(`seed ${seed}: a second run took another course (digest ${again.historyDigest.slice(0, 16)})`);
      }
    }
    if (result.violations.length > 0) {
      violations += 1;
      for (const violation of result.violations) console.log(`seed ${seed} FAILED: ${violation}`);
      console.log(`  replay: ${replay(seed)}`);
      if (options.stopOnFailure) {
        console.log(`first violation after ${runs} seeds`);
        break;
      }
    }
  }
  const seconds = (performance.now() - started) / 1000;
  const perRun = options.checkReplay ? 2 : 1;
  console.log(
    `real replicas: ${((runs * perRun) / seconds).toFixed(2)} seeds/s (one process), ${Math.round(
      (ticks * perRun) / seconds,
    )} steps/s, ${acknowledged} acknowledged publications and ${unknownOutcomes} of unknown outcome in ` +
      `${seconds.toFixed(1)} s`,
  );
  console.log(
    `faults and changes: ${REPLICA_COVERAGE_KEYS.map((key) => `${coverage[key]} ${describeKey(key)}`).join(", ")}`,
  );
  if (options.checkReplay) console.log(`replays: ${divergent} of ${runs} seeds took another course the second time`);
  console.log(`${runs} seeds, ${violations} violations`);
  return violations;
}

function describeKey(key: keyof ReplicaCoverage): string {
  return key.replace(/[A-Z]/g, (letter) => ` ${letter.toLowerCase()}`);
}

function describeResult(result: ReplicaSimulationResult): string {
  return (
    `seed ${result.seed}: ${result.ticks} steps, ${result.publications} publications (${result.acknowledged} ` +
    `acknowledged, ${result.unknownOutcomes} of unknown outcome), ${result.reads} reads, ${result.leadersElected} ` +
    `leaders, ${result.messagesSent} messages, ${result.crashes} crashes (${result.lostWrites} writes lost, ` +
    `${result.tornWrites} torn), ${result.restarts} clean restarts, ${result.membershipChanges} membership changes, ` +
    `${result.learnersPromoted} learners promoted, ${result.replicasRemoved} replicas removed, ` +
    `${result.priorityChanges} priority changes, ${result.heldRequestsAnsweredDone} held membership requests answered ` +
    `done, ${result.forcedReconfigurations} forced reconfigurations, ` +
    `${result.snapshotsTaken} snapshots taken, ${result.snapshotsInstalled} installed, ${result.commits} durable ` +
    `commits; history digest ` +
    `${result.historyDigest}`
  );
}
