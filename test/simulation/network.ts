/**
 * Simulated network: messages are delayed by a random number of ticks (which reorders them), dropped or
 * duplicated with configurable probabilities, and blocked by partitions, which may be asymmetric (A reaches B while B
 * does not reach A). Snapshot chunks may also arrive with a damaged byte: most of them damaged on the way, which the
 * checksum sent with the chunk tells, one in ten damaged before the sender computed that checksum (as a sender's
 * memory could be, far more rarely than that in truth), which only the checksum of the whole snapshot tells. Such a
 * damage makes the member reject the snapshot and the transfer start over, so a larger share would make transfers of
 * many chunks under chaos start over most of the time.
 */
import { crc32c } from "@node-rs/crc32";
import type { Message } from "../../src/cluster/raft/core/messages.js";
import type { SeededRandom } from "../../src/cluster/raft/core/random.js";
import type { MemberId } from "../../src/cluster/raft/types.js";

/** Fault settings of the network; changed by the harness while it runs. */
export interface NetworkFaults {
  dropProbability: number;
  duplicateProbability: number;
  /** Chance that a snapshot chunk arrives with one byte changed. */
  snapshotCorruptionProbability: number;
  minDelayTicks: number;
  maxDelayTicks: number;
}

interface InFlightMessage {
  readonly deliverAt: number;
  readonly sequence: number;
  readonly message: Message;
}

/** Bound on messages in flight; beyond it new messages are dropped (a congested network). */
const MAX_IN_FLIGHT = 20_000;

/** Moves messages between members with simulated faults. */
export class SimulatedNetwork {
  private queue: InFlightMessage[] = [];
  private sequence = 0;
  private readonly blocked = new Set<string>();
  faults: NetworkFaults = {
    dropProbability: 0,
    duplicateProbability: 0,
    snapshotCorruptionProbability: 0,
    minDelayTicks: 1,
    maxDelayTicks: 1,
  };
  sent = 0;
  /** Snapshot chunks damaged before their checksum was computed (only the whole snapshot's checksum can tell). */
  chunksDamagedBeforeChecksum = 0;
  /** Answers rejecting a whole snapshot, as members sent them (before drops, duplicates and partitions). */
  snapshotRejectionsSent = 0;
  /** Each member and snapshot (`member:index:term`) that some rejection named. */
  private readonly rejectedSnapshots = new Set<string>();

  /** When each link's latest snapshot chunk is due (`orderedSnapshotChunks`). */
  private readonly lastChunkDueAt = new Map<string, number>();

  /**
   * With `orderedSnapshotChunks`, snapshot chunks on each link arrive in the order they were sent (still delayed,
   * dropped, duplicated and damaged), as on the one TCP connection a broker's transport keeps per peer. Reordered
   * freely, chunks of a few hundred bytes left nearly every window to the leader's resend timeout (the member accepts
   * chunks only in order), and a transfer of a hundred chunks outlasted the liveness bounds after healing.
   */
  constructor(
    private readonly random: SeededRandom,
    private readonly options: { readonly orderedSnapshotChunks?: boolean } = {},
  ) {}

  /** Queues a message (or drops or duplicates it). */
  send(message: Message, now: number): void {
    this.sent++;
    if (message.type === "snapshotResponse" && message.status === "rejected") {
      this.snapshotRejectionsSent++;
      this.rejectedSnapshots.add(`${message.from}:${message.snapshotIndex}:${message.snapshotTerm}`);
    }
    if (this.blocked.has(linkKey(message.from, message.to))) return;
    if (this.random.chance(this.faults.dropProbability)) return;
    if (
      message.type === "snapshotChunk" &&
      message.data.byteLength > 0 &&
      this.random.chance(this.faults.snapshotCorruptionProbability)
    ) {
      const data = message.data.slice();
      const position = this.random.nextInt(data.byteLength);
      data[position] = (data[position] ?? 0) ^ 0x20;
      const beforeChecksum = this.random.chance(0.1);
      if (beforeChecksum) this.chunksDamagedBeforeChecksum++;
      message = { ...message, data, ...(beforeChecksum ? { checksum: crc32c(data) >>> 0 } : {}) };
    }
    const copies = this.random.chance(this.faults.duplicateProbability) ? 2 : 1;
    for (let copy = 0; copy < copies; copy++) {
      if (this.queue.length >= MAX_IN_FLIGHT) return;
      const spread = this.faults.maxDelayTicks - this.faults.minDelayTicks + 1;
      const delay = this.faults.minDelayTicks + this.random.nextInt(Math.max(1, spread));
      let deliverAt = now + delay;
      if (message.type === "snapshotChunk" && this.options.orderedSnapshotChunks === true) {
        // Due no earlier than the chunk before it on this link; equal times deliver in sending order.
        const link = linkKey(message.from, message.to);
        deliverAt = Math.max(deliverAt, this.lastChunkDueAt.get(link) ?? 0);
        this.lastChunkDueAt.set(link, deliverAt);
      }
      this.queue.push({ deliverAt, sequence: this.sequence++, message });
    }
  }

  /**
   * How many distinct pairs of a member and a snapshot were rejected. A member that crashes between a rejection and the
   * next receipt resumes the rejected bytes from its storage and rejects them once more, so answers overcount.
   */
  get distinctSnapshotRejections(): number {
    return this.rejectedSnapshots.size;
  }

  /** Removes and returns the messages due at `now`, in delivery order. */
  deliverDue(now: number): Message[] {
    const due: InFlightMessage[] = [];
    const remaining: InFlightMessage[] = [];
    for (const item of this.queue) (item.deliverAt <= now ? due : remaining).push(item);
    this.queue = remaining;
    due.sort((left, right) => left.deliverAt - right.deliverAt || left.sequence - right.sequence);
    // A partition that starts while a message is in flight stops it too.
    return due.map((item) => item.message).filter((message) => !this.blocked.has(linkKey(message.from, message.to)));
  }

  /** Blocks messages from `from` to `to` (one direction). */
  block(from: MemberId, to: MemberId): void {
    this.blocked.add(linkKey(from, to));
  }

  /** Splits members into groups that cannot reach each other. */
  partition(groups: readonly (readonly MemberId[])[]): void {
    for (const group of groups) {
      for (const other of groups) {
        if (other === group) continue;
        for (const from of group) for (const to of other) this.block(from, to);
      }
    }
  }

  /** Removes every partition. */
  heal(): void {
    this.blocked.clear();
  }

  /** Drops everything in flight from or to a member (it left the group for good). */
  dropAllFor(member: MemberId): void {
    this.queue = this.queue.filter((item) => item.message.from !== member && item.message.to !== member);
  }

  /** Messages in flight. */
  inFlight(): number {
    return this.queue.length;
  }
}

function linkKey(from: MemberId, to: MemberId): string {
  return `${from}>${to}`;
}
