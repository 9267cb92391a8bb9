/**
 * The batch of work the core hands its driver. The driver must, in this order: send `messagesBeforePersist` (at
 * once, while the writes below are in progress: they never depend on them); durably write `snapshotReceipt`, install
 * `snapshot`, persist `entriesToPersist` and `hardState` (and store `compaction`); only then send `messages`; apply
 * `snapshot` (restore the state machine from the stored snapshot) and then `committedEntries`; serve `readStates`
 * once applied up to their index; fail `droppedReads`; and finally call `RaftNode.advance(ready)`. Calling `advance` is the durability acknowledgement:
 * the core never counts its own entries towards a commit, and never acknowledges entries to a leader, before it.
 * `committedEntries` are durable already (committed by a quorum and held in this member's storage), so a driver may
 * apply them, and serve reads, while this batch is still being persisted, unless the batch carries a `snapshot`.
 *
 * Why a leader may replicate before its own write is durable (dissertation §10.2.1): its appends and heartbeats
 * depend only on its term, which is already durable, and on entries it proposed itself. If it crashes before its
 * write completes, it simply lost entries nobody counted as committed: a commit needs a majority of DURABLE copies,
 * and the leader counts its own copy only after `advance`. A term or vote change is different: a member must not
 * speak in a term, or for a vote, it could forget in a crash, so a ready that changes either holds every message
 * back in `messages`.
 *
 * When `mustSync` is false the batch holds nothing that must be durable: its only hard-state change (if any) is the
 * commit index, which Raft treats as volatile (the paper's Figure 2). The driver then need not write `hardState` at
 * all, and must not wait for a durable write before sending `messages` or applying: the committed entries it applies
 * are already durable, and the next batch with `mustSync` carries the latest commit index to disk. A crash before
 * then restarts the member from an older durable commit index, which is safe: it never exceeds what was committed or
 * the durable log, the member re-applies from its snapshot up to it, and the leader tells it the rest.
 */
import type { Compaction, Entry, HardState, MemberId, SnapshotMetadata, SnapshotReceipt } from "../types.js";
import type { Message } from "./messages.js";
import type { ReadContext, ReadState } from "./read-index.js";

/** The role a member plays in its current term. */
export type Role = "follower" | "preCandidate" | "candidate" | "leader";

/** Volatile state worth reporting when it changes (not persisted). */
export interface SoftState {
  readonly role: Role;
  readonly leaderId: MemberId | null;
  readonly term: number;
}

/** One batch of outputs of the core. */
export interface Ready {
  /** Present when the role or the known leader changed. */
  readonly softState: SoftState | null;
  /**
   * Present when it changed, or when the commit index moved since the last synced batch and this one syncs. Persist
   * it before sending `messages` when `mustSync` is true; when false it may be dropped (only the commit index changed).
   */
  readonly hardState: HardState | null;
  /**
   * Whether this batch must be durable before `messages` leave and before `advance`: true when there are entries to
   * persist, snapshot chunks or a snapshot, or a term or vote change; false when the only hard-state change is the
   * commit index.
   */
  readonly mustSync: boolean;
  /** Entries to append durably; they replace any stored entries from the first one's index on. */
  readonly entriesToPersist: readonly Entry[];
  /**
   * Chunks of a snapshot being received from the leader, in order: store them first
   * (`RaftStorage.receiveSnapshotChunks`). The responses acknowledging them are in `messages`. A storage may
   * acknowledge chunks whose writes are still in progress; a restarted member resumes the receipt where its durable
   * bytes end, and the leader goes back there. The snapshot counts only once installed, after all of it is durable.
   */
  readonly snapshotReceipt: SnapshotReceipt | null;
  /**
   * A snapshot received from the leader is complete and its checksum matched: after writing `snapshotReceipt`,
   * verify and install it (`RaftStorage.finishSnapshotReceive`, which drops the whole log), then restore the state
   * machine from the stored snapshot. The core never holds the snapshot's data, only this metadata.
   */
  readonly snapshot: SnapshotMetadata | null;
  /**
   * A snapshot the application asked for (`RaftNode.compact`): store it durably with `RaftStorage.installSnapshot`,
   * which drops the entries it covers.
   */
  readonly compaction: Compaction | null;
  /** Committed, durable entries to apply in order. */
  readonly committedEntries: readonly Entry[];
  /**
   * Leader appends and heartbeats that may be sent before (or while) this batch is persisted. Always empty when
   * `hardState` changes the term or the vote.
   */
  readonly messagesBeforePersist: readonly Message[];
  /** Messages to send only once everything above is durable (responses, votes, anything else). */
  readonly messages: readonly Message[];
  /** Confirmed linearizable reads. */
  readonly readStates: readonly ReadState[];
  /** Reads that can no longer be confirmed (leadership lost); the application must fail or retry them. */
  readonly droppedReads: readonly ReadContext[];
}
