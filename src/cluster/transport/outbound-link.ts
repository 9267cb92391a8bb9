/**
 * One outbound connection to one target (a peer node or a node address), shared by the cluster transport and the
 * transport client.
 *
 * Life cycle: "idle" until first used, then "connecting" (TCP connect + handshake), "open", and after any failure
 * "waiting" for a jittered exponential backoff before the next attempt. Once used, the link keeps reconnecting
 * until it is closed, so a peer that comes back is found again without anyone having to poke it.
 *
 * Frames wait in one FIFO queue bounded in count and bytes; they go to the socket while it accepts writes, so the
 * memory held per target is at most the queue bounds plus one socket high-water mark. Messages that do not fit
 * are dropped (the caller learns it from `send` returning false). Requests fail fast instead of waiting when the
 * target is known to be down (link "waiting"), and every outstanding request fails when its connection breaks,
 * because its answer could only have come back on that connection.
 *
 * An open connection that carries nothing back for `pingIntervalMs` sends a ping, and one that still carries nothing
 * back `unansweredPingTimeoutMs` after the ping left for the kernel is dropped and made again. Why: TCP keepalive
 * never fires while written bytes wait for their acknowledgement, and the kernel retransmits them with a backoff that
 * doubles each time. After a network partition of 30–90 s, connections still "established" carried nothing for
 * another 17–29 s after the network was back (`ss` showed a retransmission timeout of 26 s), so the gateway could not
 * reach a partition's new leader and refused every write to it for that long. A new connection is answered at once.
 *
 * "connecting" covers the handshake of `handshake.ts` too: the link answers the target's challenge with its proof
 * and sends nothing else until the target has proved in turn that it holds the cluster secret, so frames never go
 * to a server that merely listens at the address. A failed handshake counts as a failed attempt (backoff, then
 * again); it is logged once per reason until a handshake succeeds, so a wrong secret on a gateway shows up in its
 * log without filling it.
 */
import { connect } from "node:net";
import type { Logger } from "pino";
import type { BufferPool } from "../../buffers/buffer-pool.js";
import type { RetainedRegions } from "../../buffers/retained-regions.js";
import { monotonicNowMs } from "../../time/monotonic.js";
import { backoffDelayMs } from "./backoff.js";
import type { ClusterCredentials } from "./cluster-credentials.js";
import type { Envelope, NodeId, PeerAddress } from "./envelope.js";
import { PROTOCOL_VERSION } from "./envelope.js";
import {
  BackpressureError,
  HandshakeError,
  type HandshakeFailureReason,
  PeerUnreachableError,
  ProtocolError,
  RemoteError,
  TransportClosedError,
  TransportTimeoutError,
} from "./errors.js";
import { FramedConnection, type OpenSocket } from "./framed-connection.js";
import { encodeFrame } from "./framing.js";
import {
  type ConnectorIdentity,
  connectorProof,
  type HandshakeTranscript,
  MAX_UNAUTHENTICATED_FRAME_BYTES,
  newNonce,
  verifyAcceptorProof,
} from "./handshake.js";
import type { ConnectionOptions, PeerStatistics } from "./options.js";

/** Where a link is in its life cycle; see the module comment. */
export type LinkState = "idle" | "connecting" | "open" | "waiting" | "closed";

/** Everything a link needs besides the shared options. */
export interface OutboundLinkSettings {
  /** Name of the target in errors, e.g. "node 2" or "127.0.0.1:26501". */
  readonly target: string;
  readonly address: PeerAddress;
  /** Who this side is in the handshake. */
  readonly identity: ConnectorIdentity;
  /** Proves this side's membership of the cluster and checks the target's. */
  readonly credentials: ClusterCredentials;
  /** When set, the accepting side must answer with this node id or the connection is refused. */
  readonly expectedNodeId?: NodeId;
  readonly options: ConnectionOptions;
  /** Counters to update (owned by the caller so they survive the link). */
  readonly statistics: PeerStatistics;
  /** Source of jitter in [0, 1). */
  readonly random: () => number;
  /** Where the frames of one-way messages come from; each goes back once its socket wrote it. None: allocated. */
  readonly framePool?: BufferPool;
  /** Where the connection reads large bodies flagged as retained (see FrameDecoderOptions); none: like other bodies. */
  readonly retainedBodies?: RetainedRegions;
  /** Where failed handshakes are reported; none: nowhere. */
  readonly logger?: Logger | undefined;
}

