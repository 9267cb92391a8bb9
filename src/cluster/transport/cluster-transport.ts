/**
 * The node-to-node transport: one per node. It listens for connections from peers and clients, keeps one lazily
 * opened outbound connection per peer (address book keyed by node id), and offers one-way messages (bounded,
 * lossy: the Raft layer tolerates loss) and request/response with timeouts.
 *
 * Traffic between two nodes uses two connections, one opened by each side: each side sends its messages and
 * requests on its own outbound connection and answers the other side's requests on the connection they came in on.
 */
import type { Server, Socket } from "node:net";
import { createServer } from "node:net";
import type { Envelope, NodeId, PeerAddress } from "./envelope.js";
import { PROTOCOL_VERSION } from "./envelope.js";
import type { RemoteErrorCode } from "./errors.js";
import { PeerUnreachableError, ProtocolError, TransportClosedError } from "./errors.js";
import { FramedConnection } from "./framed-connection.js";
import { encodeFrame } from "./framing.js";
import type { ConnectionOptions, PeerStatistics } from "./options.js";
import { DEFAULT_CONNECTION_OPTIONS, definedOnly, emptyStatistics, validateConnectionOptions } from "./options.js";
import type { LinkState } from "./outbound-link.js";
import { OutboundLink } from "./outbound-link.js";

/** Who sent a request: a peer node, or a client (such as the gateway) that has no node id. */
export type RequestSender =
  | { readonly role: "node"; readonly nodeId: NodeId }
  | { readonly role: "client"; readonly remoteAddress: string };

/** Receives one-way messages from peers. A handler that throws is a bug: the error is rethrown uncaught. */
export type MessageHandler<TMessage> = (from: NodeId, message: TMessage) => void;

/** Answers requests; a rejection (or throw) reaches the caller as a RemoteError carrying the error's message. */
export type RequestHandler<TRequest, TResponse> = (from: RequestSender, request: TRequest) => Promise<TResponse>;

/** Options of a ClusterTransport; the connection limits default to DEFAULT_CONNECTION_OPTIONS. */
export interface ClusterTransportOptions extends Partial<ConnectionOptions> {
  /** This node's id, sent in every handshake. */
  readonly nodeId: NodeId;
  /** Interface to listen on, e.g. "127.0.0.1" or "0.0.0.0". */
  readonly host: string;
  /** Port to listen on; 0 picks a free one (read it back from `listeningAddress()`). */
  readonly port: number;
  /** Requests being handled at once per inbound connection; beyond it the sender gets an "overloaded" error. */
  readonly maxInboundInFlightRequests?: number;
  /** Inbound connections (from peers and clients) kept at once; further ones are closed on accept. */
  readonly maxInboundConnections?: number;
  /** Jitter source in [0, 1) for reconnection backoff (defaults to Math.random). */
  readonly random?: () => number;
}

/** Default of ClusterTransportOptions.maxInboundInFlightRequests. */
export const DEFAULT_MAX_INBOUND_IN_FLIGHT_REQUESTS = 1_024;

/** Default of ClusterTransportOptions.maxInboundConnections. */
export const DEFAULT_MAX_INBOUND_CONNECTIONS = 1_024;

/** Traffic counters of a transport. */
export interface TransportStatistics {
  /** Per peer node, inbound and outbound together (copies; safe to keep). */
  readonly peers: ReadonlyMap<NodeId, PeerStatistics>;
  /** All traffic with clients (connections whose handshake has no node id). */
  readonly clients: PeerStatistics;
  /** Inbound connections closed because they broke the protocol (oversized frame, bad handshake, …). */
  readonly protocolErrors: number;
}

interface InboundState {
  sender: RequestSender | undefined;
  requestsInFlight: number;
  handshakeTimer: NodeJS.Timeout | undefined;
}

