/**
 * A source of the current instant in epoch milliseconds. Services take one instead of calling `Date.now()` so
 * tests decide what time it is (no sleeping) and replicas can be simulated with skewed clocks.
 */
export type Clock = () => number;

/** The wall clock of this process. */
export const systemClock: Clock = () => Date.now();
