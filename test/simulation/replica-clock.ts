/**
 * Simulated time for real partition replicas: one shared clock that only moves when the harness advances it, and a
 * `ReplicaClock` view of it per replica incarnation. A view's tick timers and sleeps fire when the harness advances
 * the time past them, in the order they were started; freezing a view (the process crashed) drops them without
 * firing, so a crashed replica never runs again.
 *
 * Snapshot encoding yields a turn of the event loop between slices (`yieldTurn`). Those turns are real, and how many a
 * snapshot takes depends on the wall clock, so the clock counts the ones pending: the harness waits for none to be
 * left before it calls the cluster settled, and the snapshot's bytes (fixed when its encoding starts) then reach the
 * storage in the same step however many slices the encoding took.
 */
import type { ReplicaClock } from "../../src/cluster/broker/partition-replica.js";

/** Where simulated time starts: a fixed instant, so publication times and deadlines replay exactly. */
export const SIMULATED_EPOCH_MS = Date.UTC(2030, 0, 1);

interface Timer {
  readonly view: ReplicaClockView;
  readonly sequence: number;
  dueAtMs: number;
  /** Repeats every `intervalMs`; null for a one-off sleep. */
  readonly intervalMs: number | null;
  readonly fire: () => void;
}

/** Most timers at once: a few per replica are expected; more means a leak in the harness or the driver. */
const MAX_TIMERS = 10_000;

/** The shared simulated clock. */
export class SimulatedReplicaTime {
  private nowMs = SIMULATED_EPOCH_MS;
  private readonly timers = new Set<Timer>();
  private timerSequence = 0;
  private yieldsPending = 0;

  /** Milliseconds since the epoch, simulated. */
  now(): number {
    return this.nowMs;
  }

  /** Yields of snapshot encoding that have not resumed yet. */
  get pendingYields(): number {
    return this.yieldsPending;
  }

  /** A clock for one replica incarnation. */
  view(): ReplicaClockView {
    return new ReplicaClockView(this);
  }

  /**
   * Moves time forward by `stepMs` and fires every timer due by then, earliest first (ties in the order they were
   * started). A repeating timer fires at most once per call: a replica's ticks only count, so catching up on missed
   * ones in a burst would add nothing.
   */
  advance(stepMs: number): void {
    this.nowMs += stepMs;
    const due = [...this.timers]
      .filter((timer) => timer.dueAtMs <= this.nowMs)
      .sort((left, right) => left.dueAtMs - right.dueAtMs || left.sequence - right.sequence);
    for (const timer of due) {
      if (!this.timers.has(timer)) continue;
      if (timer.intervalMs === null) this.timers.delete(timer);
      else {
        const intervalMs = timer.intervalMs;
        timer.dueAtMs += Math.ceil((this.nowMs - timer.dueAtMs + 1) / intervalMs) * intervalMs;
      }
      timer.fire();
    }
  }

  /** Starts a timer (a view's `repeat` or `sleep`). */
  add(view: ReplicaClockView, delayMs: number, intervalMs: number | null, fire: () => void): Timer {
    if (this.timers.size >= MAX_TIMERS) throw new Error(`harness: more than ${MAX_TIMERS} simulated timers`);
    const timer: Timer = {
      view,
      sequence: this.timerSequence++,
      dueAtMs: this.nowMs + Math.max(0, delayMs),
      intervalMs,
      fire,
    };
    this.timers.add(timer);
    return timer;
  }

  /** Cancels a timer. */
  remove(timer: Timer): void {
    this.timers.delete(timer);
  }

  /** Drops every timer of `view` without firing it. */
  removeAllOf(view: ReplicaClockView): void {
    for (const timer of [...this.timers]) if (timer.view === view) this.timers.delete(timer);
  }

  /** A turn of the real event loop, counted while pending. */
  yieldTurn(view: ReplicaClockView): Promise<void> {
    this.yieldsPending += 1;
    return new Promise((resolve) => {
      setImmediate(() => {
        this.yieldsPending -= 1;
        // A frozen incarnation is never resumed: its process is gone.
        if (!view.frozen) resolve();
      });
    });
  }
}

/** One replica incarnation's clock; see the module comment. */
export class ReplicaClockView implements ReplicaClock {
  frozen = false;

  constructor(private readonly time: SimulatedReplicaTime) {}

  /** Milliseconds since the epoch, simulated. */
  now(): number {
    return this.time.now();
  }

  /** The same simulated time: the simulation's clock never steps. */
  monotonicNow(): number {
    return this.time.now();
  }

  /** Calls `tick` every `intervalMs` of simulated time until the returned function is called. */
  repeat(intervalMs: number, tick: () => void): () => void {
    if (this.frozen) return () => {};
    const timer = this.time.add(this, intervalMs, intervalMs, tick);
    return () => this.time.remove(timer);
  }

  /** Resolves once `delayMs` of simulated time passed (never for a frozen incarnation). */
  sleep(delayMs: number): Promise<void> {
    return new Promise((resolve) => {
      if (!this.frozen) this.time.add(this, delayMs, null, resolve);
    });
  }

  /** Resolves after a real turn of the event loop (never for a frozen incarnation). */
  yieldTurn(): Promise<void> {
    return this.time.yieldTurn(this);
  }

  /** The incarnation crashed: its timers never fire again and nothing it waits on resumes. */
  freeze(): void {
    this.frozen = true;
    this.time.removeAllOf(this);
  }
}
