/**
 * A chaos run against the real local cluster: a platform, 3 broker processes and a gateway on loopback, publishers
 * writing through the gateway, and a seeded schedule of faults on the brokers (SIGKILL, SIGSTOP, SIGTERM, and
 * now and then two brokers or all of them down at once, which takes the quorum away). Snapshots are taken every few hundred
 * entries, so restarted brokers also catch up through their leaders' snapshots.
 *
 * What it checks, the product's promise:
 * - every message the gateway acknowledged (200) is readable by its key with its content, during the faults (or the
 *   read is refused as unavailable, never answered 404 or with other content) and after them;
 * - no two acknowledgements carry the same message key, and no publication is applied twice (each carries a
 *   unique message id, so a second copy would be refused with 409);
 * - every answer is 200 or one of the gateway's "unavailable / unknown outcome" answers (502, 503, 504);
 * - once the faults stop, every partition has a leader, every replica is healthy and all replicas of a partition
 *   reach the same applied index;
 * - no broker or gateway logged an error: the faults are expected states, reported as warnings.
 *
 * With `scale`, cluster changes run beside the faults: brokers added (started, then added through the management
 * API) and removed (removed through the API, then stopped once the change completed), and the replication factor
 * changed between 2 and 3, one change at a time, each followed to its end while brokers are killed and paused. A
 * quarter of them are also cancelled at a random moment. Every change must complete, or end cancelled when the
 * cancel was accepted (or the run reports it), at least one must complete, and the checks above hold for whatever
 * brokers the cluster has then. The run counts the cancels it tried and made, which the command line's runs must
 * include (`cli.ts`).
 * With `scalePartitions` too, partitions are added one at a time (up to 6, experimental), so messages are relocated
 * to new partitions under the faults and must stay readable by the keys they were acknowledged with.
 *
 * The seed fixes the fault schedule only: processes, disks and the kernel's scheduling are not deterministic, so a
 * failing seed is a strong hint for a replay, not an exact one.
 */
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pino } from "pino";
import { SeededRandom } from "../../src/cluster/raft/core/random.js";
import {
  addLocalBrokers,
  type LocalCluster,
  removeLocalBrokers,
  startLocalCluster,
} from "../../src/platform/provisioner/index.js";
import { childCommand } from "../support/child-command.js";
import {
  eventually,
  everyPartitionLed,
  everyReplicaHealthy,
  type GatewayTopology,
  leaderOf,
  partitionIndexes,
} from "../support/cluster.js";
import { startTestPlatform, type TestPlatform } from "../support/platform.js";
import { requestToken } from "../support/tokens.js";

/** How a chaos run is set up. */
export interface ChaosOptions {
  /** Seed of the fault schedule. */
  readonly seed: number;
  /**
   * How long faults are injected, from the first one on (the cluster's start is not counted); the checks after it
   * take some seconds more.
   */
  readonly durationMs: number;
  /**
   * Faults the run injects at least: it goes on past `durationMs` until it injected as many, for at most another
   * `durationMs`, so that a slow machine (long recoveries) still exercises what the run is for. Default 0.
   */
  readonly minimumFaults?: number;
  /** Concurrent publishers. */
  readonly clients: number;
  /** Pause of each publisher after each answer (0: as fast as the cluster answers), to bound the machine's load. */
  readonly pauseBetweenPublicationsMs?: number;
  /** Snapshot interval of every replica (`service.broker.raft.snapshotIntervalEntries`). */
  readonly snapshotIntervalEntries: number;
  /** More settings for the brokers and the gateway, as `SERVICE_*` variables (e.g. another commit mode). */
  readonly environment?: Readonly<Record<string, string>>;
  /** Called every `progressIntervalMs` with the run's counts so far. */
  readonly onProgress?: (progress: ChaosProgress) => void;
  readonly progressIntervalMs?: number;
  /** Keep the data directory (brokers' logs and data) when the run found a violation. */
  readonly keepDataOnFailure?: boolean;
  /** Run cluster changes (brokers added and removed, replication factor changed) beside the faults. */
  readonly scale?: boolean;
  /** With `scale`, add partitions too (the experimental partition scaling is enabled on the brokers). */
  readonly scalePartitions?: boolean;
}

