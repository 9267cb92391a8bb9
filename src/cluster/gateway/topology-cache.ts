/**
 * Keeps the gateway's view of the cluster fresh: every `refreshIntervalMs` (and on demand, when a request found a
 * leader gone) it asks every known broker and every contact point to `describe` itself, bounded by
 * `describeTimeoutMs`, and assembles the answers into a TopologyView. At most one round runs at a time; callers that
 * need a view newer than some instant share the round that satisfies them.
 */
import type { Logger } from "pino";
import type { BrokerAddress, BrokerDescription, BrokerRequest } from "../broker/protocol.js";
import type { PeerAddress, TransportClient } from "../transport/index.js";
import { describeAddress } from "../transport/index.js";
import { assembleTopologyView, type TopologyView } from "./topology-view.js";

/** Parses `host:port,host:port` (configuration `gateway.contactPoints`); throws naming the bad entry. */
export function parseContactPoints(text: string): PeerAddress[] {
  const entries = text
    .split(",")
    .map((entry) => entry.trim())
    .filter((entry) => entry !== "");
  return entries.map((entry) => {
    const separator = entry.lastIndexOf(":");
    const host = entry.slice(0, separator).replace(/^\[(.*)\]$/, "$1");
    const port = Number(entry.slice(separator + 1));
    if (separator <= 0 || host === "" || !Number.isInteger(port) || port < 1 || port > 65535) {
      throw new Error(`contact point "${entry}" is not host:port with a port in 1..65535`);
    }
    return { host, port };
  });
}

/** Options of TopologyCache. */
export interface TopologyCacheOptions {
  client: TransportClient<BrokerRequest, unknown>;
  contactPoints: readonly PeerAddress[];
  gatewayVersion: string;
  /** Longest wait for one broker's `describe` answer. */
  describeTimeoutMs: number;
  /** Time between two periodic rounds. */
  refreshIntervalMs: number;
  logger: Logger;
  /** The monotonic clock rounds are stamped with (milliseconds). */
  now: () => number;
}

/** Checks the shape of a `describe` answer before trusting it: a broker's answer is input like any other. */
function isBrokerDescription(value: unknown): value is BrokerDescription {
  if (typeof value !== "object" || value === null) return false;
  const candidate = value as Partial<BrokerDescription>;
  return (
    Number.isInteger(candidate.nodeId) &&
    typeof candidate.host === "string" &&
    Number.isInteger(candidate.port) &&
    typeof candidate.version === "string" &&
    typeof candidate.configuration === "string" &&
    Array.isArray(candidate.brokers) &&
    candidate.brokers.every(
      (address: Partial<BrokerAddress>) =>
        typeof address === "object" &&
        address !== null &&
        Number.isInteger(address.nodeId) &&
        typeof address.host === "string" &&
        Number.isInteger(address.port),
    ) &&
    Array.isArray(candidate.replicas) &&
    candidate.replicas.every(
      (report) =>
        typeof report === "object" &&
        report !== null &&
        Number.isInteger(report.partitionId) &&
        ["leader", "follower", "inactive"].includes(report.role) &&
        ["healthy", "unhealthy", "dead"].includes(report.health) &&
        typeof report.term === "number",
    )
  );
}

/** The periodically refreshed topology; see the module comment. */
export class TopologyCache {
  private view: TopologyView | undefined;
  private lastRoundStartedAtMs = Number.NEGATIVE_INFINITY;
  private round: { startedAtMs: number; done: Promise<TopologyView | undefined> } | undefined;
  private queued: Promise<TopologyView | undefined> | undefined;
  private timer: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(private readonly options: TopologyCacheOptions) {}

  /** The latest view, or undefined before any broker answered. */
  current(): TopologyView | undefined {
    return this.view;
  }

  /** Runs a first round and starts the periodic refresh. */
  async start(): Promise<void> {
    await this.refresh();
    this.schedule();
  }

  /** Stops the periodic refresh; a running round finishes on its own. */
  close(): void {
    this.closed = true;
    if (this.timer !== undefined) clearTimeout(this.timer);
  }

  /** A view from a round that started at or after `notBeforeMs` (default: now), running one if needed. */
  async refreshedSince(notBeforeMs: number = this.options.now()): Promise<TopologyView | undefined> {
    if (this.lastRoundStartedAtMs >= notBeforeMs && this.round === undefined) return this.view;
    if (this.round !== undefined && this.round.startedAtMs >= notBeforeMs) return this.round.done;
    return this.refresh();
  }

  /** Starts a round now, or right after the running one (callers arriving meanwhile share that queued round). */
  refresh(): Promise<TopologyView | undefined> {
    if (this.round === undefined) return this.startRound();
    this.queued ??= this.round.done.then(() => {
      this.queued = undefined;
      return this.startRound();
    });
    return this.queued;
  }

  private schedule(): void {
    if (this.closed) return;
    this.timer = setTimeout(() => {
      void this.refresh().finally(() => this.schedule());
    }, this.options.refreshIntervalMs);
    this.timer.unref();
  }

  private startRound(): Promise<TopologyView | undefined> {
    const startedAtMs = this.options.now();
    const done = this.runRound().finally(() => {
      this.lastRoundStartedAtMs = startedAtMs;
      this.round = undefined;
    });
    this.round = { startedAtMs, done };
    return done;
  }

  private async runRound(): Promise<TopologyView | undefined> {
    const targets = new Map<string, PeerAddress>();
    for (const address of this.options.contactPoints) targets.set(describeAddress(address), address);
    // Which broker was asked where, as the round starts: the view may only change when the round ends, but the name
    // promises what was asked.
    const askedAddresses = new Map(this.view?.addresses ?? []);
    for (const address of askedAddresses.values()) {
      targets.set(describeAddress(address), { host: address.host, port: address.port });
    }
    const answers = await Promise.all(
      [...targets.values()].map(async (address) => {
        try {
          const answer = await this.options.client.request(
            address,
            { type: "describe" },
            { timeoutMs: this.options.describeTimeoutMs },
          );
          if (isBrokerDescription(answer)) return answer;
          this.options.logger.warn({ broker: describeAddress(address) }, "malformed describe answer ignored");
        } catch {
          // An unreachable broker is expected during failures; the view lists it as dead.
        }
        return undefined;
      }),
    );
    const descriptions = new Map<number, BrokerDescription>();
    for (const answer of answers) if (answer !== undefined) descriptions.set(answer.nodeId, answer);
    const view = assembleTopologyView({
      descriptions: [...descriptions.values()],
      previousAddresses: this.view?.addresses ?? new Map(),
      askedAddresses,
      previousVersions: this.view?.versions ?? new Map(),
      previousConfiguration: this.view?.configuration,
      previousConfigurationTexts: this.view?.configurationTexts ?? new Map(),
      gatewayVersion: this.options.gatewayVersion,
    });
    if (view !== undefined) this.view = view;
    return this.view;
  }
}
