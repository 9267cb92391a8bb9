/**
 * Runs chaos runs against the real local cluster from the command line.
 *
 *   npm run chaos                              one run of 60 s with a seed from the clock
 *   npm run chaos -- --seed 42 --duration-s 300 --clients 16 --snapshot-interval 200
 *   npm run chaos -- --runs 5                  five runs, seeds S..S+4
 *   npm run chaos -- --env SERVICE_BROKER_RAFT_SYNCHRONOUS_COMMIT=false    settings for the cluster (repeatable)
 *   npm run chaos -- --scale                   cluster changes (brokers added and removed, replication factor) too
 *   npm run chaos -- --scale --scale-partitions     and partitions added (3 → up to 6, experimental)
 *
 * Prints the counts every 5 s, every fault, and per run `seed S: N acknowledged, …, K violations`; keeps the data
 * directory (brokers' logs and data) of a failing run and prints where it is. The exit code is 1 when any run found
 * a violation, or when runs with `--scale` together tried no cancel (their coverage).
 */
import { parseArgs } from "node:util";
import { runClusterChaos } from "./cluster-chaos.js";

const { values } = parseArgs({
  options: {
    seed: { type: "string" },
    runs: { type: "string" },
    "duration-s": { type: "string" },
    clients: { type: "string" },
    "snapshot-interval": { type: "string" },
    env: { type: "string", multiple: true },
    scale: { type: "boolean" },
    "scale-partitions": { type: "boolean" },
  },
});

function positiveInteger(text: string | undefined, name: string, fallback: number): number {
  if (text === undefined) return fallback;
  const value = Number(text);
  if (!Number.isInteger(value) || value <= 0) throw new Error(`--${name} must be a positive integer, got ${text}`);
  return value;
}

const firstSeed = positiveInteger(values.seed, "seed", Date.now() % 1_000_000);
const runs = positiveInteger(values.runs, "runs", 1);
const durationMs = positiveInteger(values["duration-s"], "duration-s", 60) * 1000;
const clients = positiveInteger(values.clients, "clients", 8);
const snapshotIntervalEntries = positiveInteger(values["snapshot-interval"], "snapshot-interval", 200);
const environment: Record<string, string> = {};
for (const assignment of values.env ?? []) {
  const separator = assignment.indexOf("=");
  if (separator <= 0) throw new Error(`--env expects NAME=value, got ${assignment}`);
  environment[assignment.slice(0, separator)] = assignment.slice(separator + 1);
}

let failedRuns = 0;
let cancelsAttempted = 0;
for (let seed = firstSeed; seed < firstSeed + runs; seed += 1) {
  console.log(
    `seed ${seed}: ${durationMs / 1000} s of faults${values.scale === true ? " and cluster changes" : ""}, ${clients} publishers, snapshots every ${snapshotIntervalEntries} entries`,
  );
  let faultsPrinted = 0;
  let changesPrinted = 0;
  const result = await runClusterChaos({
    seed,
    durationMs,
    clients,
    snapshotIntervalEntries,
    environment,
    keepDataOnFailure: true,
    scale: values.scale === true,
    scalePartitions: values["scale-partitions"] === true,
    onProgress: (progress) => {
      for (const fault of progress.faults.slice(faultsPrinted)) console.log(`  fault: ${fault}`);
      faultsPrinted = progress.faults.length;
      for (const change of progress.changes.slice(changesPrinted)) console.log(`  change: ${change}`);
      changesPrinted = progress.changes.length;
      console.log(
        `  ${(progress.elapsedMs / 1000).toFixed(0)} s: ${progress.acknowledged} acknowledged, ${progress.refused} refused, ` +
          `${progress.unknownOutcomes} unknown outcomes, ${progress.readsFoundDuringFaults}/${progress.readsDuringFaults} reads found, ` +
          `longest write outage ${progress.longestWriteOutageMs} ms`,
      );
    },
  });
  for (const fault of result.faults.slice(faultsPrinted)) console.log(`  fault: ${fault}`);
  for (const change of result.changes.slice(changesPrinted)) console.log(`  change: ${change}`);
  for (const violation of result.violations) console.log(`seed ${seed} VIOLATION: ${violation}`);
  if (result.keptDataDirectory !== undefined) console.log(`  data and logs kept in ${result.keptDataDirectory}`);
  console.log(
    `seed ${seed}: ${result.acknowledged} acknowledged, ${result.refused} refused, ${result.unknownOutcomes} unknown ` +
      `outcomes, ${result.faults.length} faults, ${result.changes.length} changes (${result.changesCompleted} ` +
      `completed, ${result.cancelsRecorded} of ${result.cancelsAttempted} cancels made), ` +
      `${result.readsFoundDuringFaults}/${result.readsDuringFaults} reads ` +
      `during the faults found, longest write outage ${result.longestWriteOutageMs} ms, ${result.violations.length} violations`,
  );
  if (result.violations.length > 0) failedRuns += 1;
  cancelsAttempted += result.cancelsAttempted;
}
console.log(`${runs} runs, ${failedRuns} with violations`);
// Coverage of the runs together: one run may, by chance, try no cancel; runs that together tried none checked none.
const cancelsMissing = values.scale === true && cancelsAttempted === 0;
if (cancelsMissing) console.log(`COVERAGE: ${runs} runs with --scale tried no cancel; run more or longer runs`);
process.exitCode = failedRuns > 0 || cancelsMissing ? 1 : 0;