/** The counts of a chaos run. */
export interface ChaosProgress {
  readonly elapsedMs: number;
  /** Publications answered 200. */
  readonly acknowledged: number;
  /** Publications refused as unavailable (503): not written. */
  readonly refused: number;
  /** Publications whose outcome is unknown (502, 504, a reset connection or a client timeout). */
  readonly unknownOutcomes: number;
  /** Reads of acknowledged messages answered while faults were injected, and how many of them were 200. */
  readonly readsDuringFaults: number;
  readonly readsFoundDuringFaults: number;
  /** The longest time without any acknowledgement while faults were injected (how long the worst fault stopped writes). */
  readonly longestWriteOutageMs: number;
  /** Faults injected so far, each as a line such as `kill broker 2 (leader of 1), down 1800 ms`. */
  readonly faults: readonly string[];
  /** Cluster changes made so far, each as a line such as `change 4: brokers 0,1,2 → 0,1,2,3, COMPLETED in 3100 ms`. */
  readonly changes: readonly string[];
  /** Of the changes (with `scale`): how many completed, how many the run tried to cancel, and how many it cancelled. */
  readonly changesCompleted: number;
  readonly cancelsAttempted: number;
  readonly cancelsRecorded: number;
  readonly violations: readonly string[];
}

/** What a chaos run ends with. */
export interface ChaosResult extends ChaosProgress {
  readonly seed: number;
  /** Where the cluster's data and logs are, when they were kept. */
  readonly keptDataDirectory: string | undefined;
  /** Error and fatal lines of the brokers' and gateway's logs, by message, with how often each appeared. */
  readonly errorLogMessages: ReadonlyMap<string, number>;
}

interface PublishedMessage {
  readonly correlationKey: string;
  readonly variables: { readonly publisher: number; readonly sequence: number };
}

/** Answers of the gateway that mean "not done" or "not known to be done": never a violation on their own. */
const UNAVAILABLE_STATUSES = new Set([502, 503, 504]);
const REQUEST_TIMEOUT_MS = 15_000;
const RECOVERY_TIMEOUT_MS = 60_000;
/** Longest a cluster change may take while faults go on before the run reports it as stuck. */
const CHANGE_TIMEOUT_MS = 180_000;
/** Of the cluster changes a run with `scale` makes, the share (in percent) it also tries to cancel. */
const CANCEL_PERCENT = 25;

/** Partitions the cluster starts with; a run with `scalePartitions` adds up to `MAX_PARTITIONS`. */
const INITIAL_PARTITIONS = 3;
const MAX_PARTITIONS = 6;

/** The partitions of the running cluster, as the run knows them (updated when a partition scale-up completed). */
interface Partitions {
  ids: number[];
}

/** Whether the topology was read and every partition has a leader; undefined otherwise, for `eventually`. */
function led(topology: GatewayTopology | undefined, partitions: Partitions): true | undefined {
  return topology !== undefined && everyPartitionLed(topology, partitions.ids) ? true : undefined;
}

const sleep = (ms: number): Promise<void> => new Promise((resolveSleep) => setTimeout(resolveSleep, ms));

