/**
 * Planner benchmark: plans and simulates scaling a cluster of about 1,000 brokers and 10,000 partitions with
 * replication factor 3 (to 1,000 brokers, down to 997, and to replication factor 4), which is what the coordinator
 * does before it answers a scaling request or a dry run. 10,000 partitions is over the product's maximum (8,191),
 * so those cases call the unchecked core (`computeScalePlan`) on a configuration built directly; one more case runs
 * the maximum partition count through the validated entry point (`planScale`). Each case runs several times after a
 * warm-up and prints its median and p99; the ratio of the worst median to the 200 ms budget is printed last.
 */
import { performance } from "node:perf_hooks";
import {
  type ClusterConfiguration,
  type ClusterOperation,
  computeScalePlan,
  initialConfiguration,
  MAX_PARTITION_COUNT,
  type MemberState,
  type PartitionReplica,
  planScale,
  type ResolvedScaleRequest,
  roundRobinDistribution,
  roundRobinReplicas,
  simulatePlan,
} from "../../src/cluster/topology/index.js";
import { formatNumber, printTable } from "../support/report.js";

const BUDGET_MS = 200;
const WARMUP_RUNS = 5;
const MEASURED_RUNS = 40;
const NOW_ISO = "2026-11-21T10:15:00.000Z";

function brokerRange(count: number): number[] {
  return Array.from({ length: count }, (_, index) => index);
}

/**
 * A configuration with partitions 1..partitionCount placed by round robin over `memberIds`, built directly because
 * `initialConfiguration` (rightly) refuses more than MAX_PARTITION_COUNT partitions.
 */
function roundRobinConfiguration(
  memberIds: readonly number[],
  partitionCount: number,
  replicationFactor: number,
): ClusterConfiguration {
  const config = { exporting: { exporters: [{ id: "records-file", state: "ENABLED" as const }] } };
  const partitionsByBroker = new Map(memberIds.map((brokerId) => [brokerId, new Map<number, PartitionReplica>()]));
  for (let partitionId = 1; partitionId <= partitionCount; partitionId += 1) {
    for (const { brokerId, priority } of roundRobinReplicas(memberIds, partitionId, replicationFactor)) {
      partitionsByBroker.get(brokerId)!.set(partitionId, { state: "ACTIVE", priority, config });
    }
  }
  const members = new Map<number, MemberState>();
  for (const [brokerId, partitions] of partitionsByBroker) {
    members.set(brokerId, { state: "ACTIVE", version: 0, lastUpdatedAt: NOW_ISO, partitions });
  }
  return {
    version: 1,
    members,
    lastChange: null,
    earlierChanges: [],
    pendingChange: null,
    routing: {
      version: 1,
      requestHandling: { strategy: "AllPartitions", partitionCount },
      messageCorrelation: { strategy: "HashMod", partitionCount },
    },
  };
}

interface BenchmarkCase {
  readonly name: string;
  /** Plans the request; the timed work is this plus the simulation of its result. */
  readonly plan: () => readonly ClusterOperation[];
  readonly configuration: ClusterConfiguration;
  readonly expectedBrokerCount: number;
  /** Whether the case counts for the budget ratio (the 10,000-partition cases do). */
  readonly budgeted: boolean;
}

function unchecked(
  name: string,
  currentBrokers: number,
  targetBrokers: number,
  replicationFactor: number,
): BenchmarkCase {
  const partitionCount = 10_000;
  const configuration = roundRobinConfiguration(brokerRange(currentBrokers), partitionCount, 3);
  const request: ResolvedScaleRequest = { brokers: brokerRange(targetBrokers), replicationFactor, partitionCount };
  return {
    name,
    configuration,
    plan: () => computeScalePlan(configuration, request),
    expectedBrokerCount: targetBrokers,
    budgeted: true,
  };
}

function validatedAtMaximum(): BenchmarkCase {
  const memberIds = brokerRange(1_000);
  const configuration = initialConfiguration({
    clusterSize: memberIds.length,
    partitionCount: MAX_PARTITION_COUNT,
    replicationFactor: 3,
    distribution: roundRobinDistribution(memberIds, MAX_PARTITION_COUNT, 3),
    nowIso: NOW_ISO,
  });
  return {
    name: `1,000 → 997 brokers, ${MAX_PARTITION_COUNT.toLocaleString("en")} partitions, RF 3 (planScale)`,
    configuration,
    plan: () => planScale(configuration, { brokers: brokerRange(997) }),
    expectedBrokerCount: 997,
    budgeted: false,
  };
}

function percentile(sortedValues: readonly number[], fraction: number): number {
  const index = Math.min(sortedValues.length - 1, Math.ceil(fraction * sortedValues.length) - 1);
  return sortedValues[Math.max(0, index)]!;
}

interface CaseResult {
  readonly operationCount: number;
  readonly planMedianMs: number;
  readonly medianMs: number;
  readonly p99Ms: number;
}

function measure(benchmark: BenchmarkCase): CaseResult {
  const totals: number[] = [];
  const planning: number[] = [];
  let operationCount = 0;
  for (let run = 0; run < WARMUP_RUNS + MEASURED_RUNS; run += 1) {
    const startedMs = performance.now();
    const plan = benchmark.plan();
    const plannedMs = performance.now();
    const expected = simulatePlan(benchmark.configuration, plan, NOW_ISO);
    const finishedMs = performance.now();
    // Checked every run so the work cannot be skipped, and so a wrong result cannot pass as a fast one.
    if (plan.length === 0 || expected.members.size !== benchmark.expectedBrokerCount) {
      throw new Error(
        `${benchmark.name}: unexpected result (${plan.length} operations, ${expected.members.size} brokers)`,
      );
    }
    operationCount = plan.length;
    if (run >= WARMUP_RUNS) {
      totals.push(finishedMs - startedMs);
      planning.push(plannedMs - startedMs);
    }
  }
  totals.sort((left, right) => left - right);
  planning.sort((left, right) => left - right);
  return {
    operationCount,
    planMedianMs: percentile(planning, 0.5),
    medianMs: percentile(totals, 0.5),
    p99Ms: percentile(totals, 0.99),
  };
}

/** Runs the planner benchmark and prints its table and, last, the ratio to the budget. */
export async function run(): Promise<void> {
  const cases = [
    unchecked("997 → 1,000 brokers, 10,000 partitions, RF 3", 997, 1_000, 3),
    unchecked("1,000 → 997 brokers, 10,000 partitions, RF 3", 1_000, 997, 3),
    unchecked("1,000 brokers, 10,000 partitions, RF 3 → 4", 1_000, 1_000, 4),
    validatedAtMaximum(),
  ];
  console.log(
    `planner: plan + simulation, ${WARMUP_RUNS} warm-up and ${MEASURED_RUNS} measured runs per case (budget ${BUDGET_MS} ms)`,
  );
  const rows: string[][] = [];
  let worstBudgetedMedianMs = 0;
  for (const benchmark of cases) {
    const result = measure(benchmark);
    if (benchmark.budgeted) worstBudgetedMedianMs = Math.max(worstBudgetedMedianMs, result.medianMs);
    rows.push([
      benchmark.name,
      result.operationCount.toLocaleString("en"),
      formatNumber(result.planMedianMs, 1),
      formatNumber(result.medianMs, 1),
      formatNumber(result.p99Ms, 1),
    ]);
  }
  printTable(["case", "operations", "plan median ms", "plan + simulate median ms", "p99 ms"], rows);
  console.log(`ratio to the ${BUDGET_MS} ms budget: ${formatNumber(worstBudgetedMedianMs / BUDGET_MS, 2)}`);
}
