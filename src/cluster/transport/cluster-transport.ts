/**
 * The node-to-node transport: one per node. It listens for connections from peers and clients, keeps one lazily
 * opened outbound connection per peer (address book keyed by node id), and offers one-way messages (bounded,
 * lossy: the Raft layer tolerates loss) and request/response with timeouts.
 *
 * Traffic between two nodes uses two connections, one opened by each side: each side sends its messages and
 * requests on its own outbound connection and answers the other side's requests on the connection they came in on.
 *
 * Every connection starts with the handshake of `handshake.ts`, which proves that both sides hold the cluster
 * secret and carry the same cluster id; nothing else is accepted before it ends. Until then an inbound connection is
 * bounded three ways: frames of at most MAX_UNAUTHENTICATED_FRAME_BYTES, `connectTimeoutMs` to finish, and a place
 * among at most `maxUnauthenticatedConnections` (`maxUnauthenticatedConnectionsPerAddress` per remote address).
 * When a new connection finds no place, the oldest unauthenticated one (of its address, or of all) is closed rather
 * than the new one refused: a real peer's handshake takes one round trip, so whoever fills the places to lock peers
 * out has to keep opening connections faster than that.
 */
import type { Server, Socket } from "node:net";
import { createServer } from "node:net";
import type { Logger } from "pino";
import { BufferPool } from "../../buffers/buffer-pool.js";
import { type RetainedRegionStatistics, RetainedRegions } from "../../buffers/retained-regions.js";
import { connectionAddressKey } from "../../net/address-key.js";
import { adoptAcceptedSocket } from "./accepted-socket.js";
import type { ClusterCredentials } from "./cluster-credentials.js";
import type { Envelope, NodeId, PeerAddress } from "./envelope.js";
import { PROTOCOL_VERSION } from "./envelope.js";
import type { HandshakeFailureReason, RemoteErrorCode } from "./errors.js";
import {
  FrameTooLargeError,
  HandshakeError,
  MalformedFrameError,
  PeerUnreachableError,
  ProtocolError,
  TransportClosedError,
} from "./errors.js";
import { FramedConnection } from "./framed-connection.js";
import { encodeFrame } from "./framing.js";
import {
  acceptorProof,
  type ConnectorIdentity,
  type HandshakeTranscript,
  MAX_UNAUTHENTICATED_FRAME_BYTES,
  newNonce,
  verifyConnectorProof,
} from "./handshake.js";
import type { ConnectionOptions, PeerStatistics } from "./options.js";
import { DEFAULT_CONNECTION_OPTIONS, definedOnly, emptyStatistics, validateConnectionOptions } from "./options.js";
import type { LinkState } from "./outbound-link.js";
import { OutboundLink } from "./outbound-link.js";
import { RefusalLog } from "./refusal-log.js";

/**
 * The frames of one-way messages from 256 KiB to 4 MiB (snapshot chunks, large appends) reuse memory (see
 * buffer-pool.ts); a transport keeps about a snapshot transfer's window of them free, and at most 32 MiB.
 */
const FRAME_POOL = {
  minBytes: 256 * 1024,
  maxBytes: 4 * 1024 * 1024,
  capacityStepBytes: 64 * 1024,
  maxFreeBuffers: 16,
  maxFreeBytes: 32 * 1024 * 1024,
} as const;

