/**
 * The local cluster and its provisioner when a port chosen free is taken by another process before the child meant
 * for it listens (the system hands out ports of one small range to every process that asks for a free one): a port
 * the start chose itself is chosen again (and the provisioner records it) and the cluster started again; a port the
 * operator configured is not changed, and the start fails naming it. The ports are taken the moment they have been
 * chosen, through the module that chooses them.
 */
import { randomUUID } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { type AddressInfo, createServer, type Server, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { pino } from "pino";
import { afterEach, describe, expect, it, vi } from "vitest";
import {
  type LocalCluster,
  PORT_IN_USE_RETRIES,
  PortInUseError,
  startLocalCluster,
} from "../../../src/platform/provisioner/index.js";
import { openStore } from "../../../src/platform/store/database.js";
import { startTestPlatform, type TestPlatform } from "../../support/platform.js";

/** What the next choice of ports hands to another process before returning (set by a test, used once). */
const takeNext: { brokerClusterPortOf?: number; gatewayManagementPort?: boolean } = {};
/**
 * Whether every port chosen again for a broker is taken too, how many times one was chosen again, what choosing one
 * throws, and where choosing waits (told it is reached, it waits for the gate).
 */
const replacements: {
  takeEvery: boolean;
  count: number;
  failure?: Error;
  pause?: { reached: () => void; gate: Promise<void> };
} = { takeEvery: false, count: 0 };
/**
 * Ports the system hands out first while set, as it may hand a stopped cluster's ports to whoever asks for a free
 * one, and how many choices were offered them.
 */
const offering: { ports: number[]; choices: number } = { ports: [], choices: 0 };
/** Servers standing for the other processes that took ports, with the connections they accepted. */
const holders: { server: Server; sockets: Set<Socket> }[] = [];

/** Listens on `port` (0: any), as another process that took it would; it answers nobody. */
async function hold(port: number): Promise<number> {
  const sockets = new Set<Socket>();
  // Readiness polls may reach it before the child that could not listen exits: kept to be closed with it.
  const server = createServer((socket) => sockets.add(socket));
  await new Promise<void>((resolveListen) => server.listen({ host: "127.0.0.1", port }, resolveListen));
  holders.push({ server, sockets });
  return (server.address() as AddressInfo).port;
}

/** The port a holder listens on. */
function heldPort(index: number): number {
  const holder = holders[index];
  if (holder === undefined) throw new Error(`no port was taken as holder ${index}`);
  return (holder.server.address() as AddressInfo).port;
}

vi.mock("../../../src/platform/provisioner/local-brokers.js", async (importOriginal) => {
  const original = await importOriginal<typeof import("../../../src/platform/provisioner/local-brokers.js")>();
  /** `count` distinct free ports none of `taken`: the offered ones first, while there are. */
  const offeredFirst = async (host: string, count: number, taken: ReadonlySet<number>): Promise<number[]> => {
    offering.choices += 1;
    const picked = offering.ports.filter((port) => !taken.has(port)).slice(0, count);
    return [...picked, ...(await original.freePorts(host, count - picked.length, new Set([...taken, ...picked])))];
  };
  return {
    ...original,
    // The brokers' ports of a first start: the chosen cluster port of one broker is taken right after the choice.
    brokerPorts: async (...parameters: Parameters<typeof original.brokerPorts>) => {
      const [clusterDirectory, host, brokerCount, reserved = new Set()] = parameters;
      if (offering.ports.length > 0 && original.readLocalBrokers(clusterDirectory) === null) {
        // As the original chooses them, from the offered ports first.
        const chosen = await offeredFirst(host, 2 * brokerCount, reserved);
        const brokers = Array.from({ length: brokerCount }, (_, nodeId) => ({
          nodeId,
          clusterPort: chosen[2 * nodeId] ?? 0,
          managementPort: chosen[2 * nodeId + 1] ?? 0,
        }));
        original.writeLocalBrokers(clusterDirectory, { brokers });
        return { brokers };
      }
      const ports = await original.brokerPorts(...parameters);
      const nodeId = takeNext.brokerClusterPortOf;
      const broker = ports.brokers.find((entry) => entry.nodeId === nodeId);
      if (broker !== undefined) {
        takeNext.brokerClusterPortOf = undefined;
        await hold(broker.clusterPort);
      }
      return ports;
    },
    // The gateway's ports of a first placement (two at once): the management port is taken right after the choice.
    freePorts: async (...parameters: Parameters<typeof original.freePorts>) => {
      const ports =
        offering.ports.length > 0 ? await offeredFirst(...parameters) : await original.freePorts(...parameters);
      const [, managementPort] = ports;
      if (takeNext.gatewayManagementPort === true && managementPort !== undefined) {
        takeNext.gatewayManagementPort = false;
        await hold(managementPort);
      }
      return ports;
    },
    // A broker's port chosen again, taken right after the choice while every one is.
    replaceBrokerPort: async (...parameters: Parameters<typeof original.replaceBrokerPort>) => {
      if (replacements.failure !== undefined) throw replacements.failure;
      if (replacements.pause !== undefined) {
        replacements.pause.reached();
        await replacements.pause.gate;
      }
      const replacement = await original.replaceBrokerPort(...parameters);
      if (replacement !== undefined) {
        replacements.count += 1;
        if (replacements.takeEvery) await hold(replacement);
      }
      return replacement;
    },
  };
});

const fakeCli = fileURLToPath(new URL("./fake-cli.mjs", import.meta.url));
const cleanups: (() => Promise<void>)[] = [];

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  for (const { server, sockets } of holders.splice(0)) {
    for (const socket of sockets) socket.destroy();
    await new Promise((resolveClose) => server.close(resolveClose));
  }
  takeNext.brokerClusterPortOf = undefined;
  takeNext.gatewayManagementPort = false;
  replacements.takeEvery = false;
  replacements.count = 0;
  replacements.failure = undefined;
  replacements.pause = undefined;
  offering.ports = [];
  offering.choices = 0;
});

