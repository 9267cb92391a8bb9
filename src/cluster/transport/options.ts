/** Limits and timings shared by the cluster transport and the transport client, with their defaults. */
import { DEFAULT_MAX_FRAME_BYTES } from "./framing.js";

/** Limits and timings of outbound connections (one per peer or per address). */
export interface ConnectionOptions {
  /** Largest frame body accepted or sent; a larger incoming frame closes the connection. */
  readonly maxFrameBytes: number;
  /** Time allowed for the TCP connect plus the handshake answer before the attempt counts as failed. */
  readonly connectTimeoutMs: number;
  /** Reconnection delay ceiling after the first failure (exponential growth, jittered). */
  readonly initialBackoffMs: number;
  /** Reconnection delay ceiling after many failures. */
  readonly maxBackoffMs: number;
  /** Frames (messages and requests) waiting for the connection, per peer; beyond it messages are dropped. */
  readonly maxQueuedFrames: number;
  /** Bytes of frames waiting for the connection, per peer; beyond it messages are dropped. */
  readonly maxQueuedBytes: number;
  /** Requests sent or queued but not yet answered, per peer; beyond it requests fail with a BackpressureError. */
  readonly maxInFlightRequests: number;
  /** How long an open connection may carry nothing back before it sends a ping. */
  readonly pingIntervalMs: number;
  /**
   * How long after a ping left for the kernel the connection may still carry nothing back; then it is dropped and
   * made again (see outbound-link.ts).
   */
  readonly unansweredPingTimeoutMs: number;
}

/** Defaults of ConnectionOptions, sized for a handful of brokers on one network. */
export const DEFAULT_CONNECTION_OPTIONS: ConnectionOptions = {
  maxFrameBytes: DEFAULT_MAX_FRAME_BYTES,
  connectTimeoutMs: 5_000,
  initialBackoffMs: 50,
  maxBackoffMs: 2_000,
  maxQueuedFrames: 4_096,
  maxQueuedBytes: 64 * 1024 * 1024,
  maxInFlightRequests: 1_024,
  pingIntervalMs: 1_000,
  unansweredPingTimeoutMs: 5_000,
};

/** Counters of the traffic with one peer (or one client address), for metrics. */
export interface PeerStatistics {
  /** Frames written to the peer (messages, requests, responses, errors; handshakes excluded). */
  framesSent: number;
  /** Bytes of those frames, headers included. */
  bytesSent: number;
  /** Frames received from the peer (handshakes excluded). */
  framesReceived: number;
  /** Bytes of those frames, headers included. */
  bytesReceived: number;
  /** Messages and requests refused locally: queue full, no address known, or discarded by `close()`. */
  framesDropped: number;
}

/** A zeroed statistics record. */
export function emptyStatistics(): PeerStatistics {
  return { framesSent: 0, bytesSent: 0, framesReceived: 0, bytesReceived: 0, framesDropped: 0 };
}

/** Validates option values; throws an Error naming the first invalid one. */
export function validateConnectionOptions(options: ConnectionOptions): void {
  for (const [name, value] of Object.entries(options)) {
    if (typeof value === "number" && (!Number.isSafeInteger(value) || value < 1)) {
      throw new Error(`transport option ${name} must be a positive integer, got ${value}`);
    }
  }
  if (options.maxBackoffMs < options.initialBackoffMs) {
    throw new Error("transport option maxBackoffMs must be at least initialBackoffMs");
  }
}

/** Drops keys whose value is undefined, so that spreading the result does not override defaults with undefined. */
export function definedOnly<T extends object>(value: T): Partial<T> {
  return Object.fromEntries(Object.entries(value).filter(([, entry]) => entry !== undefined)) as Partial<T>;
}