/** The answer to every ping (it holds no field, so it is encoded once). */
const PONG_FRAME = encodeFrame({ kind: "pong" }, MAX_UNAUTHENTICATED_FRAME_BYTES);

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
  /** The cluster's credentials: every connection, inbound and outbound, proves with them that it holds the secret. */
  readonly credentials: ClusterCredentials;
  /** Requests being handled at once per inbound connection; beyond it the sender gets an "overloaded" error. */
  readonly maxInboundInFlightRequests?: number;
  /** Authenticated inbound connections (from peers and clients) kept at once; one more is closed after its handshake. */
  readonly maxInboundConnections?: number;
  /** Inbound connections in their handshake, in all; a new one beyond it closes the oldest of them. */
  readonly maxUnauthenticatedConnections?: number;
  /** Inbound connections in their handshake from one remote address; a new one beyond it closes that address's oldest. */
  readonly maxUnauthenticatedConnectionsPerAddress?: number;
  /** Size of each region that received bodies flagged as retained are carved from (see retained-regions.ts). */
  readonly retainedRegionBytes?: number;
  /** Where refused handshakes are reported (at most one line per remote host and reason a minute); none: nowhere. */
  readonly logger?: Logger;
  /** Jitter source in [0, 1) for reconnection backoff (defaults to Math.random). */
  readonly random?: () => number;
}

/** Default of ClusterTransportOptions.maxInboundInFlightRequests. */
export const DEFAULT_MAX_INBOUND_IN_FLIGHT_REQUESTS = 1_024;

/** Default of ClusterTransportOptions.maxInboundConnections. */
export const DEFAULT_MAX_INBOUND_CONNECTIONS = 1_024;

/** Default of ClusterTransportOptions.maxUnauthenticatedConnections. */
export const DEFAULT_MAX_UNAUTHENTICATED_CONNECTIONS = 128;

/**
 * Default of ClusterTransportOptions.maxUnauthenticatedConnectionsPerAddress: room for every broker, contact client
 * and gateway of a local cluster (all on 127.0.0.1) to connect at once when they start together.
 */
export const DEFAULT_MAX_UNAUTHENTICATED_CONNECTIONS_PER_ADDRESS = 32;

/**
 * Default of ClusterTransportOptions.retainedRegionBytes (256 MiB): V8 then sees the memory a joiner keeps grow once
 * per 256 MiB of snapshot received rather than once per chunk. A region is allocated only when the first flagged
 * body arrives, so a node that never joins a partition never allocates one.
 */
export const DEFAULT_RETAINED_REGION_BYTES = 256 * 1024 * 1024;

/** Counters of the handshakes of inbound connections. */
export interface HandshakeStatistics {
  /** Connections that proved they belong to this cluster. */
  readonly authenticated: number;
  /** Connections refused: another cluster, a wrong secret, another protocol version, a malformed handshake. */
  readonly refused: number;
  /** Connections closed for not ending their handshake within `connectTimeoutMs`. */
  readonly timedOut: number;
  /** Connections closed during their handshake to make room for newer ones. */
  readonly evicted: number;
  /** Connections in their handshake now. */
  readonly pending: number;
  /** Most bytes read from one connection that closed without authenticating: all it could make this node hold. */
  readonly largestUnauthenticatedReadBytes: number;
}

/** Traffic counters of a transport. */
export interface TransportStatistics {
  /** Per peer node, inbound and outbound together (copies; safe to keep). */
  readonly peers: ReadonlyMap<NodeId, PeerStatistics>;
  /** All traffic with clients (connections whose handshake has no node id). */
  readonly clients: PeerStatistics;
  /** Inbound connections closed because they broke the protocol (oversized frame, bad handshake, …). */
  readonly protocolErrors: number;
  /** What became of the handshakes of inbound connections. */
  readonly handshakes: HandshakeStatistics;
  /** Large outgoing frames encoded into memory of an earlier frame the socket had written (see buffer-pool.ts). */
  readonly framesReusingMemory: number;
  /** Received bodies flagged as retained, carved from regions or allocated apart (see retained-regions.ts). */
  readonly retainedRegions: RetainedRegionStatistics;
}