function temporaryDirectory(): string {
  const directory = mkdtempSync(join(tmpdir(), "flowplane-taken-ports-"));
  cleanups.push(async () => rmSync(directory, { recursive: true, force: true }));
  return directory;
}

/** Where the fake children of `platformWithFakeClusters`' platforms record themselves (`started.log`). */
let records = "";

/**
 * A platform running its first cluster with fake children whose brokers listen on their cluster ports; its log
 * messages are added to `messages` when given.
 */
async function platformWithFakeClusters(managementPort = 0, messages?: string[]): Promise<TestPlatform> {
  records = temporaryDirectory();
  const logger =
    messages === undefined
      ? undefined
      : pino({ level: "info" }, { write: (line: string) => messages.push((JSON.parse(line) as { msg: string }).msg) });
  const platform = await startTestPlatform(
    { "service.gateway.port": 0, "service.management.port": managementPort },
    {
      ...(logger === undefined ? {} : { logger }),
      dataDirectory: temporaryDirectory(),
      localClusters: {
        command: { entry: fakeCli, nodeArguments: [] },
        environment: { FAKE_RECORD_DIRECTORY: records, FAKE_BROKERS_LISTEN: "1", PATH: process.env.PATH },
      },
    },
  );
  cleanups.push(() => platform.close());
  return platform;
}

/** The primary cluster of `platform` and its provisioner. */
function primaryCluster(platform: TestPlatform) {
  const clusterId = platform.running.primaryClusterId;
  const provisioner = platform.running.provisioner;
  if (clusterId === undefined || provisioner === undefined) throw new Error("the platform runs no first cluster");
  return { clusterId, provisioner };
}

/** The pids of the fake children started since `records`' log was last cleared. */
function startedPids(): number[] {
  return readFileSync(join(records, "started.log"), "utf8")
    .split("\n")
    .filter(Boolean)
    .map((line) => Number(line.split(" ").at(-1)));
}

/** Whether process `pid` exists. */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code !== "ESRCH";
  }
}

/** What the platform's database records for cluster `clusterId`: its gateway's ports and its brokers' ports. */
async function recordedPorts(platform: TestPlatform, clusterId: string) {
  const store = await openStore({ url: "", dataDirectory: platform.dataDirectory });
  try {
    const placement = await store.database
      .selectFrom("local_cluster_placements")
      .select(["gateway_port", "management_port"])
      .where("cluster_id", "=", clusterId)
      .executeTakeFirstOrThrow();
    const brokers = await store.database
      .selectFrom("local_cluster_brokers")
      .select(["node_id", "cluster_port", "management_port"])
      .where("cluster_id", "=", clusterId)
      .orderBy("node_id")
      .execute();
    return {
      gatewayPort: placement.gateway_port,
      managementPort: placement.management_port,
      brokers: brokers.map((row) => ({
        nodeId: row.node_id,
        clusterPort: row.cluster_port,
        managementPort: row.management_port,
      })),
    };
  } finally {
    await store.close();
  }
}

