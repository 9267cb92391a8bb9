/**
 * The envelopes that travel in frames between two ends of a connection. Every frame carries exactly one envelope.
 *
 * A connection starts with the handshake of `handshake.ts`: the accepting side sends a `challenge`, the connecting
 * side answers `authenticate` (who it is: a node with its id, or a client without one, its cluster id and its proof
 * of the cluster secret), and the accepting side ends it with `accepted` (its node id, so the connecting side can
 * check it reached the node its address book promised, and its own proof) or `refused`. After that the connecting
 * side sends messages and requests, and the accepting side answers requests on the same connection (responses never
 * open a connection of their own).
 */
import { CLUSTER_ID_PATTERN } from "../../config/cluster-secret.js";
import { HANDSHAKE_PROOF_BYTES } from "./cluster-credentials.js";
import type { HandshakeFailureReason, RemoteErrorCode } from "./errors.js";
import { ProtocolError } from "./errors.js";

/** Identifier of a node (broker) in the cluster. */
export type NodeId = number;

/** Where a node listens for transport connections. */
export interface PeerAddress {
  readonly host: string;
  readonly port: number;
}

/**
 * Version of this wire protocol; a handshake of another version is refused. Version 2 introduced the authenticated
 * handshake; version 1 connections opened with a `handshake` envelope from the connecting side. Version 3 marks
 * frames whose body the receiver keeps (the length's high bit), which version 2 would refuse as too large. Version 4
 * added `ping` and `pong`, which version 3 would close the connection over.
 */
export const PROTOCOL_VERSION = 4;

/** Bytes of the random nonce each side of a handshake contributes. */
export const HANDSHAKE_NONCE_BYTES = 32;

/** Whether the connecting side is a cluster node (has a node id) or a client such as the gateway (has none). */
export type HandshakeRole = "node" | "client";

/** Handshake message 1, accepting → connecting side: a nonce to prove the secret over. */
export interface ChallengeEnvelope {
  readonly kind: "challenge";
  readonly protocolVersion: number;
  readonly clusterId: string;
  readonly nonce: Uint8Array;
}

/** Handshake message 2, connecting → accepting side: who connects, its nonce and its proof. */
export interface AuthenticateEnvelope {
  readonly kind: "authenticate";
  readonly protocolVersion: number;
  readonly clusterId: string;
  readonly role: HandshakeRole;
  /** Present when `role` is "node". */
  readonly nodeId?: NodeId;
  readonly nonce: Uint8Array;
  readonly proof: Uint8Array;
}

/** Handshake message 3, accepting → connecting side, when the proof was right: its node id and its own proof. */
export interface AcceptedEnvelope {
  readonly kind: "accepted";
  readonly nodeId: NodeId;
  readonly proof: Uint8Array;
}

/** Handshake message 3 when the accepting side refuses the connection; the connection ends after it. */
export interface RefusedEnvelope {
  readonly kind: "refused";
  readonly reason: HandshakeFailureReason;
}

/**
 * A handshake envelope of another protocol version (version 1's `handshake`, or a challenge or authentication
 * announcing another version): only its version is read, so the refusal can say which version the other side runs.
 */
export interface ForeignHandshakeEnvelope {
  readonly kind: "foreign-handshake";
  readonly protocolVersion: number;
}

/** Any envelope of the handshake. */
export type HandshakeEnvelope =
  | ChallengeEnvelope
  | AuthenticateEnvelope
  | AcceptedEnvelope
  | RefusedEnvelope
  | ForeignHandshakeEnvelope;

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

/**
 * Connecting side → accepting side on an open connection that has carried nothing back for a while; answered by a
 * `pong` on the same connection, which proves that the link still carries bytes both ways (see outbound-link.ts).
 */
export interface PingEnvelope {
  readonly kind: "ping";
}

/** The answer to a `ping`. */
export interface PongEnvelope {
  readonly kind: "pong";
}

/** Any envelope that can appear on the wire. */
export type Envelope =
  | HandshakeEnvelope
  | MessageEnvelope
  | RequestEnvelope
  | ResponseEnvelope
  | ErrorEnvelope
  | PingEnvelope
  | PongEnvelope;