/** Runs one chaos run to its end and reports what it saw; it throws only when the cluster cannot be started. */
export async function runClusterChaos(options: ChaosOptions): Promise<ChaosResult> {
  const dataDirectory = mkdtempSync(join(tmpdir(), "flowplane-chaos-"));
  const random = new SeededRandom(options.seed);
  const readRandom = new SeededRandom(options.seed ^ 0x5eed);
  const logger = pino({ level: process.env.CHAOS_LOG_LEVEL ?? "silent" });
  const startedAtMs = Date.now();
  const acknowledged = new Map<string, PublishedMessage>();
  const acknowledgedKeys: string[] = [];
  const faults: string[] = [];
  const changes: string[] = [];
  const violations: string[] = [];
  const counts = {
    refused: 0,
    unknownOutcomes: 0,
    readsDuringFaults: 0,
    readsFoundDuringFaults: 0,
    longestWriteOutageMs: 0,
    changesCompleted: 0,
    cancelsAttempted: 0,
    cancelsRecorded: 0,
  };
  let lastAcknowledgementAtMs: number | undefined;
  const partitions: Partitions = { ids: Array.from({ length: INITIAL_PARTITIONS }, (_, index) => index + 1) };

  let platform: TestPlatform | undefined;
  let cluster: LocalCluster | undefined;
  let progressTimer: NodeJS.Timeout | undefined;
  const progress = (): ChaosProgress => ({
    elapsedMs: Date.now() - startedAtMs,
    acknowledged: acknowledged.size,
    ...counts,
    faults: [...faults],
    changes: [...changes],
    violations: [...violations],
  });
  try {
    platform = await startTestPlatform();
    const token = await requestToken(platform, platform.adminClient, "gateway-api");
    cluster = await startLocalCluster({
      dataDirectory,
      command: childCommand(),
      gatewayPort: 0,
      managementPort: 0,
      issuerUrl: platform.issuerUrl,
      logger,
      logLevel: "info",
      readyTimeoutMs: 90_000,
      // The faults decide how long a broker stays down, and start it again themselves.
      restart: false,
      environment: {
        ...process.env,
        SERVICE_BROKER_RAFT_SNAPSHOT_INTERVAL_ENTRIES: String(options.snapshotIntervalEntries),
        ...(options.scalePartitions === true
          ? { SERVICE_BROKER_EXPERIMENTAL_FEATURES_ENABLE_PARTITION_SCALING: "true" }
          : {}),
        ...options.environment,
      },
    });
    const running = cluster;
    const gateway = (path: string, init: RequestInit = {}): Promise<Response> =>
      fetch(`${running.gatewayUrl}${path}`, {
        ...init,
        headers: {
          authorization: `Bearer ${token}`,
          ...(init.body === undefined ? {} : { "content-type": "application/json" }),
        },
        signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
      });
    const topology = async (): Promise<GatewayTopology | undefined> => {
      try {
        const response = await gateway("/v2/topology");
        return response.status === 200 ? ((await response.json()) as GatewayTopology) : undefined;
      } catch {
        return undefined;
      }
    };

    await eventually("a leader for every partition", RECOVERY_TIMEOUT_MS, async () =>
      led(await topology(), partitions),
    );
    if (options.onProgress !== undefined) {
      const report = options.onProgress;
      progressTimer = setInterval(() => report(progress()), options.progressIntervalMs ?? 5_000);
    }

    let injecting = true;
    const publisher = async (publisher: number): Promise<void> => {
      for (let sequence = 1; injecting; sequence += 1) {
        if (sequence > 1 && options.pauseBetweenPublicationsMs !== undefined) {
          await sleep(options.pauseBetweenPublicationsMs);
        }
        const message: PublishedMessage = {
          correlationKey: `chaos-${publisher}-${sequence}`,
          variables: { publisher, sequence },
        };
        let response: Response;
        try {
          response = await gateway("/v2/messages/publication", {
            method: "POST",
            // The correlation key, unique per publication, is also its message id: a 409 would mean the cluster
            // had already buffered this publication, that is, it was applied twice (a retry after it took effect).
            body: JSON.stringify({
              name: "chaos",
              timeToLive: 3_600_000,
              messageId: message.correlationKey,
              ...message,
            }),
          });
        } catch {
          counts.unknownOutcomes += 1;
          continue;
        }
        if (response.status === 200) {
          const { messageKey } = (await response.json()) as { messageKey: string };
          if (acknowledged.has(messageKey)) {
            violations.push(`message key ${messageKey} acknowledged twice (second: ${message.correlationKey})`);
          }
          acknowledged.set(messageKey, message);
          acknowledgedKeys.push(messageKey);
          const nowMs = Date.now();
          if (lastAcknowledgementAtMs !== undefined) {
            counts.longestWriteOutageMs = Math.max(counts.longestWriteOutageMs, nowMs - lastAcknowledgementAtMs);
          }
          lastAcknowledgementAtMs = nowMs;
        } else if (response.status === 503) {
          counts.refused += 1;
          await response.body?.cancel();
          await sleep(50);
        } else if (UNAVAILABLE_STATUSES.has(response.status)) {
          counts.unknownOutcomes += 1;
          await response.body?.cancel();
        } else {
          violations.push(
            `publication of ${message.correlationKey} answered ${response.status}: ${await response.text()}`,
          );
        }
      }
    };
    const reader = async (): Promise<void> => {
      while (injecting) {
        if (acknowledgedKeys.length === 0) {
          await sleep(20);
          continue;
        }
        const messageKey = acknowledgedKeys[readRandom.nextInt(acknowledgedKeys.length)] as string;
        const outcome = await readBack(gateway, messageKey, acknowledged.get(messageKey) as PublishedMessage);
        if (outcome === "unavailable") continue;
        counts.readsDuringFaults += 1;
        if (outcome === "found") counts.readsFoundDuringFaults += 1;
        else violations.push(`during the faults: ${outcome}`);
      }
    };

    const workload = [...Array.from({ length: options.clients }, (_, index) => publisher(index)), reader()];
    const scaleRandom = new SeededRandom(options.seed ^ 0x5ca1e);
    const scaler = async (): Promise<void> => {
      while (injecting && violations.length === 0) {
        await sleep(2_000 + scaleRandom.nextInt(6_000));
        if (!injecting) return;
        const description = await makeChange(running, dataDirectory, token, scaleRandom, violations, {
          partitions,
          scalePartitions: options.scalePartitions === true,
          counts,
        });
        if (description !== null) changes.push(description);
      }
    };
    if (options.scale === true) workload.push(scaler());
    const faultsStartedAtMs = Date.now();
    const injectsMore = (): boolean => {
      const elapsedMs = Date.now() - faultsStartedAtMs;
      if (violations.length > 0) return false;
      if (elapsedMs < options.durationMs) return true;
      return faults.length < (options.minimumFaults ?? 0) && elapsedMs < 2 * options.durationMs;
    };
    const injector = async (): Promise<void> => {
      while (injectsMore()) {
        await sleep(500 + random.nextInt(1_500));
        const description = await injectFault(running, random, await topology(), partitions.ids.length);
        faults.push(description);
        const recovered = await eventually("recovery from the fault", RECOVERY_TIMEOUT_MS, async () =>
          led(await topology(), partitions),
        ).then(
          () => true,
          () => false,
        );
        if (!recovered) {
          violations.push(`the cluster did not recover within ${RECOVERY_TIMEOUT_MS} ms after: ${description}`);
        }
      }
    };
    try {
      await injector();
    } finally {
      injecting = false;
      await Promise.all(workload);
    }

    // Even after a violation every acknowledged message is read back, so that a loss is reported beside it.
    await verifyAfterFaults(running, gateway, topology, acknowledged, partitions, violations);
    if (options.scale === true && counts.changesCompleted === 0) {
      // The run's coverage: a harness whose changes were all refused or skipped checked nothing about them.
      violations.push("no cluster change completed although --scale asked for them");
    }
  } finally {
    if (progressTimer !== undefined) clearInterval(progressTimer);
    await cluster?.close();
    await platform?.close();
  }
  const errorLogMessages = errorLines(join(dataDirectory, "cluster", "logs"));
  // Faults are expected states of a cluster: the processes report them as warnings, so any error is a defect.
  for (const [message, count] of errorLogMessages) violations.push(`logged as an error ${count}×: ${message}`);
  const keep = violations.length > 0 && options.keepDataOnFailure === true;
  if (!keep) rmSync(dataDirectory, { recursive: true, force: true });
  return { seed: options.seed, ...progress(), keptDataDirectory: keep ? dataDirectory : undefined, errorLogMessages };
}

