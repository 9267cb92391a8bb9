/**
 * Sends management requests to the cluster's coordinator. The coordinator is the member with the lowest id that
 * answers (spec: "the broker with the lowest id coordinates changes; gateways forward management requests to it"):
 * the gateway asks the lowest-id member its topology sees as reachable, follows a `not-coordinator` answer to the
 * broker it names (a bounded number of times), and falls back to the next member when one cannot be reached. When
 * none can be reached the answer is 502; when the one that was reached does not answer in time, 504. A broker that
 * received the request and failed it is reported as such (502 with its reason) when no other broker answers instead,
 * not as one that could not be reached.
 */
import type { Logger } from "pino";
import { ServiceError } from "../../http/errors.js";
import type {
  BackupListResponse,
  BackupResponse,
  BrokerRequest,
  ClusterChangeResponse,
  ClusterStatusResponse,
} from "../broker/protocol.js";
import {
  BackpressureError,
  PeerUnreachableError,
  RemoteError,
  type TransportClient,
  TransportClosedError,
  TransportTimeoutError,
} from "../transport/index.js";
import { RETRY_AFTER_SECONDS } from "./message-router.js";
import type { TopologyCache } from "./topology-cache.js";

/** A management request to the coordinator. */
export type CoordinatorRequest = Extract<
  BrokerRequest,
  {
    type:
      | "cluster-change"
      | "cluster-cancel"
      | "cluster-status"
      | "backup-take"
      | "backup-list"
      | "backup-status"
      | "backup-delete";
  }
>;

/** The coordinator's answer to each management request type. */
export interface CoordinatorResponses {
  "cluster-change": ClusterChangeResponse;
  "cluster-cancel": ClusterStatusResponse;
  "cluster-status": ClusterStatusResponse;
  "backup-take": BackupResponse;
  "backup-list": BackupListResponse;
  "backup-status": BackupResponse;
  "backup-delete": BackupResponse;
}

/** Options of CoordinatorClient. */
export interface CoordinatorClientOptions {
  client: TransportClient<BrokerRequest, unknown>;
  topology: TopologyCache;
  /** Longest wait for the coordinator's answer. */
  requestTimeoutMs: number;
  logger: Logger;
}

/** Redirects followed before giving up: brokers disagreeing about who coordinates settle within a gossip round. */
const MAX_REDIRECTS = 3;

/** Most characters of a broker's failure quoted to the API's caller. */
const MAX_QUOTED_FAILURE_LENGTH = 300;

function isAnswer(value: unknown): value is { outcome: string } {
  return typeof value === "object" && value !== null && typeof (value as { outcome?: unknown }).outcome === "string";
}

/** See the module comment. */
export class CoordinatorClient {
  constructor(private readonly options: CoordinatorClientOptions) {}

  /** Sends `request` to the coordinator and returns its answer (never `not-coordinator`). */
  async send<T extends CoordinatorRequest>(request: T): Promise<CoordinatorResponses[T["type"]]> {
    const view = this.options.topology.current() ?? (await this.options.topology.refreshedSince());
    if (view === undefined) {
      throw new ServiceError(
        "badGateway",
        "No broker of the cluster has answered the gateway yet, so the coordinator cannot be reached.",
      );
    }
    const members = [...view.configuration.members.entries()]
      .filter(([, member]) => member.state !== "LEFT")
      .map(([brokerId]) => brokerId)
      .sort((left, right) => left - right);
    // Reachable members first, lowest id first: the coordinator is the lowest-id member that runs.
    const candidates = [
      ...members.filter((id) => view.reachable.has(id)),
      ...members.filter((id) => !view.reachable.has(id)),
    ];
    const tried = new Set<number>();
    let redirects = 0;
    let timedOut: number | null = null;
    /** The first broker that received the request and failed it, and why. */
    let failed: { brokerId: number; reason: string } | null = null;
    // Bounded: each member is tried at most once.
    for (let position = 0; position < candidates.length; position += 1) {
      const brokerId = candidates[position] as number;
      if (tried.has(brokerId)) continue;
      tried.add(brokerId);
      const address = view.addresses.get(brokerId);
      if (address === undefined) continue;
      let answer: unknown;
      try {
        answer = await this.options.client.request(address, request, { timeoutMs: this.options.requestTimeoutMs });
      } catch (error) {
        if (error instanceof TransportTimeoutError) {
          timedOut = brokerId;
          break;
        }
        if (error instanceof PeerUnreachableError || error instanceof TransportClosedError) continue;
        if (error instanceof BackpressureError) {
          throw new ServiceError(
            "unavailable",
            "The gateway has as many cluster management requests in flight as it allows; retry later.",
            { headers: { "retry-after": String(RETRY_AFTER_SECONDS) } },
          );
        }
        if (error instanceof RemoteError && error.code === "overloaded") {
          // Refused before it was handled: nothing happened, and the next broker would only name this one again.
          throw new ServiceError("unavailable", `The coordinator (broker ${brokerId}) is overloaded; retry later.`, {
            headers: { "retry-after": String(RETRY_AFTER_SECONDS) },
          });
        }
        this.options.logger.warn({ err: error, brokerId }, "a broker failed a management request");
        if (error instanceof RemoteError && error.code === "handler-failed" && failed === null) {
          failed = { brokerId, reason: error.remoteMessage.slice(0, MAX_QUOTED_FAILURE_LENGTH) };
        }
        continue;
      }
      if (!isAnswer(answer)) {
        this.options.logger.warn({ brokerId }, "malformed answer to a management request ignored");
        continue;
      }
      if (answer.outcome === "not-coordinator") {
        const coordinatorId = (answer as unknown as { coordinatorId: unknown }).coordinatorId;
        if (typeof coordinatorId === "number" && redirects < MAX_REDIRECTS && !tried.has(coordinatorId)) {
          redirects += 1;
          candidates.splice(position + 1, 0, coordinatorId);
        }
        continue;
      }
      return answer as CoordinatorResponses[T["type"]];
    }
    if (timedOut !== null) {
      throw new ServiceError(
        "gatewayTimeout",
        `The coordinator (broker ${timedOut}) did not answer within ${this.options.requestTimeoutMs} ms; check GET /actuator/cluster before you retry.`,
      );
    }
    if (failed !== null) {
      throw new ServiceError(
        "badGateway",
        `Broker ${failed.brokerId} received the request and failed it (${failed.reason}), and no other broker answered as coordinator; check GET /actuator/cluster before you retry.`,
      );
    }
    throw new ServiceError(
      "badGateway",
      `The coordinator could not be reached: none of the brokers ${candidates.join(", ")} answered as coordinator.`,
    );
  }
}
