/**
 * Routes message requests to partition leaders. The partition of a publication comes from its correlation key
 * (hashed over the partitions taking requests) or, without one, round robin; the partition of a read comes from the
 * key itself. A request goes to the leader the topology knows; when that broker says it is not the leader, or
 * cannot be reached (a leader change), the request is retried ONCE at the new leader. The number of requests in
 * progress is bounded: beyond the limit (or when the transport pushes back) the answer is 503 with Retry-After.
 *
 * A publication is retried only when it certainly did not take effect: the broker refused it before proposing it,
 * or answered `not-leader` once another leader's entry replaced it, or the request never left the gateway. When the
 * connection breaks after the request was sent, or the broker cannot tell whether its entry was committed, the
 * answer is 502 `outcome-unknown`: a retry could publish the message twice. Reads are always safe to retry.
 */

import { ServiceError } from "../../http/errors.js";
import type {
  BrokerRequest,
  GetMessageResponse,
  MessageView,
  PublishMessageCommand,
  PublishMessageResponse,
} from "../broker/protocol.js";
import {
  DEFAULT_TENANT_ID,
  encodeRecord,
  parseKey,
  partitionForCorrelationKey,
  RecordValidationError,
  routingKeyOf,
} from "../engine/index.js";
import { replicasOf } from "../topology/index.js";
import {
  BackpressureError,
  PeerUnreachableError,
  RemoteError,
  type TransportClient,
  TransportClosedError,
  TransportTimeoutError,
} from "../transport/index.js";
import type { TopologyCache } from "./topology-cache.js";
import type { TopologyView } from "./topology-view.js";

/** Seconds a client is asked to wait after a 503. */
export const RETRY_AFTER_SECONDS = 1;

/**
 * Forwards a read follows at most. A message is relocated at most once per partition scale-up, to a new key, so its
 * chain of forwards is as long as the scale-ups it lived through and never loops; a longer chain than this means a
 * broker forwards wrongly, and the read is answered 502 rather than 404 (the message may well exist).
 */
export const MAX_FORWARDS = 32;

/** Pause between topology rounds while waiting for a partition to elect a leader. */
const LEADER_POLL_INTERVAL_MS = 200;

/**
 * Longest wait for a partition without a leader to elect one, bounded by half the request timeout: long enough for an
 * ordinary election after a leader's crash (an election timeout and a topology round), short enough that during a
 * quorum loss a client hears 503 with Retry-After early rather than holding its request for the whole timeout.
 */
const MAX_LEADER_WAIT_MS = 3_000;

/** Options of MessageRouter. */
export interface MessageRouterOptions {
  client: TransportClient<BrokerRequest, unknown>;
  topology: TopologyCache;
  /** How long one request may take in total (broker waits included) before it is answered 504. */
  requestTimeoutMs: number;
  /** Requests in progress beyond which new ones are refused with 503. */
  maxInFlightRequests: number;
  /** A monotonic clock in milliseconds, for deadlines. */
  now: () => number;
}

/** A publication as a client sent it (after schema validation). */
export interface PublicationRequest {
  name: string;
  correlationKey?: string;
  timeToLive?: number;
  messageId?: string;
  /** A JSON object (the schema checked it). */
  variables?: object;
  tenantId?: string;
}

function unavailable(detail: string): ServiceError {
  return new ServiceError("unavailable", detail, { headers: { "retry-after": String(RETRY_AFTER_SECONDS) } });
}

/** The answer when a publication reached a broker but its fate is not known: never retried by the gateway. */
function outcomeUnknown(detail: string): ServiceError {
  return new ServiceError(
    "outcomeUnknown",
    `${detail}. The message may or may not have been published. To retry without risking a second copy, publish ` +
      "with a messageId: a 409 for the retry then means the first attempt took effect. A partition knows a " +
      "messageId only while its message is buffered, so retry within the message's time to live.",
  );
}

/** A broker's answer that ends a request: neither a redirect to retry nor an unknown outcome. */
type Settled<T> = Exclude<T, { outcome: "not-leader" } | { outcome: "unavailable" } | { outcome: "unknown" }>;

type Attempt<T> = { kind: "answer"; value: T } | { kind: "retry"; leaderHint: number | null; detail: string };

/** The request routing of the gateway; see the module comment. */
export class MessageRouter {
  private inFlight = 0;
  private roundRobin = 0;

  constructor(private readonly options: MessageRouterOptions) {}