/** Counts the error (50) and fatal (60) lines of every JSON log in `directory` by their message and error text. */
function errorLines(directory: string): Map<string, number> {
  const counts = new Map<string, number>();
  const files = existsSync(directory) ? readdirSync(directory) : [];
  for (const file of files) {
    for (const line of readFileSync(join(directory, file), "utf8").split("\n")) {
      if (!line.startsWith("{")) continue;
      let entry: { level?: number; msg?: string; err?: { message?: string } };
      try {
        entry = JSON.parse(line) as typeof entry;
      } catch {
        continue;
      }
      if ((entry.level ?? 0) < 50) continue;
      const text = `${file.replace(/\.log$/, "")}: ${entry.msg ?? ""}${entry.err?.message ? ` (${entry.err.message})` : ""}`;
      counts.set(text, (counts.get(text) ?? 0) + 1);
    }
  }
  return counts;
}

/** Reads one acknowledged message back: found with its content, unavailable for now, or what was wrong. */
async function readBack(
  gateway: (path: string) => Promise<Response>,
  messageKey: string,
  expected: PublishedMessage,
): Promise<"found" | "unavailable" | string> {
  let response: Response;
  try {
    response = await gateway(`/v2/messages/${messageKey}`);
  } catch {
    return "unavailable";
  }
  if (UNAVAILABLE_STATUSES.has(response.status)) {
    await response.body?.cancel();
    return "unavailable";
  }
  if (response.status !== 200) {
    return `read of acknowledged message ${messageKey} (${expected.correlationKey}) answered ${response.status}: ${await response.text()}`;
  }
  const body = (await response.json()) as { key?: string; correlationKey?: string; variables?: unknown };
  // A message relocated to a partition added since answers under its new key; its content (unique per publication)
  // must be the same.
  const same =
    body.correlationKey === expected.correlationKey &&
    JSON.stringify(body.variables) === JSON.stringify(expected.variables);
  return same
    ? "found"
    : `read of ${messageKey} (${expected.correlationKey}) returned other content: ${JSON.stringify(body)}`;
}

