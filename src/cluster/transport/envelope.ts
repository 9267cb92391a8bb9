/**
 * The envelopes that travel in frames between two ends of a connection. Every frame carries exactly one envelope.
 *
 * A connection starts with a handshake in each direction: the connecting side says who it is (a node with its id,
 * or a client without one), the accepting side answers with its own node id so the connecting side can check it
 * reached the node its address book promised. After that the connecting side sends messages and requests, and
 * the accepting side answers requests on the same connection (responses never open a connection of their own).
 */
import type { RemoteErrorCode } from "./errors.js";
import { ProtocolError } from "./errors.js";

/** Identifier of a node (broker) in the cluster. */
export type NodeId = number;

/** Where a node listens for transport connections. */
export interface PeerAddress {
  readonly host: string;
  readonly port: number;
}

/** Version of this wire protocol; a handshake with another version is refused. */
export const PROTOCOL_VERSION = 1;

/** Whether the connecting side is a cluster node (has a node id) or a client such as the gateway (has none). */
export type HandshakeRole = "node" | "client";

/** First envelope in each direction. `nodeId` is present when `role` is "node". */
export interface HandshakeEnvelope {
  readonly kind: "handshake";
  readonly protocolVersion: number;
  readonly role: HandshakeRole;
  readonly nodeId?: NodeId;
}

/** One-way message; nothing answers it. */
export interface MessageEnvelope<TBody = unknown> {
  readonly kind: "message";
  readonly body: TBody;
}

/** A request; answered by a response or an error carrying the same `correlationId`. */
export interface RequestEnvelope<TBody = unknown> {
  readonly kind: "request";
  readonly correlationId: number;
  readonly body: TBody;
}

/** The successful answer to the request with the same `correlationId`. */
export interface ResponseEnvelope<TBody = unknown> {
  readonly kind: "response";
  readonly correlationId: number;
  readonly body: TBody;
}

/** The failed answer to the request with the same `correlationId`. */
export interface ErrorEnvelope {
  readonly kind: "error";
  readonly correlationId: number;
  readonly code: RemoteErrorCode;
  readonly message: string;
}

/** Any envelope that can appear on the wire. */
export type Envelope = HandshakeEnvelope | MessageEnvelope | RequestEnvelope | ResponseEnvelope | ErrorEnvelope;

const remoteErrorCodes: ReadonlySet<string> = new Set<RemoteErrorCode>(["handler-failed", "no-handler", "overloaded"]);

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function isCorrelationId(value: unknown): value is number {
  return typeof value === "number" && Number.isSafeInteger(value) && value >= 0;
}

/** Checks that a decoded frame is a well-formed envelope; throws a ProtocolError naming what is wrong otherwise. */
export function parseEnvelope(value: unknown): Envelope {
  if (!isRecord(value)) {
    throw new ProtocolError("frame is not an envelope object");
  }
  switch (value.kind) {
    case "handshake": {
      if (typeof value.protocolVersion !== "number") {
        throw new ProtocolError("handshake without a protocol version");
      }
      if (value.role === "node") {
        if (typeof value.nodeId !== "number" || !Number.isSafeInteger(value.nodeId)) {
          throw new ProtocolError("node handshake without an integer node id");
        }
        return { kind: "handshake", protocolVersion: value.protocolVersion, role: "node", nodeId: value.nodeId };
      }
      if (value.role === "client") {
        return { kind: "handshake", protocolVersion: value.protocolVersion, role: "client" };
      }
      throw new ProtocolError("handshake with an unknown role");
    }
    case "message":
      return { kind: "message", body: value.body };
    case "request":
    case "response":
      if (!isCorrelationId(value.correlationId)) {
        throw new ProtocolError(`${value.kind} without a valid correlation id`);
      }
      return { kind: value.kind, correlationId: value.correlationId, body: value.body };
    case "error":
      if (!isCorrelationId(value.correlationId)) {
        throw new ProtocolError("error without a valid correlation id");
      }
      if (typeof value.code !== "string" || !remoteErrorCodes.has(value.code) || typeof value.message !== "string") {
        throw new ProtocolError("error envelope with an invalid code or message");
      }
      return {
        kind: "error",
        correlationId: value.correlationId,
        code: value.code as RemoteErrorCode,
        message: value.message,
      };
    default:
      throw new ProtocolError("envelope with an unknown kind");
  }
}

/** Human-readable name of an address, used in error messages and as the client's connection key. */
export function describeAddress(address: PeerAddress): string {
  return `${address.host}:${address.port}`;
}
