/**
 * `flowplane cluster`: the text it prints for the API's answers, and the commands against a real gateway in front
 * of real in-process brokers (status, a dry run, a scale-up followed to its end, cancel without a change).
 */
import { join } from "node:path";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  describeOperationEntry,
  formatBytes,
  formatClusterStatus,
  formatDuration,
  formatProgressLine,
} from "../../../src/cli/cluster-display.js";
import { parseBrokerCount, parseIds, parsePartitionCount, scalePatch } from "../../../src/cli/commands/cluster.js";
import { exitCodes } from "../../../src/cli/io.js";
import type { ClusterStatus } from "../../../src/client/cluster.js";
import { Broker } from "../../../src/cluster/broker/broker.js";
import { type RunningGateway, startGateway } from "../../../src/cluster/gateway/index.js";
import { loadConfiguration } from "../../../src/config/load.js";
import {
  readLocalBrokers,
  writeLocalBrokers,
  writeLocalGateway,
} from "../../../src/platform/provisioner/local-brokers.js";
import {
  partitionSettled,
  removeDirectory,
  startBrokers,
  temporaryDirectory,
  testBrokerOptions,
  waitFor,
} from "../../cluster/broker/support.js";
import { TEST_CLUSTER_SECRET } from "../../support/cluster-secret.js";
import { type CliFixture, startCliFixture } from "../support.js";

function status(overrides: Partial<ClusterStatus> = {}): ClusterStatus {
  return {
    version: 4,
    brokers: [
      { id: 0, state: "ACTIVE", version: 1, lastUpdatedAt: "t", partitions: [{ id: 1, state: "ACTIVE", priority: 2 }] },
      {
        id: 1,
        state: "ACTIVE",
        version: 1,
        lastUpdatedAt: "t",
        partitions: [{ id: 1, state: "JOINING", priority: 1 }],
      },
    ],
    routing: {},
    ...overrides,
  };
}

