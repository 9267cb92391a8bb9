/** Simulated time, in ticks; one tick is one `RaftNode.tick()` on every running member. */
export class SimulatedClock {
  private current = 0;

  /** The current tick. */
  now(): number {
    return this.current;
  }

  /** Moves time forward by one tick. */
  advance(): number {
    this.current++;
    return this.current;
  }
}
