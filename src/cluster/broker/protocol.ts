/**
 * The requests a gateway sends to a broker over the cluster transport (connecting as a client), and the answers.
 * This file is the contract between `cluster/broker` and `cluster/gateway`; both import it and nothing else of
 * each other. Every value is msgpack-safe (plain objects, strings, numbers, booleans, null).
 */

/** A message to publish, as the gateway validated it; the leader adds the publication time when proposing. */
export interface PublishMessageCommand {
  name: string;
  /** Empty when the client sent none. */
  correlationKey: string;
  timeToLiveMs: number;
  messageId?: string;
  variables: Record<string, unknown>;
  tenantId: string;
}

/** A buffered message as a broker reports it. */
export interface MessageView {
  /** The message key as a decimal string (it names its partition in its high bits). */
  key: string;
  partitionId: number;
  name: string;
  correlationKey: string;
  timeToLiveMs: number;
  messageId?: string;
  variables: Record<string, unknown>;
  tenantId: string;
  /** When the leader accepted it, as an ISO-8601 instant. */
  publishedAt: string;
  /** When it expires, as an ISO-8601 instant. */
  expiresAt: string;
}

/** Role of one replica, as its own Raft node reports it. */
export type ReplicaRole = "leader" | "follower" | "inactive";

/** Health of one replica from its own checks: role known, storage writable, not far behind its leader. */
export type ReplicaHealth = "healthy" | "unhealthy" | "dead";

/** What a broker says about one partition replica it hosts. */
export interface ReplicaReport {
  partitionId: number;
  role: ReplicaRole;
  health: ReplicaHealth;
  term: number;
  commitIndex: number;
  appliedIndex: number;
  /** The leader this replica currently follows (its own id when leading), or null when none is known. */
  leaderId: number | null;
  /** Entries held in the replica's log after its latest snapshot (absent from brokers that do not report it). */
  logSizeEntries?: number;
}

/** Where a broker can be reached on the cluster transport. */
export interface BrokerAddress {
  nodeId: number;
  host: string;
  port: number;
}

/** What a broker knows about another broker's liveness. */
export interface BrokerLiveness {
  nodeId: number;
  /** Whether this broker heard from it recently (any message or gossip). */
  reachable: boolean;
  /** When this broker last heard from it, as an ISO-8601 instant, or null when never since it started. */
  lastContactAt: string | null;
}

/** A broker's answer to `describe`. */
export interface BrokerDescription {
  nodeId: number;
  /** The address this broker advertises. */
  host: string;
  port: number;
  version: string;
  /** The cluster configuration this broker holds, as `encodeConfiguration` (cluster/topology) writes it. */
  configuration: string;
  /** Addresses of every broker this broker knows, itself included. */
  brokers: BrokerAddress[];
  /** The replicas this broker hosts. */
  replicas: ReplicaReport[];
  /** Liveness of every other broker this broker knows (added after the first version; absent from older brokers). */
  liveness?: BrokerLiveness[];
}

/** Requests from a gateway to a broker. */
export type BrokerRequest =
  | { type: "describe" }
  | { type: "publish-message"; partitionId: number; message: PublishMessageCommand }
  | { type: "get-message"; partitionId: number; key: string };

/** Answers shared by requests addressed to a partition. */
export type PartitionRedirect =
  /** This broker's replica is not the leader; retry at `leaderId` when known. */
  | { outcome: "not-leader"; leaderId: number | null }
  /** The partition cannot answer now (not hosted here, no leader yet, overloaded, shutting down). */
  | { outcome: "unavailable"; detail: string };

/** Answer to `publish-message`, sent once the record is committed by a quorum and applied. */
export type PublishMessageResponse =
  | { outcome: "published"; key: string; partitionId: number; tenantId: string }
  | { outcome: "rejected"; reason: "duplicate-message-id" | "invalid-record"; detail: string }
  /**
   * The record is in the partition's log, but this replica stopped (or skipped past it with a snapshot) before it
   * could tell whether a quorum committed it: it may or may not take effect, so it must not be retried blindly.
   * `not-leader` and `unavailable`, by contrast, are only answered when the record is certainly not committed.
   */
  | { outcome: "unknown"; detail: string }
  | PartitionRedirect;

/** Answer to `get-message` (a linearizable read on the partition leader). */
export type GetMessageResponse =
  | { outcome: "found"; message: MessageView }
  | { outcome: "not-found" }
  | PartitionRedirect;

/** The response type of each request type. */
export interface BrokerResponses {
  describe: BrokerDescription;
  "publish-message": PublishMessageResponse;
  "get-message": GetMessageResponse;
}
