/**
 * Which connection makes room when an HTTP server at its connection cap accepts a new one (`guardConnections` in
 * limits.ts applies it). Refusing every new connection at the cap would let a few addresses, each within its own cap,
 * lock every new client out: by sending requests a byte at a time, by leaving answers unread, or by keeping
 * keep-alive connections open between cheap requests, opening each again as soon as the server closes it. So at the
 * cap the server closes one connection that is doing nothing useful, in this order of preference:
 *
 * 1. a new connection that has not sent a whole request head within `minWindowMs` of opening (a client that means
 *    to send a request sends its head at once), or one receiving a request body at less than
 *    `minReceivingBytesPerSecond` over a window of at least `minWindowMs`;
 * 2. one whose answer has bytes its client has not taken and moved less than `minAnsweringBytesPerSecond` over such a
 *    window (the client reads slowly or not at all), pipelined requests behind it or not;
 * 3. the keep-alive connection idle longest between requests (a client must expect the server to close an idle
 *    connection at any time; nginx too reuses idle keep-alive connections when it runs out). Any minimum idle time
 *    would let busy connections, each sending a cheap request a little more often, hold the cap;
 * 4. of the address holding the most connections, when it holds at least two more than the new connection's address
 *    would (each address's fair share), its oldest connection that is opened, idle or receiving a request body,
 *    however promptly: never one whose handler is at work or whose answer is being sent. A hostile test (2026-12-02)
 *    held every connection of a server from 10 addresses, each uploading bodies at 800 bytes a second, just above
 *    the pace of 1; new clients then got in one time in ten. Addresses are counted by their IPv4 address or IPv6 /64
 *    network, as the per-address cap counts.
 *
 * Progress is measured, not age: a download that moves its bytes promptly is never closed for a newcomer however long
 * it lasts, and neither is a connection whose handler is still working (nothing waits to be sent), nor one receiving
 * a pipelined request while the answer before it moves; a prompt upload only for the fair share of rule 4. When no
 * connection qualifies the new one is refused. Connections are kept apart by phase (opened, busy with requests, idle
 * between them), each in the order its phase began; of the busy ones only the `MAX_BUSY_EXAMINED` that began longest
 * ago are looked at, so an admission at the cap costs a bounded amount of work however many connections are open.
 */
import type { IncomingMessage } from "node:http";
import type { Socket } from "node:net";

/** Busy connections looked at, those busy longest first, when one must make room. */
export const MAX_BUSY_EXAMINED = 64;

/** The thresholds of the module comment. */
export interface ConnectionAdmissionThresholds {
  readonly minWindowMs: number;
  readonly minReceivingBytesPerSecond: number;
  readonly minAnsweringBytesPerSecond: number;
}

/**
 * The thresholds the servers use. 500 bytes a second is what Apache's request-timeout module asks of a request
 * body by default; an answer's client that takes less than 16 KiB a second is either gone or holding the connection.
 */
export const DEFAULT_ADMISSION_THRESHOLDS: ConnectionAdmissionThresholds = {
  minWindowMs: 1_000,
  minReceivingBytesPerSecond: 500,
  minAnsweringBytesPerSecond: 16 * 1024,
};

/** What the server is doing with one connection, as far as admission cares. */
interface ConnectionPhase {
  /** When the current phase began (opened, first request of a busy spell received, last answer ended). */
  sinceMs: number;
  /** Requests received and not yet answered; pipelined ones wait behind the first. */
  requestsOpen: number;
  /** The latest request received while requests are open, else null. */
  request: IncomingMessage | null;
  /** Bytes the connection had moved, both ways, at `markMs`: the start of the window its progress is judged over. */
  markBytes: number;
  markMs: number;
}

/** The outcome of `admit`. */
export type Admission = { readonly admitted: true; readonly replaced: Socket | null } | { readonly admitted: false };

/** Bytes `socket` has moved both ways so far. */
function bytesMoved(socket: Socket): number {
  return socket.bytesRead + socket.bytesWritten;
}

/** See the module comment. Times are milliseconds of a monotonic clock, given by the caller. */
export class ConnectionAdmission {
  // Each in the order the connections entered that phase; a connection is in exactly one of them.
  private readonly opened = new Map<Socket, ConnectionPhase>();
  private readonly busy = new Map<Socket, ConnectionPhase>();
  private readonly idle = new Map<Socket, ConnectionPhase>();
  /** The connections of each address, in the order they were admitted, and the address of each connection. */
  private readonly byAddress = new Map<string, Set<Socket>>();
  private readonly addressOf = new Map<Socket, string>();

  constructor(
    private readonly capacity: number,
    private readonly thresholds: ConnectionAdmissionThresholds = DEFAULT_ADMISSION_THRESHOLDS,
  ) {
    if (!Number.isInteger(capacity) || capacity < 1)
      throw new Error("invariant violated: a connection cap of 1 or more");
  }

  /** Connections admitted and not closed. */
  get size(): number {
    return this.opened.size + this.busy.size + this.idle.size;
  }

