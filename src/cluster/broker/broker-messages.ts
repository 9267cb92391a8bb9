/**
 * One-way messages between brokers on the cluster transport: Raft messages routed by partition id, and gossip of
 * the cluster configuration and of broker addresses. Received messages are checked before use: a peer is another
 * broker, but a malformed message must never crash the Raft core or the configuration.
 */
import { decodedCheckpointId, isTimestamp } from "../engine/index.js";
import { type Message, malformedMessageReason, RAFT_MESSAGE_TYPES } from "../raft/index.js";
import type { ClusterChangeCommand, ParsedBrokerRequest } from "./protocol.js";

/** Where a broker can be reached, with the start time of the broker process that advertised it. */
export interface GossipedAddress {
  readonly nodeId: number;
  readonly host: string;
  readonly port: number;
  /**
   * Milliseconds since the epoch when that broker started; a higher incarnation of the same broker replaces an
   * older address (a restarted broker may listen elsewhere).
   */
  readonly incarnation: number;
}

/** A Raft message for the replica of `partitionId` on the receiving broker. */
export interface RaftEnvelope {
  readonly type: "raft";
  readonly partitionId: number;
  readonly message: Message;
}

/**
 * The sender's cluster configuration (as `encodeConfiguration` writes it), the addresses it knows, and its wall clock
 * when it sent them (see cluster-clock.ts; brokers of earlier versions send none).
 */
export interface GossipEnvelope {
  readonly type: "gossip";
  readonly configuration: string;
  readonly brokers: readonly GossipedAddress[];
  readonly sentAtMs?: number;
}

/** Every one-way message between brokers. */
export type BrokerMessage = RaftEnvelope | GossipEnvelope;

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function isNonNegativeInteger(value: unknown): value is number {
  return Number.isSafeInteger(value) && (value as number) >= 0;
}

/** Whether `value` is a well-formed gossiped address. */
export function isGossipedAddress(value: unknown): value is GossipedAddress {
  return (
    isRecord(value) &&
    isNonNegativeInteger(value.nodeId) &&
    typeof value.host === "string" &&
    value.host.length > 0 &&
    isNonNegativeInteger(value.port) &&
    (value.port as number) <= 65_535 &&
    isNonNegativeInteger(value.incarnation)
  );
}

/** Longest part of a string a peer sent that a description quotes: descriptions go to the log. */
const MAX_QUOTED_CHARACTERS = 64;

/** A value a peer sent, described in a bounded number of characters. */
function quoted(value: unknown): string {
  if (typeof value === "string") {
    const quotation = JSON.stringify(value.slice(0, MAX_QUOTED_CHARACTERS));
    return value.length > MAX_QUOTED_CHARACTERS ? `${quotation}… (${value.length} characters)` : quotation;
  }
  if (typeof value === "number" || typeof value === "boolean" || value === null || value === undefined) {
    return String(value);
  }
  return Array.isArray(value) ? "an array" : `a value of type ${typeof value}`;
}

/**
 * Checks the envelope of a message from broker `from` to broker `self`; returns it typed, or a description of what
 * is wrong. The Raft message's header is checked (sender, recipient, term, type), and every field its type has
 * (`malformedMessageReason`), so that a malformed message from a peer holding the secret never reaches the core.
 */
export function parseBrokerMessage(value: unknown, from: number, self: number): BrokerMessage | string {
  if (!isRecord(value)) return "not an object";
  if (value.type === "raft") {
    const message = value.message;
    if (!isNonNegativeInteger(value.partitionId)) return "raft message without a partition id";
    if (!isRecord(message) || typeof message.type !== "string" || !RAFT_MESSAGE_TYPES.has(message.type)) {
      return "raft message of unknown type";
    }
    if (message.from !== from) return `raft message claims to be from ${quoted(message.from)} but came from ${from}`;
    if (message.to !== self) return `raft message for ${quoted(message.to)} delivered to ${self}`;
    if (!isNonNegativeInteger(message.term)) return "raft message without a term";
    const malformed = malformedMessageReason(message as Record<string, unknown> & { readonly term: number });
    if (malformed !== null) return `malformed raft message (${malformed})`;
    return { type: "raft", partitionId: value.partitionId, message: message as unknown as Message };
  }
  if (value.type === "gossip") {
    if (typeof value.configuration !== "string") return "gossip without a configuration";
    if (!Array.isArray(value.brokers) || !value.brokers.every(isGossipedAddress)) return "gossip with bad addresses";
    const { sentAtMs } = value;
    // A clock that is no record's timestamp would make the messages' times unusable (see cluster-clock.ts).
    if (sentAtMs !== undefined && !isTimestamp(sentAtMs)) {
      return `gossip sent at ${quoted(sentAtMs)}`;
    }
    return {
      type: "gossip",
      configuration: value.configuration,
      brokers: value.brokers,
      ...(sentAtMs === undefined ? {} : { sentAtMs }),
    };
  }
  return `unknown message type ${quoted(value.type)}`;
}

