/**
 * The times a partition leader stamps publications with and expires messages by: the brokers' wall clocks, each
 * broker's reading taken by the median of them all, so that one broker whose clock is wrong cannot decide alone when a
 * message expires.
 *
 * Why: a message's deadline is its publication time plus its time to live, both recorded in the partition's log, and
 * the leader proposes the expiry once its clock passes a deadline; the expiry is replicated, so it cannot be undone.
 * With each leader's own clock, a broker whose clock ran three hours ahead deleted, as soon as it led, every message
 * with less than three hours left, however correct the other brokers' clocks were.
 *
 * How: every clock is compared with this broker's steady clock (`steadyEpochMs`), which steps of the wall clock do not
 * move. Every gossip message carries its sender's wall clock (`sentAtMs`); each sample of a peer's offset (`sentAtMs`
 * minus the steady clock on arrival) is the true offset less the message's delay, never more, so a peer's offset is
 * the largest of its recent samples. This broker's own offset is its wall clock minus its steady clock, read afresh:
 * a step of its own wall clock moves only its own entry, at once, and the peers' entries outvote it. (Measured from
 * the wall clock instead, a step forward of this broker's clock moved every peer's offset back, and the largest of
 * their old samples kept the correction for eight gossip rounds, stamping and expiring by a clock an hour ahead.)
 *
 * The time is the steady clock plus the median of the offsets of this broker and of the peers heard from recently:
 * with three brokers one wrong clock is outvoted whichever way it is wrong. With an even count the two middle clocks
 * may disagree: messages expire by the slower one and are stamped by the faster one, so a disagreement can make a
 * message live longer, never shorter (stamped by the slower clock, a message published while two brokers counted
 * would expire early once a third one came back with the faster time). Pure: the caller passes the clocks' readings.
 */

/** Samples kept per peer: the largest of them is its offset, so a few late deliveries do not move it. */
const SAMPLES_PER_PEER = 8;

/**
 * How much longer one gossip message of a peer may have taken than the one before for either to count as a sample.
 * Why: the transport keeps sending what it queued while a link was down once it is up again, so after a network
 * partition of 90 s a peer's messages arrived together, sent up to 90 s before: eight of them filled the samples, and
 * for a moment the broker took the peer's clock for 99 s behind (and warned so on every heal). Two consecutive
 * messages delayed alike arrive as far apart as they were sent; those of a burst, or the first after a gap, do not.
 */
const MAX_DELAY_DIFFERENCE_MS = 250;

interface PeerSamples {
  readonly samples: number[];
  /** Where the next sample goes in `samples` (a ring). */
  next: number;
  /** The last message heard from the peer: when it was sent (its wall clock) and arrived (the steady clock). */
  lastSentAtMs: number;
  lastArrivedAtMs: number;
}

/** The middle of the brokers' clocks, as offsets from this broker's steady clock. */
export interface ClockOffsets {
  /** The offset messages expire by: the lower median. */
  readonly expiryMs: number;
  /** The offset publications are stamped with: the upper median. */
  readonly publicationMs: number;
}

/** Offsets of the brokers' wall clocks from this broker's steady clock, from the gossip they send. */
export class ClusterClock {
  private readonly peers = new Map<number, PeerSamples>();

  /**
   * Records that a message broker `nodeId` sent at its `sentAtMs` arrived when this broker's steady clock read
   * `steadyMs`. It is a sample of the peer's offset only when it arrived as long after the peer's previous message as
   * it was sent after it (within `MAX_DELAY_DIFFERENCE_MS`), so the first message of a peer is none.
   */
  observe(nodeId: number, sentAtMs: number, steadyMs: number): void {
    if (!Number.isFinite(sentAtMs) || !Number.isFinite(steadyMs)) {
      throw new Error(`invariant violated: a gossip timestamp of ${sentAtMs} observed at ${steadyMs}`);
    }
    const peer = this.peers.get(nodeId);
    if (peer === undefined) {
      this.peers.set(nodeId, { samples: [], next: 0, lastSentAtMs: sentAtMs, lastArrivedAtMs: steadyMs });
      return;
    }
    const sentAfterMs = sentAtMs - peer.lastSentAtMs;
    const arrivedAfterMs = steadyMs - peer.lastArrivedAtMs;
    peer.lastSentAtMs = sentAtMs;
    peer.lastArrivedAtMs = steadyMs;
    if (sentAfterMs <= 0 || Math.abs(arrivedAfterMs - sentAfterMs) > MAX_DELAY_DIFFERENCE_MS) return;
    peer.samples[peer.next] = sentAtMs - steadyMs;
    peer.next = (peer.next + 1) % SAMPLES_PER_PEER;
  }

  /** Broker `nodeId`'s wall clock minus this broker's steady clock, or undefined before a sample of it. */
  peerOffsetMs(nodeId: number): number | undefined {
    const peer = this.peers.get(nodeId);
    return peer === undefined || peer.samples.length === 0 ? undefined : Math.max(...peer.samples);
  }

  /**
   * The medians of `ownOffsetMs` (this broker's wall clock minus its steady clock) and the offsets of the peers
   * `counts` accepts (those heard from recently).
   */
  offsets(ownOffsetMs: number, counts: (nodeId: number) => boolean): ClockOffsets {
    const offsets = [ownOffsetMs];
    for (const nodeId of this.peers.keys()) {
      const offsetMs = this.peerOffsetMs(nodeId);
      if (offsetMs !== undefined && counts(nodeId)) offsets.push(offsetMs);
    }
    offsets.sort((left, right) => left - right);
    return {
      expiryMs: offsets[Math.floor((offsets.length - 1) / 2)] as number,
      publicationMs: offsets[Math.floor(offsets.length / 2)] as number,
    };
  }
}