describe("cluster display", () => {
  it("shows the running change's progress in one line: operations, bytes, time left, the last error", () => {
    const running = status({
      pendingChange: {
        id: 4,
        status: "IN_PROGRESS",
        startedAt: "t",
        completed: [{ operation: "BROKER_ADD", brokerId: 1, completedAt: "t" }],
        pending: [
          { operation: "PARTITION_JOIN", brokerId: 1, partitionId: 1, priority: 1 },
          { operation: "PARTITION_LEAVE", brokerId: 0, partitionId: 2 },
        ],
        progress: {
          operation: { operation: "PARTITION_JOIN", brokerId: 1, partitionId: 1, priority: 1 },
          startedAt: "t",
          attempts: 2,
          lastError: "no leader\u001b[31m answered",
          bytesTotal: 3 * 1024 * 1024,
          bytesMoved: 1024 * 1024,
          estimatedSecondsLeft: 95,
        },
      },
    });
    expect(formatProgressLine(running)).toBe(
      "1/3 operations done · now PARTITION_JOIN broker 1 partition 1 (priority 1) · 1.0 MiB of 3.0 MiB · about 1 min 35 s left · attempt 2, last error: no leader\\u001b[31m answered",
    );
    const text = formatClusterStatus(running);
    expect(text).toContain("0       ACTIVE  1:2");
    expect(text).toContain("1:1 JOINING");
    expect(text).toContain("  running  PARTITION_JOIN broker 1 partition 1 (priority 1)");
    const waiting = status({
      pendingChange: {
        id: 4,
        status: "IN_PROGRESS",
        startedAt: "t",
        completed: [],
        pending: [{ operation: "PARTITION_LEAVE", brokerId: 0, partitionId: 2 }],
        waitingFor: "broker 0, which applies the running operation PARTITION_LEAVE, does not answer this gateway",
      },
    });
    expect(formatProgressLine(waiting)).toBe(
      "0/1 operations done · now PARTITION_LEAVE broker 0 partition 2 · broker 0, which applies the running operation PARTITION_LEAVE, does not answer this gateway",
    );
    expect(
      formatProgressLine(status({ lastChange: { id: 3, status: "CANCELLED", startedAt: "t", completedAt: "t" } })),
    ).toBe("change 3 CANCELLED");
    const withHistory = formatClusterStatus(
      status({
        lastChange: { id: 5, status: "COMPLETED", startedAt: "t1", completedAt: "t2" },
        earlierChanges: [{ id: 3, status: "CANCELLED", startedAt: "t0", completedAt: "t0" }],
      }),
    );
    expect(withHistory).toContain(
      "last change: 5 COMPLETED (started t1, ended t2)\n  earlier: 3 CANCELLED (started t0, ended t0)",
    );
  });

  it("formats bytes, durations, operations, and escapes control characters", () => {
    expect(formatBytes(512)).toBe("512 B");
    expect(formatBytes(1536)).toBe("1.5 KiB");
    expect(formatDuration(42)).toBe("42 s");
    expect(formatDuration(3725)).toBe("1 h 2 min");
    expect(describeOperationEntry({ operation: "BROKER_REMOVE", brokerId: 0, brokers: [3] })).toBe(
      "BROKER_REMOVE broker 0 [3]",
    );
    const hostile = status({
      brokers: [{ id: 0, state: "ACTIVE\u001b[2J", version: 1, lastUpdatedAt: "t", partitions: [] }],
      lastChange: { id: 3, status: "COMPLETED\u001b]0;owned\u0007", startedAt: "t", completedAt: "t" },
    });
    const shown = formatClusterStatus(hostile);
    expect(shown.includes("\u001b") || shown.includes("\u0007")).toBe(false);
    expect(shown).toContain("ACTIVE\\u001b[2J");
    expect(formatProgressLine(hostile)).toBe("change 3 COMPLETED\\u001b]0;owned\\u0007");
  });

  it("turns the scale options into the PATCH body, with today's replication factor by default", () => {
    const options = { audience: "gateway-api", local: false };
    expect(scalePatch({ ...options, brokers: 5 }, status())).toEqual({ brokers: { count: 5 } });
    expect(scalePatch({ ...options, add: [3], remove: [1] }, status())).toEqual({ brokers: { add: [3], remove: [1] } });
    expect(scalePatch({ ...options, replicationFactor: 2 }, status())).toEqual({
      partitions: { count: 1, replicationFactor: 2 },
    });
    expect(() => scalePatch({ ...options, brokers: 3, add: [4] }, status())).toThrow(/either --brokers or --add/);
    expect(() => scalePatch(options, status())).toThrow(/say what to change/);
  });

  it("refuses counts and broker ids beyond what a cluster can have, naming the range rather than the API's field", () => {
    expect(parseBrokerCount("1024")).toBe(1024);
    expect(() => parseBrokerCount("1025")).toThrow("It must be a whole number from 1 to 1024.");
    expect(() => parseBrokerCount("0")).toThrow("from 1 to 1024");
    expect(() => parseBrokerCount("-1")).toThrow("from 1 to 1024");
    expect(parsePartitionCount("8191")).toBe(8191);
    expect(() => parsePartitionCount("8192")).toThrow("It must be a whole number from 1 to 8191.");
    expect(parseIds("0, 3,1023")).toEqual([0, 3, 1023]);
    expect(() => parseIds("3,1024")).toThrow("It must be comma-separated broker ids from 0 to 1023, e.g. 3,4.");
    expect(() => parseIds("3,x")).toThrow("from 0 to 1023");
    expect(() => parseIds("3,,4")).toThrow("from 0 to 1023");
    expect(() => parseIds("4,3, 4")).toThrow("It names broker 4 twice.");
    expect(parseBrokerCount(" 3 ")).toBe(3);
  });
});

