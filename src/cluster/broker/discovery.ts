/**
 * What a starting broker learns from its contact points before it opens a single replica: the cluster
 * configuration the running brokers hold, where they listen and under which ids, and whether each partition's group
 * already runs. A broker that skipped this could act on a stale or invented configuration: a broker new to the
 * cluster would bootstrap a configuration of its own, a broker that lost its disk would start a fresh group beside
 * the running one, and a broker a forced reconfiguration left out would start replicas it no longer hosts.
 *
 * Contact points are addresses only: which broker listens there is learned from its answer, so the list may name
 * brokers in any order and need not name them all.
 */
import { setTimeout as sleep } from "node:timers/promises";
import type { Logger } from "pino";
import { monotonicNowMs } from "../../time/monotonic.js";
import type { PeerAddress, TransportClient } from "../transport/index.js";
import { describeAddress } from "../transport/index.js";
import { type ClusterConfigurationAnswer, type PeerRequest, parseClusterConfigurationAnswer } from "./peer-requests.js";

/** Options of one discovery. */
export interface DiscoveryOptions {
  readonly client: TransportClient<PeerRequest, unknown>;
  readonly contactPoints: readonly PeerAddress[];
  /** This broker's own cluster address, skipped among the contact points. */
  readonly ownAddress: PeerAddress;
  readonly ownNodeId: number;
  /**
   * Longest time to keep asking. Null: until some contact point answers with a configuration (a broker that has no
   * configuration of its own and may not invent one).
   */
  readonly timeoutMs: number | null;
  /** Longest wait for one answer. */
  readonly requestTimeoutMs: number;
  /** Pause between two rounds of asking the contact points that did not answer. */
  readonly retryIntervalMs: number;
  /** Stops the discovery early (the broker is closing). */
  readonly signal: AbortSignal;
  readonly logger: Logger;
}

/** What the contact points said. */
export interface DiscoveryResult {
  /** One answer per broker that answered, by node id. */
  readonly answers: readonly ClusterConfigurationAnswer[];
  /** Contact points that never answered. */
  readonly unanswered: readonly PeerAddress[];
}

/** How often a discovery without a deadline says it is still waiting. */
const WAITING_LOG_INTERVAL_MS = 10_000;

/**
 * Asks every contact point (but this broker) for its configuration, round after round, until one answers with a
 * configuration, every contact point answered (all of them still starting, as on a cluster's first start), the
 * deadline passes, or the signal aborts.
 */
export async function discoverCluster(options: DiscoveryOptions): Promise<DiscoveryResult> {
  const own = describeAddress(options.ownAddress);
  const pending = new Map<string, PeerAddress>();
  for (const address of options.contactPoints) {
    if (describeAddress(address) !== own) pending.set(describeAddress(address), address);
  }
  const answers = new Map<number, ClusterConfigurationAnswer>();
  const startedAtMs = monotonicNowMs();
  let loggedAtMs = startedAtMs;
  // Bounded by the deadline, by the signal, or (without a deadline) by the first configuration received.
  for (;;) {
    const round = await Promise.all(
      [...pending.entries()].map(async ([key, address]) => {
        try {
          const raw = await options.client.request(
            address,
            { type: "cluster-configuration" },
            { timeoutMs: options.requestTimeoutMs },
          );
          return { key, answer: parseClusterConfigurationAnswer(raw) };
        } catch {
          // Not up yet, or unreachable: asked again next round.
          return { key, answer: null };
        }
      }),
    );
    for (const { key, answer } of round) {
      if (answer === null || answer.nodeId === options.ownNodeId) continue;
      answers.set(answer.nodeId, answer);
      pending.delete(key);
    }
    const found = [...answers.values()].some((answer) => answer.configuration !== null);
    const elapsedMs = monotonicNowMs() - startedAtMs;
    const timedOut = options.timeoutMs !== null && elapsedMs >= options.timeoutMs;
    const everyoneAnswered = pending.size === 0 && options.timeoutMs !== null;
    if (found || timedOut || everyoneAnswered || options.signal.aborted) {
      return { answers: [...answers.values()], unanswered: [...pending.values()] };
    }
    if (monotonicNowMs() - loggedAtMs >= WAITING_LOG_INTERVAL_MS) {
      loggedAtMs = monotonicNowMs();
      options.logger.warn(
        {
          waitingMs: elapsedMs,
          unanswered: [...pending.keys()],
          answeredWithoutConfiguration: [...answers.keys()],
        },
        "waiting for a contact point to tell the cluster configuration; this broker does not invent one",
      );
    }
    if (pending.size === 0) {
      // Everyone answered, but without a configuration: ask them all again.
      for (const address of options.contactPoints) {
        if (describeAddress(address) !== own) pending.set(describeAddress(address), address);
      }
    }
    await pause(options.retryIntervalMs, options.signal);
  }
}

/** Waits `durationMs`, or less when `signal` aborts. */
async function pause(durationMs: number, signal: AbortSignal): Promise<void> {
  try {
    await sleep(durationMs, undefined, { signal });
  } catch {
    // Aborted: the caller checks the signal.
  }
}