/** Checks a request from a gateway or a broker; returns it typed, or a description of what is wrong. */
export function parseBrokerRequest(value: unknown): ParsedBrokerRequest | string {
  if (!isRecord(value)) return "the request is not an object";
  switch (value.type) {
    case "describe":
      return { type: "describe" };
    case "publish-message": {
      if (!isNonNegativeInteger(value.partitionId)) return "publish-message needs an integer partitionId";
      const message = value.message;
      if (!isRecord(message)) return "publish-message needs a message object";
      const { name, correlationKey, timeToLiveMs, messageId, variables, tenantId } = message;
      if (typeof name !== "string" || typeof correlationKey !== "string" || typeof tenantId !== "string") {
        return "message name, correlationKey and tenantId must be strings";
      }
      if (typeof timeToLiveMs !== "number") return "message timeToLiveMs must be a number";
      if (messageId !== undefined && messageId !== null && typeof messageId !== "string") {
        return "message messageId must be a string when present";
      }
      if (!isRecord(variables)) return "message variables must be an object";
      return {
        type: "publish-message",
        partitionId: value.partitionId,
        message: {
          name,
          correlationKey,
          timeToLiveMs,
          ...(typeof messageId === "string" ? { messageId } : {}),
          variables,
          tenantId,
        },
      };
    }
    case "get-message":
      if (!isNonNegativeInteger(value.partitionId)) return "get-message needs an integer partitionId";
      if (typeof value.key !== "string") return "get-message needs a string key";
      return { type: "get-message", partitionId: value.partitionId, key: value.key };
    case "cluster-change": {
      if (typeof value.dryRun !== "boolean") return "cluster-change needs a boolean dryRun";
      const command = parseClusterChangeCommand(value.command);
      if (typeof command === "string") return command;
      return { type: "cluster-change", command, dryRun: value.dryRun };
    }
    case "cluster-cancel":
      if (!isNonNegativeInteger(value.changeId)) return "cluster-cancel needs an integer changeId";
      return { type: "cluster-cancel", changeId: value.changeId };
    case "cluster-status":
      return { type: "cluster-status" };
    case "backup-list":
      if (value.summary !== undefined && typeof value.summary !== "boolean") return "summary must be a boolean";
      return value.summary === true ? { type: "backup-list", summary: true } : { type: "backup-list" };
    case "backup-take":
    case "backup-status":
    case "backup-delete": {
      // Parsed to a bigint, whichever of its two encodings it came in.
      const backupId = decodedCheckpointId(value.backupId);
      if (backupId === null) return `${value.type} needs an integer backupId from 0 to 2^63 − 1`;
      return { type: value.type, backupId };
    }
    default:
      return `unknown request type ${quoted(value.type)}`;
  }
}

/**
 * Checks the shape of a cluster change command from a gateway; the bodies of `brokers` and `patch` are checked by the
 * coordinator's planner, which names what is wrong in its answer.
 */
function parseClusterChangeCommand(value: unknown): ClusterChangeCommand | string {
  if (!isRecord(value)) return "cluster-change needs a command object";
  const ids = (...names: string[]): string | null => {
    for (const name of names) {
      if (!isNonNegativeInteger(value[name])) return `cluster-change ${String(value.kind)} needs an integer ${name}`;
    }
    return null;
  };
  switch (value.kind) {
    case "brokers": {
      if (typeof value.force !== "boolean") return "cluster-change brokers needs a boolean force";
      const replicationFactor = value.replicationFactor;
      if (replicationFactor !== undefined && !Number.isSafeInteger(replicationFactor)) {
        return "cluster-change brokers: replicationFactor must be an integer";
      }
      return {
        kind: "brokers",
        body: value.body,
        force: value.force,
        ...(replicationFactor === undefined ? {} : { replicationFactor: replicationFactor as number }),
      };
    }
    case "patch":
      if (typeof value.force !== "boolean") return "cluster-change patch needs a boolean force";
      return { kind: "patch", body: value.body, force: value.force };
    case "add-broker":
    case "remove-broker": {
      const problem = ids("brokerId");
      return problem ?? { kind: value.kind, brokerId: value.brokerId as number };
    }
    case "join": {
      const problem = ids("brokerId", "partitionId", "priority");
      return (
        problem ?? {
          kind: "join",
          brokerId: value.brokerId as number,
          partitionId: value.partitionId as number,
          priority: value.priority as number,
        }
      );
    }
    case "leave": {
      const problem = ids("brokerId", "partitionId");
      return problem ?? { kind: "leave", brokerId: value.brokerId as number, partitionId: value.partitionId as number };
    }
    default:
      return `unknown cluster change ${quoted(value.kind)}`;
  }
}
