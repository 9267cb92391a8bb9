import { describe, expect, it } from "vitest";
import { ClusterClock } from "../../../src/cluster/broker/cluster-clock.js";

const HOUR_MS = 3_600_000;
const everyone = (): boolean => true;

describe("ClusterClock", () => {
  it("outvotes one broker whose clock is wrong, whichever way it is wrong", () => {
    const ahead = new ClusterClock();
    ahead.observe(1, 1_000, 1_000);
    ahead.observe(2, 1_000 + 3 * HOUR_MS, 1_000);
    expect(ahead.correctionMs(everyone)).toBe(0);

    // Seen from the broker whose clock is three hours ahead: both others are three hours behind it.
    const wrong = new ClusterClock();
    wrong.observe(0, 1_000, 1_000 + 3 * HOUR_MS);
    wrong.observe(1, 1_000, 1_000 + 3 * HOUR_MS);
    expect(wrong.correctionMs(everyone)).toBe(-3 * HOUR_MS);

    const behind = new ClusterClock();
    behind.observe(1, 1_000, 1_000);
    behind.observe(2, 1_000 - 3 * HOUR_MS, 1_000);
    expect(behind.correctionMs(everyone)).toBe(0);
  });

  it("follows the slower clock when two brokers disagree, so that an expiry comes late rather than early", () => {
    const correct = new ClusterClock();
    correct.observe(1, 1_000 + HOUR_MS, 1_000);
    expect(correct.correctionMs(everyone)).toBe(0);
    const fast = new ClusterClock();
    fast.observe(0, 1_000, 1_000 + HOUR_MS);
    expect(fast.correctionMs(everyone)).toBe(-HOUR_MS);
  });

  it("takes a peer's offset from its least delayed recent message, and counts only the peers it is told to", () => {
    const clock = new ClusterClock();
    // The same offset of +5 s, seen through delays of 0 to 300 ms.
    for (const delayMs of [300, 0, 120, 45]) clock.observe(1, 10_000 + 5_000, 10_000 + delayMs);
    expect(clock.peerOffsetMs(1)).toBe(5_000);
    clock.observe(2, 10_000 + 7_000, 10_000);
    expect(clock.correctionMs(everyone)).toBe(5_000);
    // Broker 1 no longer heard from: the lower median of 0 and +7 s.
    expect(clock.correctionMs((nodeId) => nodeId !== 1)).toBe(0);
    expect(clock.peerOffsetMs(3)).toBeUndefined();
  });

  it("forgets samples older than its window, so a peer whose clock was corrected counts as corrected", () => {
    const clock = new ClusterClock();
    clock.observe(1, HOUR_MS, 0);
    for (let sample = 0; sample < 8; sample++) clock.observe(1, 0, 0);
    expect(clock.peerOffsetMs(1)).toBe(0);
  });
});
