/**
 * The challenge-response handshake that opens every transport connection. Both sides prove they know the cluster
 * secret without sending it, over nonces the other side chose, so neither proof can be replayed:
 *
 * 1. accepting → connecting: `challenge` {protocolVersion, clusterId, nonce}. The accepting side speaks first.
 * 2. connecting → accepting: `authenticate` {protocolVersion, clusterId, role, nodeId?, nonce, proof}, where proof is
 *    HMAC(key, connector transcript). The accepting side checks the cluster id, then the proof in constant time.
 * 3. accepting → connecting: `accepted` {nodeId, proof}, proof being HMAC(key, acceptor transcript), which the
 *    connecting side checks before it sends anything else; or `refused` {reason}, and the connection ends.
 *
 * Both transcripts hold the protocol version, the cluster id, both nonces and who connects (role and node id); the
 * accepting side's also holds its own node id. A label says which side a proof comes from, so a proof one side
 * computed can never stand for the other side's.
 *
 * Until the handshake ends, frames are capped at MAX_UNAUTHENTICATED_FRAME_BYTES on both sides (the largest
 * handshake envelope is a few hundred bytes), and the decoder's read memory with them, so a connection that has not
 * proved anything can make a node hold about one kilobyte of buffers besides the socket itself. After it, the
 * connection's normal limits apply. The secret authenticates peers; it does not
 * encrypt or sign the frames that follow.
 */
import { randomBytes } from "node:crypto";
import type { ClusterCredentials } from "./cluster-credentials.js";
import type { NodeId } from "./envelope.js";
import { HANDSHAKE_NONCE_BYTES, PROTOCOL_VERSION } from "./envelope.js";

/** Largest frame either side accepts before the handshake has ended. */
export const MAX_UNAUTHENTICATED_FRAME_BYTES = 1_024;

/** Who opens a connection: a cluster node with its id, or a client such as the gateway. */
export type ConnectorIdentity = { readonly role: "node"; readonly nodeId: NodeId } | { readonly role: "client" };

/** Everything both proofs cover. */
export interface HandshakeTranscript {
  readonly clusterId: string;
  readonly acceptorNonce: Uint8Array;
  readonly connectorNonce: Uint8Array;
  readonly connector: ConnectorIdentity;
}

const CONNECTOR_LABEL = "flowplane cluster handshake: connecting side";
const ACCEPTOR_LABEL = "flowplane cluster handshake: accepting side";

/** A fresh random nonce. */
export function newNonce(): Buffer {
  return randomBytes(HANDSHAKE_NONCE_BYTES);
}

/**
 * The bytes a proof is computed over: each variable-length field is preceded by its length, so no two different
 * transcripts encode to the same bytes.
 */
function encodeTranscript(label: string, transcript: HandshakeTranscript, acceptorNodeId: NodeId | undefined): Buffer {
  if (
    transcript.acceptorNonce.length !== HANDSHAKE_NONCE_BYTES ||
    transcript.connectorNonce.length !== HANDSHAKE_NONCE_BYTES
  ) {
    throw new Error(`invariant violated: handshake nonces have ${HANDSHAKE_NONCE_BYTES} bytes`);
  }
  const number = (value: number): Buffer => {
    const bytes = Buffer.allocUnsafe(8);
    bytes.writeDoubleBE(value, 0);
    return bytes;
  };
  const text = (value: string): Buffer => {
    const bytes = Buffer.from(value, "utf8");
    return Buffer.concat([number(bytes.length), bytes]);
  };
  const { connector } = transcript;
  return Buffer.concat([
    text(label),
    number(PROTOCOL_VERSION),
    text(transcript.clusterId),
    transcript.acceptorNonce,
    transcript.connectorNonce,
    text(connector.role),
    number(connector.role === "node" ? connector.nodeId : -1),
    number(acceptorNodeId ?? -1),
  ]);
}

/** The connecting side's proof (message 2). */
export function connectorProof(credentials: ClusterCredentials, transcript: HandshakeTranscript): Buffer {
  return credentials.prove(encodeTranscript(CONNECTOR_LABEL, transcript, undefined));
}

/** Whether `proof` is the connecting side's proof of `transcript`, compared in constant time. */
export function verifyConnectorProof(
  credentials: ClusterCredentials,
  transcript: HandshakeTranscript,
  proof: Uint8Array,
): boolean {
  return credentials.verify(encodeTranscript(CONNECTOR_LABEL, transcript, undefined), proof);
}

/** The accepting side's proof (message 3), which also covers its own node id. */
export function acceptorProof(
  credentials: ClusterCredentials,
  transcript: HandshakeTranscript,
  acceptorNodeId: NodeId,
): Buffer {
  return credentials.prove(encodeTranscript(ACCEPTOR_LABEL, transcript, acceptorNodeId));
}

/** Whether `proof` is the accepting side's proof of `transcript` and its node id, compared in constant time. */
export function verifyAcceptorProof(
  credentials: ClusterCredentials,
  transcript: HandshakeTranscript,
  acceptorNodeId: NodeId,
  proof: Uint8Array,
): boolean {
  return credentials.verify(encodeTranscript(ACCEPTOR_LABEL, transcript, acceptorNodeId), proof);
}