/** Picks and carries out one fault, including its repair; returns what it did. */
async function injectFault(
  cluster: LocalCluster,
  random: SeededRandom,
  topology: GatewayTopology | undefined,
  partitionCount: number,
): Promise<string> {
  // The brokers running now (a cluster change may have added or removed some).
  const ids = cluster.brokers.map((broker) => broker.nodeId);
  const brokerCount = ids.length;
  const roll = random.nextInt(100);
  const partitionId = 1 + random.nextInt(partitionCount);
  const leader = topology === undefined ? undefined : leaderOf(topology, partitionId);
  const victim =
    roll < 35 && leader !== undefined && ids.includes(leader) ? leader : (ids[random.nextInt(brokerCount)] as number);
  const why = victim === leader ? ` (leader of ${partitionId})` : "";
  const downMs = 300 + random.nextInt(2_700);
  if (roll < 60) {
    await kill(cluster, victim, "SIGKILL");
    await sleep(downMs);
    await restartIfListed(cluster, victim);
    return `kill broker ${victim}${why}, down ${downMs} ms`;
  }
  if (roll < 75) {
    const pid = cluster.brokers.find((broker) => broker.nodeId === victim)?.pid;
    if (pid === undefined) return `pause broker ${victim}: not running, skipped`;
    process.kill(pid, "SIGSTOP");
    await sleep(downMs);
    process.kill(pid, "SIGCONT");
    return `pause broker ${victim}${why} for ${downMs} ms`;
  }
  if (roll < 90) {
    await kill(cluster, victim, "SIGTERM");
    await sleep(downMs);
    await restartIfListed(cluster, victim);
    return `stop broker ${victim}${why} (SIGTERM), down ${downMs} ms`;
  }
  if (roll >= 96) {
    // Every broker killed at once, as in a power cut of the whole cluster: all of it comes back from disk alone.
    for (const nodeId of ids) await kill(cluster, nodeId, "SIGKILL");
    await sleep(downMs);
    for (const nodeId of ids) await restartIfListed(cluster, nodeId);
    return `kill every broker, down ${downMs} ms`;
  }
  // Two brokers down at once: no partition has a quorum, so nothing may be acknowledged until one is back.
  const second = ids[(ids.indexOf(victim) + 1 + random.nextInt(brokerCount - 1)) % brokerCount] as number;
  await kill(cluster, victim, "SIGKILL");
  await kill(cluster, second, "SIGKILL");
  await sleep(downMs);
  await restartIfListed(cluster, victim);
  await restartIfListed(cluster, second);
  return `kill brokers ${victim} and ${second} (no quorum), down ${downMs} ms`;
}

