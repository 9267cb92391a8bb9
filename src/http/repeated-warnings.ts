/**
 * Holds back log lines that repeat under load. A server that cannot serve (a partition changing leaders, a coordinator
 * that is busy, a database that is away) answers every request 503, and a warning per request made a flood of
 * requests a flood of identical lines: a log that grows at the rate a client chooses can fill a disk the brokers need.
 * So a kind of warning is logged at most once per window, and the line that ends a quiet spell says how many were held
 * back before it.
 *
 * The count of the last window is told only by the next line of its kind: a timer could report it sooner, but would
 * need stopping with every server. The gateway's metrics count each of its REST answers by status meanwhile.
 */

/** Kinds of warning tracked at once. The keys are codes of the error catalogue, far fewer than this. */
const MAX_TRACKED_KINDS = 256;

/** Options of `RepeatedWarnings`. */
export interface RepeatedWarningsOptions {
  /** Shortest time between two lines of one kind. */
  readonly windowMs: number;
  /** The monotonic clock, in milliseconds. */
  readonly now: () => number;
}

/** One kind's window: when its last line was logged and how many were held back since. */
interface Window {
  loggedAtMs: number;
  heldBack: number;
}

/** See the module comment. */
export class RepeatedWarnings {
  private readonly windows = new Map<string, Window>();

  constructor(private readonly options: RepeatedWarningsOptions) {
    if (!(options.windowMs >= 0)) throw new RangeError(`windowMs must be at least 0, not ${options.windowMs}`);
  }

  /**
   * Whether a warning of `kind` is to be logged now: null when it is held back, else how many of its kind were held
   * back since the last one logged (to be named in the line).
   */
  admit(kind: string): number | null {
    const nowMs = this.options.now();
    const window = this.windows.get(kind);
    if (window === undefined) {
      if (this.windows.size >= MAX_TRACKED_KINDS) {
        // The oldest kind is forgotten, with its held-back count: only reachable if the keys stopped being codes.
        const oldest = this.windows.keys().next().value as string;
        this.windows.delete(oldest);
      }
      this.windows.set(kind, { loggedAtMs: nowMs, heldBack: 0 });
      return 0;
    }
    if (nowMs - window.loggedAtMs < this.options.windowMs) {
      window.heldBack += 1;
      return null;
    }
    const heldBack = window.heldBack;
    window.loggedAtMs = nowMs;
    window.heldBack = 0;
    return heldBack;
  }
}