  /** Requests in progress now. */
  inFlightRequests(): number {
    return this.inFlight;
  }

  /** Publishes a message; resolves once a quorum of its partition committed it. */
  async publish(request: PublicationRequest): Promise<{ messageKey: string; tenantId: string }> {
    const command: PublishMessageCommand = {
      name: request.name,
      correlationKey: request.correlationKey ?? "",
      timeToLiveMs: request.timeToLive ?? 0,
      variables: (request.variables ?? {}) as Record<string, unknown>,
      tenantId: request.tenantId ?? DEFAULT_TENANT_ID,
      ...(request.messageId === undefined ? {} : { messageId: request.messageId }),
    };
    // The engine's own validation answers 400 here, so nothing invalid travels to a broker.
    try {
      encodeRecord({ kind: "publishMessage", ...command, publishedAtMs: 0 });
    } catch (error) {
      if (error instanceof RecordValidationError) {
        throw new ServiceError("invalidRequest", error.problems.join("; "), {
          extensions: { errors: error.problems.map((message) => ({ location: "body", message })) },
        });
      }
      throw error;
    }
    return this.bounded(async (deadlineMs) => {
      const view = await this.viewWithPartitions(deadlineMs);
      let partitionId = this.partitionFor(routingKeyOf(command.correlationKey, command.messageId), view);
      // Bounded: a partition that does not own the key names the one that does; after partitions were added the
      // gateway's routing may lag by one topology round, so it refreshes and sends the publication there once.
      for (let attempt = 0; ; attempt += 1) {
        const response = await this.routed<PublishMessageResponse>(
          partitionId,
          { type: "publish-message", partitionId, message: command },
          deadlineMs,
        );
        switch (response.outcome) {
          case "published":
            return { messageKey: response.key, tenantId: response.tenantId };
          case "rejected":
            if (response.reason === "duplicate-message-id") throw new ServiceError("conflict", response.detail);
            if (response.reason === "relocating") throw unavailable(`Partition ${partitionId}: ${response.detail}.`);
            if (response.reason === "not-owner") {
              if (attempt > 0) throw unavailable(`The partitions of the cluster are changing: ${response.detail}.`);
              void this.options.topology.refresh();
              partitionId = response.ownerPartitionId;
              continue;
            }
            throw new ServiceError("invalidRequest", response.detail);
          default:
            throw new Error(`invariant violated: unexpected publish outcome ${JSON.stringify(response)}`);
        }
      }
    });
  }

  /** Reads a buffered message by its key (a linearizable read on the partition's leader). */
  async getMessage(messageKey: string): Promise<MessageView> {
    const decoded = parseKey(messageKey);
    if (decoded === undefined) {
      throw new ServiceError(
        "invalidRequest",
        `'${messageKey}' is not a message key: a key is the decimal number a publication was answered with, its partition id times 2^51 plus a counter from 1.`,
      );
    }
    return this.bounded(async (deadlineMs) => {
      let view = await this.viewWithPartitions(deadlineMs);
      let key = messageKey;
      let partitionId = decoded.partitionId;
      // Bounded: each forward is one partition scale-up that relocated the message (see MAX_FORWARDS).
      for (let hop = 0; hop <= MAX_FORWARDS; hop += 1) {
        // A partition just added may be missing from a view one round old: look again before answering 404.
        if (!this.partitionExists(view, partitionId)) view = (await this.options.topology.refreshedSince()) ?? view;
        if (!this.partitionExists(view, partitionId)) {
          // A view no broker answered for may predate the partition (another gateway may have acknowledged a
          // message there): 404 only when brokers did answer, and 503 to retry otherwise.
          if (view.reachable.size === 0) {
            throw unavailable(`No broker answered to say whether partition ${partitionId} exists yet.`);
          }
          break;
        }
        const response = await this.routed<GetMessageResponse>(
          partitionId,
          { type: "get-message", partitionId, key },
          deadlineMs,
        );
        if (response.outcome === "found") return response.message;
        if (response.outcome === "not-found") break;
        if (response.outcome === "moved") {
          const next = parseKey(response.key);
          if (next === undefined)
            throw new ServiceError("badGateway", "A broker forwarded the read to a malformed key.");
          if (hop === MAX_FORWARDS) {
            throw new ServiceError(
              "badGateway",
              `The brokers forwarded the read of message '${messageKey}' more than ${MAX_FORWARDS} times.`,
            );
          }
          key = response.key;
          partitionId = next.partitionId;
          continue;
        }
        throw new Error(`invariant violated: unexpected read outcome ${JSON.stringify(response)}`);
      }
      throw new ServiceError("notFound", `Message '${messageKey}' does not exist.`);
    });
  }

