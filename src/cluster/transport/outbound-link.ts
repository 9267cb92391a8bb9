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
 */
import { connect } from "node:net";
import { backoffDelayMs } from "./backoff.js";
import type { Envelope, HandshakeEnvelope, NodeId, PeerAddress } from "./envelope.js";
import { PROTOCOL_VERSION } from "./envelope.js";
import {
  BackpressureError,
  PeerUnreachableError,
  ProtocolError,
  RemoteError,
  TransportClosedError,
  TransportTimeoutError,
} from "./errors.js";
import { FramedConnection } from "./framed-connection.js";
import { encodeFrame } from "./framing.js";
import type { ConnectionOptions, PeerStatistics } from "./options.js";

/** Where a link is in its life cycle; see the module comment. */
export type LinkState = "idle" | "connecting" | "open" | "waiting" | "closed";

/** Everything a link needs besides the shared options. */
export interface OutboundLinkSettings {
  /** Name of the target in errors, e.g. "node 2" or "127.0.0.1:26501". */
  readonly target: string;
  readonly address: PeerAddress;
  /** The handshake this side sends first. */
  readonly handshake: HandshakeEnvelope;
  /** When set, the accepting side must answer with this node id or the connection is refused. */
  readonly expectedNodeId?: NodeId;
  readonly options: ConnectionOptions;
  /** Counters to update (owned by the caller so they survive the link). */
  readonly statistics: PeerStatistics;
  /** Source of jitter in [0, 1). */
  readonly random: () => number;
}

interface QueuedFrame {
  readonly frame: Buffer;
  readonly correlationId: number | undefined;
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

  /** Queues a one-way message; returns false (and counts a drop) when the queue is full or the link is closed. */
  send(body: unknown): boolean {
    // Check the cheap bounds first so that a full queue does not cost an encoding per dropped message.
    if (this.stateValue === "closed" || this.queue.length >= this.settings.options.maxQueuedFrames) {
      this.settings.statistics.framesDropped += 1;
      return false;
    }
    const frame = encodeFrame({ kind: "message", body }, this.settings.options.maxFrameBytes);
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
    this.settings.statistics.framesDropped += this.queue.filter((queued) => queued.correlationId === undefined).length;
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
      this.settings.statistics.framesSent += 1;
      this.settings.statistics.bytesSent += queued.frame.length;
      this.socketFull = !connection.write(queued.frame);
    }
  }

  private connectNow(): void {
    this.stateValue = "connecting";
    this.socketFull = false;
    const { options, handshake, target } = this.settings;
    const socket = connect({ host: this.address.host, port: this.address.port });
    socket.setKeepAlive(true, options.connectTimeoutMs);
    const connection = new FramedConnection(socket, {
      maxFrameBytes: options.maxFrameBytes,
      onEnvelope: (envelope, frameBytes) => this.receive(connection, envelope, frameBytes),
      onClose: (error) => this.connectionClosed(connection, error),
      onDrain: () => {
        this.socketFull = false;
        this.flush();
      },
    });
    this.connection = connection;
    socket.once("connect", () => {
      connection.write(encodeFrame(handshake, options.maxFrameBytes));
    });
    this.connectTimer = setTimeout(() => {
      connection.close(new Error(`no handshake from ${target} within ${options.connectTimeoutMs} ms`));
    }, options.connectTimeoutMs);
  }

  private receive(connection: FramedConnection, envelope: Envelope, frameBytes: number): void {
    if (this.stateValue === "connecting") {
      if (envelope.kind !== "handshake" || envelope.role !== "node") {
        connection.close(new ProtocolError("expected a node handshake as the first frame"));
        return;
      }
      if (envelope.protocolVersion !== PROTOCOL_VERSION) {
        connection.close(new ProtocolError(`unsupported protocol version ${envelope.protocolVersion}`));
        return;
      }
      const expected = this.settings.expectedNodeId;
      if (expected !== undefined && envelope.nodeId !== expected) {
        connection.close(new ProtocolError(`reached node ${envelope.nodeId} instead of node ${expected}`));
        return;
      }
      clearTimeout(this.connectTimer);
      this.connectTimer = undefined;
      this.stateValue = "open";
      this.consecutiveFailures = 0;
      this.flush();
      return;
    }
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
    this.lastFailure = error?.message ?? "connection closed";
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