/** Every port of `recorded`. */
function portsOf(recorded: Awaited<ReturnType<typeof recordedPorts>>): number[] {
  return [
    recorded.gatewayPort,
    recorded.managementPort,
    ...recorded.brokers.flatMap((broker) => [broker.clusterPort, broker.managementPort]),
  ];
}

/** The specification of a cluster of three brokers of `platform`'s organization. */
function specificationOf(platform: TestPlatform, clusterId: string, primary: boolean) {
  return {
    clusterId,
    organizationId: platform.organizationId,
    shape: { brokers: 3, partitions: 3, replicationFactor: 3 },
    primary,
  };
}

/** Reads the brokers file of `clusterDirectory`. */
function listedBrokers(clusterDirectory: string): { nodeId: number; clusterPort: number; managementPort: number }[] {
  return (
    JSON.parse(readFileSync(join(clusterDirectory, "ports.json"), "utf8")) as {
      brokers: { nodeId: number; clusterPort: number; managementPort: number }[];
    }
  ).brokers;
}

/** Starts a local cluster of fake children whose brokers listen on their cluster ports, closed after the test. */
async function startFakeCluster(dataDirectory: string, choosePortsAgain?: boolean): Promise<LocalCluster> {
  const cluster = await startLocalCluster({
    ...(choosePortsAgain === undefined ? {} : { choosePortsAgain }),
    dataDirectory,
    gatewayPort: 0,
    managementPort: 0,
    issuerUrl: "http://127.0.0.1:1",
    logger: pino({ level: "silent" }),
    environment: { FAKE_RECORD_DIRECTORY: temporaryDirectory(), FAKE_BROKERS_LISTEN: "1", PATH: process.env.PATH },
    command: { entry: fakeCli, nodeArguments: [] },
  });
  cleanups.push(() => cluster.close());
  return cluster;
}

describe("startLocalCluster's ports", () => {
  it("chooses another cluster port for a broker of a first start when another process took the chosen one", async () => {
    takeNext.brokerClusterPortOf = 2;
    const dataDirectory = temporaryDirectory();
    const cluster = await startFakeCluster(dataDirectory);
    const takenPort = heldPort(0);
    const brokerTwo = cluster.brokers.find((broker) => broker.nodeId === 2);
    expect(brokerTwo?.clusterAddress).toMatch(/^127\.0\.0\.1:\d+$/);
    expect(brokerTwo?.clusterAddress).not.toBe(`127.0.0.1:${takenPort}`);
    const listed = listedBrokers(join(dataDirectory, "cluster")).find((broker) => broker.nodeId === 2);
    expect(`127.0.0.1:${listed?.clusterPort}`).toBe(brokerTwo?.clusterAddress);
  });

  it("leaves the port as it is when told not to choose ports again, and the start fails naming it", async () => {
    takeNext.brokerClusterPortOf = 2;
    const dataDirectory = temporaryDirectory();
    const failure = await startFakeCluster(dataDirectory, false).catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(PortInUseError);
    expect(failure).toMatchObject({ processName: "broker 2", purpose: "cluster port", port: heldPort(0) });
    expect(replacements.count).toBe(0);
    expect(listedBrokers(join(dataDirectory, "cluster")).find((broker) => broker.nodeId === 2)?.clusterPort).toBe(
      heldPort(0),
    );
  });

  it("starts no child when aborted before its children are started", async () => {
    const events: string[] = [];
    const aborted = new AbortController();
    aborted.abort();
    const failure = await startLocalCluster({
      dataDirectory: temporaryDirectory(),
      gatewayPort: 0,
      managementPort: 0,
      issuerUrl: "http://127.0.0.1:1",
      logger: pino({ level: "silent" }),
      environment: { FAKE_RECORD_DIRECTORY: temporaryDirectory(), PATH: process.env.PATH },
      command: { entry: fakeCli, nodeArguments: [] },
      signal: aborted.signal,
      onChildEvent: (event) => events.push(`${event.process} ${event.event}`),
    }).catch((error: unknown) => error);
    expect((failure as Error).message).toBe("the start of the local cluster was cancelled");
    expect(events).toEqual([]);
  });

  it("fails with the taken port's error, caused by what failed, when another port cannot be chosen", async () => {
    takeNext.brokerClusterPortOf = 2;
    replacements.failure = new Error("the brokers file cannot be written");
    const failure = await startFakeCluster(temporaryDirectory()).catch((error: unknown) => error);
    expect(failure).not.toBeInstanceOf(PortInUseError);
    expect((failure as Error).message).toMatch(
      new RegExp(
        `^broker 2 of the local cluster could not listen on its cluster port 127\\.0\\.0\\.1:${heldPort(0)}: .*; choosing another port failed: the brokers file cannot be written$`,
      ),
    );
    expect((failure as Error).cause).toBe(replacements.failure);
  });

  it("chooses another management port for the gateway when another process took the chosen one", async () => {
    takeNext.gatewayManagementPort = true;
    const cluster = await startFakeCluster(temporaryDirectory());
    expect(cluster.managementUrl).not.toBe(`http://127.0.0.1:${heldPort(0)}`);
    expect(
      ((await (await fetch(`${cluster.managementUrl}/actuator/health`)).json()) as { status: string }).status,
    ).toBe("UP");
  });
});

