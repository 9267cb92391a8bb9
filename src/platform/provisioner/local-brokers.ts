/**
 * The brokers of the local cluster and their ports, kept in `<dataDirectory>/cluster/ports.json`. The file is the
 * desired set of brokers: the running local cluster (`startLocalCluster`) starts a broker listed there that does not
 * run yet and stops (and deletes the data of) one that is no longer listed, within a second. That is how
 * `flowplane cluster scale` adds broker processes before a scale-up and removes them after a scale-down, and how a
 * later `flowplane start` finds the cluster at the same addresses with the same brokers.
 *
 * Ports are picked among free ports when a broker is added and kept for good, so two flowplane instances with
 * different data directories run side by side. Writes are atomic (a temporary file renamed over the old one) and
 * durable once they return: a restore's recovery after a power loss relies on the file it finds.
 */
import { existsSync, readFileSync } from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";
import { ownPrivateDirectory, replacePrivateFile } from "../../files/private-files.js";

/** One broker of the local cluster. */
export interface LocalBrokerPorts {
  readonly nodeId: number;
  readonly clusterPort: number;
  readonly managementPort: number;
}

/** What `ports.json` keeps. */
export interface PersistedPorts {
  readonly brokers: readonly LocalBrokerPorts[];
}

/** Name of the brokers file in the cluster directory. */
export const BROKERS_FILE_NAME = "ports.json";

/**
 * Name of the file in the cluster directory that says where the cluster's gateway answers, written at every start:
 * `flowplane cluster scale` checks that the management API it calls is this cluster's before it starts or stops
 * any of its broker processes.
 */
export const GATEWAY_FILE_NAME = "gateway.json";

/** What `gateway.json` keeps. */
export interface LocalGateway {
  readonly managementUrl: string;
}

/** Records where the local cluster's gateway answers (atomically, like the brokers file). */
export function writeLocalGateway(clusterDirectory: string, gateway: LocalGateway): void {
  ownPrivateDirectory(clusterDirectory);
  const file = join(clusterDirectory, GATEWAY_FILE_NAME);
  replacePrivateFile(file, `${JSON.stringify(gateway, null, 2)}\n`, `${file}.tmp`);
}

/** Where the local cluster's gateway answered at its last start, or null when no start recorded it. */
export function readLocalGateway(clusterDirectory: string): LocalGateway | null {
  const file = join(clusterDirectory, GATEWAY_FILE_NAME);
  if (!existsSync(file)) return null;
  const parsed = JSON.parse(readFileSync(file, "utf8")) as { managementUrl?: unknown };
  if (typeof parsed.managementUrl !== "string") throw new Error(`${file} does not hold a managementUrl`);
  return { managementUrl: parsed.managementUrl };
}

/** Asks the system for a free port on `host` (bind to 0, read, release). */
export async function freePort(host: string): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen({ host, port: 0 }, () => {
      const address = server.address();
      const port = typeof address === "object" && address !== null ? address.port : 0;
      server.close(() => (port > 0 ? resolvePort(port) : reject(new Error("no port was assigned"))));
    });
  });
}

function isBrokerEntry(value: unknown): value is LocalBrokerPorts {
  if (typeof value !== "object" || value === null) return false;
  const entry = value as Record<string, unknown>;
  return (
    Number.isSafeInteger(entry.nodeId) &&
    (entry.nodeId as number) >= 0 &&
    Number.isInteger(entry.clusterPort) &&
    Number.isInteger(entry.managementPort)
  );
}

/** Reads the brokers file of `clusterDirectory`, or null when there is none; throws naming a malformed file. */
export function readLocalBrokers(clusterDirectory: string): PersistedPorts | null {
  const file = join(clusterDirectory, BROKERS_FILE_NAME);
  if (!existsSync(file)) return null;
  const parsed = JSON.parse(readFileSync(file, "utf8")) as { brokers?: unknown };
  const brokers = parsed.brokers;
  if (!Array.isArray(brokers) || !brokers.every(isBrokerEntry)) {
    throw new Error(`${file} does not list brokers as {nodeId, clusterPort, managementPort}`);
  }
  const ids = brokers.map((entry) => entry.nodeId);
  if (new Set(ids).size !== ids.length) throw new Error(`${file} lists a broker id more than once`);
  return { brokers: [...brokers].sort((left, right) => left.nodeId - right.nodeId) };
}

/** Replaces the brokers file of `clusterDirectory` (atomically: a temporary file renamed over the old one). */
export function writeLocalBrokers(clusterDirectory: string, ports: PersistedPorts): void {
  ownPrivateDirectory(clusterDirectory);
  const file = join(clusterDirectory, BROKERS_FILE_NAME);
  replacePrivateFile(file, `${JSON.stringify(ports, null, 2)}\n`, `${file}.tmp`);
}