/** Starts a killed broker again, unless a change removed it from the local cluster meanwhile. */
async function restartIfListed(cluster: LocalCluster, nodeId: number): Promise<void> {
  if (!cluster.brokers.some((broker) => broker.nodeId === nodeId)) return;
  await cluster.restartBroker(nodeId).catch(() => {
    // Already started again (the scaler's broker start races a fault's restart): nothing to do.
  });
}

/**
 * Makes one cluster change through the management API and follows it to its end, as an operator would: a broker
 * added (started first), a broker removed (stopped once the change completed), the replication factor moved
 * between 2 and 3, or (with `scalePartitions`) one partition added; a share of them it also tries to cancel
 * (`cancelChange`). Returns what it did, or null when the cluster refused (e.g. a broker it needs is down right now,
 * which is a 400 by the spec); a change that does not end within `CHANGE_TIMEOUT_MS` is a violation.
 */
async function makeChange(
  cluster: LocalCluster,
  dataDirectory: string,
  token: string,
  random: SeededRandom,
  violations: string[],
  scaling: {
    readonly partitions: Partitions;
    readonly scalePartitions: boolean;
    readonly counts: { changesCompleted: number; cancelsAttempted: number; cancelsRecorded: number };
  },
): Promise<string | null> {
  const manage = async (path: string, init: RequestInit = {}): Promise<Response> =>
    fetch(`${cluster.managementUrl}${path}`, {
      ...init,
      headers: {
        authorization: `Bearer ${token}`,
        ...(init.body === undefined ? {} : { "content-type": "application/json" }),
      },
      signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
    });
  const status = async (): Promise<{
    brokers: { id: number; partitions: unknown[] }[];
    lastChange?: { id: number; status: string };
    pendingChange?: { id: number };
  } | null> => {
    try {
      const response = await manage("/actuator/cluster");
      return response.status === 200 ? ((await response.json()) as Awaited<ReturnType<typeof status>>) : null;
    } catch {
      return null;
    }
  };
  const current = await status();
  if (current === null || current.pendingChange !== undefined) return null;
  const ids = current.brokers.map((broker) => broker.id).sort((left, right) => left - right);
  const clusterDirectory = join(dataDirectory, "cluster");
  const roll = random.nextInt(100);
  let request: {
    path: string;
    init: RequestInit;
    what: string;
    added?: number;
    removed?: number;
    partitionCount?: number;
  };
  const counts = new Map<number, number>();
  for (const broker of current.brokers) {
    for (const partition of broker.partitions as { id: number }[]) {
      counts.set(partition.id, (counts.get(partition.id) ?? 0) + 1);
    }
  }
  const replicationFactor = Math.min(...counts.values());
  if (scaling.scalePartitions && counts.size < MAX_PARTITIONS && roll >= 80) {
    const partitionCount = counts.size + 1;
    request = {
      path: "/actuator/cluster",
      init: { method: "PATCH", body: JSON.stringify({ partitions: { count: partitionCount, replicationFactor } }) },
      what: `partitions ${counts.size} → ${partitionCount}`,
      partitionCount,
    };
  } else if (ids.length < 5 && roll < 40) {
    const added = (ids[ids.length - 1] ?? 0) + 1;
    await addLocalBrokers(clusterDirectory, "127.0.0.1", [added]);
    await eventually(`broker ${added} started`, RECOVERY_TIMEOUT_MS, async () =>
      cluster.brokers.find((broker) => broker.nodeId === added)?.pid !== undefined ? true : undefined,
    );
    const target = [...ids, added];
    request = {
      path: "/actuator/cluster/brokers",
      init: { method: "POST", body: JSON.stringify(target) },
      what: `brokers ${ids.join(",")} → ${target.join(",")}`,
      added,
    };
  } else if (ids.length > 3 && roll < 80) {
    const removed = ids[ids.length - 1] as number;
    const target = ids.slice(0, -1);
    request = {
      path: "/actuator/cluster/brokers",
      init: { method: "POST", body: JSON.stringify(target) },
      what: `brokers ${ids.join(",")} → ${target.join(",")}`,
      removed,
    };
  } else {
    const target = replicationFactor === 3 ? 2 : 3;
    request = {
      path: "/actuator/cluster",
      init: {
        method: "PATCH",
        body: JSON.stringify({ partitions: { count: counts.size, replicationFactor: target } }),
      },
      what: `replication factor → ${target}`,
    };
  }
  // A broker just started, or one a fault took down, is refused as unreachable for a moment: ask again, bounded.
  let changeId: number | null = null;
  for (let attempt = 0; attempt < 20 && changeId === null; attempt += 1) {
    let response: Response;
    try {
      response = await manage(request.path, request.init);
    } catch {
      await sleep(500);
      continue;
    }
    if (response.status === 202) {
      changeId = ((await response.json()) as { changeId: number }).changeId;
      break;
    }
    const detail = ((await response.json().catch(() => ({}))) as { detail?: string }).detail ?? "";
    if (
      response.status === 409 ||
      (response.status === 400 && /unreachable|not running/.test(detail)) ||
      response.status >= 500
    ) {
      await sleep(500);
      continue;
    }
    violations.push(`the change ${request.what} was refused with ${response.status}: ${detail}`);
    return null;
  }
  if (changeId === null) return `change ${request.what}: not accepted while brokers were down, skipped`;
  const startedAtMs = Date.now();
  const id = changeId;
  // Now and then the operator changes their mind: a cancel at a random moment, under the same faults.
  const cancelling = random.nextInt(100) < CANCEL_PERCENT;
  const cancelled = cancelling ? await cancelChange(manage, id, random, violations) : false;
  if (cancelling) scaling.counts.cancelsAttempted += 1;
  if (cancelled) scaling.counts.cancelsRecorded += 1;
  const ended = await eventually(`change ${id} ended`, CHANGE_TIMEOUT_MS, async () => {
    const now = await status();
    return now !== null && now.lastChange !== undefined && now.lastChange.id >= id && now.pendingChange?.id !== id
      ? now.lastChange.status
      : undefined;
  }).catch(() => null);
  if (ended === null) {
    violations.push(`change ${id} (${request.what}) did not end within ${CHANGE_TIMEOUT_MS} ms`);
    return `change ${id}: ${request.what}, stuck`;
  }
  const expected = cancelled ? "CANCELLED" : "COMPLETED";
  if (ended !== expected) violations.push(`change ${id} (${request.what}) ended ${ended}, not ${expected}`);
  if (ended === "COMPLETED") scaling.counts.changesCompleted += 1;
  if (request.removed !== undefined && ended === "COMPLETED") removeLocalBrokers(clusterDirectory, [request.removed]);
  if (request.added !== undefined && ended === "CANCELLED") {
    // A broker the cancelled change did not make a member is stopped, as the recommended sequence says.
    const after = await status();
    if (after !== null && !after.brokers.some((broker) => broker.id === request.added)) {
      removeLocalBrokers(clusterDirectory, [request.added]);
    }
  }
  if (request.partitionCount !== undefined && ended === "COMPLETED") {
    scaling.partitions.ids = Array.from({ length: request.partitionCount }, (_, index) => index + 1);
  }
  return `change ${id}: ${request.what}, ${ended} in ${Date.now() - startedAtMs} ms`;
}