describe("the local provisioner's ports", () => {
  it("chooses another cluster port for a broker when another process took the chosen one before the broker started", async () => {
    takeNext.brokerClusterPortOf = 1;
    const platform = await platformWithFakeClusters();
    const { clusterId, provisioner } = primaryCluster(platform);
    const cluster = await provisioner.whenStarted(clusterId);
    expect(cluster).toBeDefined();
    expect(holders).toHaveLength(1);
    const takenPort = heldPort(0);
    const brokerOne = cluster?.brokers.find((broker) => broker.nodeId === 1);
    expect(brokerOne?.clusterAddress).toMatch(/^127\.0\.0\.1:\d+$/);
    expect(brokerOne?.clusterAddress).not.toBe(`127.0.0.1:${takenPort}`);
    // The new port is the broker's for good: the brokers file the next start reads lists it, and so does the database.
    const listed = listedBrokers((await provisioner.directoryOf(clusterId)) ?? "");
    expect(`127.0.0.1:${listed.find((broker) => broker.nodeId === 1)?.clusterPort}`).toBe(brokerOne?.clusterAddress);
    expect((await recordedPorts(platform, clusterId)).brokers).toEqual(listed);
    // Every child of the failed attempt exited: the running ones are the children of the attempt that got ready.
    const running = new Set(cluster?.children().map((child) => child.pid));
    const leftOver = startedPids().filter((pid) => !running.has(pid));
    expect(leftOver.length).toBeGreaterThan(0);
    expect(leftOver.filter(alive)).toEqual([]);
  });

  it(`fails the start once it has chosen another port ${PORT_IN_USE_RETRIES} times, each taken in turn`, async () => {
    takeNext.brokerClusterPortOf = 1;
    replacements.takeEvery = true;
    const platform = await platformWithFakeClusters();
    const { clusterId, provisioner } = primaryCluster(platform);
    expect(await provisioner.whenStarted(clusterId)).toBeUndefined();
    expect(provisioner.state(clusterId)).toBe("failed");
    expect(replacements.count).toBe(PORT_IN_USE_RETRIES);
    expect(holders).toHaveLength(1 + PORT_IN_USE_RETRIES);
    const lastTaken = heldPort(PORT_IN_USE_RETRIES);
    expect(provisioner.startFailure(clusterId)).toMatch(
      new RegExp(`^broker 1 of the local cluster could not listen on its cluster port 127\\.0\\.0\\.1:${lastTaken}: `),
    );
    expect(startedPids().filter(alive)).toEqual([]);
  });

  it("starts nothing more when the cluster is stopped while a port is chosen again", async () => {
    takeNext.brokerClusterPortOf = 1;
    let reached = (): void => undefined;
    let release = (): void => undefined;
    const choosing = new Promise<void>((resolveReached) => {
      reached = resolveReached;
    });
    replacements.pause = {
      reached,
      gate: new Promise<void>((resolveGate) => {
        release = resolveGate;
      }),
    };
    const messages: string[] = [];
    const platform = await platformWithFakeClusters(0, messages);
    const { clusterId, provisioner } = primaryCluster(platform);
    await choosing;
    const stopping = provisioner.stop(clusterId);
    release();
    await stopping;
    expect(await provisioner.whenStarted(clusterId)).toBeUndefined();
    expect(provisioner.state(clusterId)).toBe("stopped");
    // Only the attempt that met the taken port started children.
    expect(messages.filter((message) => message === "gateway started")).toHaveLength(1);
    expect(startedPids().filter(alive)).toEqual([]);
  });

  it("keeps the recorded ports at a later launch: a port another process holds fails it and nothing is changed", async () => {
    const platform = await platformWithFakeClusters();
    const { clusterId, provisioner } = primaryCluster(platform);
    expect(await provisioner.whenStarted(clusterId)).toBeDefined();
    await provisioner.stop(clusterId);
    const directory = (await provisioner.directoryOf(clusterId)) ?? "";
    const brokersFile = readFileSync(join(directory, "ports.json"), "utf8");
    const recorded = await recordedPorts(platform, clusterId);
    const brokerOne = recorded.brokers.find((broker) => broker.nodeId === 1);
    if (brokerOne === undefined) throw new Error("broker 1 of the first cluster was not recorded");
    await hold(brokerOne.clusterPort);
    writeFileSync(join(records, "started.log"), "");

    await provisioner.launch(specificationOf(platform, clusterId, true));
    expect(await provisioner.whenStarted(clusterId)).toBeUndefined();
    expect(provisioner.state(clusterId)).toBe("failed");
    expect(provisioner.startFailure(clusterId)).toMatch(
      new RegExp(
        `^broker 1 of the local cluster could not listen on its cluster port 127\\.0\\.0\\.1:${brokerOne.clusterPort}: `,
      ),
    );
    expect(replacements.count).toBe(0);
    expect(readFileSync(join(directory, "ports.json"), "utf8")).toBe(brokersFile);
    expect(await recordedPorts(platform, clusterId)).toEqual(recorded);
    // Every child the failed launch started has exited.
    const started = startedPids();
    expect(started.length).toBeGreaterThan(0);
    expect(started.filter(alive)).toEqual([]);
  });

  it("never gives a cluster's first launch a port recorded for another cluster, a stopped one included", async () => {
    const platform = await platformWithFakeClusters();
    const { clusterId, provisioner } = primaryCluster(platform);
    expect(await provisioner.whenStarted(clusterId)).toBeDefined();
    await provisioner.stop(clusterId);
    const first = portsOf(await recordedPorts(platform, clusterId));
    // The stopped cluster's ports are free for the system, which hands them out first.
    offering.ports = first;

    const secondId = randomUUID();
    await provisioner.launch(specificationOf(platform, secondId, false));
    expect(await provisioner.whenStarted(secondId)).toBeDefined();
    expect(offering.choices).toBeGreaterThanOrEqual(2);
    const second = portsOf(await recordedPorts(platform, secondId));
    expect(second.filter((port) => first.includes(port))).toEqual([]);
    expect(new Set(second).size).toBe(second.length);
  });

  it("chooses another management port for the gateway when another process took the chosen one", async () => {
    takeNext.gatewayManagementPort = true;
    const platform = await platformWithFakeClusters();
    const { clusterId, provisioner } = primaryCluster(platform);
    const cluster = await provisioner.whenStarted(clusterId);
    expect(holders).toHaveLength(1);
    const takenPort = heldPort(0);
    expect(cluster?.managementUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(cluster?.managementUrl).not.toBe(`http://127.0.0.1:${takenPort}`);
    // What the platform tells clients is the new port.
    expect((await provisioner.endpoints(clusterId))?.managementUrl).toBe(cluster?.managementUrl);
    expect((await (await fetch(`${cluster?.managementUrl}/actuator/health`)).json()) as unknown).toMatchObject({
      status: "UP",
    });
  });

  it("keeps a configured port another process holds, and the start fails naming it", async () => {
    const configuredPort = await hold(0);
    const platform = await platformWithFakeClusters(configuredPort);
    const { clusterId, provisioner } = primaryCluster(platform);
    expect(await provisioner.whenStarted(clusterId)).toBeUndefined();
    expect(provisioner.state(clusterId)).toBe("failed");
    expect(provisioner.startFailure(clusterId)).toMatch(
      new RegExp(
        `^gateway of the local cluster could not listen on its management port 127\\.0\\.0\\.1:${configuredPort}: another process uses that port; see .*gateway\\.log$`,
      ),
    );
    expect((await provisioner.endpoints(clusterId))?.managementUrl).toBe(`http://127.0.0.1:${configuredPort}`);
  });
});