  private partitionExists(view: TopologyView, partitionId: number): boolean {
    for (const member of view.configuration.members.values()) if (member.partitions.has(partitionId)) return true;
    return false;
  }

  /** The partition a publication goes to, by its routing key (see correlation.ts), round robin without one. */
  private partitionFor(routingKey: string, view: TopologyView): number {
    const active = view.activePartitions;
    // Keys are hashed over the routing's correlation count, which after partitions were added may differ from the
    // partitions taking requests (it moves to the new count while the new partitions start to take work).
    const correlationCount = view.configuration.routing.messageCorrelation.partitionCount;
    if (routingKey !== "") return partitionForCorrelationKey(routingKey, correlationCount);
    this.roundRobin = (this.roundRobin + 1) % active.length;
    const partitionId = active[this.roundRobin];
    if (partitionId === undefined) throw new Error("invariant violated: round robin index within active partitions");
    return partitionId;
  }

  /** Runs `work` within the in-flight bound and the request deadline. */
  private async bounded<T>(work: (deadlineMs: number) => Promise<T>): Promise<T> {
    if (this.inFlight >= this.options.maxInFlightRequests) {
      throw unavailable(
        `The gateway has ${this.options.maxInFlightRequests} requests in progress, its limit; retry shortly.`,
      );
    }
    this.inFlight += 1;
    try {
      return await work(this.options.now() + this.options.requestTimeoutMs);
    } finally {
      this.inFlight -= 1;
    }
  }

  private async viewWithPartitions(deadlineMs: number): Promise<TopologyView> {
    const view = this.options.topology.current() ?? (await this.options.topology.refreshedSince());
    if (view === undefined) throw unavailable("No broker of the cluster has answered the gateway yet.");
    if (view.activePartitions.length === 0) throw unavailable("The cluster has no partition taking requests.");
    if (this.options.now() > deadlineMs) throw this.timedOut();
    return view;
  }

  private timedOut(): ServiceError {
    return new ServiceError(
      "gatewayTimeout",
      `The cluster did not answer within ${this.options.requestTimeoutMs} ms; the request may or may not have taken effect.`,
    );
  }

  /**
   * The leader of `partitionId`, waiting until `leaderDeadlineMs` for an election when there is none; each topology
   * round is awaited only until then too, so a round held up by unreachable brokers cannot stretch the wait.
   */
  private async leaderOf(partitionId: number, leaderDeadlineMs: number, refreshFirst: boolean): Promise<number> {
    let view = refreshFirst ? await this.refreshedUntil(leaderDeadlineMs) : this.options.topology.current();
    for (;;) {
      const leader = view?.leaders.get(partitionId);
      if (leader !== undefined) return leader.nodeId;
      if (this.options.now() + LEADER_POLL_INTERVAL_MS >= leaderDeadlineMs) {
        throw unavailable(noLeaderReason(view, partitionId));
      }
      await new Promise((resolve) => setTimeout(resolve, LEADER_POLL_INTERVAL_MS));
      view = await this.refreshedUntil(leaderDeadlineMs);
    }
  }

  /** A fresh topology view, or the current one when no round finishes before `deadlineMs`. */
  private async refreshedUntil(deadlineMs: number): Promise<TopologyView | undefined> {
    const waitMs = deadlineMs - this.options.now();
    if (waitMs <= 0) return this.options.topology.current();
    let timer: NodeJS.Timeout | undefined;
    const expired = new Promise<undefined>((resolve) => {
      timer = setTimeout(() => resolve(undefined), waitMs);
    });
    try {
      return (await Promise.race([this.options.topology.refreshedSince(), expired])) ?? this.options.topology.current();
    } finally {
      clearTimeout(timer);
    }
  }