/** The per-node transport; see the module comment. */
export class ClusterTransport<TMessage = unknown, TRequest = unknown, TResponse = unknown> {
  private readonly options: ConnectionOptions;
  private readonly maxInboundInFlightRequests: number;
  private readonly maxInboundConnections: number;
  private readonly random: () => number;
  private readonly server: Server;
  private readonly addresses = new Map<NodeId, PeerAddress>();
  private readonly links = new Map<NodeId, OutboundLink>();
  private readonly peerStatistics = new Map<NodeId, PeerStatistics>();
  private readonly clientStatistics = emptyStatistics();
  private readonly inbound = new Set<FramedConnection>();
  private protocolErrors = 0;
  private messageHandler: MessageHandler<TMessage> | undefined;
  private requestHandler: RequestHandler<TRequest, TResponse> | undefined;
  private bound: PeerAddress | undefined;
  private closed = false;

  constructor(private readonly settings: ClusterTransportOptions) {
    const { nodeId, host, port, maxInboundInFlightRequests, maxInboundConnections, random, ...limits } = settings;
    this.options = { ...DEFAULT_CONNECTION_OPTIONS, ...definedOnly(limits) };
    validateConnectionOptions(this.options);
    this.maxInboundInFlightRequests = maxInboundInFlightRequests ?? DEFAULT_MAX_INBOUND_IN_FLIGHT_REQUESTS;
    if (!Number.isSafeInteger(this.maxInboundInFlightRequests) || this.maxInboundInFlightRequests < 1) {
      throw new Error("transport option maxInboundInFlightRequests must be a positive integer");
    }
    this.maxInboundConnections = maxInboundConnections ?? DEFAULT_MAX_INBOUND_CONNECTIONS;
    if (!Number.isSafeInteger(this.maxInboundConnections) || this.maxInboundConnections < 1) {
      throw new Error("transport option maxInboundConnections must be a positive integer");
    }
    this.random = random ?? Math.random;
    this.server = createServer((socket) => this.accept(socket));
  }

  /** This node's id. */
  get nodeId(): NodeId {
    return this.settings.nodeId;
  }

  /** Starts listening; resolves with the bound address (the real port when `port` was 0). */
  listen(): Promise<PeerAddress> {
    if (this.closed) {
      return Promise.reject(new TransportClosedError());
    }
    return new Promise((resolve, reject) => {
      const onError = (error: Error): void => reject(error);
      this.server.once("error", onError);
      this.server.listen({ host: this.settings.host, port: this.settings.port }, () => {
        this.server.off("error", onError);
        const address = this.server.address();
        if (address === null || typeof address === "string") {
          reject(new Error("invariant violated: a TCP server has an address with a port"));
          return;
        }
        this.bound = { host: this.settings.host, port: address.port };
        resolve(this.bound);
      });
    });
  }

  /** The address `listen()` bound; throws before `listen()` resolved. */
  listeningAddress(): PeerAddress {
    if (this.bound === undefined) {
      throw new Error("the transport is not listening yet");
    }
    return this.bound;
  }

  /** Records (or changes) where a peer listens. Changing it re-establishes the connection to the new address. */
  setPeerAddress(nodeId: NodeId, address: PeerAddress): void {
    if (nodeId === this.settings.nodeId) {
      throw new Error(`node ${nodeId} cannot be its own peer`);
    }
    this.addresses.set(nodeId, address);
    this.links.get(nodeId)?.setAddress(address);
  }

  /**
   * Forgets a peer: its connection is closed, its queued messages dropped and its outstanding requests rejected
   * with PeerUnreachableError.
   */
  removePeerAddress(nodeId: NodeId): void {
    this.addresses.delete(nodeId);
    this.links
      .get(nodeId)
      ?.close((sent) => new PeerUnreachableError(`node ${nodeId}`, "removed from the address book", sent));
    this.links.delete(nodeId);
  }

  /** Registers the handler of one-way messages (replaces any previous one). Messages without a handler are dropped. */
  onMessage(handler: MessageHandler<TMessage>): void {
    this.messageHandler = handler;
  }

  /** Registers the handler of requests (replaces any previous one). Without one, callers get a "no-handler" error. */
  onRequest(handler: RequestHandler<TRequest, TResponse>): void {
    this.requestHandler = handler;
  }

  /**
   * Sends a one-way message, fire-and-forget, in order with the other messages and requests to the same peer.
   * Returns false when it was dropped (unknown peer, queue full, transport closed); true means queued, not delivered.
   * Throws FrameTooLargeError when the encoded message exceeds `maxFrameBytes` (a caller bug).
   */
  send(peerId: NodeId, message: TMessage): boolean {
    const link = this.link(peerId);
    if (link === undefined) {
      this.statisticsOf(peerId).framesDropped += 1;
      return false;
    }
    return link.send(message);
  }