interface InboundState {
  /**
   * The remote address as the per-address cap and the refusal log count it: an IPv4 address, or an IPv6 address's /64
   * network (one host usually holds a whole /64, and could otherwise open the cap's worth from each address).
   */
  readonly remoteHost: string;
  /** The remote IP address and port, naming a client in RequestSender. */
  readonly remoteAddress: string;
  /** This side's challenge; the connecting side's proof must cover it. */
  readonly acceptorNonce: Buffer;
  /** Undefined until the handshake has ended. */
  sender: RequestSender | undefined;
  requestsInFlight: number;
  handshakeTimer: NodeJS.Timeout | undefined;
}

/** Checks an optional positive integer option and returns it or its default. */
function positiveIntegerOption(name: string, value: number | undefined, defaultValue: number): number {
  const chosen = value ?? defaultValue;
  if (!Number.isSafeInteger(chosen) || chosen < 1) {
    throw new Error(`transport option ${name} must be a positive integer`);
  }
  return chosen;
}

/** The per-node transport; see the module comment. */
export class ClusterTransport<TMessage = unknown, TRequest = unknown, TResponse = unknown> {
  private readonly options: ConnectionOptions;
  private readonly maxInboundInFlightRequests: number;
  private readonly maxInboundConnections: number;
  private readonly maxUnauthenticatedConnections: number;
  private readonly maxUnauthenticatedConnectionsPerAddress: number;
  private readonly random: () => number;
  /** Buffers of large one-way frames (snapshot chunks), shared by the links to every peer. */
  private readonly framePool = new BufferPool(FRAME_POOL);
  /** Memory for the large received bodies their senders flagged as retained, shared by every connection. */
  private readonly retainedRegions: RetainedRegions;
  private readonly server: Server;
  private readonly addresses = new Map<NodeId, PeerAddress>();
  private readonly links = new Map<NodeId, OutboundLink>();
  private readonly peerStatistics = new Map<NodeId, PeerStatistics>();
  private readonly clientStatistics = emptyStatistics();
  private readonly authenticatedConnections = new Set<FramedConnection>();
  /** Inbound connections in their handshake, oldest first (a Map iterates in insertion order). */
  private readonly unauthenticatedConnections = new Map<FramedConnection, InboundState>();
  /** The same connections by remote host, each set oldest first. */
  private readonly unauthenticatedByHost = new Map<string, Set<FramedConnection>>();
  private readonly handshakeCounters = {
    authenticated: 0,
    refused: 0,
    timedOut: 0,
    evicted: 0,
    largestUnauthenticatedReadBytes: 0,
  };
  private readonly refusalLog: RefusalLog;
  private protocolErrors = 0;
  private messageHandler: MessageHandler<TMessage> | undefined;
  private requestHandler: RequestHandler<TRequest, TResponse> | undefined;
  private bound: PeerAddress | undefined;
  private closed = false;

