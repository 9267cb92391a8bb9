/** Public surface of the cluster transport: framed msgpack messages and requests between nodes over TCP. */
export type { BackoffOptions } from "./backoff.js";
export { backoffDelayMs } from "./backoff.js";
export type {
  ClusterTransportOptions,
  MessageHandler,
  RequestHandler,
  RequestSender,
  TransportStatistics,
} from "./cluster-transport.js";
export {
  ClusterTransport,
  DEFAULT_MAX_INBOUND_CONNECTIONS,
  DEFAULT_MAX_INBOUND_IN_FLIGHT_REQUESTS,
} from "./cluster-transport.js";
export type {
  Envelope,
  ErrorEnvelope,
  HandshakeEnvelope,
  HandshakeRole,
  MessageEnvelope,
  NodeId,
  PeerAddress,
  RequestEnvelope,
  ResponseEnvelope,
} from "./envelope.js";
export { describeAddress, PROTOCOL_VERSION, parseEnvelope } from "./envelope.js";
export type { RemoteErrorCode } from "./errors.js";
export {
  BackpressureError,
  FrameTooLargeError,
  PeerUnreachableError,
  ProtocolError,
  RemoteError,
  TransportClosedError,
  TransportError,
  TransportTimeoutError,
} from "./errors.js";
export type { DecodedFrame, FrameDecoderOptions } from "./framing.js";
export { DEFAULT_MAX_FRAME_BYTES, encodeFrame, FRAME_HEADER_BYTES, FrameDecoder } from "./framing.js";
export type { ConnectionOptions, PeerStatistics } from "./options.js";
export { DEFAULT_CONNECTION_OPTIONS } from "./options.js";
export type { LinkState } from "./outbound-link.js";
export type { TransportClientOptions } from "./transport-client.js";
export { DEFAULT_MAX_CONNECTIONS, TransportClient } from "./transport-client.js";
