/**
 * The local cluster and its provisioner when a port chosen free is taken by another process before the child meant
 * for it listens (the system hands out ports of one small range to every process that asks for a free one): a port
 * the start chose itself is chosen again (and the provisioner records it) and the cluster started again; a port the
 * operator configured is not changed, and the start fails naming it. The ports are taken the moment they have been
 * chosen, through the module that chooses them.
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { type AddressInfo, createServer, type Server, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { pino } from "pino";
import { afterEach, describe, expect, it, vi } from "vitest";
import { type LocalCluster, startLocalCluster } from "../../../src/platform/provisioner/index.js";
import { startTestPlatform, type TestPlatform } from "../../support/platform.js";

/** What the next choice of ports hands to another process before returning (set by a test, used once). */
const takeNext: { brokerClusterPortOf?: number; gatewayManagementPort?: boolean } = {};
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
  return {
    ...original,
    // The brokers' ports of a first start: the chosen cluster port of one broker is taken right after the choice.
    brokerPorts: async (...parameters: Parameters<typeof original.brokerPorts>) => {
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
      const ports = await original.freePorts(...parameters);
      const [, managementPort] = ports;
      if (takeNext.gatewayManagementPort === true && managementPort !== undefined) {
        takeNext.gatewayManagementPort = false;
        await hold(managementPort);
      }
      return ports;
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
});

function temporaryDirectory(): string {
  const directory = mkdtempSync(join(tmpdir(), "flowplane-taken-ports-"));
  cleanups.push(async () => rmSync(directory, { recursive: true, force: true }));
  return directory;
}

/** A platform running its first cluster with fake children whose brokers listen on their cluster ports. */
async function platformWithFakeClusters(managementPort = 0): Promise<TestPlatform> {
  const records = temporaryDirectory();
  const platform = await startTestPlatform(
    { "service.gateway.port": 0, "service.management.port": managementPort },
    {
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

/** Reads the brokers file of `clusterDirectory`. */
function listedBrokers(clusterDirectory: string): { nodeId: number; clusterPort: number; managementPort: number }[] {
  return (
    JSON.parse(readFileSync(join(clusterDirectory, "ports.json"), "utf8")) as {
      brokers: { nodeId: number; clusterPort: number; managementPort: number }[];
    }
  ).brokers;
}

/** Starts a local cluster of fake children whose brokers listen on their cluster ports, closed after the test. */
async function startFakeCluster(dataDirectory: string): Promise<LocalCluster> {
  const cluster = await startLocalCluster({
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
    // The new port is the broker's for good: the brokers file the next start reads lists it.
    const listed = listedBrokers((await provisioner.directoryOf(clusterId)) ?? "");
    expect(`127.0.0.1:${listed.find((broker) => broker.nodeId === 1)?.clusterPort}`).toBe(brokerOne?.clusterAddress);
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
    expect((await (await fetch(`${cluster?.managementUrl}/actuator/health`)).json()) as unknown).toEqual({
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
