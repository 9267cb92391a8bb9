/**
 * Read index (Raft dissertation §6.4): a leader answers a linearizable read by recording its commit index,
 * confirming with a heartbeat round that a majority still follows it, and releasing the read at that index. The
 * application serves the read once it has applied up to the index. A leader that has not yet committed an entry of
 * its own term does not know the latest commit index, so reads wait until it has.
 */
/** Opaque identifier the application attaches to a read. */
export type ReadContext = string;

/** A confirmed read: serve it once the state machine has applied `index`. */
export interface ReadState {
  readonly context: ReadContext;
  readonly index: number;
}

interface PendingRead {
  readonly context: ReadContext;
  readonly index: number;
  readonly sequence: number;
}

/** Pending reads of the current leadership term, confirmed by heartbeat sequence numbers. */
export class ReadIndexTracker {
  private readonly waitingForCommit: ReadContext[] = [];
  private readonly pending: PendingRead[] = [];
  private sequence = 0;

  constructor(private readonly maxPendingReads: number) {}

  /** Number of reads not yet confirmed. */
  size(): number {
    return this.waitingForCommit.length + this.pending.length;
  }

  /** Whether another read may be queued. */
  hasRoom(): boolean {
    return this.size() < this.maxPendingReads;
  }

  /** Queues a read until the leader has committed an entry of its term. */
  waitForCommit(context: ReadContext): void {
    this.waitingForCommit.push(context);
  }

  /** Takes the reads that waited for the first commit of the term. */
  takeWaiting(): ReadContext[] {
    return this.waitingForCommit.splice(0, this.waitingForCommit.length);
  }

  /** Registers a read at `commitIndex`; returns the sequence number the next heartbeat round must carry. */
  add(context: ReadContext, commitIndex: number): number {
    this.sequence++;
    this.pending.push({ context, index: commitIndex, sequence: this.sequence });
    return this.sequence;
  }

  /** The sequence number of the latest registered read. */
  currentSequence(): number {
    return this.sequence;
  }

  /**
   * Releases every read whose sequence a majority has echoed (`confirmedSequence` is the majority-acknowledged
   * sequence, counting the leader itself).
   */
  confirm(confirmedSequence: number): ReadState[] {
    let count = 0;
    while (
      count < this.pending.length &&
      (this.pending[count]?.sequence ?? Number.POSITIVE_INFINITY) <= confirmedSequence
    ) {
      count++;
    }
    return this.pending.splice(0, count).map(({ context, index }) => ({ context, index }));
  }

  /** Drops every read (leadership lost); returns their contexts so the application can fail them. */
  dropAll(): ReadContext[] {
    const dropped = [...this.waitingForCommit, ...this.pending.map((read) => read.context)];
    this.waitingForCommit.length = 0;
    this.pending.length = 0;
    return dropped;
  }

  /** Resets sequences for a new leadership term. */
  reset(): void {
    this.dropAll();
    this.sequence = 0;
  }
}
