/**
 * The time a partition leader stamps publications with and expires messages by: this broker's wall clock corrected
 * towards the other brokers' clocks, so that one broker whose clock is wrong cannot decide alone when a message
 * expires.
 *
 * Why: a message's deadline is its publication time plus its time to live, both recorded in the partition's log, and
 * the leader proposes the expiry once its clock passes a deadline; the expiry is replicated, so it cannot be undone.
 * With each leader's own clock, a broker whose clock ran three hours ahead deleted, as soon as it led, every message
 * with less than three hours left, however correct the other brokers' clocks were.
 *
 * How: every gossip message carries its sender's wall clock (`sentAtMs`). Each sample of a peer's offset
 * (`sentAtMs` minus this broker's clock on arrival) is the true offset less the message's delay, never more, so a
 * peer's offset is the largest of its recent samples. The correction is the lower median of the offsets of this broker
 * (zero) and of the peers heard from recently: with three brokers one wrong clock is outvoted whichever way it is
 * wrong; with two, the slower clock wins, so a disagreement delays an expiry rather than bringing it forward. Pure: the
 * caller passes the wall clock readings.
 */

/** Samples kept per peer: the largest of them is its offset, so a few late deliveries do not move it. */
const SAMPLES_PER_PEER = 8;

interface PeerSamples {
  readonly samples: number[];
  /** Where the next sample goes in `samples` (a ring). */
  next: number;
}

/** Offsets of other brokers' wall clocks from this one's, from the gossip they send. */
export class ClusterClock {
  private readonly peers = new Map<number, PeerSamples>();

  /** Records that a message broker `nodeId` sent at its `sentAtMs` arrived when this broker's clock read `nowMs`. */
  observe(nodeId: number, sentAtMs: number, nowMs: number): void {
    if (!Number.isFinite(sentAtMs)) throw new Error(`invariant violated: a gossip timestamp of ${sentAtMs}`);
    const offset = sentAtMs - nowMs;
    const peer = this.peers.get(nodeId);
    if (peer === undefined) {
      this.peers.set(nodeId, { samples: [offset], next: 1 % SAMPLES_PER_PEER });
      return;
    }
    peer.samples[peer.next] = offset;
    peer.next = (peer.next + 1) % SAMPLES_PER_PEER;
  }

  /** Broker `nodeId`'s clock minus this one's, in milliseconds, or undefined when it never sent its clock. */
  peerOffsetMs(nodeId: number): number | undefined {
    const peer = this.peers.get(nodeId);
    return peer === undefined ? undefined : Math.max(...peer.samples);
  }

  /**
   * What to add to this broker's wall clock: the lower median of zero (this broker) and the offsets of the peers
   * `counts` accepts (those heard from recently).
   */
  correctionMs(counts: (nodeId: number) => boolean): number {
    const offsets = [0];
    for (const nodeId of this.peers.keys()) {
      if (!counts(nodeId)) continue;
      offsets.push(this.peerOffsetMs(nodeId) as number);
    }
    offsets.sort((left, right) => left - right);
    return offsets[Math.floor((offsets.length - 1) / 2)] as number;
  }
}