/** Where the handshake of the current connection stands while the link is "connecting". */
type HandshakePhase =
  | { readonly step: "awaiting-challenge" }
  | { readonly step: "awaiting-acceptance"; readonly transcript: HandshakeTranscript };

interface QueuedFrame {
  readonly frame: Buffer;
  readonly correlationId: number | undefined;
  /** Called once the socket is done with the frame instead of returning it to the frame pool (a ping's). */
  readonly onWritten?: () => void;
}

/** The one ping frame every link sends (it holds no field, so it is encoded once). */
const PING_FRAME = encodeFrame({ kind: "ping" }, MAX_UNAUTHENTICATED_FRAME_BYTES);

/** A ping waiting for anything to come back: queued, or written to the socket at `writtenAtMs` (monotonic). */
interface OutstandingPing {
  writtenAtMs: number | undefined;
}

interface PendingRequest {
  readonly resolve: (response: unknown) => void;
  readonly reject: (error: Error) => void;
  readonly timer: NodeJS.Timeout;
  queued: QueuedFrame | undefined;
}

/** An outbound connection with its queue and outstanding requests; see the module comment. */
export class OutboundLink {
  private stateValue: LinkState = "idle";
  private connection: FramedConnection | undefined;
  private connectTimer: NodeJS.Timeout | undefined;
  private backoffTimer: NodeJS.Timeout | undefined;
  private consecutiveFailures = 0;
  private lastFailure = "not connected yet";
  private address: PeerAddress;
  private readonly queue: QueuedFrame[] = [];
  private queuedBytes = 0;
  private socketFull = false;
  private readonly pending = new Map<number, PendingRequest>();
  private nextCorrelationId = 1;
  private handshakePhase: HandshakePhase = { step: "awaiting-challenge" };
  /** The reason of the last handshake failure logged since the last successful handshake. */
  private loggedHandshakeFailure: HandshakeFailureReason | undefined;
  /** When the open connection last carried anything back (monotonic). */
  private lastReceivedAtMs = 0;
  private ping: OutstandingPing | undefined;
  /** Checks the open connection's liveness every `pingIntervalMs`; undefined while no connection is open. */
  private livenessTimer: NodeJS.Timeout | undefined;

  constructor(private readonly settings: OutboundLinkSettings) {
    this.address = settings.address;
  }

  /** Current life-cycle state. */
  get state(): LinkState {
    return this.stateValue;
  }

  /** Requests sent or queued and not yet answered. */
  get inFlightRequests(): number {
    return this.pending.size;
  }

  /** Points the link at a new address; an existing connection to the old one is dropped and re-established. */
  setAddress(address: PeerAddress): void {
    if (address.host === this.address.host && address.port === this.address.port) {
      return;
    }
    this.address = address;
    if (this.connection !== undefined) {
      this.connection.close(new Error("the peer's address changed"));
    } else if (this.stateValue === "waiting") {
      clearTimeout(this.backoffTimer);
      this.backoffTimer = undefined;
      this.connectNow();
    }
  }

  /**
   * Queues a one-way message; returns false (and counts a drop) when the queue is full, the link is closed, or it
   * waits to connect again after a failure. `retainedBody` flags its frame as one whose body the receiver will likely
   * keep views of (see framing.ts). Why not queue while waiting: one-way messages are gossip and Raft's, sent again
   * as a matter of course, and what waited for a peer that is gone reached it all at once when it came back (a new
   * broker process received 333 s of another's gossip, whose times read as the peers' clocks 333 s behind).
   */
  send(body: unknown, retainedBody = false): boolean {
    // Check the cheap bounds first so that a full queue does not cost an encoding per dropped message.
    if (
      this.stateValue === "closed" ||
      this.stateValue === "waiting" ||
      this.queue.length >= this.settings.options.maxQueuedFrames
    ) {
      this.settings.statistics.framesDropped += 1;
      return false;
    }
    const frame = encodeFrame(
      { kind: "message", body },
      this.settings.options.maxFrameBytes,
      this.settings.framePool,
      retainedBody,
    );
    if (!this.hasRoomFor(frame)) {
      this.settings.statistics.framesDropped += 1;
      return false;
    }
    this.enqueue({ frame, correlationId: undefined });
    return true;
  }

