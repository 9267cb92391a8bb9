import { describe, expect, it } from "vitest";
import { ClusterClock } from "../../../src/cluster/broker/cluster-clock.js";

const HOUR_MS = 3_600_000;
const everyone = (): boolean => true;

// Offsets are from the observing broker's steady clock, which these tests keep at 1,000 ms unless they move it.
describe("ClusterClock", () => {
  it("outvotes one broker whose clock is wrong, whichever way it is wrong", () => {
    const ahead = new ClusterClock();
    ahead.observe(1, 1_000, 1_000);
    ahead.observe(2, 1_000 + 3 * HOUR_MS, 1_000);
    expect(ahead.offsets(0, everyone)).toEqual({ expiryMs: 0, publicationMs: 0 });

    // Seen from the broker whose wall clock is three hours ahead of the others (and of its steady clock).
    const wrong = new ClusterClock();
    wrong.observe(0, 1_000, 1_000);
    wrong.observe(1, 1_000, 1_000);
    expect(wrong.offsets(3 * HOUR_MS, everyone)).toEqual({ expiryMs: 0, publicationMs: 0 });

    const behind = new ClusterClock();
    behind.observe(1, 1_000, 1_000);
    behind.observe(2, 1_000 - 3 * HOUR_MS, 1_000);
    expect(behind.offsets(0, everyone)).toEqual({ expiryMs: 0, publicationMs: 0 });
  });

  it("is not moved by a step of this broker's own wall clock while the others agree", () => {
    // A broker whose wall clock was an hour behind when it started (so its steady clock is too): the peers read +1 h.
    const clock = new ClusterClock();
    for (let gossip = 0; gossip < 8; gossip++) {
      clock.observe(1, 1_000 + HOUR_MS, 1_000);
      clock.observe(2, 1_000 + HOUR_MS, 1_000);
    }
    expect(clock.offsets(0, everyone).expiryMs).toBe(HOUR_MS);
    // Its wall clock is stepped right: only its own offset moves, and the time stays the peers'.
    expect(clock.offsets(HOUR_MS, everyone)).toEqual({ expiryMs: HOUR_MS, publicationMs: HOUR_MS });
    // Stepped an hour too far: outvoted at once, with no gossip in between.
    expect(clock.offsets(2 * HOUR_MS, everyone)).toEqual({ expiryMs: HOUR_MS, publicationMs: HOUR_MS });
  });

  it("expires by the slower and stamps by the faster of two clocks that disagree, so a message lives longer, not shorter", () => {
    const correct = new ClusterClock();
    correct.observe(1, 1_000 + HOUR_MS, 1_000);
    expect(correct.offsets(0, everyone)).toEqual({ expiryMs: 0, publicationMs: HOUR_MS });
    const fast = new ClusterClock();
    fast.observe(0, 1_000 - HOUR_MS, 1_000);
    expect(fast.offsets(0, everyone)).toEqual({ expiryMs: -HOUR_MS, publicationMs: 0 });
    // The same four brokers in both orders: the two middle clocks decide.
    const four = new ClusterClock();
    four.observe(1, 1_000 - HOUR_MS, 1_000);
    four.observe(2, 1_000 + 2 * HOUR_MS, 1_000);
    four.observe(3, 1_000 + 5 * HOUR_MS, 1_000);
    expect(four.offsets(0, everyone)).toEqual({ expiryMs: 0, publicationMs: 2 * HOUR_MS });
  });

  it("takes a peer's offset from its least delayed recent message, and counts only the peers it is told to", () => {
    const clock = new ClusterClock();
    // The same offset of +5 s, seen through delays of 0 to 300 ms.
    for (const delayMs of [300, 0, 120, 45]) clock.observe(1, 10_000 + 5_000, 10_000 + delayMs);
    expect(clock.peerOffsetMs(1)).toBe(5_000);
    clock.observe(2, 10_000 + 7_000, 10_000);
    expect(clock.offsets(0, everyone)).toEqual({ expiryMs: 5_000, publicationMs: 5_000 });
    // Broker 1 no longer heard from: 0 and +7 s.
    expect(clock.offsets(0, (nodeId) => nodeId !== 1)).toEqual({ expiryMs: 0, publicationMs: 7_000 });
    expect(clock.peerOffsetMs(3)).toBeUndefined();
  });

  it("forgets samples older than its window, so a peer whose clock was corrected counts as corrected", () => {
    const clock = new ClusterClock();
    clock.observe(1, HOUR_MS, 0);
    for (let sample = 0; sample < 8; sample++) clock.observe(1, 0, 0);
    expect(clock.peerOffsetMs(1)).toBe(0);
  });
});