  /**
   * Sends a request and resolves with the peer's response. Rejects with TransportTimeoutError,
   * PeerUnreachableError (no address, connection failed or broke), RemoteError (the peer's handler failed),
   * BackpressureError (local bounds reached), FrameTooLargeError or TransportClosedError.
   */
  request(peerId: NodeId, request: TRequest, options: { readonly timeoutMs: number }): Promise<TResponse> {
    if (this.closed) {
      return Promise.reject(new TransportClosedError());
    }
    const link = this.link(peerId);
    if (link === undefined) {
      return Promise.reject(new PeerUnreachableError(`node ${peerId}`, "no address known"));
    }
    return link.request(request, options.timeoutMs) as Promise<TResponse>;
  }

  /** Connection state towards a peer ("absent" when no address is known or nothing was sent yet). */
  connectionState(peerId: NodeId): LinkState | "absent" {
    return this.links.get(peerId)?.state ?? "absent";
  }

  /** A snapshot of the traffic counters. */
  statistics(): TransportStatistics {
    const peers = new Map<NodeId, PeerStatistics>();
    for (const [nodeId, statistics] of this.peerStatistics) {
      peers.set(nodeId, { ...statistics });
    }
    return { peers, clients: { ...this.clientStatistics }, protocolErrors: this.protocolErrors };
  }

