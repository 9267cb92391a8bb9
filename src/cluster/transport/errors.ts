/**
 * Typed failures of the cluster transport. Callers branch on the class (`instanceof`), never on message text:
 * the Raft layer ignores most of them (it tolerates loss), the gateway maps them to HTTP answers (a
 * BackpressureError becomes 503, a PeerUnreachableError a retry on another broker).
 */

/** Base class of every error the transport raises, so callers can tell transport failures from their own. */
export class TransportError extends Error {
  override readonly name: string = "TransportError";
}

/** No response arrived within the request's `timeoutMs`. The request may or may not have been processed. */
export class TransportTimeoutError extends TransportError {
  override readonly name = "TransportTimeoutError";
  constructor(
    readonly target: string,
    readonly timeoutMs: number,
  ) {
    super(`request to ${target} timed out after ${timeoutMs} ms`);
  }
}

/**
 * The target could not be reached: no address is known, the connection attempt failed, or the connection broke
 * while the request was outstanding (in which case it may or may not have been processed).
 */
export class PeerUnreachableError extends TransportError {
  override readonly name = "PeerUnreachableError";
  constructor(
    readonly target: string,
    readonly reason: string,
    /**
     * Whether the request had been handed to the connection before it broke: the peer may then have processed it,
     * so a caller must not repeat a request that is not idempotent as if it had never been sent.
     */
    readonly requestSent = false,
  ) {
    super(`${target} is unreachable: ${reason}`);
  }
}

/** Why the remote side answered a request with an error instead of a response. */
export type RemoteErrorCode = "handler-failed" | "no-handler" | "overloaded";

/** The remote side received the request but answered with an error (its handler threw, or it was overloaded). */
export class RemoteError extends TransportError {
  override readonly name = "RemoteError";
  constructor(
    readonly target: string,
    readonly code: RemoteErrorCode,
    readonly remoteMessage: string,
  ) {
    super(`${target} answered with an error (${code}): ${remoteMessage}`);
  }
}

/** A local bound (queued frames, queued bytes or in-flight requests) is reached; the request was not sent. */
export class BackpressureError extends TransportError {
  override readonly name = "BackpressureError";
  constructor(
    readonly target: string,
    readonly limit: string,
  ) {
    super(`backpressure towards ${target}: ${limit}`);
  }
}

/** The transport (or client) was closed while the request was outstanding, or is used after `close()`. */
export class TransportClosedError extends TransportError {
  override readonly name = "TransportClosedError";
  constructor() {
    super("the transport is closed");
  }
}

/** The other side broke the wire protocol (bad handshake, malformed frame, unexpected envelope). */
export class ProtocolError extends TransportError {
  override readonly name: string = "ProtocolError";
}

/** A frame's body is not msgpack the protocol can decode within its bounds (see msgpack-bounds.ts). */
export class MalformedFrameError extends ProtocolError {
  override readonly name = "MalformedFrameError";
}

/** A frame is larger than the configured `maxFrameBytes`; the connection that carried it is closed. */
export class FrameTooLargeError extends ProtocolError {
  override readonly name = "FrameTooLargeError";
  constructor(
    readonly frameBytes: number,
    readonly maxFrameBytes: number,
  ) {
    super(`frame of ${frameBytes} bytes exceeds the maximum of ${maxFrameBytes} bytes`);
  }
}

/**
 * Why a connection's handshake failed; stable names, used in errors, in log lines and in the `refused` envelope the
 * accepting side sends before it closes the connection.
 * - `other-cluster`: the other side carries another cluster id (another cluster, or another cluster secret).
 * - `authentication-failed`: its proof does not match: it does not know this cluster's secret.
 * - `protocol-version`: it speaks another version of the wire protocol.
 * - `unexpected-node`: the connection reached another node than the address book names.
 * - `malformed`: it broke the handshake's rules (wrong envelope, out of order), or sent a frame too large or not
 *   decodable before it authenticated.
 */
export type HandshakeFailureReason =
  | "other-cluster"
  | "authentication-failed"
  | "protocol-version"
  | "unexpected-node"
  | "malformed";

/** A connection's handshake failed: the other side is not a member of this cluster, or not the node expected. */
export class HandshakeError extends ProtocolError {
  override readonly name = "HandshakeError";
  constructor(
    readonly reason: HandshakeFailureReason,
    message: string,
  ) {
    super(message);
  }
}