  /** Sends a partition request to its leader, retrying once on a leader change. */
  private async routed<T extends PublishMessageResponse | GetMessageResponse>(
    partitionId: number,
    request: BrokerRequest,
    deadlineMs: number,
  ): Promise<Settled<T>> {
    const leaderDeadlineMs = Math.min(
      deadlineMs,
      this.options.now() + Math.min(MAX_LEADER_WAIT_MS, this.options.requestTimeoutMs / 2),
    );
    let leaderId = await this.leaderOf(partitionId, leaderDeadlineMs, false);
    const first = await this.attempt<T>(leaderId, request, deadlineMs);
    if (first.kind === "answer") return first.value;
    // The hint names the new leader only when the broker knows it and it is another broker; otherwise ask the cluster.
    const hinted = first.leaderHint !== null && first.leaderHint !== leaderId ? first.leaderHint : undefined;
    const view = this.options.topology.current();
    leaderId =
      hinted !== undefined && view?.addresses.has(hinted) === true
        ? hinted
        : await this.leaderOf(partitionId, leaderDeadlineMs, true);
    const second = await this.attempt<T>(leaderId, request, deadlineMs);
    if (second.kind === "answer") return second.value;
    // A second miss means the leadership is still moving; the client retries later rather than the gateway looping.
    void this.options.topology.refresh();
    throw unavailable(`Partition ${partitionId} is changing leaders (${second.detail}); retry shortly.`);
  }

  private async attempt<T extends PublishMessageResponse | GetMessageResponse>(
    brokerId: number,
    request: BrokerRequest,
    deadlineMs: number,
  ): Promise<Attempt<Settled<T>>> {
    const address = this.options.topology.current()?.addresses.get(brokerId);
    if (address === undefined) return { kind: "retry", leaderHint: null, detail: `broker ${brokerId} has no address` };
    const timeoutMs = deadlineMs - this.options.now();
    if (timeoutMs <= 0) throw this.timedOut();
    let response: T;
    try {
      response = (await this.options.client.request({ host: address.host, port: address.port }, request, {
        timeoutMs,
      })) as T;
    } catch (error) {
      if (error instanceof BackpressureError) {
        throw unavailable("The gateway's connection to the partition leader is saturated; retry shortly.");
      }
      if (error instanceof TransportTimeoutError) throw this.timedOut();
      if (error instanceof PeerUnreachableError) {
        // A publication the broker may have received is not sent again: if it was committed, a second copy would be
        // published (or, with a messageId, refused as a duplicate although the first copy took effect).
        if (error.requestSent && request.type === "publish-message") {
          throw outcomeUnknown(`the connection to broker ${brokerId} broke while it handled the publication`);
        }
        return { kind: "retry", leaderHint: null, detail: `broker ${brokerId} is unreachable` };
      }
      if (error instanceof RemoteError) {
        if (error.code === "overloaded") throw unavailable(`Broker ${brokerId} is overloaded; retry shortly.`);
        throw new ServiceError("badGateway", `Broker ${brokerId} failed to handle the request: ${error.remoteMessage}`);
      }
      if (error instanceof TransportClosedError) throw unavailable("The gateway is shutting down.");
      throw error;
    }
    if (typeof response !== "object" || response === null || typeof response.outcome !== "string") {
      throw new ServiceError("badGateway", `Broker ${brokerId} sent a malformed answer.`);
    }
    if (response.outcome === "not-leader") {
      return { kind: "retry", leaderHint: response.leaderId, detail: `broker ${brokerId} is not the leader` };
    }
    if (response.outcome === "unavailable") {
      return { kind: "retry", leaderHint: null, detail: response.detail };
    }
    if (response.outcome === "unknown") throw outcomeUnknown(`broker ${brokerId}: ${response.detail}`);
    return { kind: "answer", value: response as Settled<T> };
  }
}

/**
 * Why `partitionId` has no leader for this gateway. When replicas of it do not answer the gateway, its leader may be
 * among them, alive for the other brokers: a gateway cut off from a healthy leader said the partition had no
 * leader, which sent operators looking for an election problem instead of at the network.
 */
function noLeaderReason(view: TopologyView | undefined, partitionId: number): string {
  const silent =
    view === undefined
      ? []
      : replicasOf(view.configuration, partitionId)
          .map((replica) => replica.brokerId)
          .filter((brokerId) => !view.reachable.has(brokerId));
  if (silent.length === 0) return `Partition ${partitionId} has no leader at the moment; retry shortly.`;
  const brokers = silent.length === 1 ? `broker ${silent[0]}` : `brokers ${silent.join(", ")}`;
  return (
    `Partition ${partitionId} has no leader among the brokers this gateway reaches (${brokers} of its replicas ` +
    "do not answer it); retry shortly."
  );
}