  constructor(private readonly settings: ClusterTransportOptions) {
    const {
      nodeId,
      host,
      port,
      credentials,
      maxInboundInFlightRequests,
      maxInboundConnections,
      maxUnauthenticatedConnections,
      maxUnauthenticatedConnectionsPerAddress,
      retainedRegionBytes,
      logger,
      random,
      ...limits
    } = settings;
    this.options = { ...DEFAULT_CONNECTION_OPTIONS, ...definedOnly(limits) };
    validateConnectionOptions(this.options);
    this.maxInboundInFlightRequests = positiveIntegerOption(
      "maxInboundInFlightRequests",
      maxInboundInFlightRequests,
      DEFAULT_MAX_INBOUND_IN_FLIGHT_REQUESTS,
    );
    this.maxInboundConnections = positiveIntegerOption(
      "maxInboundConnections",
      maxInboundConnections,
      DEFAULT_MAX_INBOUND_CONNECTIONS,
    );
    this.maxUnauthenticatedConnections = positiveIntegerOption(
      "maxUnauthenticatedConnections",
      maxUnauthenticatedConnections,
      DEFAULT_MAX_UNAUTHENTICATED_CONNECTIONS,
    );
    this.maxUnauthenticatedConnectionsPerAddress = positiveIntegerOption(
      "maxUnauthenticatedConnectionsPerAddress",
      maxUnauthenticatedConnectionsPerAddress,
      DEFAULT_MAX_UNAUTHENTICATED_CONNECTIONS_PER_ADDRESS,
    );
    this.retainedRegions = new RetainedRegions({
      regionBytes: positiveIntegerOption("retainedRegionBytes", retainedRegionBytes, DEFAULT_RETAINED_REGION_BYTES),
    });
    this.refusalLog = new RefusalLog(logger);
    this.random = random ?? Math.random;
    // Accepted sockets wait unread until `adoptAcceptedSocket` gave them reads into the decoder's memory.
    this.server = createServer({ pauseOnConnect: true }, (socket) => this.accept(socket));
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
   * Throws FrameTooLargeError when the encoded message exceeds `maxFrameBytes` (a caller bug). `retainedBody` says
   * that the receiver will likely keep views of the message for long, so that it reads a large one into a region
   * (see framing.ts).
   */
  send(peerId: NodeId, message: TMessage, options?: { readonly retainedBody?: boolean }): boolean {
    const link = this.link(peerId);
    if (link === undefined) {
      this.statisticsOf(peerId).framesDropped += 1;
      return false;
    }
    return link.send(message, options?.retainedBody ?? false);
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
    return {
      peers,
      clients: { ...this.clientStatistics },
      protocolErrors: this.protocolErrors,
      handshakes: { ...this.handshakeCounters, pending: this.unauthenticatedConnections.size },
      framesReusingMemory: this.framePool.reusedBuffers,
      retainedRegions: this.retainedRegions.statistics(),
    };
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
    for (const connection of [...this.authenticatedConnections, ...this.unauthenticatedConnections.keys()]) {
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
      identity: { role: "node", nodeId: this.settings.nodeId },
      credentials: this.settings.credentials,
      expectedNodeId: peerId,
      options: this.options,
      logger: this.settings.logger,
      statistics: this.statisticsOf(peerId),
      random: this.random,
      framePool: this.framePool,
      retainedBodies: this.retainedRegions,
    });
    this.links.set(peerId, link);
    return link;
  }

  private accept(socket: Socket): void {
    if (this.closed) {
      socket.destroy();
      return;
    }
    const remoteHost = connectionAddressKey(socket.remoteAddress);
    this.makeRoomForHandshake(remoteHost);
    const state: InboundState = {
      remoteHost,
      remoteAddress: `${socket.remoteAddress ?? "unknown"}:${socket.remotePort ?? 0}`,
      acceptorNonce: newNonce(),
      sender: undefined,
      requestsInFlight: 0,
      handshakeTimer: undefined,
    };
    const connection: FramedConnection = new FramedConnection((onread) => adoptAcceptedSocket(socket, onread), {
      maxFrameBytes: MAX_UNAUTHENTICATED_FRAME_BYTES,
      // An inbound connection carries answers to the requests that came over it, which someone is waiting for.
      flushPriority: "answers",
      onEnvelope: (envelope, frameBytes) => this.receive(connection, state, envelope, frameBytes),
      onClose: (error) => this.inboundClosed(connection, state, error),
    });
    this.unauthenticatedConnections.set(connection, state);
    let sameHost = this.unauthenticatedByHost.get(remoteHost);
    if (sameHost === undefined) {
      sameHost = new Set();
      this.unauthenticatedByHost.set(remoteHost, sameHost);
    }
    sameHost.add(connection);
    state.handshakeTimer = setTimeout(() => {
      this.handshakeCounters.timedOut += 1;
      connection.close(new ProtocolError(`no handshake within ${this.options.connectTimeoutMs} ms`));
    }, this.options.connectTimeoutMs);
    connection.write(
      encodeFrame(
        {
          kind: "challenge",
          protocolVersion: PROTOCOL_VERSION,
          clusterId: this.settings.credentials.clusterId,
          nonce: state.acceptorNonce,
        },
        MAX_UNAUTHENTICATED_FRAME_BYTES,
      ),
    );
  }

