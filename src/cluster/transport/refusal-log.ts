/**
 * Log lines about refused input, at most one per source and reason per interval: handshakes the transport refuses
 * (anyone who reaches a cluster port can make a node refuse connections as fast as it can open them), and messages a
 * broker drops as malformed. One line per refusal would let the sender fill the disk. The line after a quiet interval
 * says how many refusals were left out of the log. Lines are also bounded across sources, `maxLinesPerInterval`
 * per interval: a hostile test (2026-12-02) refused connections from 3,000 loopback addresses and got 3,000 lines in
 * 1.6 s, one per address. The first line of the next interval says how many refusals that bound left out.
 */
import type { Logger } from "pino";
import type { HandshakeFailureReason } from "./errors.js";

/** Default time between two lines about the same remote host and reason. */
export const DEFAULT_REFUSAL_LOG_INTERVAL_MS = 60_000;

/** Remote hosts and reasons remembered at once; the oldest is forgotten beyond it, so memory stays bounded. */
const MAX_TRACKED_SOURCES = 1_024;

/** Default of the lines logged per interval at most, across all sources and reasons. */
export const DEFAULT_MAX_LINES_PER_INTERVAL = 100;

interface SourceState {
  loggedAtMs: number;
  suppressed: number;
}

/** Rate-limited logging of refused input; see the module comment. */
export class RefusalLog<Reason extends string = HandshakeFailureReason> {
  private readonly sources = new Map<string, SourceState>();
  /** When the current interval of the bound across sources began, and the lines logged in it. */
  private intervalStartMs = Number.NEGATIVE_INFINITY;
  private linesInInterval = 0;
  /** Refusals the bound across sources left out of the log since its last line about them. */
  private unloggedBeyondBound = 0;

  constructor(
    private readonly logger: Logger | undefined,
    private readonly intervalMs = DEFAULT_REFUSAL_LOG_INTERVAL_MS,
    private readonly now: () => number = Date.now,
    private readonly maxLinesPerInterval = DEFAULT_MAX_LINES_PER_INTERVAL,
  ) {}

  /** Logs `message` at warn level unless a line about the same source and reason was logged within the interval. */
  report(remoteHost: string, reason: Reason, fields: Readonly<Record<string, unknown>>, message: string): void {
    if (this.logger === undefined) {
      return;
    }
    const key = `${reason} ${remoteHost}`;
    const nowMs = this.now();
    const state = this.sources.get(key);
    if (state !== undefined && nowMs - state.loggedAtMs < this.intervalMs) {
      state.suppressed += 1;
      return;
    }
    if (nowMs - this.intervalStartMs >= this.intervalMs) {
      this.intervalStartMs = nowMs;
      this.linesInInterval = 0;
      if (this.unloggedBeyondBound > 0) {
        this.linesInInterval += 1;
        this.logger.warn(
          { refusalsNotLogged: this.unloggedBeyondBound },
          `${this.unloggedBeyondBound} refusals were left out of the log, beyond ${this.maxLinesPerInterval} lines in ${this.intervalMs} ms from many sources`,
        );
        this.unloggedBeyondBound = 0;
      }
    }
    if (this.linesInInterval >= this.maxLinesPerInterval) {
      this.unloggedBeyondBound += 1;
      return;
    }
    this.linesInInterval += 1;
    const suppressed = state?.suppressed ?? 0;
    this.sources.delete(key);
    if (this.sources.size >= MAX_TRACKED_SOURCES) {
      const oldest = this.sources.keys().next().value;
      if (oldest !== undefined) this.sources.delete(oldest);
    }
    this.sources.set(key, { loggedAtMs: nowMs, suppressed: 0 });
    this.logger.warn(
      { ...fields, reason, ...(suppressed > 0 ? { refusalsNotLogged: suppressed } : {}) },
      suppressed > 0 ? `${message} (and ${suppressed} more like it since the last such line)` : message,
    );
  }
}