describe("flowplane cluster against a running cluster", () => {
  let fixture: CliFixture;
  let root: string;
  let brokers: Broker[];
  let gateway: RunningGateway;
  let environment: Record<string, string>;

  beforeAll(async () => {
    fixture = await startCliFixture();
    root = await temporaryDirectory("cli");
    brokers = await startBrokers(root, 3);
    for (const partitionId of [1, 2, 3]) {
      await waitFor(() => partitionSettled(brokers, partitionId, 3), `partition ${partitionId} settled`, 2_000);
    }
    gateway = await startGateway(
      loadConfiguration({
        environment: {},
        flags: {
          "service.gateway.port": 0,
          "service.management.port": 0,
          "service.cluster.secret": TEST_CLUSTER_SECRET,
          "service.gateway.issuerUrl": fixture.platform.issuerUrl,
          "service.gateway.contactPoints": brokers.map((broker) => `127.0.0.1:${broker.clusterAddress.port}`).join(","),
        },
      }),
      { logger: pino({ level: "silent" }), topologyRefreshIntervalMs: 100 },
    );
    environment = {
      ...fixture.clientEnvironment,
      SERVICE_CLUSTER_MANAGEMENT_URL: gateway.managementUrl,
      SERVICE_DATA_DIRECTORY: root,
    };
  });

  afterAll(async () => {
    await gateway?.close();
    await Promise.all((brokers ?? []).map((broker) => broker.close()));
    if (root !== undefined) await removeDirectory(root);
    await fixture?.close();
  });

  it("status prints the brokers and says no change runs; --json prints the API's answer", async () => {
    const text = await fixture.cli(["cluster", "status"], environment);
    expect(text.exitCode).toBe(exitCodes.ok);
    expect(text.stdout).toContain("configuration version 1");
    expect(text.stdout).toMatch(/^0\s+ACTIVE\s+1:3\s+2:1\s+3:2$/m);
    expect(text.stdout).toContain("no change in progress");
    const json = await fixture.cli(["cluster", "status", "--json"], environment);
    expect((JSON.parse(json.stdout) as ClusterStatus).version).toBe(1);
  });

  it("scale --dry-run prints the plan and changes nothing; cancel without a change fails with 1, not as a usage error", async () => {
    const dryRun = await fixture.cli(["cluster", "scale", "--replication-factor", "2", "--dry-run"], environment);
    expect(dryRun.exitCode, dryRun.stderr).toBe(exitCodes.ok);
    expect(dryRun.stdout).toContain("Dry run, nothing recorded.");
    expect(dryRun.stdout).toContain("PARTITION_LEAVE");
    expect(brokers[0]!.configuration.version).toBe(1);
    const cancel = await fixture.cli(["cluster", "cancel"], environment);
    expect(cancel.exitCode).toBe(exitCodes.failure);
    expect(cancel.stderr).toBe("error: no change is in progress; there is nothing to cancel\n");
  });

  it("scale refuses at once to run the local cluster's brokers for the management API of another cluster", async () => {
    // A local cluster in another data directory whose gateway answered on another port at its last start.
    const dataDirectory = await temporaryDirectory("cli-local");
    try {
      const clusterDirectory = join(dataDirectory, "cluster");
      writeLocalBrokers(clusterDirectory, { brokers: [{ nodeId: 0, clusterPort: 1, managementPort: 2 }] });
      writeLocalGateway(clusterDirectory, { managementUrl: "http://127.0.0.1:1" });
      const run = await fixture.cli(["cluster", "scale", "--add", "3"], {
        ...environment,
        SERVICE_DATA_DIRECTORY: dataDirectory,
      });
      expect(run.exitCode).toBe(exitCodes.usage);
      expect(run.stderr).toContain(
        `the local cluster in ${clusterDirectory} has its management API at http://127.0.0.1:1`,
      );
      expect(run.stderr).toContain("--cluster-id");
      // Nothing was started for it: its brokers file is as it was.
      expect(readLocalBrokers(clusterDirectory)?.brokers.map((broker) => broker.nodeId)).toEqual([0]);
      // The same port on another machine is another cluster too.
      writeLocalGateway(clusterDirectory, { managementUrl: environment.SERVICE_CLUSTER_MANAGEMENT_URL as string });
      const remote = new URL(environment.SERVICE_CLUSTER_MANAGEMENT_URL as string);
      remote.hostname = "cluster.example.com";
      const elsewhere = await fixture.cli(["cluster", "scale", "--add", "3"], {
        ...environment,
        SERVICE_DATA_DIRECTORY: dataDirectory,
        SERVICE_CLUSTER_MANAGEMENT_URL: remote.toString(),
      });
      expect(elsewhere.exitCode).toBe(exitCodes.usage);
      expect(elsewhere.stderr).toContain("--cluster-id");
    } finally {
      await removeDirectory(dataDirectory);
    }
  });

  it("scale names where it looked for a local cluster when the API refuses a broker that is not running", async () => {
    // The data directory (SERVICE_DATA_DIRECTORY) holds no local cluster, so the command starts no broker.
    const run = await fixture.cli(["cluster", "scale", "--add", "7"], environment);
    expect(run.exitCode).toBe(exitCodes.failure);
    expect(run.stderr).toContain("broker 7 is to be added but is not running and reachable");
    expect(run.stderr).toContain(`found none in ${join(root, "cluster")}`);
    expect(run.stderr).toContain(
      "give --data-directory, or start the brokers the API names yourself (flowplane broker)",
    );
    // With --no-local the command looks for none, and says only what the API answered.
    const remote = await fixture.cli(["cluster", "scale", "--add", "7", "--no-local"], environment);
    expect(remote.exitCode).toBe(exitCodes.failure);
    expect(remote.stderr).toContain("broker 7 is to be added but is not running and reachable");
    expect(remote.stderr).not.toContain("found none");
    // A data directory given by hand that holds no local cluster is a mistake, refused before the API is called: the
    // same dry run without it succeeds.
    const empty = await temporaryDirectory("cli-empty");
    try {
      const dryRun = ["cluster", "scale", "--replication-factor", "2", "--dry-run"];
      expect((await fixture.cli(dryRun, environment)).exitCode).toBe(exitCodes.ok);
      const given = await fixture.cli([...dryRun, "--data-directory", empty], environment);
      expect(given.exitCode).toBe(exitCodes.usage);
      expect(given.stderr).toContain(`no local cluster in ${join(empty, "cluster")}`);
    } finally {
      await removeDirectory(empty);
    }
    expect(brokers[0]!.configuration.version).toBe(1);
  });

  it("scale --add --watch adds a running broker and follows the change to its end", async () => {
    const fourth = await Broker.start(
      testBrokerOptions(root, 3, { contactPoints: brokers.map((broker) => broker.clusterAddress) }),
    );
    brokers.push(fourth);
    await waitFor(() => brokers[0]!.isReachable(3), "the coordinator hears from broker 3");
    const run = await fixture.cli(["cluster", "scale", "--add", "3", "--watch", "--no-local"], environment);
    expect(run.exitCode, run.stderr).toBe(exitCodes.ok);
    expect(run.stdout).toMatch(/Change \d+ started: \d+ operations?\n/);
    expect(run.stdout).toMatch(/change \d+: COMPLETED/);
    expect(brokers[0]!.configuration.members.get(3)?.partitions.size).toBeGreaterThan(0);

    // With --json: the plan, then the answer the change ended on, one document after the other and nothing else.
    const fifth = await Broker.start(
      testBrokerOptions(root, 4, { contactPoints: brokers.map((broker) => broker.clusterAddress) }),
    );
    brokers.push(fifth);
    await waitFor(() => brokers[0]!.isReachable(4), "the coordinator hears from broker 4");
    const json = await fixture.cli(["cluster", "scale", "--add", "4", "--watch", "--json", "--no-local"], environment);
    expect(json.exitCode, json.stderr).toBe(exitCodes.ok);
    const [plan, ended, ...rest] = json.stdout
      .trimEnd()
      .split(/\n(?=\{)/)
      .map((document) => JSON.parse(document));
    expect(rest).toEqual([]);
    expect(plan).toMatchObject({ changeId: expect.any(Number), plannedChanges: expect.any(Array) });
    expect(ended).toMatchObject({ lastChange: { id: plan.changeId, status: "COMPLETED" } });
    const refused = await fixture.cli(["cluster", "scale", "--add", "9", "--no-local"], environment);
    expect(refused.exitCode).toBe(exitCodes.failure);
    expect(refused.stderr).toMatch(
      /broker 9 is to be added but is not running and reachable; start it first \(HTTP 400\)/,
    );
  });
});