  /**
   * Admits `socket` when there is room, or when a connection can make room (`replaced`, which the caller must
   * close); otherwise refuses it.
   */
  admit(socket: Socket, nowMs: number, addressKey: string): Admission {
    let replaced: Socket | null = null;
    if (this.size >= this.capacity) {
      const candidate = this.candidate(nowMs) ?? this.beyondFairShare(addressKey);
      if (candidate === undefined) return { admitted: false };
      this.closed(candidate);
      replaced = candidate;
    }
    this.opened.set(socket, { sinceMs: nowMs, requestsOpen: 0, request: null, markBytes: 0, markMs: nowMs });
    let sockets = this.byAddress.get(addressKey);
    if (sockets === undefined) {
      sockets = new Set();
      this.byAddress.set(addressKey, sockets);
    }
    sockets.add(socket);
    this.addressOf.set(socket, addressKey);
    return { admitted: true, replaced };
  }

  /** `request`'s head arrived on `socket`. */
  requestReceived(socket: Socket, request: IncomingMessage, nowMs: number): void {
    const busy = this.busy.get(socket);
    if (busy !== undefined) {
      busy.requestsOpen += 1;
      busy.request = request;
      return;
    }
    const phase = this.opened.get(socket) ?? this.idle.get(socket);
    if (phase === undefined) return;
    this.opened.delete(socket);
    this.idle.delete(socket);
    phase.requestsOpen = 1;
    phase.request = request;
    this.mark(socket, phase, nowMs);
    phase.sinceMs = nowMs;
    this.busy.set(socket, phase);
  }

  /** One of `socket`'s requests was answered (or its answer abandoned). */
  answerEnded(socket: Socket, nowMs: number): void {
    const phase = this.busy.get(socket);
    if (phase === undefined) return;
    phase.requestsOpen -= 1;
    // The next pipelined request's answer is judged over a window of its own.
    this.mark(socket, phase, nowMs);
    if (phase.requestsOpen > 0) return;
    this.busy.delete(socket);
    phase.request = null;
    phase.sinceMs = nowMs;
    this.idle.set(socket, phase);
  }

  /** `socket` closed. */
  closed(socket: Socket): void {
    this.opened.delete(socket);
    this.busy.delete(socket);
    this.idle.delete(socket);
    const addressKey = this.addressOf.get(socket);
    if (addressKey === undefined) return;
    this.addressOf.delete(socket);
    const sockets = this.byAddress.get(addressKey);
    sockets?.delete(socket);
    if (sockets?.size === 0) this.byAddress.delete(addressKey);
  }

  /**
   * The connection rule 4 of the module comment closes for a new connection of `addressKey`, or undefined. Looks at
   * each address once and at the connections of one: there are at most as many of either as the cap.
   */
  private beyondFairShare(addressKey: string): Socket | undefined {
    let largest: Set<Socket> | undefined;
    for (const sockets of this.byAddress.values()) {
      if (largest === undefined || sockets.size > largest.size) largest = sockets;
    }
    const newcomerCount = (this.byAddress.get(addressKey)?.size ?? 0) + 1;
    if (largest === undefined || largest.size <= newcomerCount) return undefined;
    for (const socket of largest) {
      const busy = this.busy.get(socket);
      if (busy === undefined) return socket;
      const receiving = busy.requestsOpen === 1 && busy.request !== null && !busy.request.complete;
      if (receiving) return socket;
    }
    return undefined;
  }

  private mark(socket: Socket, phase: ConnectionPhase, nowMs: number): void {
    phase.markBytes = bytesMoved(socket);
    phase.markMs = nowMs;
  }

  /** The connection to close for a new one (see the module comment), or undefined when none qualifies. */
  private candidate(nowMs: number): Socket | undefined {
    const { minWindowMs, minReceivingBytesPerSecond, minAnsweringBytesPerSecond } = this.thresholds;
    const [firstOpened, openedPhase] = this.opened.entries().next().value ?? [];
    if (firstOpened !== undefined && openedPhase !== undefined && nowMs - openedPhase.sinceMs >= minWindowMs) {
      return firstOpened;
    }
    let stalled: Socket | undefined;
    let examined = 0;
    for (const [socket, phase] of this.busy) {
      if (examined >= MAX_BUSY_EXAMINED) break;
      examined += 1;
      const windowMs = nowMs - phase.markMs;
      if (windowMs < minWindowMs) continue;
      const bytesPerSecond = ((bytesMoved(socket) - phase.markBytes) * 1_000) / windowMs;
      const receiving = phase.requestsOpen === 1 && phase.request !== null && !phase.request.complete;
      if (receiving) {
        if (bytesPerSecond < minReceivingBytesPerSecond) return socket;
      } else if (socket.writableLength > 0 && bytesPerSecond < minAnsweringBytesPerSecond) {
        stalled ??= socket;
        continue;
      }
      // Judged moving (or its handler still at work): the next look judges it over a window from now.
      this.mark(socket, phase, nowMs);
    }
    return stalled ?? this.idle.keys().next().value;
  }
}
