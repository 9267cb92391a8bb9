/** Helpers for broker tests: in-process brokers on loopback port 0 in temporary directories, and bounded polling. */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pino from "pino";
import { Broker } from "../../../src/cluster/broker/broker.js";
import { BROKER_DEFAULTS, type BrokerOptions } from "../../../src/cluster/broker/options.js";
import type { BrokerAddress, ReplicaReport } from "../../../src/cluster/broker/protocol.js";
import { testClusterCredentials } from "../../support/cluster-secret.js";
import { defaultHttpServerLimits } from "../../support/http.js";

/** Polls `condition` until it holds; throws after `attempts` polls so a broken test fails instead of hanging. */
export async function waitFor(
  condition: () => boolean | Promise<boolean>,
  description: string,
  attempts = 1_000,
): Promise<void> {
  for (let attempt = 0; attempt < attempts; attempt += 1) {
    if (await condition()) return;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  throw new Error(`condition never held: ${description}`);
}

/** Creates a temporary directory; the caller removes it with `removeDirectory`. */
export function temporaryDirectory(prefix: string): Promise<string> {
  return mkdtemp(join(tmpdir(), `flowplane-broker-${prefix}-`));
}

/** Removes a temporary directory. */
export async function removeDirectory(directory: string): Promise<void> {
  await rm(directory, { recursive: true, force: true });
}

/** Options of a test broker: fast Raft timings, loopback, port 0, silent logs. */
export function testBrokerOptions(root: string, nodeId: number, overrides: Partial<BrokerOptions> = {}): BrokerOptions {
  return {
    nodeId,
    host: "127.0.0.1",
    advertisedHost: "127.0.0.1",
    clusterPort: 0,
    managementHost: "127.0.0.1",
    managementPort: 0,
    managementLimits: defaultHttpServerLimits,
    dataDirectory: join(root, "brokers", String(nodeId)),
    clusterSize: 3,
    partitionsCount: 3,
    replicationFactor: 3,
    partitioning: { scheme: "ROUND_ROBIN" },
    contactPoints: [],
    heartbeatIntervalMs: 25,
    electionTimeoutMs: 250,
    synchronousCommit: true,
    snapshotIntervalEntries: 10_000,
    partitionScalingEnabled: false,
    ...BROKER_DEFAULTS,
    gossipIntervalMs: 100,
    shutdownTimeoutMs: 2_000,
    clusterCredentials: testClusterCredentials(),
    version: "0.0.0-test",
    logger: pino({ level: process.env.TEST_LOG_LEVEL ?? "silent" }),
    ...overrides,
  };
}

/**
 * Starts `count` brokers one after the other; each gets the addresses of those started before it as contact points,
 * and learns the later ones by gossip.
 */
export async function startBrokers(
  root: string,
  count: number,
  overrides: (nodeId: number) => Partial<BrokerOptions> = () => ({}),
): Promise<Broker[]> {
  const brokers: Broker[] = [];
  for (let nodeId = 0; nodeId < count; nodeId += 1) {
    const contactPoints: BrokerAddress[] = brokers.map((broker) => broker.clusterAddress);
    brokers.push(
      await Broker.start(testBrokerOptions(root, nodeId, { contactPoints, clusterSize: count, ...overrides(nodeId) })),
    );
  }
  return brokers;
}

/** Every replica report of `partitionId` among `brokers`. */
export function reportsOf(brokers: readonly Broker[], partitionId: number): ReplicaReport[] {
  return brokers.flatMap((broker) => broker.replicaReports().filter((report) => report.partitionId === partitionId));
}

/** Whether `partitionId` has exactly one leader, every other replica follows it, and all are healthy. */
export function partitionSettled(brokers: readonly Broker[], partitionId: number, replicas: number): boolean {
  const reports = reportsOf(brokers, partitionId);
  const leaders = reports.filter((report) => report.role === "leader");
  const leader = leaders[0];
  return (
    reports.length === replicas &&
    leaders.length === 1 &&
    leader !== undefined &&
    reports.every(
      (report) => report.leaderId === leader.leaderId && report.term === leader.term && report.health === "healthy",
    )
  );
}

/** The broker leading `partitionId`, or undefined. */
export function leaderOf(brokers: readonly Broker[], partitionId: number): Broker | undefined {
  return brokers.find((broker) => broker.replica(partitionId)?.report().role === "leader");
}
