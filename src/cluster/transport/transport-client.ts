/**
 * Requests to nodes from callers that are not nodes themselves (the gateway). A client has no node id: it
 * handshakes as a client and reaches nodes by address, keeping one connection per address with the same reuse,
 * reconnect and bounding rules as the cluster transport. When a connection already has `maxInFlightRequests`
 * outstanding, a new request fails at once with a BackpressureError, so the gateway can answer 503 instead of
 * queueing without bound. Like a node, a client proves in every handshake that it holds the cluster secret.
 */
import type { Logger } from "pino";
import type { ClusterCredentials } from "./cluster-credentials.js";
import type { PeerAddress } from "./envelope.js";
import { describeAddress } from "./envelope.js";
import { BackpressureError, PeerUnreachableError, TransportClosedError } from "./errors.js";
import type { ConnectionOptions, PeerStatistics } from "./options.js";
import { DEFAULT_CONNECTION_OPTIONS, definedOnly, emptyStatistics, validateConnectionOptions } from "./options.js";
import { OutboundLink } from "./outbound-link.js";

/** Options of a TransportClient; the connection limits default to DEFAULT_CONNECTION_OPTIONS. */
export interface TransportClientOptions extends Partial<ConnectionOptions> {
  /** The cluster's credentials, proving in every handshake that this client belongs to the cluster. */
  readonly credentials: ClusterCredentials;
  /** Where failed handshakes are reported (once per address and reason until one succeeds); none: nowhere. */
  readonly logger?: Logger;
  /** Distinct addresses the client keeps connections to; a request to one more fails with a BackpressureError. */
  readonly maxConnections?: number;
  /** Jitter source in [0, 1) for reconnection backoff (defaults to Math.random). */
  readonly random?: () => number;
}

/** Default of TransportClientOptions.maxConnections. */
export const DEFAULT_MAX_CONNECTIONS = 256;

/** A client of node transports; see the module comment. */
export class TransportClient<TRequest = unknown, TResponse = unknown> {
  private readonly options: ConnectionOptions;
  private readonly credentials: ClusterCredentials;
  private readonly logger: Logger | undefined;
  private readonly maxConnections: number;
  private readonly random: () => number;
  private readonly links = new Map<string, OutboundLink>();
  private readonly addressStatistics = new Map<string, PeerStatistics>();
  private closed = false;

  constructor(settings: TransportClientOptions) {
    const { credentials, logger, maxConnections, random, ...limits } = settings;
    this.options = { ...DEFAULT_CONNECTION_OPTIONS, ...definedOnly(limits) };
    validateConnectionOptions(this.options);
    this.credentials = credentials;
    this.logger = logger;
    this.maxConnections = maxConnections ?? DEFAULT_MAX_CONNECTIONS;
    if (!Number.isSafeInteger(this.maxConnections) || this.maxConnections < 1) {
      throw new Error("transport option maxConnections must be a positive integer");
    }
    this.random = random ?? Math.random;
  }

  /**
   * Sends a request to the node at `address` and resolves with its response. Rejects with BackpressureError
   * (too many requests in flight on that connection, or too many connections), TransportTimeoutError,
   * PeerUnreachableError, RemoteError, FrameTooLargeError or TransportClosedError.
   */
  request(address: PeerAddress, request: TRequest, options: { readonly timeoutMs: number }): Promise<TResponse> {
    if (this.closed) {
      return Promise.reject(new TransportClosedError());
    }
    const key = describeAddress(address);
    let link = this.links.get(key);
    if (link === undefined) {
      if (this.links.size >= this.maxConnections) {
        return Promise.reject(new BackpressureError(key, `${this.maxConnections} connections open`));
      }
      const statistics = emptyStatistics();
      this.addressStatistics.set(key, statistics);
      link = new OutboundLink({
        target: key,
        address,
        identity: { role: "client" },
        credentials: this.credentials,
        options: this.options,
        statistics,
        random: this.random,
        logger: this.logger,
      });
      this.links.set(key, link);
    }
    return link.request(request, options.timeoutMs) as Promise<TResponse>;
  }

  /**
   * Closes the connection to one address (e.g. a broker that left the cluster) and stops reconnecting to it; its
   * outstanding requests are rejected with PeerUnreachableError.
   */
  forget(address: PeerAddress): void {
    const key = describeAddress(address);
    this.links.get(key)?.close((sent) => new PeerUnreachableError(key, "forgotten by the client", sent));
    this.links.delete(key);
    this.addressStatistics.delete(key);
  }

  /** A snapshot of the traffic counters per address ("host:port"). */
  statistics(): ReadonlyMap<string, PeerStatistics> {
    const snapshot = new Map<string, PeerStatistics>();
    for (const [key, statistics] of this.addressStatistics) {
      snapshot.set(key, { ...statistics });
    }
    return snapshot;
  }

  /** Closes every connection; outstanding requests are rejected with TransportClosedError. */
  async close(): Promise<void> {
    this.closed = true;
    for (const link of this.links.values()) {
      link.close();
    }
    this.links.clear();
  }
}
