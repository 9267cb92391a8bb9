/** Public surface of the cluster transport: framed msgpack messages and requests between nodes over TCP. */
export type { BackoffOptions } from "./backoff.js";
export { backoffDelayMs } from "./backoff.js";
export { ClusterCredentials, HANDSHAKE_PROOF_BYTES } from "./cluster-credentials.js";
export type {
  ClusterTransportOptions,
  HandshakeStatistics,
  MessageHandler,
  RequestHandler,
  RequestSender,
  TransportStatistics,
} from "./cluster-transport.js";
export {
  ClusterTransport,
  DEFAULT_MAX_INBOUND_CONNECTIONS,
  DEFAULT_MAX_INBOUND_IN_FLIGHT_REQUESTS,
  DEFAULT_MAX_UNAUTHENTICATED_CONNECTIONS,
  DEFAULT_MAX_UNAUTHENTICATED_CONNECTIONS_PER_ADDRESS,
  DEFAULT_RETAINED_REGION_BYTES,
} from "./cluster-transport.js";
export type {
  AcceptedEnvelope,
  AuthenticateEnvelope,
  ChallengeEnvelope,
  Envelope,
  ErrorEnvelope,
  ForeignHandshakeEnvelope,
  HandshakeEnvelope,
  HandshakeRole,
  MessageEnvelope,
  NodeId,
  PeerAddress,
  RefusedEnvelope,
  RequestEnvelope,
  ResponseEnvelope,
} from "./envelope.js";
export { describeAddress, HANDSHAKE_NONCE_BYTES, PROTOCOL_VERSION, parseEnvelope } from "./envelope.js";
export type { HandshakeFailureReason, RemoteErrorCode } from "./errors.js";
export {
  BackpressureError,
  FrameTooLargeError,
  HandshakeError,
  PeerUnreachableError,
  ProtocolError,
  RemoteError,
  TransportClosedError,
  TransportError,
  TransportTimeoutError,
} from "./errors.js";
export type { DecodedFrame, FrameDecoderOptions } from "./framing.js";
export { DEFAULT_MAX_FRAME_BYTES, encodeFrame, FRAME_HEADER_BYTES, FrameDecoder } from "./framing.js";
export type { ConnectorIdentity, HandshakeTranscript } from "./handshake.js";
export {
  acceptorProof,
  connectorProof,
  MAX_UNAUTHENTICATED_FRAME_BYTES,
  verifyAcceptorProof,
  verifyConnectorProof,
} from "./handshake.js";
export type { ConnectionOptions, PeerStatistics } from "./options.js";
export { DEFAULT_CONNECTION_OPTIONS } from "./options.js";
export type { LinkState } from "./outbound-link.js";
export { RefusalLog } from "./refusal-log.js";
export type { TransportClientOptions } from "./transport-client.js";
export { DEFAULT_MAX_CONNECTIONS, TransportClient } from "./transport-client.js";
