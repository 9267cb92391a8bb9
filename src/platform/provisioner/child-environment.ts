/**
 * The environment a child of a local cluster starts with: its settings under their documented variable names, none
 * of the platform's secrets, the local cluster's secret file, and for a broker its ports, data directory and share
 * of the machine's memory.
 */
import { join } from "node:path";
import { configurationLeaves } from "../../config/load.js";
import { availableMemoryBytes, defaultMaxBufferedMessageBytes } from "../../config/memory.js";
import type { LocalBrokerPorts } from "./local-brokers.js";
import { SUPERVISOR_CHANNEL, SUPERVISOR_VARIABLE } from "./supervision.js";

/**
 * Sets a setting in a child's environment under its documented variable name and removes its other spellings, so
 * a value inherited from the parent under another spelling cannot win over it.
 */
export function setSetting(environment: Record<string, string | undefined>, key: string, value: string | number): void {
  const leaf = configurationLeaves().find((candidate) => candidate.key === key);
  if (leaf === undefined) throw new Error(`invariant violated: ${key} is a configuration key`);
  for (const name of leaf.environmentVariables) delete environment[name];
  environment[leaf.environmentVariable] = String(value);
}

/** Whether `environment` sets configuration key `key` by any of its environment variables. */
function isSet(environment: Record<string, string | undefined>, key: string): boolean {
  const leaf = configurationLeaves().find((candidate) => candidate.key === key);
  if (leaf === undefined) throw new Error(`invariant violated: ${key} is a configuration key`);
  return leaf.environmentVariables.some((name) => environment[name] !== undefined && environment[name] !== "");
}

/** Settings only the platform reads that carry secrets: children never inherit them. */
const platformSecretSettings = ["service.secrets.key", "service.database.url"];

/**
 * Settings of the platform's first start (the administration client), removed whole: children check that the
 * client's id and secret come together, so a child given the id without the secret would refuse to start.
 */
const platformBootstrapPrefix = "service.bootstrap.";

/** Removes every spelling of a setting from a child's environment. */
export function removeSetting(environment: Record<string, string | undefined>, key: string): void {
  const leaf = configurationLeaves().find((candidate) => candidate.key === key);
  if (leaf === undefined) throw new Error(`invariant violated: ${key} is a configuration key`);
  for (const name of leaf.environmentVariables) delete environment[name];
}

/** What the environment of a local cluster's child is made of. */
export interface BrokerSettingsContext {
  baseEnvironment: Readonly<Record<string, string | undefined>>;
  logLevel: string;
  clusterSecretFile: string;
  clusterDirectory: string;
  host: string;
  brokerCount: number;
  partitionCount: number;
  replicationFactor: number;
  backupDirectory: string | undefined;
}

/** The file in a broker's data directory that names the process holding the directory (the broker, or a restore). */
export const BROKER_PID_FILE_NAME = "broker.pid";

/** Name of the folder of a cluster's brokers' data directories, in the cluster's directory. */
export const BROKERS_DIRECTORY_NAME = "brokers";

/** The data directory of a local cluster's broker. */
export function brokerDataDirectory(clusterDirectory: string, nodeId: number): string {
  return join(clusterDirectory, BROKERS_DIRECTORY_NAME, String(nodeId));
}

/** The environment every child of a local cluster starts from. */
export function localChildEnvironment(context: BrokerSettingsContext): Record<string, string | undefined> {
  const environment: Record<string, string | undefined> = { ...context.baseEnvironment };
  // The platform's secrets are no business of brokers and gateways, which would only widen who can read them.
  for (const key of platformSecretSettings) removeSetting(environment, key);
  for (const leaf of configurationLeaves()) {
    if (leaf.key.startsWith(platformBootstrapPrefix)) removeSetting(environment, leaf.key);
  }
  setSetting(environment, "service.log.level", context.logLevel);
  removeSetting(environment, "service.cluster.secret");
  setSetting(environment, "service.cluster.secretFile", context.clusterSecretFile);
  // The child stops by itself when its IPC channel to this process closes (supervision.ts).
  environment[SUPERVISOR_VARIABLE] = SUPERVISOR_CHANNEL;
  return environment;
}

/** The glibc tunable that decides whether malloc asks the kernel for transparent huge pages for what it maps. */
const MALLOC_HUGE_PAGES_TUNABLE = "glibc.malloc.hugetlb";

/**
 * A `GLIBC_TUNABLES` value with malloc's transparent huge pages on, keeping the tunables `value` holds; unchanged
 * when it already sets them either way, since an operator may have meant to switch them off.
 */
export function withMallocHugePages(value: string | undefined): string {
  const tunables = (value ?? "").split(":").filter((tunable) => tunable !== "");
  if (tunables.some((tunable) => tunable.split("=")[0] === MALLOC_HUGE_PAGES_TUNABLE)) return tunables.join(":");
  return [...tunables, `${MALLOC_HUGE_PAGES_TUNABLE}=1`].join(":");
}

/** The environment of broker `entry` of a local cluster: what `flowplane broker` and `flowplane restore` run with. */
export function localBrokerEnvironment(
  context: BrokerSettingsContext,
  entry: LocalBrokerPorts,
  contactPoints: string,
): Record<string, string | undefined> {
  const environment = localChildEnvironment(context);
  setSetting(environment, "service.broker.host", context.host);
  setSetting(environment, "service.broker.dataDirectory", brokerDataDirectory(context.clusterDirectory, entry.nodeId));
  setSetting(environment, "service.broker.managementPort", entry.managementPort);
  setSetting(environment, "service.broker.cluster.nodeId", entry.nodeId);
  // The sizes of the cluster's first start; a broker added later takes the running configuration instead.
  setSetting(environment, "service.broker.cluster.clusterSize", context.brokerCount);
  setSetting(environment, "service.broker.cluster.partitionsCount", context.partitionCount);
  setSetting(environment, "service.broker.cluster.replicationFactor", context.replicationFactor);
  setSetting(environment, "service.broker.cluster.initialContactPoints", contactPoints);
  setSetting(environment, "service.broker.cluster.clusterPort", entry.clusterPort);
  // The brokers of a local cluster share this machine's memory: each takes its share of the default bound of buffered
  // messages, unless the operator set one.
  if (!isSet(environment, "service.broker.memory.maxBufferedMessageBytes")) {
    const share = defaultMaxBufferedMessageBytes(availableMemoryBytes(), context.brokerCount);
    setSetting(environment, "service.broker.memory.maxBufferedMessageBytes", share);
  }
  if (context.backupDirectory !== undefined) {
    setSetting(environment, "service.backup.filesystem.basePath", context.backupDirectory);
  }
  // A broker keeps every message in memory, and a replica that joins keeps a whole partition's state in memory it
  // allocates as it receives it. Where the kernel gives huge pages only to memory that asks for them (the usual
  // `madvise` mode), faulting that memory in page by page costs several times as much, most of all on a virtual
  // machine whose host provides each page anew (DEVELOPERS.md, "Huge pages for a broker's memory"). glibc ignores a
  // tunable it does not know, and another C library ignores the variable.
  environment.GLIBC_TUNABLES = withMallocHugePages(environment.GLIBC_TUNABLES);
  return environment;
}