/**
 * After a pause of up to 3 s, asks to cancel change `changeId`, again on an answer of no coordinator (502, 503, 504)
 * or none at all, at most 10 times; answers whether the cancel was recorded (200). A change that ended meanwhile
 * (404) or that cannot be cancelled now (409: a started scale-up, or too few brokers heard) runs to its end; any
 * other answer is a violation.
 */
async function cancelChange(
  manage: (path: string, init?: RequestInit) => Promise<Response>,
  changeId: number,
  random: SeededRandom,
  violations: string[],
): Promise<boolean> {
  await sleep(random.nextInt(3_000));
  for (let attempt = 0; attempt < 10; attempt += 1) {
    let response: Response;
    try {
      response = await manage(`/actuator/cluster/changes/${changeId}`, { method: "DELETE" });
    } catch {
      await sleep(500);
      continue;
    }
    await response.body?.cancel();
    if (response.status === 200) return true;
    if (response.status === 404 || response.status === 409) return false;
    if (response.status < 500) {
      violations.push(`cancelling change ${changeId} was answered ${response.status}`);
      return false;
    }
    await sleep(500);
  }
  return false;
}

/** Sends `signal` to a broker and waits (bounded) until its process has exited. */
async function kill(cluster: LocalCluster, nodeId: number, signal: NodeJS.Signals): Promise<void> {
  const broker = cluster.brokers.find((candidate) => candidate.nodeId === nodeId);
  const pid = broker?.pid;
  if (broker === undefined || pid === undefined) return;
  process.kill(pid, signal);
  await eventually(`broker ${nodeId} to exit after ${signal}`, RECOVERY_TIMEOUT_MS, async () =>
    broker.pid === undefined ? true : undefined,
  );
}