  /** Stops everything: outstanding requests rejected with TransportClosedError, connections and server closed. */
  async close(): Promise<void> {
    if (this.closed) {
      return;
    }
    this.closed = true;
    for (const link of this.links.values()) {
      link.close();
    }
    this.links.clear();
    for (const connection of [...this.inbound]) {
      connection.close(undefined);
    }
    if (!this.server.listening) {
      return;
    }
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private statisticsOf(nodeId: NodeId): PeerStatistics {
    let statistics = this.peerStatistics.get(nodeId);
    if (statistics === undefined) {
      statistics = emptyStatistics();
      this.peerStatistics.set(nodeId, statistics);
    }
    return statistics;
  }

  private link(peerId: NodeId): OutboundLink | undefined {
    if (this.closed) {
      return undefined;
    }
    let link = this.links.get(peerId);
    if (link !== undefined) {
      return link;
    }
    const address = this.addresses.get(peerId);
    if (address === undefined) {
      return undefined;
    }
    link = new OutboundLink({
      target: `node ${peerId}`,
      address,
      handshake: { kind: "handshake", protocolVersion: PROTOCOL_VERSION, role: "node", nodeId: this.settings.nodeId },
      expectedNodeId: peerId,
      options: this.options,
      statistics: this.statisticsOf(peerId),
      random: this.random,
    });
    this.links.set(peerId, link);
    return link;
  }

  private accept(socket: Socket): void {
    if (this.closed || this.inbound.size >= this.maxInboundConnections) {
      socket.destroy();
      return;
    }
    const state: InboundState = { sender: undefined, requestsInFlight: 0, handshakeTimer: undefined };
    const remoteAddress = `${socket.remoteAddress ?? "unknown"}:${socket.remotePort ?? 0}`;
    const connection: FramedConnection = new FramedConnection(socket, {
      maxFrameBytes: this.options.maxFrameBytes,
      // An inbound connection carries answers to the requests that came over it, which someone is waiting for.
      flushPriority: "answers",
      onEnvelope: (envelope, frameBytes) => this.receive(connection, state, remoteAddress, envelope, frameBytes),
      onClose: (error) => {
        clearTimeout(state.handshakeTimer);
        this.inbound.delete(connection);
        if (error instanceof ProtocolError) {
          this.protocolErrors += 1;
        }
      },
    });
    this.inbound.add(connection);
    state.handshakeTimer = setTimeout(() => {
      connection.close(new ProtocolError("no handshake in time"));
    }, this.options.connectTimeoutMs);
  }

  private inboundStatistics(sender: RequestSender): PeerStatistics {
    return sender.role === "node" ? this.statisticsOf(sender.nodeId) : this.clientStatistics;
  }

  private receive(
    connection: FramedConnection,
    state: InboundState,
    remoteAddress: string,
    envelope: Envelope,
    frameBytes: number,
  ): void {
    const sender = state.sender;
    if (sender === undefined) {
      if (envelope.kind !== "handshake" || envelope.protocolVersion !== PROTOCOL_VERSION) {
        connection.close(new ProtocolError("expected a handshake of this protocol version as the first frame"));
        return;
      }
      clearTimeout(state.handshakeTimer);
      state.handshakeTimer = undefined;
      state.sender =
        envelope.role === "node" && envelope.nodeId !== undefined
          ? { role: "node", nodeId: envelope.nodeId }
          : { role: "client", remoteAddress };
      connection.write(
        encodeFrame(
          { kind: "handshake", protocolVersion: PROTOCOL_VERSION, role: "node", nodeId: this.settings.nodeId },
          this.options.maxFrameBytes,
        ),
      );
      return;
    }
    const statistics = this.inboundStatistics(sender);
    statistics.framesReceived += 1;
    statistics.bytesReceived += frameBytes;
    if (envelope.kind === "message" && sender.role === "node") {
      const handler = this.messageHandler;
      if (handler === undefined) {
        statistics.framesDropped += 1;
        return;
      }
      try {
        handler(sender.nodeId, envelope.body as TMessage);
      } catch (error) {
        // A throwing message handler is a bug in the layer above; surface it loudly without corrupting this stream.
        queueMicrotask(() => {
          throw error;
        });
      }
      return;
    }
    if (envelope.kind === "request") {
      this.handleRequest(connection, state, sender, envelope.correlationId, envelope.body as TRequest);
      return;
    }
    connection.close(new ProtocolError(`unexpected ${envelope.kind} on an inbound connection`));
  }

  private handleRequest(
    connection: FramedConnection,
    state: InboundState,
    sender: RequestSender,
    correlationId: number,
    request: TRequest,
  ): void {
    const handler = this.requestHandler;
    if (handler === undefined) {
      this.answerError(connection, sender, correlationId, "no-handler", "no request handler is registered");
      return;
    }
    if (state.requestsInFlight >= this.maxInboundInFlightRequests) {
      this.answerError(connection, sender, correlationId, "overloaded", "too many requests in flight");
      return;
    }
    state.requestsInFlight += 1;
    // Run the handler asynchronously so a synchronous throw is reported like a rejection.
    Promise.resolve()
      .then(() => handler(sender, request))
      .then(
        (response) => {
          state.requestsInFlight -= 1;
          let frame: Buffer;
          try {
            frame = encodeFrame({ kind: "response", correlationId, body: response }, this.options.maxFrameBytes);
          } catch (error) {
            this.answerError(connection, sender, correlationId, "handler-failed", (error as Error).message);
            return;
          }
          this.write(connection, sender, frame);
        },
        (error: unknown) => {
          state.requestsInFlight -= 1;
          const message = error instanceof Error ? error.message : String(error);
          this.answerError(connection, sender, correlationId, "handler-failed", message);
        },
      );
  }

  private answerError(
    connection: FramedConnection,
    sender: RequestSender,
    correlationId: number,
    code: RemoteErrorCode,
    message: string,
  ): void {
    // Truncate so that a huge error message can never exceed the frame limit.
    const frame = encodeFrame({ kind: "error", correlationId, code, message: message.slice(0, 4_096) }, 1 << 20);
    this.write(connection, sender, frame);
  }

  private write(connection: FramedConnection, sender: RequestSender, frame: Buffer): void {
    if (connection.isClosed) {
      return;
    }
    // Answers are bounded by the in-flight request limit, but a sender that never reads would still make them pile
    // up in the socket buffer; cut such a connection off rather than buffer without bound.
    if (connection.pendingWriteBytes > this.options.maxQueuedBytes) {
      connection.close(new Error("the sender does not read its responses"));
      return;
    }
    const statistics = this.inboundStatistics(sender);
    statistics.framesSent += 1;
    statistics.bytesSent += frame.length;
    connection.write(frame);
  }
}
