import { access } from "node:fs/promises";
import { join, resolve } from "node:path";
import pino from "pino";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { Broker } from "../../../src/cluster/broker/broker.js";
import {
  brokerOptionsFromConfiguration,
  FIRST_CONFIGURATION_TIME,
  firstConfiguration,
  initialDistribution,
  parseContactPoints,
} from "../../../src/cluster/broker/options.js";
import { partitionsOf } from "../../../src/cluster/topology/index.js";
import { ConfigurationError, loadConfiguration } from "../../../src/config/load.js";
import { TEST_CLUSTER_SECRET } from "../../support/cluster-secret.js";
import { removeDirectory, temporaryDirectory, testBrokerOptions } from "./support.js";

const logger = pino({ level: "silent" });

/** The cluster secret every broker needs, as the environment gives it. */
const secret = { SERVICE_CLUSTER_SECRET: TEST_CLUSTER_SECRET };

describe("broker options", () => {
  let directory: string;

  beforeEach(async () => {
    directory = await temporaryDirectory("options");
  });

  afterEach(async () => {
    await removeDirectory(directory);
  });

  it("reads the SERVICE_BROKER_* environment in both spellings", () => {
    const configuration = loadConfiguration({
      environment: {
        SERVICE_DATA_DIRECTORY: directory,
        SERVICE_BROKER_CLUSTER_NODEID: "2",
        SERVICE_BROKER_CLUSTER_CLUSTERSIZE: "4",
        SERVICE_BROKER_CLUSTER_PARTITIONSCOUNT: "5",
        SERVICE_BROKER_CLUSTER_REPLICATIONFACTOR: "3",
        SERVICE_BROKER_CLUSTER_INITIALCONTACTPOINTS: "10.0.0.1:26502, 10.0.0.2:26502,[::1]:26503,host-4:1",
        SERVICE_BROKER_CLUSTER_CLUSTER_PORT: "26600",
        SERVICE_BROKER_MANAGEMENT_PORT: "9701",
        SERVICE_BROKER_ADVERTISED_HOST: "broker-2.example",
        SERVICE_BROKER_RAFT_SNAPSHOT_INTERVAL_ENTRIES: "500",
        SERVICE_CLUSTER_SECRET: TEST_CLUSTER_SECRET,
        SERVICE_CLUSTER_ID: "production",
        SERVICE_HTTP_MAX_CONNECTIONS_PER_ADDRESS: "7",
      },
    });
    const options = brokerOptionsFromConfiguration(configuration, { logger, version: "1.2.3" });
    expect(options).toMatchObject({
      nodeId: 2,
      clusterSize: 4,
      partitionsCount: 5,
      replicationFactor: 3,
      clusterPort: 26600,
      managementPort: 9701,
      advertisedHost: "broker-2.example",
      host: "127.0.0.1",
      dataDirectory: resolve(directory, "brokers", "2"),
      version: "1.2.3",
      partitioning: { scheme: "ROUND_ROBIN" },
      snapshotIntervalEntries: 500,
    });
    expect(options.clusterCredentials.clusterId).toBe("production");
    // The management server applies the same service.http limits as every other HTTP server.
    expect(options.managementLimits).toEqual(configuration.http);
    expect(options.managementLimits.maxConnectionsPerAddress).toBe(7);
    expect(options.contactPoints).toEqual([
      { host: "10.0.0.1", port: 26502 },
      { host: "10.0.0.2", port: 26502 },
      { host: "::1", port: 26503 },
      { host: "host-4", port: 1 },
    ]);
    const explicit = loadConfiguration({
      environment: { SERVICE_BROKER_DATA_DIRECTORY: join(directory, "mine"), ...secret },
    });
    expect(brokerOptionsFromConfiguration(explicit, { logger, version: "1" }).dataDirectory).toBe(
      join(directory, "mine"),
    );
  });

  it("names each malformed contact point, a too short election timeout and a wildcard advertised host", () => {
    expect(() => parseContactPoints("a:1,b,c:99999")).toThrow(ConfigurationError);
    try {
      parseContactPoints("a:1,b,c:99999");
    } catch (error) {
      expect((error as ConfigurationError).problems).toHaveLength(2);
      expect((error as ConfigurationError).problems[0]).toContain("entry 2");
      expect((error as ConfigurationError).problems[1]).toContain("entry 3");
    }
    const configuration = loadConfiguration({
      environment: { SERVICE_BROKER_RAFT_HEARTBEAT_INTERVAL_MS: "100", SERVICE_BROKER_RAFT_ELECTION_TIMEOUT_MS: "150" },
    });
    expect(() => brokerOptionsFromConfiguration(configuration, { logger, version: "1" })).toThrow(/electionTimeoutMs/);
    const wildcard = loadConfiguration({ environment: { SERVICE_BROKER_HOST: "0.0.0.0" } });
    expect(() => brokerOptionsFromConfiguration(wildcard, { logger, version: "1" })).toThrow(/advertisedHost/);
    const advertised = loadConfiguration({
      environment: { SERVICE_BROKER_HOST: "0.0.0.0", SERVICE_BROKER_ADVERTISEDHOST: "broker-0.internal", ...secret },
    });
    expect(brokerOptionsFromConfiguration(advertised, { logger, version: "1" })).toMatchObject({
      host: "0.0.0.0",
      advertisedHost: "broker-0.internal",
    });
  });

  it("builds the round-robin first configuration, identical on every broker", () => {
    const options = testBrokerOptions(directory, 0, { clusterSize: 3, partitionsCount: 3, replicationFactor: 2 });
    const configuration = firstConfiguration(options, initialDistribution(options));
    expect(configuration.version).toBe(1);
    expect(configuration.members.get(1)?.lastUpdatedAt).toBe(FIRST_CONFIGURATION_TIME);
    expect(partitionsOf(configuration, 0)).toEqual([
      { partitionId: 1, priority: 2, state: "ACTIVE" },
      { partitionId: 3, priority: 1, state: "ACTIVE" },
    ]);
  });

  it("validates a FIXED scheme with errors naming the partition and broker at fault", () => {
    const fixed = (partitions: { partitionId: number; nodes: { nodeId: number; priority: number }[] }[]) =>
      testBrokerOptions(directory, 0, {
        clusterSize: 2,
        partitionsCount: 2,
        replicationFactor: 2,
        partitioning: { scheme: "FIXED", partitions },
      });
    const valid = fixed([
      {
        partitionId: 1,
        nodes: [
          { nodeId: 0, priority: 2 },
          { nodeId: 1, priority: 1 },
        ],
      },
      {
        partitionId: 2,
        nodes: [
          { nodeId: 1, priority: 2 },
          { nodeId: 0, priority: 1 },
        ],
      },
    ]);
    const configuration = firstConfiguration(valid, initialDistribution(valid));
    expect(partitionsOf(configuration, 1)).toEqual([
      { partitionId: 1, priority: 1, state: "ACTIVE" },
      { partitionId: 2, priority: 2, state: "ACTIVE" },
    ]);

    const problemsOf = (options: ReturnType<typeof fixed>): readonly string[] => {
      try {
        initialDistribution(options);
      } catch (error) {
        expect(error).toBeInstanceOf(ConfigurationError);
        return (error as ConfigurationError).problems;
      }
      throw new Error("expected a ConfigurationError");
    };
    const problems = problemsOf(
      fixed([
        {
          partitionId: 1,
          nodes: [
            { nodeId: 0, priority: 1 },
            { nodeId: 5, priority: 1 },
          ],
        },
        { partitionId: 3, nodes: [{ nodeId: 0, priority: 1 }] },
      ]),
    );
    expect(problems.join("\n")).toContain("partition 1: broker 5 is outside 0..1");
    expect(problems.join("\n")).toContain("partition 1: priority 1 is used by more than one replica");
    expect(problems.join("\n")).toContain("partition 3 is outside 1..2");
    expect(problems.join("\n")).toContain("partition 2 has no replicas assigned");
    expect(problems.every((problem) => problem.startsWith("service.broker.experimental.partitioning (FIXED)"))).toBe(
      true,
    );
    expect(problemsOf(fixed([])).join("\n")).toContain("list every partition");
  });

  it("refuses to start a broker with an invalid FIXED scheme before touching its data directory", async () => {
    const options = testBrokerOptions(directory, 0, {
      clusterSize: 1,
      partitionsCount: 1,
      replicationFactor: 1,
      partitioning: { scheme: "FIXED", partitions: [{ partitionId: 1, nodes: [{ nodeId: 3, priority: 1 }] }] },
    });
    await expect(Broker.start(options)).rejects.toThrow(/partition 1: broker 3 is outside 0..0/);
    await expect(access(options.dataDirectory)).rejects.toThrow(/ENOENT/);
    const roundRobin = testBrokerOptions(directory, 0, { clusterSize: 2, replicationFactor: 3 });
    await expect(Broker.start(roundRobin)).rejects.toThrow(/replication factor 3 is larger than the cluster size 2/);
    // More replicas than a change may give a cluster: the bound holds at the first start too, for either scheme.
    const tooLarge = testBrokerOptions(directory, 0, { clusterSize: 4, partitionsCount: 8191, replicationFactor: 4 });
    await expect(Broker.start(tooLarge)).rejects.toThrow(
      "the cluster would hold 32764 replicas (8191 partitions × replication factor 4), over the maximum 24573",
    );
    await expect(access(tooLarge.dataDirectory)).rejects.toThrow(/ENOENT/);
  });
});