/** The checks once the faults stopped: recovery, every acknowledged message, converged replicas. */
async function verifyAfterFaults(
  cluster: LocalCluster,
  gateway: (path: string) => Promise<Response>,
  topology: () => Promise<GatewayTopology | undefined>,
  acknowledged: ReadonlyMap<string, PublishedMessage>,
  partitions: Partitions,
  violations: string[],
): Promise<void> {
  let healthy = true;
  try {
    await eventually("every replica healthy", RECOVERY_TIMEOUT_MS, async () => {
      const current = await topology();
      return current !== undefined && everyPartitionLed(current, partitions.ids) && everyReplicaHealthy(current)
        ? true
        : undefined;
    });
  } catch (error) {
    violations.push(String(error));
    healthy = false;
  }
  // Unhealthy, the cluster may leave some partitions unreadable for good: each read is retried less, so that the
  // read-back still ends in bounded time and reports what it could read and what it could not.
  const retries = healthy ? 50 : 3;
  const missing: string[] = [];
  const entries = [...acknowledged];
  const readers = Array.from({ length: 8 }, async (_, offset) => {
    for (let index = offset; index < entries.length; index += 8) {
      const [messageKey, expected] = entries[index] as [string, PublishedMessage];
      let outcome = await readBack(gateway, messageKey, expected);
      for (let attempt = 0; outcome === "unavailable" && attempt < retries; attempt += 1) {
        await sleep(100);
        outcome = await readBack(gateway, messageKey, expected);
      }
      if (outcome !== "found") missing.push(outcome === "unavailable" ? `${messageKey} stayed unavailable` : outcome);
    }
  });
  await Promise.all(readers);
  violations.push(...missing.slice(0, 20));
  if (missing.length > 20) violations.push(`… and ${missing.length - 20} more unreadable acknowledged messages`);
  if (!healthy) return;
  try {
    await eventually("every partition's replicas at one applied index", RECOVERY_TIMEOUT_MS, async () => {
      const applied = await partitionIndexes(cluster.managementUrl, "applied_index");
      const byPartition = new Map<string, Set<number>>();
      for (const [replica, index] of applied) {
        const partition = replica.split("/")[0] as string;
        byPartition.set(partition, (byPartition.get(partition) ?? new Set()).add(index));
      }
      const current = await topology();
      if (current === undefined) return undefined;
      // Every replica the topology lists reports an applied index, and those of one partition agree.
      const listed = current.brokers.reduce((sum, broker) => sum + broker.partitions.length, 0);
      const replicas = [...byPartition.values()];
      return replicas.length === partitions.ids.length &&
        applied.size === listed &&
        replicas.every((indexes) => indexes.size === 1)
        ? true
        : undefined;
    });
  } catch (error) {
    violations.push(
      `${String(error)}: ${JSON.stringify([...(await partitionIndexes(cluster.managementUrl, "applied_index"))])}`,
    );
  }
}