/**
 * Distinct free ports, `count` of them, none of `taken`. The system hands out ports of one small range to every
 * process that asks for a free one, so a port chosen here may be taken by another process before the child it is
 * meant for binds it: the local cluster names such a port when a child cannot listen on it (`PortInUseError`).
 */
export async function freePorts(host: string, count: number, taken: ReadonlySet<number>): Promise<number[]> {
  const picked = new Set<number>();
  // Bounded: the system hands out distinct ports almost always; a repeat just asks again.
  for (let attempt = 0; picked.size < count && attempt < 20 * count; attempt += 1) {
    const port = await freePort(host);
    if (!taken.has(port)) picked.add(port);
  }
  if (picked.size < count) throw new Error("could not find distinct free ports for the brokers");
  return [...picked];
}

/**
 * Adds brokers `nodeIds` to the brokers file with fresh free ports (ids already listed keep theirs, and no port of
 * `reserved`, such as the cluster's gateway's, is chosen) and returns the whole list. A running local cluster starts
 * the added brokers.
 */
export async function addLocalBrokers(
  clusterDirectory: string,
  host: string,
  nodeIds: readonly number[],
  reserved: ReadonlySet<number> = new Set(),
): Promise<PersistedPorts> {
  const current = readLocalBrokers(clusterDirectory) ?? { brokers: [] };
  const known = new Set(current.brokers.map((entry) => entry.nodeId));
  const added = [...new Set(nodeIds)].filter((nodeId) => !known.has(nodeId)).sort((left, right) => left - right);
  if (added.length === 0) return current;
  const taken = new Set([
    ...reserved,
    ...current.brokers.flatMap((entry) => [entry.clusterPort, entry.managementPort]),
  ]);
  const ports = await freePorts(host, 2 * added.length, taken);
  const brokers = [
    ...current.brokers,
    ...added.map((nodeId, position) => ({
      nodeId,
      clusterPort: ports[2 * position] as number,
      managementPort: ports[2 * position + 1] as number,
    })),
  ].sort((left, right) => left.nodeId - right.nodeId);
  const updated = { brokers };
  writeLocalBrokers(clusterDirectory, updated);
  return updated;
}

/** Removes brokers `nodeIds` from the brokers file; a running local cluster stops them and deletes their data. */
export function removeLocalBrokers(clusterDirectory: string, nodeIds: readonly number[]): PersistedPorts {
  const current = readLocalBrokers(clusterDirectory) ?? { brokers: [] };
  const removed = new Set(nodeIds);
  const updated = { brokers: current.brokers.filter((entry) => !removed.has(entry.nodeId)) };
  writeLocalBrokers(clusterDirectory, updated);
  return updated;
}

/**
 * The brokers of the local cluster: those the file lists, or (at the first start) brokers 0..`brokerCount`-1 on
 * free ports other than `reserved`, written to the file. The count only matters for that first start: afterwards the
 * file says which brokers there are (scaling changes it).
 */
export async function brokerPorts(
  clusterDirectory: string,
  host: string,
  brokerCount: number,
  reserved: ReadonlySet<number> = new Set(),
): Promise<PersistedPorts> {
  const existing = readLocalBrokers(clusterDirectory);
  if (existing !== null) return existing;
  return addLocalBrokers(
    clusterDirectory,
    host,
    Array.from({ length: brokerCount }, (_, nodeId) => nodeId),
    reserved,
  );
}

/**
 * Gives the broker listening on `port` (cluster or management port) a fresh free port other than `reserved` and the
 * brokers' own, in the brokers file; returns the new port, or undefined when no broker listed there uses `port`.
 */
export async function replaceBrokerPort(
  clusterDirectory: string,
  host: string,
  port: number,
  reserved: ReadonlySet<number> = new Set(),
): Promise<number | undefined> {
  const current = readLocalBrokers(clusterDirectory);
  const owner = current?.brokers.find((entry) => entry.clusterPort === port || entry.managementPort === port);
  if (current === null || owner === undefined) return undefined;
  const taken = new Set([
    ...reserved,
    ...current.brokers.flatMap((entry) => [entry.clusterPort, entry.managementPort]),
  ]);
  const [replacement] = await freePorts(host, 1, taken);
  if (replacement === undefined) throw new Error("invariant violated: freePorts returns the count asked for");
  const brokers = current.brokers.map((entry) =>
    entry !== owner
      ? entry
      : entry.clusterPort === port
        ? { ...entry, clusterPort: replacement }
        : { ...entry, managementPort: replacement },
  );
  writeLocalBrokers(clusterDirectory, { brokers });
  return replacement;
}