const remoteErrorCodes: ReadonlySet<string> = new Set<RemoteErrorCode>(["handler-failed", "no-handler", "overloaded"]);

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function isCorrelationId(value: unknown): value is number {
  return typeof value === "number" && Number.isSafeInteger(value) && value >= 0;
}

const refusalReasons: ReadonlySet<string> = new Set<HandshakeFailureReason>([
  "other-cluster",
  "authentication-failed",
  "protocol-version",
  "unexpected-node",
  "malformed",
]);

function isNodeId(value: unknown): value is NodeId {
  return typeof value === "number" && Number.isSafeInteger(value) && value >= 0;
}

function isBytes(value: unknown, length: number): value is Uint8Array {
  return value instanceof Uint8Array && value.length === length;
}

/** A cluster id as the setting allows it; anything else could carry control characters into a log line. */
function isClusterId(value: unknown): value is string {
  return typeof value === "string" && CLUSTER_ID_PATTERN.test(value);
}

function parseChallenge(value: Record<string, unknown>): ChallengeEnvelope {
  if (!isClusterId(value.clusterId) || !isBytes(value.nonce, HANDSHAKE_NONCE_BYTES)) {
    throw new ProtocolError("challenge without a valid cluster id and nonce");
  }
  return { kind: "challenge", protocolVersion: PROTOCOL_VERSION, clusterId: value.clusterId, nonce: value.nonce };
}

function parseAuthenticate(value: Record<string, unknown>): AuthenticateEnvelope {
  if (
    !isClusterId(value.clusterId) ||
    !isBytes(value.nonce, HANDSHAKE_NONCE_BYTES) ||
    !isBytes(value.proof, HANDSHAKE_PROOF_BYTES)
  ) {
    throw new ProtocolError("authentication without a valid cluster id, nonce and proof");
  }
  const common = {
    kind: "authenticate",
    protocolVersion: PROTOCOL_VERSION,
    clusterId: value.clusterId,
    nonce: value.nonce,
    proof: value.proof,
  } as const;
  if (value.role === "node") {
    if (!isNodeId(value.nodeId)) {
      throw new ProtocolError("node authentication without a valid node id");
    }
    return { ...common, role: "node", nodeId: value.nodeId };
  }
  if (value.role === "client") {
    return { ...common, role: "client" };
  }
  throw new ProtocolError("authentication with an unknown role");
}

/** Checks that a decoded frame is a well-formed envelope; throws a ProtocolError naming what is wrong otherwise. */
export function parseEnvelope(value: unknown): Envelope {
  if (!isRecord(value)) {
    throw new ProtocolError("frame is not an envelope object");
  }
  switch (value.kind) {
    case "handshake":
    case "challenge":
    case "authenticate": {
      if (typeof value.protocolVersion !== "number" || !Number.isSafeInteger(value.protocolVersion)) {
        throw new ProtocolError(`${value.kind} without a protocol version`);
      }
      // Another version may lay out everything else differently; its version is all a refusal needs.
      if (value.kind === "handshake" || value.protocolVersion !== PROTOCOL_VERSION) {
        return { kind: "foreign-handshake", protocolVersion: value.protocolVersion };
      }
      return value.kind === "challenge" ? parseChallenge(value) : parseAuthenticate(value);
    }
    case "accepted":
      if (!isNodeId(value.nodeId) || !isBytes(value.proof, HANDSHAKE_PROOF_BYTES)) {
        throw new ProtocolError("acceptance without a valid node id and proof");
      }
      return { kind: "accepted", nodeId: value.nodeId, proof: value.proof };
    case "refused":
      if (typeof value.reason !== "string" || !refusalReasons.has(value.reason)) {
        throw new ProtocolError("refusal with an unknown reason");
      }
      return { kind: "refused", reason: value.reason as HandshakeFailureReason };
    case "message":
      return { kind: "message", body: value.body };
    case "ping":
    case "pong":
      return { kind: value.kind };
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
