/**
 * Whole milliseconds on the process's monotonic clock, for deadlines, timeouts and durations. Unlike `Date.now()`,
 * a step of the wall clock (an NTP correction, an operator setting the time) does not move it: measured on the wall
 * clock, a step back of two hours made a timeout last two hours longer and a broker heard from before the step look
 * heard from just now. Whole, because several consumers (the transport's request timeouts) take integers only.
 */
export function monotonicNowMs(): number {
  return Math.floor(performance.now());
}

/**
 * Milliseconds since the epoch as this process's wall clock read at its start, plus the monotonic time since: a
 * clock that steps of the wall clock do not move, to compare other clocks with (see cluster-clock.ts).
 */
export function steadyEpochMs(): number {
  return performance.timeOrigin + performance.now();
}
