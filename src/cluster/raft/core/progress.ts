/**
 * What a leader knows about each member's log, and the flow control that bounds what it sends.
 *
 * - probe: the leader does not know where the member's log matches; it sends one append at a time and waits.
 * - replicate: the member is in sync; the leader pipelines appends optimistically, bounded by `Inflights`.
 * - snapshot: the member is behind the start of the leader's log and receives a snapshot in chunks, a window of them
 *   at a time (`SnapshotTransfer`).
 */
import type { MemberId } from "../types.js";
import type { SnapshotTransfer } from "./snapshot-transfer.js";

/** A bounded window of append messages in flight to one member, by count and by bytes. */
export class Inflights {
  private readonly items: { lastIndex: number; bytes: number }[] = [];
  private totalBytes = 0;

  constructor(
    private readonly maxMessages: number,
    private readonly maxBytes: number,
  ) {
    if (maxMessages < 1) throw new Error("inflights: maxMessages must be ≥ 1");
    if (maxBytes < 1) throw new Error("inflights: maxBytes must be ≥ 1");
  }

  /** Records a sent message whose last entry is `lastIndex`. */
  add(lastIndex: number, bytes: number): void {
    if (this.full()) throw new Error("inflights: adding to a full window breaks flow control");
    const last = this.items[this.items.length - 1];
    if (last && lastIndex <= last.lastIndex) {
      throw new Error(`inflights: index ${lastIndex} not after ${last.lastIndex}`);
    }
    this.items.push({ lastIndex, bytes });
    this.totalBytes += bytes;
  }

  /** Forgets every message acknowledged by an acknowledgement up to `index`. */
  freeUpTo(index: number): void {
    let count = 0;
    while (count < this.items.length && (this.items[count]?.lastIndex ?? Number.POSITIVE_INFINITY) <= index) {
      this.totalBytes -= this.items[count]?.bytes ?? 0;
      count++;
    }
    this.items.splice(0, count);
  }

  /** Frees the oldest message (a heartbeat response proves the member is alive even if an append was lost). */
  freeFirst(): void {
    const first = this.items.shift();
    if (first) this.totalBytes -= first.bytes;
  }

  /** Whether no more messages may be sent. */
  full(): boolean {
    return this.items.length >= this.maxMessages || this.totalBytes >= this.maxBytes;
  }

  /** Number of messages in flight. */
  count(): number {
    return this.items.length;
  }

  /** Bytes in flight. */
  bytes(): number {
    return this.totalBytes;
  }

  /** Forgets everything (on a state change). */
  reset(): void {
    this.items.length = 0;
    this.totalBytes = 0;
  }
}

/** The replication progress of one member, as seen by the leader. */
export class Progress {
  state: "probe" | "replicate" | "snapshot" = "probe";
  match = 0;
  next: number;
  /** In probe state: an append was sent and not answered yet. */
  probeSent = false;
  /** Heard from during the current check-quorum period. */
  recentActive = false;
  /** Highest read-index sequence the member has echoed in the current term. */
  readSequence = 0;
  /** Commit index carried by the latest append sent to the member, so a commit broadcast can skip it when current. */
  sentCommitIndex = 0;
  /** For a learner: the tick since which it has been caught up (see `RaftNodeOptions.promotionLagEntries`), or null. */
  caughtUpSinceTick: number | null = null;
  snapshotTransfer: SnapshotTransfer | null = null;
  readonly inflights: Inflights;

  constructor(
    readonly member: MemberId,
    next: number,
    maxInflightMessages: number,
    maxInflightBytes: number,
  ) {
    this.next = next;
    this.inflights = new Inflights(maxInflightMessages, maxInflightBytes);
  }

  /** Probe: send one message at a time, starting at `match + 1`. */
  becomeProbe(): void {
    this.state = "probe";
    this.next = this.match + 1;
    this.probeSent = false;
    this.snapshotTransfer = null;
    this.inflights.reset();
  }

  /** Replicate: pipeline appends after `match`. */
  becomeReplicate(): void {
    this.state = "replicate";
    this.next = this.match + 1;
    this.probeSent = false;
    this.snapshotTransfer = null;
    this.inflights.reset();
  }

  /** Snapshot: the member needs the given snapshot. */
  becomeSnapshot(transfer: SnapshotTransfer): void {
    this.state = "snapshot";
    this.probeSent = false;
    this.inflights.reset();
    this.snapshotTransfer = transfer;
  }

  /** Records an acknowledged index; returns whether it was news. */
  maybeUpdate(index: number): boolean {
    let updated = false;
    if (index > this.match) {
      this.match = index;
      updated = true;
      this.probeSent = false;
    }
    this.next = Math.max(this.next, index + 1);
    return updated;
  }

  /**
   * Handles a rejected append for `rejected` with the member's hint; returns false when the rejection is stale (it
   * answers a message sent before the last state change).
   */
  maybeDecreaseTo(rejected: number, matchHint: number): boolean {
    if (this.state === "replicate") {
      if (rejected <= this.match) return false;
      this.next = this.match + 1;
      return true;
    }
    if (this.next - 1 !== rejected) return false;
    this.next = Math.max(Math.min(rejected, matchHint + 1), this.match + 1, 1);
    this.probeSent = false;
    return true;
  }

  /** Whether the leader must hold back appends to this member. */
  isPaused(): boolean {
    switch (this.state) {
      case "probe":
        return this.probeSent;
      case "replicate":
        return this.inflights.full();
      case "snapshot":
        return true;
    }
  }
}
