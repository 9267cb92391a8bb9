/**
 * Topology-round benchmark: what one round of the gateway's topology cache costs its event loop at the replica bound
 * (8,191 partitions at replication factor 3), beside what reading the brokers' answers off the wire costs anyway.
 *
 * Every second the gateway asks each broker to describe itself, and each answer carries the broker's whole encoded
 * configuration (about 2 MB at the bound). The floor is parsing those answers (`JSON.parse` of each message, which
 * the transport does before the view sees it). Above it, the view decodes and merges every configuration it has not
 * absorbed yet: a first round, or a round after a change, pays that; a steady round, where every answer repeats the
 * text the previous view absorbed, should cost little more than the floor. The broker's side is measured too: the
 * encoding it sends in every describe answer and gossip message, first and repeated, and what one gossip message
 * from another broker costs it: decoding and merging it, against recognizing a repeat by its digest.
 */
import { performance } from "node:perf_hooks";
import type { BrokerDescription } from "../../src/cluster/broker/protocol.js";
import { assembleTopologyView, type TopologyView } from "../../src/cluster/gateway/topology-view.js";
import {
  AbsorbedGossip,
  type ClusterConfiguration,
  decodeConfiguration,
  encodeConfiguration,
  gossipDigest,
  initialConfiguration,
  MAX_PARTITION_COUNT,
  mergeConfigurations,
  roundRobinDistribution,
} from "../../src/cluster/topology/index.js";
import { formatNumber, printTable } from "../support/report.js";

const WARMUP_RUNS = 2;
const MEASURED_RUNS = 9;
const REPLICATION_FACTOR = 3;
const BROKER_COUNTS = [3, 12] as const;

/** The median of `runs` timings of `work`, in milliseconds, after a warm-up. */
function medianMs(work: () => void): number {
  for (let run = 0; run < WARMUP_RUNS; run += 1) work();
  const timings: number[] = [];
  for (let run = 0; run < MEASURED_RUNS; run += 1) {
    const startedAt = performance.now();
    work();
    timings.push(performance.now() - startedAt);
  }
  timings.sort((left, right) => left - right);
  return timings[Math.floor(timings.length / 2)] as number;
}

function configurationOf(brokerCount: number): ClusterConfiguration {
  const brokerIds = Array.from({ length: brokerCount }, (_, index) => index);
  return initialConfiguration({
    clusterSize: brokerCount,
    partitionCount: MAX_PARTITION_COUNT,
    replicationFactor: REPLICATION_FACTOR,
    distribution: roundRobinDistribution(brokerIds, MAX_PARTITION_COUNT, REPLICATION_FACTOR),
    nowIso: "2026-12-03T00:00:00.000Z",
  });
}

/** The describe answers of every broker, as the wire carries them (one JSON message each). */
function wireAnswers(configuration: ClusterConfiguration, brokerCount: number): string[] {
  const text = encodeConfiguration(configuration);
  return Array.from({ length: brokerCount }, (_, nodeId) =>
    JSON.stringify({
      nodeId,
      host: "127.0.0.1",
      port: 26_500 + nodeId,
      version: "bench",
      configuration: text,
      brokers: [],
      replicas: [],
    } satisfies BrokerDescription),
  );
}

function assemble(descriptions: BrokerDescription[], previous: TopologyView | undefined): TopologyView | undefined {
  return assembleTopologyView({
    descriptions,
    previousAddresses: previous?.addresses ?? new Map(),
    askedAddresses: previous?.addresses ?? new Map(),
    previousVersions: previous?.versions ?? new Map(),
    previousConfiguration: previous?.configuration,
    previousConfigurationTexts: previous?.configurationTexts ?? new Map(),
    gatewayVersion: "bench",
  });
}

/** Runs the benchmark and prints one row per broker count, then the ratio of a steady round to the wire's floor. */
export async function run(): Promise<void> {
  const rows: string[][] = [];
  let worstRatio = 0;
  for (const brokerCount of BROKER_COUNTS) {
    const configuration = configurationOf(brokerCount);
    const messages = wireAnswers(configuration, brokerCount);
    const parse = (): BrokerDescription[] => messages.map((message) => JSON.parse(message) as BrokerDescription);
    const firstView = assemble(parse(), undefined);
    const wireMs = medianMs(() => void parse());
    const firstRoundMs = medianMs(() => void assemble(parse(), undefined)) - wireMs;
    const steadyRoundMs = medianMs(() => void assemble(parse(), firstView)) - wireMs;
    // A fresh copy each time, as a broker holds after a change, against the one it holds already.
    const encodeFirstMs = medianMs(() => void encodeConfiguration({ ...configuration }));
    const encodeAgainMs = medianMs(() => void encodeConfiguration(configuration));
    // One gossip message as a broker takes it in: merged, or recognized as a repeat of what it absorbed.
    const gossipText = encodeConfiguration(configuration);
    const gossipMergeMs = medianMs(() => void mergeConfigurations(configuration, decodeConfiguration(gossipText)));
    const absorbed = new AbsorbedGossip();
    absorbed.record(1, gossipDigest(gossipText), configuration);
    const gossipRepeatMs = medianMs(() => void absorbed.repeats(1, gossipDigest(gossipText), configuration));
    worstRatio = Math.max(worstRatio, (wireMs + steadyRoundMs) / wireMs);
    rows.push([
      String(brokerCount),
      formatNumber(Buffer.byteLength(messages[0] as string) / 1024 / 1024, 1),
      formatNumber(wireMs, 1),
      formatNumber(Math.max(0, firstRoundMs), 1),
      formatNumber(Math.max(0, steadyRoundMs), 1),
      formatNumber(encodeFirstMs, 1),
      formatNumber(encodeAgainMs, 3),
      formatNumber(gossipMergeMs, 1),
      formatNumber(gossipRepeatMs, 1),
    ]);
  }
  console.log(
    `One topology round at ${MAX_PARTITION_COUNT} partitions × replication factor ${REPLICATION_FACTOR}, medians of ${MEASURED_RUNS} runs (ms):`,
  );
  printTable(
    [
      "brokers",
      "answer MB",
      "parse answers (floor)",
      "view, first round",
      "view, steady round",
      "broker encode, new",
      "broker encode, again",
      "gossip, merged",
      "gossip, repeat",
    ],
    rows,
  );
  console.log(
    `ratio: a steady round (parse + view) to parsing the answers alone, worst case: ${worstRatio.toFixed(2)}`,
  );
}