  /** Sends a request and resolves with the body of its response; rejects with a TransportError subclass. */
  request(body: unknown, timeoutMs: number): Promise<unknown> {
    const { target, options } = this.settings;
    if (!Number.isSafeInteger(timeoutMs) || timeoutMs < 1) {
      return Promise.reject(new Error(`timeoutMs must be a positive integer, got ${timeoutMs}`));
    }
    if (this.stateValue === "closed") {
      return Promise.reject(new TransportClosedError());
    }
    if (this.stateValue === "waiting") {
      return Promise.reject(new PeerUnreachableError(target, this.lastFailure));
    }
    if (this.pending.size >= options.maxInFlightRequests) {
      this.settings.statistics.framesDropped += 1;
      return Promise.reject(new BackpressureError(target, `${options.maxInFlightRequests} requests in flight`));
    }
    const correlationId = this.nextCorrelationId;
    let frame: Buffer;
    try {
      frame = encodeFrame({ kind: "request", correlationId, body }, options.maxFrameBytes);
    } catch (error) {
      return Promise.reject(error);
    }
    if (!this.hasRoomFor(frame)) {
      this.settings.statistics.framesDropped += 1;
      return Promise.reject(new BackpressureError(target, "send queue full"));
    }
    this.nextCorrelationId += 1;
    return new Promise<unknown>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.settle(correlationId)?.reject(new TransportTimeoutError(target, timeoutMs));
      }, timeoutMs);
      const queued: QueuedFrame = { frame, correlationId };
      this.pending.set(correlationId, { resolve, reject, timer, queued });
      this.enqueue(queued);
    });
  }

  /**
   * Ends the link: timers cleared, socket destroyed, queued frames discarded, outstanding requests rejected with
   * `makeError(sent)`, `sent` telling whether the request had left the queue for the socket.
   */
  close(makeError: (sent: boolean) => Error = () => new TransportClosedError()): void {
    if (this.stateValue === "closed") {
      return;
    }
    this.stateValue = "closed";
    clearTimeout(this.connectTimer);
    clearTimeout(this.backoffTimer);
    clearInterval(this.livenessTimer);
    // A queued ping is the link's own, not a message anybody sent, so it is no dropped frame.
    this.settings.statistics.framesDropped += this.queue.filter(
      (queued) => queued.correlationId === undefined && queued.frame !== PING_FRAME,
    ).length;
    this.queue.length = 0;
    this.queuedBytes = 0;
    this.rejectAllPending(makeError);
    this.connection?.close(undefined);
    this.connection = undefined;
  }

  private hasRoomFor(frame: Buffer): boolean {
    const { maxQueuedFrames, maxQueuedBytes } = this.settings.options;
    return this.queue.length < maxQueuedFrames && this.queuedBytes + frame.length <= maxQueuedBytes;
  }

  private enqueue(queued: QueuedFrame): void {
    this.queue.push(queued);
    this.queuedBytes += queued.frame.length;
    if (this.stateValue === "idle") {
      this.connectNow();
    } else if (this.stateValue === "open") {
      this.flush();
    }
  }

  /** Hands queued frames to the socket until it is full or the queue is empty. */
  private flush(): void {
    const connection = this.connection;
    if (this.stateValue !== "open" || connection === undefined) {
      return;
    }
    while (!this.socketFull) {
      const queued = this.queue.shift();
      if (queued === undefined) {
        break;
      }
      this.queuedBytes -= queued.frame.length;
      if (queued.correlationId !== undefined) {
        const request = this.pending.get(queued.correlationId);
        if (request === undefined) {
          // Timed out while queued; nobody waits for its answer any more.
          continue;
        }
        request.queued = undefined;
      }
      if (queued.frame !== PING_FRAME) {
        this.settings.statistics.framesSent += 1;
        this.settings.statistics.bytesSent += queued.frame.length;
      }
      const pool = this.settings.framePool;
      this.socketFull = !connection.write(
        queued.frame,
        queued.onWritten ??
          (pool === undefined || queued.correlationId !== undefined ? undefined : () => pool.release(queued.frame)),
      );
    }
  }

  private connectNow(): void {
    this.stateValue = "connecting";
    this.socketFull = false;
    this.handshakePhase = { step: "awaiting-challenge" };
    const { options, target } = this.settings;
    const address = this.address;
    const openSocket: OpenSocket = (onread) => {
      const socket = connect({ host: address.host, port: address.port, onread });
      socket.setKeepAlive(true, options.connectTimeoutMs);
      return socket;
    };
    const connection = new FramedConnection(openSocket, {
      // Until the target has proved it belongs to the cluster, it may send nothing larger than a handshake.
      maxFrameBytes: MAX_UNAUTHENTICATED_FRAME_BYTES,
      onEnvelope: (envelope, frameBytes) => this.receive(connection, envelope, frameBytes),
      onClose: (error) => this.connectionClosed(connection, error),
      retainedBodies: this.settings.retainedBodies,
      onDrain: () => {
        this.socketFull = false;
        this.flush();
      },
    });
    this.connection = connection;
    this.connectTimer = setTimeout(() => {
      connection.close(
        new Error(
          `no handshake from ${target} within ${options.connectTimeoutMs} ms (a broker of protocol version 1 waits for the connecting side to speak first)`,
        ),
      );
    }, options.connectTimeoutMs);
  }

  private receive(connection: FramedConnection, envelope: Envelope, frameBytes: number): void {
    if (this.stateValue === "connecting") {
      this.continueHandshake(connection, envelope);
      return;
    }
    this.lastReceivedAtMs = monotonicNowMs();
    this.ping = undefined;
    // Pings and pongs are the link's own; the statistics count what the layers above exchange.
    if (envelope.kind === "pong") return;
    this.settings.statistics.framesReceived += 1;
    this.settings.statistics.bytesReceived += frameBytes;
    if (envelope.kind === "response") {
      this.settle(envelope.correlationId)?.resolve(envelope.body);
    } else if (envelope.kind === "error") {
      this.settle(envelope.correlationId)?.reject(
        new RemoteError(this.settings.target, envelope.code, envelope.message),
      );
    } else {
      connection.close(new ProtocolError(`unexpected ${envelope.kind} on an outbound connection`));
    }
  }

  /** Handshake messages 1 and 3 as the connecting side sees them; see `handshake.ts`. */
  private continueHandshake(connection: FramedConnection, envelope: Envelope): void {
    const { target, credentials, identity, expectedNodeId } = this.settings;
    const fail = (reason: HandshakeFailureReason, message: string): void => {
      connection.close(new HandshakeError(reason, message));
    };
    if (envelope.kind === "refused") {
      fail(envelope.reason, `${target} refused the handshake (${envelope.reason})`);
      return;
    }
    if (envelope.kind === "foreign-handshake") {
      fail(
        "protocol-version",
        `${target} speaks protocol version ${envelope.protocolVersion}, this side ${PROTOCOL_VERSION}; every broker and gateway of a cluster must run the same version`,
      );
      return;
    }
    const phase = this.handshakePhase;
    if (phase.step === "awaiting-challenge") {
      if (envelope.kind !== "challenge") {
        fail("malformed", `${target} sent ${envelope.kind} instead of a challenge`);
        return;
      }
      if (envelope.clusterId !== credentials.clusterId) {
        fail(
          "other-cluster",
          `${target} belongs to cluster "${envelope.clusterId}", this side to cluster "${credentials.clusterId}" (another cluster, or another cluster secret)`,
        );
        return;
      }
      const transcript: HandshakeTranscript = {
        clusterId: credentials.clusterId,
        acceptorNonce: envelope.nonce,
        connectorNonce: newNonce(),
        connector: identity,
      };
      this.handshakePhase = { step: "awaiting-acceptance", transcript };
      connection.write(
        encodeFrame(
          {
            kind: "authenticate",
            protocolVersion: PROTOCOL_VERSION,
            clusterId: credentials.clusterId,
            ...identity,
            nonce: transcript.connectorNonce,
            proof: connectorProof(credentials, transcript),
          },
          MAX_UNAUTHENTICATED_FRAME_BYTES,
        ),
      );
      return;
    }
    if (envelope.kind !== "accepted") {
      fail("malformed", `${target} sent ${envelope.kind} instead of accepting or refusing the handshake`);
      return;
    }
    if (!verifyAcceptorProof(credentials, phase.transcript, envelope.nodeId, envelope.proof)) {
      fail("authentication-failed", `${target} did not prove that it holds this cluster's secret`);
      return;
    }
    if (expectedNodeId !== undefined && envelope.nodeId !== expectedNodeId) {
      fail("unexpected-node", `reached node ${envelope.nodeId} instead of node ${expectedNodeId}`);
      return;
    }
    clearTimeout(this.connectTimer);
    this.connectTimer = undefined;
    connection.maxFrameBytes = this.settings.options.maxFrameBytes;
    this.stateValue = "open";
    this.consecutiveFailures = 0;
    this.loggedHandshakeFailure = undefined;
    this.lastReceivedAtMs = monotonicNowMs();
    this.ping = undefined;
    this.livenessTimer = setInterval(() => this.checkLiveness(connection), this.settings.options.pingIntervalMs);
    this.livenessTimer.unref();
    this.flush();
  }

  /**
   * Drops the open connection when a ping left for the kernel `unansweredPingTimeoutMs` ago and nothing came back
   * since (see the module comment), and sends a ping when nothing came back for `pingIntervalMs`. The ping waits in
   * the queue behind what was queued before it, so its time runs from when the socket took it, not from when it was
   * queued: a link slowly draining a snapshot's chunks is not taken for a dead one.
   */
  private checkLiveness(connection: FramedConnection): void {
    if (this.connection !== connection || this.stateValue !== "open") return;
    const { pingIntervalMs, unansweredPingTimeoutMs } = this.settings.options;
    const nowMs = monotonicNowMs();
    const writtenAtMs = this.ping?.writtenAtMs;
    if (writtenAtMs !== undefined && nowMs - writtenAtMs >= unansweredPingTimeoutMs) {
      connection.close(
        new Error(
          `nothing came back from ${this.settings.target} within ${unansweredPingTimeoutMs} ms of a ping: the network to it is down or it stalled`,
        ),
      );
      return;
    }
    if (this.ping !== undefined || nowMs - this.lastReceivedAtMs < pingIntervalMs) return;
    const ping: OutstandingPing = { writtenAtMs: undefined };
    this.ping = ping;
    // Beyond the queue's bounds if need be: one small frame, and the only way to learn whether a full queue drains.
    this.queue.push({
      frame: PING_FRAME,
      correlationId: undefined,
      onWritten: () => {
        ping.writtenAtMs = monotonicNowMs();
      },
    });
    this.queuedBytes += PING_FRAME.length;
    this.flush();
  }

  /**
   * Logs a failed handshake once per reason until a handshake succeeds. A connection reaching another node than
   * expected is routine while addresses change (a broker restarted on another port), so it is logged at debug.
   */
  private logHandshakeFailure(error: HandshakeError): void {
    if (this.loggedHandshakeFailure === error.reason) {
      return;
    }
    this.loggedHandshakeFailure = error.reason;
    const fields = {
      target: this.settings.target,
      address: `${this.address.host}:${this.address.port}`,
      reason: error.reason,
    };
    if (error.reason === "unexpected-node") {
      this.settings.logger?.debug(fields, error.message);
    } else {
      this.settings.logger?.warn(fields, `cluster handshake failed: ${error.message}`);
    }
  }

  /** Removes a pending request (from the queue too) and returns it, or undefined if it was already settled. */
  private settle(correlationId: number): PendingRequest | undefined {
    const request = this.pending.get(correlationId);
    if (request === undefined) {
      return undefined;
    }
    this.pending.delete(correlationId);
    clearTimeout(request.timer);
    if (request.queued !== undefined) {
      const index = this.queue.indexOf(request.queued);
      if (index >= 0) {
        this.queue.splice(index, 1);
        this.queuedBytes -= request.queued.frame.length;
      }
    }
    return request;
  }

  private rejectAllPending(makeError: (sent: boolean) => Error): void {
    for (const [correlationId, request] of [...this.pending]) {
      // A request still in the queue never reached the socket; one that left it may have reached the peer.
      const sent = request.queued === undefined;
      this.settle(correlationId)?.reject(makeError(sent));
    }
  }

  private connectionClosed(connection: FramedConnection, error: Error | undefined): void {
    if (this.connection !== connection || this.stateValue === "closed") {
      return;
    }
    this.connection = undefined;
    clearTimeout(this.connectTimer);
    this.connectTimer = undefined;
    clearInterval(this.livenessTimer);
    this.livenessTimer = undefined;
    this.ping = undefined;
    // A ping still queued belonged to this connection; the next one sends its own.
    const queuedPing = this.queue.findIndex((queued) => queued.frame === PING_FRAME);
    if (queuedPing !== -1) {
      this.queue.splice(queuedPing, 1);
      this.queuedBytes -= PING_FRAME.length;
    }
    this.lastFailure = error?.message ?? "connection closed";
    if (error instanceof HandshakeError) {
      this.logHandshakeFailure(error);
    }
    const reason = this.lastFailure;
    this.rejectAllPending((sent) => new PeerUnreachableError(this.settings.target, reason, sent));
    this.consecutiveFailures += 1;
    this.stateValue = "waiting";
    const delayMs = backoffDelayMs(this.consecutiveFailures, this.settings.options, this.settings.random);
    this.backoffTimer = setTimeout(() => {
      this.backoffTimer = undefined;
      this.connectNow();
    }, delayMs);
  }
}
