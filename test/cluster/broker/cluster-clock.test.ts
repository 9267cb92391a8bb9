import { describe, expect, it } from "vitest";
import { ClusterClock } from "../../../src/cluster/broker/cluster-clock.js";

const HOUR_MS = 3_600_000;
const everyone = (): boolean => true;

/**
 * Broker `nodeId`, whose wall clock is `offsetMs` from the observer's steady clock, gossips `count` times a second
 * apart from the observer's steady time `fromMs`, each message arriving `delayMs` after it was sent; returns the
 * steady time after the last one.
 */
function gossip(clock: ClusterClock, nodeId: number, offsetMs: number, fromMs: number, count = 3, delayMs = 0) {
  let steadyMs = fromMs;
  for (let message = 0; message < count; message++) {
    clock.observe(nodeId, steadyMs + offsetMs, steadyMs + delayMs);
    steadyMs += 1_000;
  }
  return steadyMs;
}

// Offsets are from the observing broker's steady clock.
describe("ClusterClock", () => {
  it("outvotes one broker whose clock is wrong, whichever way it is wrong", () => {
    const ahead = new ClusterClock();
    gossip(ahead, 1, 0, 1_000);
    gossip(ahead, 2, 3 * HOUR_MS, 1_000);
    expect(ahead.offsets(0, everyone)).toEqual({ expiryMs: 0, publicationMs: 0 });

    // Seen from the broker whose wall clock is three hours ahead of the others (and of its steady clock).
    const wrong = new ClusterClock();
    gossip(wrong, 0, 0, 1_000);
    gossip(wrong, 1, 0, 1_000);
    expect(wrong.offsets(3 * HOUR_MS, everyone)).toEqual({ expiryMs: 0, publicationMs: 0 });

    const behind = new ClusterClock();
    gossip(behind, 1, 0, 1_000);
    gossip(behind, 2, -3 * HOUR_MS, 1_000);
    expect(behind.offsets(0, everyone)).toEqual({ expiryMs: 0, publicationMs: 0 });
  });

  it("is not moved by a step of this broker's own wall clock while the others agree", () => {
    // A broker whose wall clock was an hour behind when it started (so its steady clock is too): the peers read +1 h.
    const clock = new ClusterClock();
    gossip(clock, 1, HOUR_MS, 1_000, 10);
    gossip(clock, 2, HOUR_MS, 1_000, 10);
    expect(clock.offsets(0, everyone).expiryMs).toBe(HOUR_MS);
    // Its wall clock is stepped right: only its own offset moves, and the time stays the peers'.
    expect(clock.offsets(HOUR_MS, everyone)).toEqual({ expiryMs: HOUR_MS, publicationMs: HOUR_MS });
    // Stepped an hour too far: outvoted at once, with no gossip in between.
    expect(clock.offsets(2 * HOUR_MS, everyone)).toEqual({ expiryMs: HOUR_MS, publicationMs: HOUR_MS });
  });

  it("expires by the slower and stamps by the faster of two clocks that disagree, so a message lives longer, not shorter", () => {
    const correct = new ClusterClock();
    gossip(correct, 1, HOUR_MS, 1_000);
    expect(correct.offsets(0, everyone)).toEqual({ expiryMs: 0, publicationMs: HOUR_MS });
    const fast = new ClusterClock();
    gossip(fast, 0, -HOUR_MS, 1_000);
    expect(fast.offsets(0, everyone)).toEqual({ expiryMs: -HOUR_MS, publicationMs: 0 });
    // Four brokers: the two middle clocks decide.
    const four = new ClusterClock();
    gossip(four, 1, -HOUR_MS, 1_000);
    gossip(four, 2, 2 * HOUR_MS, 1_000);
    gossip(four, 3, 5 * HOUR_MS, 1_000);
    expect(four.offsets(0, everyone)).toEqual({ expiryMs: 0, publicationMs: 2 * HOUR_MS });
  });

  it("takes a peer's offset from its least delayed recent message, and counts only the peers it is told to", () => {
    const clock = new ClusterClock();
    // The same offset of +5 s, seen through delays of 0 to 120 ms.
    let steadyMs = 10_000;
    for (const delayMs of [100, 0, 120, 45, 60]) {
      clock.observe(1, steadyMs + 5_000, steadyMs + delayMs);
      steadyMs += 1_000;
    }
    expect(clock.peerOffsetMs(1)).toBe(5_000);
    gossip(clock, 2, 7_000, 10_000);
    expect(clock.offsets(0, everyone)).toEqual({ expiryMs: 5_000, publicationMs: 5_000 });
    // Broker 1 no longer heard from: 0 and +7 s.
    expect(clock.offsets(0, (nodeId) => nodeId !== 1)).toEqual({ expiryMs: 0, publicationMs: 7_000 });
    expect(clock.peerOffsetMs(3)).toBeUndefined();
  });

  it("forgets samples older than its window, so a peer whose clock was corrected counts as corrected", () => {
    const clock = new ClusterClock();
    const afterMs = gossip(clock, 1, HOUR_MS, 0, 3);
    // The peer's clock is stepped back an hour: the message across the step is no sample, the next eight are.
    gossip(clock, 1, 0, afterMs, 9);
    expect(clock.peerOffsetMs(1)).toBe(0);
  });

  it("takes no sample from messages that arrive together after a network partition, sent long apart", () => {
    const clock = new ClusterClock();
    const cutAtMs = gossip(clock, 1, 0, 0, 5);
    expect(clock.peerOffsetMs(1)).toBe(0);
    // Ninety seconds cut off: the peer's messages of the first 20 s were queued and arrive at once when it heals.
    const healedAtMs = cutAtMs + 90_000;
    for (let message = 0; message < 20; message++) clock.observe(1, cutAtMs + message * 1_000, healedAtMs + message);
    expect(clock.peerOffsetMs(1)).toBe(0);
    // So does a new observer, which takes no offset from such a burst (it would read the peer as 70–90 s behind).
    const fresh = new ClusterClock();
    for (let message = 0; message < 20; message++) fresh.observe(1, cutAtMs + message * 1_000, healedAtMs + message);
    expect(fresh.peerOffsetMs(1)).toBeUndefined();
    // The messages sent after the heal, a second apart, are samples again.
    gossip(fresh, 1, 0, healedAtMs + 1_000, 2);
    expect(fresh.peerOffsetMs(1)).toBe(0);
  });
});