  /** Closes the oldest unauthenticated connections that stand in the way of one more from `remoteHost`. */
  private makeRoomForHandshake(remoteHost: string): void {
    const sameHost = this.unauthenticatedByHost.get(remoteHost);
    if (sameHost !== undefined && sameHost.size >= this.maxUnauthenticatedConnectionsPerAddress) {
      this.evict(sameHost.values().next().value);
    }
    if (this.unauthenticatedConnections.size >= this.maxUnauthenticatedConnections) {
      this.evict(this.unauthenticatedConnections.keys().next().value);
    }
    if (
      this.unauthenticatedConnections.size >= this.maxUnauthenticatedConnections ||
      (this.unauthenticatedByHost.get(remoteHost)?.size ?? 0) >= this.maxUnauthenticatedConnectionsPerAddress
    ) {
      throw new Error("invariant violated: evicting a connection makes room for one more");
    }
  }

  private evict(connection: FramedConnection | undefined): void {
    if (connection === undefined) {
      throw new Error("invariant violated: a full set of unauthenticated connections has an oldest one");
    }
    this.handshakeCounters.evicted += 1;
    connection.close(new Error("closed during its handshake to make room for newer connections"));
  }

  private inboundClosed(connection: FramedConnection, state: InboundState, error: Error | undefined): void {
    clearTimeout(state.handshakeTimer);
    if (state.sender === undefined) {
      // A frame that could not be decoded ends the connection before any handshake step saw it: said here, as a
      // refused step would be, so that an operator learns who sends such frames.
      if (error instanceof MalformedFrameError || error instanceof FrameTooLargeError) {
        this.refusalLog.report(
          state.remoteHost,
          "malformed",
          { remoteAddress: state.remoteAddress, problem: error.message },
          `${state.remoteAddress}: refused a connection whose frame could not be read before it authenticated`,
        );
      }
      this.forgetUnauthenticated(connection, state);
      this.handshakeCounters.largestUnauthenticatedReadBytes = Math.max(
        this.handshakeCounters.largestUnauthenticatedReadBytes,
        connection.bytesRead,
      );
    } else {
      this.authenticatedConnections.delete(connection);
    }
    if (error instanceof ProtocolError) {
      this.protocolErrors += 1;
    }
  }

  private forgetUnauthenticated(connection: FramedConnection, state: InboundState): void {
    this.unauthenticatedConnections.delete(connection);
    const sameHost = this.unauthenticatedByHost.get(state.remoteHost);
    sameHost?.delete(connection);
    if (sameHost?.size === 0) {
      this.unauthenticatedByHost.delete(state.remoteHost);
    }
  }

  private inboundStatistics(sender: RequestSender): PeerStatistics {
    return sender.role === "node" ? this.statisticsOf(sender.nodeId) : this.clientStatistics;
  }

