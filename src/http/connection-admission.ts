/**
 * Which connection makes room when an HTTP server at its connection cap accepts a new one (`guardConnections` in
 * limits.ts applies it). Refusing every new connection at the cap would let a few addresses, each within its own cap,
 * lock every new client out: by sending request heads a byte at a time, by leaving answers unread, or by keeping
 * keep-alive connections open between cheap requests, opening each again as soon as the server closes it. So at the
 * cap the server closes one connection that is doing nothing useful, in this order of preference:
 *
 * 1. one still receiving its request, head or body, for at least `minReceivingMs` (a new connection since it opened,
 *    a keep-alive one since its request's head arrived): a client that means to send a request sends it at once;
 * 2. one whose answer has been under way for at least `minStalledMs` with bytes its client has not taken;
 * 3. a keep-alive connection idle between requests, the one idle longest (a client must expect the server to close
 *    an idle connection at any time; nginx too reuses idle keep-alive connections when it runs out). Any minimum here
 *    would let busy connections, each sending a cheap request a little more often than the minimum, hold the cap.
 *
 * A connection whose request arrived whole and whose answer its client reads is never closed for another, nor is a
 * connection receiving a pipelined request while an earlier one is being answered. When no connection qualifies the
 * new one is refused. Only the `MAX_CANDIDATES_EXAMINED` connections longest in their current phase are looked at, so
 * each admission at the cap costs a bounded amount of work however many connections are open.
 */
import type { IncomingMessage } from "node:http";
import type { Socket } from "node:net";

/** Connections looked at, longest in their current phase first, when one must make room. */
export const MAX_CANDIDATES_EXAMINED = 64;

/** The minimum times of the module comment. */
export interface ConnectionAdmissionTimes {
  readonly minReceivingMs: number;
  readonly minStalledMs: number;
  readonly minIdleMs: number;
}

/** The times the servers use: a prompt client is never mistaken for a slow one; see 3. above for idle ones. */
export const DEFAULT_ADMISSION_TIMES: ConnectionAdmissionTimes = {
  minReceivingMs: 1_000,
  minStalledMs: 1_000,
  minIdleMs: 0,
};

/** What the server is doing with one connection, as far as admission cares. */
interface ConnectionPhase {
  /** When the current phase began (opened, first request of a busy spell received, last answer ended). */
  sinceMs: number;
  /** Requests received and not yet answered; pipelined ones wait behind the first. */
  requestsOpen: number;
  /** The latest request received while requests are open, else null. */
  request: IncomingMessage | null;
  /** Whether it has carried a request before, so that a pause is between requests. */
  servedBefore: boolean;
}

/** The outcome of `admit`. */
export type Admission = { readonly admitted: true; readonly replaced: Socket | null } | { readonly admitted: false };

/** See the module comment. Times are milliseconds of a monotonic clock, given by the caller. */
export class ConnectionAdmission {
  // In the order the connections entered their current phase: a connection moves to the end when it enters one.
  private readonly phases = new Map<Socket, ConnectionPhase>();

  constructor(
    private readonly capacity: number,
    private readonly times: ConnectionAdmissionTimes = DEFAULT_ADMISSION_TIMES,
  ) {
    if (!Number.isInteger(capacity) || capacity < 1)
      throw new Error("invariant violated: a connection cap of 1 or more");
  }

  /** Connections admitted and not closed. */
  get size(): number {
    return this.phases.size;
  }

  /**
   * Admits `socket` when there is room, or when a connection can make room (`replaced`, which the caller must
   * close); otherwise refuses it.
   */
  admit(socket: Socket, nowMs: number): Admission {
    let replaced: Socket | null = null;
    if (this.phases.size >= this.capacity) {
      const candidate = this.candidate(nowMs);
      if (candidate === undefined) return { admitted: false };
      this.phases.delete(candidate);
      replaced = candidate;
    }
    this.phases.set(socket, { sinceMs: nowMs, requestsOpen: 0, request: null, servedBefore: false });
    return { admitted: true, replaced };
  }

  /** `request`'s head arrived on `socket`. */
  requestReceived(socket: Socket, request: IncomingMessage, nowMs: number): void {
    const phase = this.phases.get(socket);
    if (phase === undefined) return;
    phase.requestsOpen += 1;
    phase.request = request;
    phase.servedBefore = true;
    if (phase.requestsOpen === 1) this.enter(socket, phase, nowMs);
  }

  /** One of `socket`'s requests was answered (or its answer abandoned). */
  answerEnded(socket: Socket, nowMs: number): void {
    const phase = this.phases.get(socket);
    if (phase === undefined || phase.requestsOpen === 0) return;
    phase.requestsOpen -= 1;
    if (phase.requestsOpen > 0) return;
    phase.request = null;
    this.enter(socket, phase, nowMs);
  }

  /** `socket` closed. */
  closed(socket: Socket): void {
    this.phases.delete(socket);
  }

  private enter(socket: Socket, phase: ConnectionPhase, nowMs: number): void {
    phase.sinceMs = nowMs;
    this.phases.delete(socket);
    this.phases.set(socket, phase);
  }

  /** The connection to close for a new one (see the module comment), or undefined when none qualifies. */
  private candidate(nowMs: number): Socket | undefined {
    let stalled: Socket | undefined;
    let idle: Socket | undefined;
    let examined = 0;
    for (const [socket, phase] of this.phases) {
      if (examined >= MAX_CANDIDATES_EXAMINED) break;
      examined += 1;
      const ageMs = nowMs - phase.sinceMs;
      if (phase.requestsOpen === 0) {
        if (!phase.servedBefore && ageMs >= this.times.minReceivingMs) return socket;
        if (phase.servedBefore && ageMs >= this.times.minIdleMs) idle ??= socket;
        continue;
      }
      const receiving = phase.request !== null && !phase.request.complete;
      if (receiving) {
        if (phase.requestsOpen === 1 && ageMs >= this.times.minReceivingMs) return socket;
        continue;
      }
      if (ageMs >= this.times.minStalledMs && socket.writableLength > 0) stalled ??= socket;
    }
    return stalled ?? idle;
  }
}