  private receive(connection: FramedConnection, state: InboundState, envelope: Envelope, frameBytes: number): void {
    const sender = state.sender;
    if (sender === undefined) {
      this.authenticate(connection, state, envelope);
      return;
    }
    if (envelope.kind === "ping") {
      // The connecting side checks that the link carries bytes both ways (see outbound-link.ts); the statistics
      // count what the layers above exchange.
      connection.write(PONG_FRAME);
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

  /** Handshake message 2: admits the connection when it belongs to this cluster and proves the secret. */
  private authenticate(connection: FramedConnection, state: InboundState, envelope: Envelope): void {
    const { credentials } = this.settings;
    const from = `refused a connection from ${state.remoteAddress}`;
    if (envelope.kind === "foreign-handshake") {
      this.refuse(
        connection,
        state,
        "protocol-version",
        { protocolVersion: envelope.protocolVersion },
        `${from}: it speaks protocol version ${envelope.protocolVersion}, this node ${PROTOCOL_VERSION}; every broker and gateway of a cluster must run the same version`,
      );
      return;
    }
    if (envelope.kind !== "authenticate") {
      this.refuse(
        connection,
        state,
        "malformed",
        { kind: envelope.kind },
        `${from}: it sent ${envelope.kind} before authenticating`,
      );
      return;
    }
    const who = envelope.role === "node" ? `node ${envelope.nodeId}` : "a client";
    if (envelope.clusterId !== credentials.clusterId) {
      this.refuse(
        connection,
        state,
        "other-cluster",
        { remoteClusterId: envelope.clusterId, clusterId: credentials.clusterId },
        `${from} (${who}): it belongs to cluster "${envelope.clusterId}", this node to cluster "${credentials.clusterId}" (another cluster, or another cluster secret)`,
      );
      return;
    }
    const connector: ConnectorIdentity =
      envelope.role === "node" && envelope.nodeId !== undefined
        ? { role: "node", nodeId: envelope.nodeId }
        : { role: "client" };
    const transcript: HandshakeTranscript = {
      clusterId: credentials.clusterId,
      acceptorNonce: state.acceptorNonce,
      connectorNonce: envelope.nonce,
      connector,
    };
    if (!verifyConnectorProof(credentials, transcript, envelope.proof)) {
      this.refuse(
        connection,
        state,
        "authentication-failed",
        {},
        `${from} (${who}): its proof does not match this cluster's secret`,
      );
      return;
    }
    if (this.authenticatedConnections.size >= this.maxInboundConnections) {
      connection.close(new Error(`more than ${this.maxInboundConnections} inbound connections`));
      return;
    }
    clearTimeout(state.handshakeTimer);
    state.handshakeTimer = undefined;
    this.forgetUnauthenticated(connection, state);
    this.authenticatedConnections.add(connection);
    this.handshakeCounters.authenticated += 1;
    state.sender =
      connector.role === "node"
        ? { role: "node", nodeId: connector.nodeId }
        : { role: "client", remoteAddress: state.remoteAddress };
    connection.maxFrameBytes = this.options.maxFrameBytes;
    // Only brokers send snapshot chunks: a client's flagged body is read as any other, so that no client can make
    // a view of a few KiB hold a whole region.
    if (connector.role === "node") connection.retainedBodies = this.retainedRegions;
    const proof = acceptorProof(credentials, transcript, this.settings.nodeId);
    connection.write(
      encodeFrame({ kind: "accepted", nodeId: this.settings.nodeId, proof }, MAX_UNAUTHENTICATED_FRAME_BYTES),
    );
  }

  /** Ends a connection whose handshake failed, telling the other side why, and logs it (rate-limited). */
  private refuse(
    connection: FramedConnection,
    state: InboundState,
    reason: HandshakeFailureReason,
    fields: Readonly<Record<string, unknown>>,
    message: string,
  ): void {
    this.handshakeCounters.refused += 1;
    this.refusalLog.report(state.remoteHost, reason, { remoteAddress: state.remoteAddress, ...fields }, message);
    connection.closeAfterWriting(
      encodeFrame({ kind: "refused", reason }, MAX_UNAUTHENTICATED_FRAME_BYTES),
      new HandshakeError(reason, message),
    );
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
      // Logged: every request in flight on the connection fails with it, and the sender may only see a broken link.
      this.settings.logger?.warn(
        { sender, pendingWriteBytes: connection.pendingWriteBytes, maxQueuedBytes: this.options.maxQueuedBytes },
        "closed a connection whose answers piled up unread beyond the limit",
      );
      connection.close(new Error("the sender does not read its responses"));
      return;
    }
    const statistics = this.inboundStatistics(sender);
    statistics.framesSent += 1;
    statistics.bytesSent += frame.length;
    connection.write(frame);
  }
}
