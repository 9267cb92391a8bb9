/**
 * The Raft node: a pure, deterministic state machine in the shape of etcd-io/raft. Inputs are `tick`, `step`
 * (received messages), proposals, configuration changes, read requests and `advance` (the durability
 * acknowledgement); outputs come out of `ready`. There are no timers, sockets, disk or clocks in here, and the
 * only randomness comes from the injected `RandomSource`.
 */
import type {
  Compaction,
  Configuration,
  Entry,
  EntryKind,
  ForcedMembership,
  HardState,
  Member,
  MemberId,
  PersistedState,
  PreparedSnapshotData,
  SnapshotChunk,
  SnapshotDigest,
  SnapshotMetadata,
  SnapshotReceipt,
} from "../types.js";
import {
  applyChange,
  assertValidConfiguration,
  type ConfigurationChange,
  ConfigurationHistory,
  decodeConfiguration,
  EMPTY_CONFIGURATION,
  encodeConfiguration,
  isVoter,
  memberOf,
  sameConfiguration,
  votersOf,
} from "./configuration.js";
import { RaftLog, type StableLog } from "./log.js";
import {
  type AppendMessage,
  type AppendResponseMessage,
  entriesSizeBytes,
  type HeartbeatMessage,
  type HeartbeatResponseMessage,
  type Message,
  type SnapshotChunkMessage,
  type SnapshotResponseMessage,
  type VoteRequestMessage,
  type VoteResponseMessage,
} from "./messages.js";
import { Progress } from "./progress.js";
import { committedIndex, voteOutcome } from "./quorum.js";
import type { RandomSource } from "./random.js";
import { type ReadContext, ReadIndexTracker, type ReadState } from "./read-index.js";
import type { Ready, Role, SoftState } from "./ready.js";
import { SnapshotReceiver, SnapshotTransfer, sameSnapshot, snapshotChecksum } from "./snapshot-transfer.js";

/** Explicit options of a node; there are no hidden defaults. */
export interface RaftNodeOptions {
  readonly id: MemberId;
  /** Read access to the durable log (the storage itself satisfies it). */
  readonly storage: StableLog;
  /** What the storage holds (from `RaftStorage.load()`). */
  readonly persisted: PersistedState;
  /** Configuration of a founding member whose storage is empty; ignored when the storage holds anything. */
  readonly bootstrap: Configuration | null;
  /** Minimum ticks without hearing from a leader before campaigning; the actual timeout is randomized above it. */
  readonly electionTimeoutTicks: number;
  /** Ticks between leader heartbeats; must be smaller than the election timeout. */
  readonly heartbeatTimeoutTicks: number;
  /** Flow control: append messages in flight to one member. */
  readonly maxInflightMessages: number;
  /**
   * Flow control: entry bytes in flight to one member (data and overhead, as `entriesSizeBytes` counts them). Nothing
   * more is sent once they reach it, but the message that reaches it is a whole one (`maxBytesPerMessage` of data,
   * or a single larger entry), so they may pass it by that message.
   */
  readonly maxInflightBytes: number;
  /** Batching: entries per append message. */
  readonly maxEntriesPerMessage: number;
  /** Batching: entry bytes per append message (at least one entry is always sent). */
  readonly maxBytesPerMessage: number;
  /** Size of one snapshot chunk (the receiving member's storage must accept chunks this large). */
  readonly snapshotChunkBytes: number;
  /**
   * Flow control of a snapshot transfer: chunks in flight to one member beyond the offset it acknowledged. The leader
   * reads each chunk from its storage as it sends it, so a transfer costs the leader at most this many chunks of
   * memory (in its outbox and the transport), and the member about as much (in its inbox and its next write).
   */
  readonly snapshotWindowChunks: number;
  /**
   * Ticks a snapshot transfer waits for an acknowledgement that moves its window before it sends the window again
   * from the acknowledged offset; nothing else resends a chunk. Choose it above the round trip including the member's
   * write of a window: a shorter one only resends chunks that were not lost (bounded by one window per timeout). The
   * drivers use the election timeout: a member that cannot answer within one is not keeping up with the group anyway.
   */
  readonly snapshotResendTicks: number;
  /** Committed entries handed out per ready batch. */
  readonly maxCommittedEntriesPerReady: number;
  /** Reads waiting for confirmation at once; further reads are refused. */
  readonly maxPendingReads: number;
  /** Entries a leader holds beyond its commit index; further proposals are refused until some commit. */
  readonly maxUncommittedEntries: number;
  /**
   * A learner counts as caught up while it is replicating and trails the commit index by at most this many entries.
   * Under a steady stream of writes a learner is almost never at the commit index itself, so requiring that would
   * starve its promotion; a bounded lag keeps the promotion from costing availability all the same.
   */
  readonly promotionLagEntries: number;
  /** Ticks a learner must have stayed caught up before the leader accepts its promotion. */
  readonly promotionStableTicks: number;
  readonly random: RandomSource;
  /** Pre-vote (dissertation §9.6): campaign only after a majority would grant the vote. */
  readonly preVote: boolean;
  /** Check-quorum (dissertation §6.2): a leader steps down when it has not heard from a majority for a timeout. */
  readonly checkQuorum: boolean;
}

/** Why a request was refused. */
export type Refusal =
  | { readonly accepted: false; readonly reason: "notLeader"; readonly leaderId: MemberId | null }
  | { readonly accepted: false; readonly reason: "transferringLeadership" }
  | { readonly accepted: false; readonly reason: "changeInProgress" }
  | { readonly accepted: false; readonly reason: "leaderNotReady" }
  | { readonly accepted: false; readonly reason: "learnerBehind" }
  | { readonly accepted: false; readonly reason: "invalid"; readonly detail: string }
  | { readonly accepted: false; readonly reason: "tooManyReads" }
  | { readonly accepted: false; readonly reason: "tooManyUncommitted" };

/** Result of a proposal: where the entry was appended, or why it was refused. */
export type ProposalResult = { readonly accepted: true; readonly index: number; readonly term: number } | Refusal;

/** Result of a request that does not append an entry (a read, a leadership transfer). */
export type RequestResult = { readonly accepted: true } | Refusal;

/** The explicit acknowledgement a forced reconfiguration requires. */
export interface ForceReconfigurationOptions {
  /** Entries that were not committed, or committed only on members outside the new set, may be lost. */
  readonly acceptDataLoss: true;
}

/** A snapshot of the node's state for drivers, tests and invariant checkers. */
export interface NodeStatus {
  readonly id: MemberId;
  readonly role: Role;
  readonly term: number;
  readonly votedFor: MemberId | null;
  readonly leaderId: MemberId | null;
  readonly commitIndex: number;
  readonly appliedIndex: number;
  readonly firstIndex: number;
  readonly lastIndex: number;
  readonly stableLastIndex: number;
  readonly configuration: Configuration;
  readonly forced: boolean;
  /** Members a forced reconfiguration left out (see `HardState.fencedMembers`). */
  readonly fencedMembers: readonly MemberId[];
  readonly leadTransferee: MemberId | null;
}

/**
 * Snapshot data a member received damaged, counted since its node was created (`RaftNode.receiptDamage`).
 * `chunksDamaged`: chunks whose bytes failed the checksum sent with them; `snapshotsRejected`: snapshots whose whole
 * checksum failed after their last byte; `lastSenderId`: the leader that sent the latest damaged data (null before any).
 */
export interface ReceiptDamage {
  readonly chunksDamaged: number;
  readonly snapshotsRejected: number;
  readonly lastSenderId: MemberId | null;
}

interface InFlightReady {
  readonly ready: Ready;
  readonly lastEntry: Entry | null;
}

type CampaignKind = "preVote" | "election" | "transfer";

/** A member of one Raft group. */
export class RaftNode {
  readonly id: MemberId;
  private readonly options: RaftNodeOptions;
  private readonly log: RaftLog;
  private readonly history: ConfigurationHistory;
  private readonly reads: ReadIndexTracker;

  private term: number;
  private votedFor: MemberId | null;
  private role: Role = "follower";
  private leaderId: MemberId | null = null;

  private electionElapsed = 0;
  private heartbeatElapsed = 0;
  private randomizedElectionTimeout = 0;
  private ticks = 0;
  private higherPriorityCandidateSeenAt = Number.NEGATIVE_INFINITY;

  private votes = new Map<MemberId, boolean>();
  private progress = new Map<MemberId, Progress>();
  private leadTransferee: MemberId | null = null;
  private pendingConfigIndex = 0;
  private readonly priorityTransferBackoffUntil = new Map<MemberId, number>();
  private forced: ForcedMembership | null = null;
  /** Members a forced reconfiguration left out (see `HardState.fencedMembers`); replaced, never mutated. */
  private fencedMembers: readonly MemberId[] = [];
  /** The snapshot this member is receiving from a leader: its progress and running checksum, never its bytes. */
  private receiver: SnapshotReceiver | null = null;
  /** Chunks accepted since the last `Ready`, to be written durably by the next one. */
  private pendingReceipt: { metadata: SnapshotMetadata; restart: boolean; chunks: SnapshotChunk[] } | null = null;
  /** Snapshot data from leaders that arrived damaged, since this node was created (see `receiptDamage`). */
  private damage: ReceiptDamage = { chunksDamaged: 0, snapshotsRejected: 0, lastSenderId: null };

  private outbox: Message[] = [];
  /**
   * Set when new entries or a new commit index should reach every follower. The broadcast itself happens once, when
   * the next `Ready` is assembled: a driver that proposes many entries between two readies then sends each follower
   * one append carrying all of them, rather than one append (and one response) per proposal or per commit step.
   */
  private broadcastPending = false;
  private readStates: ReadState[] = [];
  private droppedReads: ReadContext[] = [];
  private pendingCompaction: Compaction | null = null;
  private handedOutSnapshot: SnapshotMetadata | null = null;
  private lastHardState: HardState;
  /** The commit index of the last hard state handed out in a batch that had to sync (drivers write only those). */
  private lastSyncedCommitIndex: number;
  private lastSoftState: SoftState;
  private inFlight: InFlightReady | null = null;

  constructor(options: RaftNodeOptions) {
    validateOptions(options);
    this.options = options;
    this.id = options.id;
    const persisted = options.persisted;
    const snapshot = persisted.snapshot;
    const snapshotIndex = snapshot?.index ?? 0;
    if (!snapshot && persisted.firstIndex > 1) {
      throw new Error(`raft: storage starts at ${persisted.firstIndex} but holds no snapshot`);
    }
    const lastIndex = Math.max(persisted.lastIndex, snapshotIndex);
    this.log = new RaftLog(options.storage, {
      snapshotIndex,
      snapshotTerm: snapshot?.term ?? 0,
      lastIndex,
      commitIndex: persisted.hardState.commitIndex,
    });
    this.history = new ConfigurationHistory(snapshotIndex, snapshot?.configuration ?? EMPTY_CONFIGURATION);
    this.scanConfigurations(snapshotIndex + 1, lastIndex);
    this.term = persisted.hardState.term;
    this.votedFor = persisted.hardState.votedFor;
    this.forced = persisted.hardState.forced ?? null;
    if (this.forced !== null) assertValidConfiguration(this.forced.configuration);
    this.fencedMembers = persisted.hardState.fencedMembers ?? [];
    const incoming = persisted.incomingSnapshot;
    // The receipt resumes where its durable bytes end: the leader learns that offset from the first answer.
    if (incoming !== null) this.receiver = new SnapshotReceiver(incoming.metadata, incoming);
    this.lastHardState = persisted.hardState;
    this.lastSyncedCommitIndex = persisted.hardState.commitIndex;
    this.reads = new ReadIndexTracker(options.maxPendingReads);
    if (options.bootstrap && lastIndex === 0 && this.term === 0) {
      assertValidConfiguration(options.bootstrap);
      // Every founding member writes the same first entry, so index 1 is identical (and committed) everywhere.
      this.term = 1;
      this.appendToLog([
        { index: 1, term: 1, kind: "configuration", data: encodeConfiguration(sortedConfiguration(options.bootstrap)) },
      ]);
      this.log.commitTo(1);
    }
    this.lastSoftState = this.softState();
    this.resetRandomizedElectionTimeout();
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Inputs

  /** Advances logical time by one tick. */
  tick(): void {
    this.ticks++;
    if (this.role === "leader") this.tickLeader();
    else this.tickElection();
  }

  /** Processes one message received from another member. */
  step(message: Message): void {
    if (message.to !== this.id) throw new Error(`raft: message for ${message.to} delivered to ${this.id}`);
    if (message.from === this.id) throw new Error("raft: a member does not send messages to itself");
    // A member a forced reconfiguration left out may still run with the old membership (it may even form a majority
    // of it): nothing it says may change this member's term, vote or log.
    if (this.isFenced(message.from)) return;
    if (message.term > this.term) {
      if (message.type === "voteRequest") {
        const inLease =
          this.options.checkQuorum &&
          this.leaderId !== null &&
          this.electionElapsed < this.options.electionTimeoutTicks;
        // Dissertation §4.2.3: while a member hears from a leader it ignores campaigns, so a partitioned or removed
        // member cannot disrupt a healthy group. Leadership transfer is the deliberate exception.
        if (inLease && !message.transfer) return;
      }
      const keepsTerm =
        (message.type === "voteRequest" && message.preVote) ||
        (message.type === "voteResponse" && message.preVote && message.granted);
      if (!keepsTerm) {
        const fromLeader =
          message.type === "append" || message.type === "heartbeat" || message.type === "snapshotChunk";
        this.becomeFollower(message.term, fromLeader ? message.from : null);
      }
    } else if (message.term < this.term) {
      if (message.type === "append" || message.type === "heartbeat") {
        // Tell a stale leader about the newer term so it steps down (needed with pre-vote and check-quorum, where
        // the member that bumped the term may never send it a vote request).
        this.send({
          type: "appendResponse",
          from: this.id,
          to: message.from,
          term: this.term,
          rejected: true,
          index: 0,
          hintIndex: 0,
          hintTerm: 0,
        });
      } else if (message.type === "voteRequest" && message.preVote) {
        this.sendVoteResponse(message, false, this.term);
      }
      return;
    }

    switch (message.type) {
      case "voteRequest":
        this.handleVoteRequest(message);
        return;
      case "voteResponse":
        this.handleVoteResponse(message);
        return;
      case "append":
      case "heartbeat":
      case "snapshotChunk":
        if (this.role === "leader") {
          throw new Error(
            `raft: Election Safety violated: two leaders in term ${this.term} (${this.id}, ${message.from})`,
          );
        }
        if (this.role !== "follower") this.becomeFollower(this.term, message.from);
        this.electionElapsed = 0;
        this.leaderId = message.from;
        if (message.type === "append") this.handleAppend(message);
        else if (message.type === "heartbeat") this.handleHeartbeat(message);
        else this.handleSnapshotChunk(message);
        return;
      case "timeoutNow":
        if (this.role !== "leader" && this.promotable()) this.campaign("transfer");
        return;
      case "appendResponse":
        if (this.role === "leader") this.handleAppendResponse(message);
        return;
      case "heartbeatResponse":
        if (this.role === "leader") this.handleHeartbeatResponse(message);
        return;
      case "snapshotResponse":
        if (this.role === "leader") this.handleSnapshotResponse(message);
        return;
    }
  }

  /** Proposes application data; only a leader accepts it. */
  propose(data: Uint8Array): ProposalResult {
    const refusal = this.leaderRefusal();
    if (refusal) return refusal;
    const entry = this.appendAsLeader("normal", data);
    this.broadcastPending = true;
    return { accepted: true, index: entry.index, term: entry.term };
  }

  /**
   * Proposes one membership change (see configuration.ts for the rules). It takes effect on each member when
   * appended there; the result says where it was appended.
   */
  proposeConfigurationChange(change: ConfigurationChange): ProposalResult {
    const refusal = this.leaderRefusal();
    if (refusal) return refusal;
    if (this.forced) return { accepted: false, reason: "changeInProgress" };
    if (this.pendingConfigIndex > this.log.committed) return { accepted: false, reason: "changeInProgress" };
    if (!this.committedInCurrentTerm()) return { accepted: false, reason: "leaderNotReady" };
    let next: Configuration;
    try {
      next = applyChange(this.configuration(), change);
    } catch (error) {
      return { accepted: false, reason: "invalid", detail: (error as Error).message };
    }
    if (change.type === "promote" && !this.promotionReady(change.member)) {
      return { accepted: false, reason: "learnerBehind" };
    }
    const entry = this.appendAsLeader("configuration", encodeConfiguration(next));
    this.pendingConfigIndex = entry.index;
    this.broadcastPending = true;
    return { accepted: true, index: entry.index, term: entry.term };
  }

  /**
   * Replaces the membership with `members` without the agreement of the old quorum, for when that quorum is gone.
   * Call it on EVERY member of the new set. The member campaigns at once; the first election under the forced
   * membership needs the vote of every voter in it, so the most up-to-date member of the new set wins and no entry
   * any of them holds is lost. Entries held only by members outside the new set (including committed ones) may be
   * lost, which `acceptDataLoss` acknowledges. The forced membership is part of the hard state, so a restarted
   * member resumes it; it is in force (elections needing every voter) until a configuration entry holding the same
   * membership, or any entry of a later term, is committed (see `maybeEndForcedMembership`). The members left out are fenced: their messages are ignored from then on (see
   * `HardState.fencedMembers`) unless a later configuration entry lists them again. Idempotent.
   */
  forceReconfigure(members: readonly Member[], options: ForceReconfigurationOptions): void {
    if (options.acceptDataLoss !== true) {
      throw new Error("raft: forced reconfiguration requires { acceptDataLoss: true }");
    }
    const configuration = sortedConfiguration({ members });
    assertValidConfiguration(configuration);
    if (!isVoter(configuration, this.id)) {
      throw new Error(`raft: forced reconfiguration must include member ${this.id} as a voter`);
    }
    const kept = new Set(configuration.members.map((member) => member.id));
    const leftOut = this.configuration()
      .members.map((member) => member.id)
      .filter((id) => !kept.has(id));
    this.fencedMembers = [...new Set([...this.fencedMembers.filter((id) => !kept.has(id)), ...leftOut])].sort(
      (left, right) => left - right,
    );
    this.forced = { configuration, sinceTerm: this.term };
    if (this.role === "leader") this.becomeFollower(this.term, null);
    this.campaign("transfer");
  }

  /** Requests a linearizable read; the confirmation comes back in `Ready.readStates` with the same context. */
  readIndex(context: ReadContext): RequestResult {
    if (this.role !== "leader") return { accepted: false, reason: "notLeader", leaderId: this.leaderId };
    if (!this.reads.hasRoom()) return { accepted: false, reason: "tooManyReads" };
    if (!this.committedInCurrentTerm()) {
      this.reads.waitForCommit(context);
      return { accepted: true };
    }
    this.registerRead(context);
    return { accepted: true };
  }

  /** Asks the leader to hand leadership to `target` (dissertation §3.10). */
  transferLeadership(target: MemberId): RequestResult {
    if (this.role !== "leader") return { accepted: false, reason: "notLeader", leaderId: this.leaderId };
    if (target === this.id) return { accepted: false, reason: "invalid", detail: "already the leader" };
    if (!isVoter(this.configuration(), target)) {
      return { accepted: false, reason: "invalid", detail: `member ${target} is not a voter` };
    }
    if (this.leadTransferee === target) return { accepted: true };
    this.leadTransferee = target;
    this.electionElapsed = 0;
    const progress = this.progress.get(target);
    if (progress && progress.match === this.log.lastIndex()) this.sendTimeoutNow(target);
    else this.sendAppend(target, true);
    return { accepted: true };
  }

  /**
   * Takes a snapshot of the state machine at `index` (which must be applied) so the log before it can be dropped.
   * The snapshot comes back in `Ready.compaction` to be stored.
   *
   * `digest` is the data's size and CRC-32C when the caller computed them already (a storage that prepared the
   * snapshot's chunks did, a slice at a time): checksumming hundreds of megabytes here in one go would hold the
   * caller's thread for as long. Only the size is checked against the data here; the storage compares the checksum
   * it computed itself with the one recorded when it installs the compaction. Without `digest` the data is
   * checksummed here. Data the storage prepared (`PreparedSnapshotData`) carries its own size and checksum.
   */
  compact(index: number, data: Uint8Array | PreparedSnapshotData, digest?: SnapshotDigest): void {
    if (index > this.log.applied) throw new Error(`raft: cannot compact to ${index}, applied only ${this.log.applied}`);
    const given = data instanceof Uint8Array ? digest : data;
    const sizeBytes = data instanceof Uint8Array ? data.byteLength : data.sizeBytes;
    if (given !== undefined) {
      if (given.sizeBytes !== sizeBytes || !Number.isSafeInteger(sizeBytes) || sizeBytes < 0) {
        throw new Error(
          `raft: the checksum handed to compact is of ${given.sizeBytes} bytes, the snapshot holds ${sizeBytes}`,
        );
      }
      if (!Number.isInteger(given.checksum) || given.checksum < 0 || given.checksum > 0xffffffff) {
        throw new Error(`raft: ${given.checksum} handed to compact is not a CRC-32C`);
      }
    }
    if (index <= this.log.snapshotIndex) return;
    const term = this.log.term(index);
    if (term === null) throw new Error(`raft: cannot compact to ${index}: its term is unknown`);
    this.pendingCompaction = {
      metadata: {
        index,
        term,
        configuration: this.history.at(index),
        sizeBytes,
        checksum: given?.checksum ?? snapshotChecksum(data as Uint8Array),
      },
      data,
    };
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Outputs

  /** The next batch of work, or null when there is none or the previous batch has not been advanced yet. */
  ready(): Ready | null {
    if (this.inFlight) return null;
    if (this.broadcastPending) {
      this.broadcastPending = false;
      if (this.role === "leader") this.broadcastNews();
    }
    this.maybeEndForcedMembership();
    const softState = this.softState();
    const softChanged =
      softState.role !== this.lastSoftState.role ||
      softState.leaderId !== this.lastSoftState.leaderId ||
      softState.term !== this.lastSoftState.term;
    const hardState = this.hardState();
    // The forced membership and the fenced members change rarely and are replaced, never mutated: identity tells.
    const membershipStateChanged =
      hardState.forced !== this.lastHardState.forced || hardState.fencedMembers !== this.lastHardState.fencedMembers;
    const hardChanged =
      hardState.term !== this.lastHardState.term ||
      hardState.votedFor !== this.lastHardState.votedFor ||
      hardState.commitIndex !== this.lastHardState.commitIndex ||
      membershipStateChanged;
    const snapshot = this.log.pendingSnapshot !== this.handedOutSnapshot ? this.log.pendingSnapshot : null;
    const snapshotReceipt: SnapshotReceipt | null = this.pendingReceipt;
    const entriesToPersist = [...this.log.unstable];
    const committedEntries = this.log.nextEntriesToApply(this.options.maxCommittedEntriesPerReady);
    const termOrVoteChanged =
      hardState.term !== this.lastHardState.term || hardState.votedFor !== this.lastHardState.votedFor;
    const { messagesBeforePersist, messages } = this.splitOutbox(termOrVoteChanged);
    const mustSync =
      entriesToPersist.length > 0 ||
      snapshotReceipt !== null ||
      snapshot !== null ||
      termOrVoteChanged ||
      membershipStateChanged;
    // The commit index is volatile (the paper's Figure 2), so a batch that changes only it needs no durable write and
    // drivers skip it. A batch that syncs therefore carries the hard state whenever its commit index moved since the
    // last synced one, so the durable commit index keeps up with every sync instead of waiting for the next change.
    const commitIndexUnsynced = hardState.commitIndex !== this.lastSyncedCommitIndex;
    const carriesHardState = hardChanged || (mustSync && commitIndexUnsynced);
    const ready: Ready = {
      softState: softChanged ? softState : null,
      hardState: carriesHardState ? hardState : null,
      mustSync,
      entriesToPersist,
      snapshotReceipt,
      snapshot,
      compaction: this.pendingCompaction,
      committedEntries,
      messagesBeforePersist,
      messages,
      readStates: this.readStates,
      droppedReads: this.droppedReads,
    };
    const empty =
      !softChanged &&
      !hardChanged &&
      !snapshot &&
      !snapshotReceipt &&
      entriesToPersist.length === 0 &&
      !this.pendingCompaction &&
      committedEntries.length === 0 &&
      this.outbox.length === 0 &&
      this.readStates.length === 0 &&
      this.droppedReads.length === 0;
    if (empty) return null;
    this.lastSoftState = softState;
    this.lastHardState = hardState;
    if (mustSync && carriesHardState) this.lastSyncedCommitIndex = hardState.commitIndex;
    if (snapshot) this.handedOutSnapshot = snapshot;
    this.pendingReceipt = null;
    this.pendingCompaction = null;
    this.outbox = [];
    this.readStates = [];
    this.droppedReads = [];
    this.inFlight = { ready, lastEntry: entriesToPersist[entriesToPersist.length - 1] ?? null };
    return ready;
  }

  /**
   * Splits the outbox into the messages that may leave before this batch is durable and those that must wait. Only
   * appends and heartbeats qualify: a leader sends them, they carry its own entries and its term, and the term (with
   * the vote that won it) became durable in an earlier batch, since `ready` hands out nothing while one is in
   * flight. When this batch changes the term or the vote, every message waits: a member must never speak in a term,
   * or after a vote, that a crash could make it forget. Responses always wait, since they acknowledge this batch.
   */
  private splitOutbox(termOrVoteChanged: boolean): { messagesBeforePersist: Message[]; messages: Message[] } {
    if (termOrVoteChanged) return { messagesBeforePersist: [], messages: this.outbox };
    const durableTerm = this.lastHardState.term;
    const messagesBeforePersist: Message[] = [];
    const messages: Message[] = [];
    for (const message of this.outbox) {
      if (message.type !== "append" && message.type !== "heartbeat") {
        messages.push(message);
        continue;
      }
      if (message.term !== durableTerm) {
        throw new Error(
          `raft: ${message.type} of term ${message.term} from ${this.id} would be sent before persistence, but the ` +
            `durable term is ${durableTerm}`,
        );
      }
      messagesBeforePersist.push(message);
    }
    return { messagesBeforePersist, messages };
  }

  /** Acknowledges that everything in `ready` is durable, sent and applied. */
  advance(ready: Ready): void {
    if (!this.inFlight || this.inFlight.ready !== ready) throw new Error("raft: advance called for an unknown ready");
    const { lastEntry } = this.inFlight;
    this.inFlight = null;
    if (ready.snapshot) {
      this.log.snapshotStable(ready.snapshot);
      if (this.handedOutSnapshot === ready.snapshot) this.handedOutSnapshot = null;
    }
    if (lastEntry) this.log.stableTo(lastEntry.index, lastEntry.term);
    if (ready.compaction) {
      this.log.compacted(ready.compaction.metadata.index, ready.compaction.metadata.term);
      this.history.compactTo(ready.compaction.metadata.index);
      if (this.role === "leader") this.restartTransfersOfOlderSnapshots();
    }
    const lastApplied = ready.committedEntries[ready.committedEntries.length - 1];
    if (lastApplied) this.log.appliedTo(lastApplied.index);
    if (this.role === "leader") {
      const self = this.progress.get(this.id);
      if (self) self.maybeUpdate(this.log.stableLastIndex);
      if (this.maybeCommit()) this.broadcastPending = true;
    }
  }

  /** Current state, for drivers and checkers. */
  status(): NodeStatus {
    return {
      id: this.id,
      role: this.role,
      term: this.term,
      votedFor: this.votedFor,
      leaderId: this.leaderId,
      commitIndex: this.log.committed,
      appliedIndex: this.log.applied,
      firstIndex: this.log.firstIndex(),
      lastIndex: this.log.lastIndex(),
      stableLastIndex: this.log.stableLastIndex,
      configuration: this.configuration(),
      forced: this.forced !== null,
      fencedMembers: this.fencedMembers,
      leadTransferee: this.leadTransferee,
    };
  }

  /**
   * Snapshot data this member received damaged, counted since the node was created: chunks whose bytes did not match
   * the checksum the leader sent with them (each is asked for again on its own), and whole snapshots whose checksum
   * did not match once every byte had arrived (each is received again from byte 0). Either means bytes changed
   * between the leader's storage and this member's: a driver reports it, since Raft alone only retries. The record
   * is replaced, never changed, on each damage, so a driver may keep the one it read to compare with later ones.
   */
  receiptDamage(): ReceiptDamage {
    return this.damage;
  }

  /** Replication progress of a member as the leader sees it (tests and drivers); undefined when not leader. */
  progressOf(member: MemberId): Readonly<Progress> | undefined {
    return this.role === "leader" ? this.progress.get(member) : undefined;
  }

  /** The configuration in force (the forced one while a forced reconfiguration is pending). */
  configuration(): Configuration {
    return this.forced?.configuration ?? this.history.current();
  }

  /**
   * The configuration of the committed log: the latest configuration entry at or below the commit index (the
   * snapshot's configuration when the log holds none). Unlike `configuration()`, it never shows a change that could
   * still be truncated away, so a caller waiting for a membership change to take hold waits for this one.
   */
  committedConfiguration(): Configuration {
    return this.history.at(this.log.committed);
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Elections

  private tickElection(): void {
    this.electionElapsed++;
    const deferring = this.ticks - this.higherPriorityCandidateSeenAt < this.options.electionTimeoutTicks;
    if (this.promotable() && this.electionElapsed >= this.randomizedElectionTimeout && !deferring) {
      this.electionElapsed = 0;
      this.campaign(this.options.preVote ? "preVote" : "election");
    }
  }

  private tickLeader(): void {
    this.heartbeatElapsed++;
    this.electionElapsed++;
    this.trackLearnersCatchingUp();
    if (this.electionElapsed >= this.options.electionTimeoutTicks) {
      this.electionElapsed = 0;
      if (this.options.checkQuorum && !this.quorumActive()) {
        this.becomeFollower(this.term, null);
        return;
      }
      for (const progress of this.progress.values()) progress.recentActive = progress.member === this.id;
      if (this.leadTransferee !== null) {
        // The transfer did not finish within an election timeout: resume normal operation, and do not retry a
        // priority transfer to that member for a while, so a member that cannot win does not keep disrupting us.
        this.priorityTransferBackoffUntil.set(this.leadTransferee, this.ticks + 4 * this.options.electionTimeoutTicks);
        this.leadTransferee = null;
      }
    }
    if (this.heartbeatElapsed >= this.options.heartbeatTimeoutTicks) {
      this.heartbeatElapsed = 0;
      this.broadcastHeartbeat();
      this.maybeTransferToHigherPriority();
    }
    for (const progress of this.progress.values()) {
      // The only retransmission of snapshot chunks: a window unacknowledged for a timeout is sent again.
      if (progress.snapshotTransfer?.tick(this.options.snapshotResendTicks)) this.sendSnapshotWindow(progress);
    }
  }

  private promotable(): boolean {
    return isVoter(this.configuration(), this.id);
  }

  private campaign(kind: CampaignKind): void {
    const voters = votersOf(this.configuration());
    if (!voters.includes(this.id)) throw new Error(`raft: member ${this.id} campaigns but is not a voter`);
    let voteTerm: number;
    if (kind === "preVote") {
      this.role = "preCandidate";
      this.leaderId = null;
      voteTerm = this.term + 1;
    } else {
      this.setTerm(this.term + 1);
      this.votedFor = null;
      this.vote(this.id);
      this.role = "candidate";
      this.leaderId = null;
      voteTerm = this.term;
    }
    this.resetTimers();
    this.progress.clear();
    this.votes = new Map([[this.id, true]]);
    if (this.countVotes()) return;
    for (const voter of voters) {
      if (voter === this.id) continue;
      this.send({
        type: "voteRequest",
        from: this.id,
        to: voter,
        term: voteTerm,
        preVote: kind === "preVote",
        transfer: kind === "transfer",
        lastIndex: this.log.lastIndex(),
        lastTerm: this.log.lastTerm(),
      });
    }
  }

  /** Applies the current vote count; returns true when the campaign ended. */
  private countVotes(): boolean {
    const outcome = voteOutcome(votersOf(this.configuration()), this.votes, this.forced !== null);
    if (outcome === "won") {
      if (this.role === "preCandidate") this.campaign("election");
      else this.becomeLeader();
      return true;
    }
    if (outcome === "lost") {
      this.becomeFollower(this.term, null);
      return true;
    }
    return false;
  }

  private handleVoteRequest(message: VoteRequestMessage): void {
    // Only a member may win this member's vote. A candidate the configuration does not list was removed (or was never
    // added); a member that knows no configuration yet (it is joining, or lost its disk) votes for nobody until a
    // leader's entries or snapshot tell it who the members are. A candidate that was just added is listed by every
    // member holding the committed entry that added it, and those are enough for its majority.
    if (memberOf(this.configuration(), message.from) === undefined) {
      this.sendVoteResponse(message, false, this.term);
      return;
    }
    const canVote =
      this.votedFor === message.from ||
      (this.votedFor === null && this.leaderId === null) ||
      (message.preVote && message.term > this.term);
    if (canVote && this.log.isUpToDate(message.lastIndex, message.lastTerm)) {
      this.sendVoteResponse(message, true, message.term);
      const candidate = memberOf(this.configuration(), message.from);
      const mine = memberOf(this.configuration(), this.id);
      if (!message.preVote) {
        this.vote(message.from);
        this.electionElapsed = 0;
      } else if (candidate && mine && candidate.priority > mine.priority) {
        // Priority election: a member that just endorsed a healthy, up-to-date member of higher priority defers its
        // own campaign for a timeout. It still votes for anyone, so the group elects SOMEONE if that member fails.
        // (A separate clock: resetting electionElapsed would fake a leader lease and make it ignore that very
        // member's real vote request.)
        this.higherPriorityCandidateSeenAt = this.ticks;
      }
    } else {
      this.sendVoteResponse(message, false, this.term);
    }
  }

  private sendVoteResponse(message: VoteRequestMessage, granted: boolean, term: number): void {
    this.send({ type: "voteResponse", from: this.id, to: message.from, term, preVote: message.preVote, granted });
  }

  private handleVoteResponse(message: VoteResponseMessage): void {
    const expected =
      (this.role === "preCandidate" && message.preVote) || (this.role === "candidate" && !message.preVote);
    if (!expected) return;
    this.votes.set(message.from, message.granted);
    this.countVotes();
  }

  private becomeFollower(term: number, leaderId: MemberId | null): void {
    if (term > this.term) {
      this.setTerm(term);
      this.votedFor = null;
    }
    if (this.role === "leader") this.droppedReads.push(...this.reads.dropAll());
    this.role = "follower";
    this.leaderId = leaderId;
    this.progress.clear();
    this.leadTransferee = null;
    this.resetTimers();
  }

  private becomeLeader(): void {
    if (this.role !== "candidate") throw new Error(`raft: becomeLeader from ${this.role}`);
    this.role = "leader";
    this.leaderId = this.id;
    this.resetTimers();
    this.reads.reset();
    this.leadTransferee = null;
    this.progress.clear();
    this.syncProgress();
    const self = this.progress.get(this.id);
    if (self) {
      self.maybeUpdate(this.log.stableLastIndex);
      self.recentActive = true;
    }
    // Any configuration entry still uncommitted in the log may be pending; refuse new changes until it commits.
    this.pendingConfigIndex = this.history.currentIndex();
    if (this.forced) {
      const entry = this.appendAsLeader("configuration", encodeConfiguration(this.forced.configuration));
      this.pendingConfigIndex = entry.index;
    } else {
      this.appendAsLeader("noop", new Uint8Array(0));
    }
    this.broadcastAppend();
  }

  private resetTimers(): void {
    this.electionElapsed = 0;
    this.heartbeatElapsed = 0;
    this.resetRandomizedElectionTimeout();
  }

  /**
   * Randomized election timeout in [T, 2T) plus half a timeout per distinct higher voter priority, so higher
   * priority members time out first while every voter still times out eventually.
   */
  private resetRandomizedElectionTimeout(): void {
    const configuration = this.configuration();
    const mine = memberOf(configuration, this.id)?.priority ?? 1;
    const higher = new Set(
      configuration.members
        .filter((member) => member.role === "voter" && member.priority > mine)
        .map((member) => member.priority),
    );
    const timeout = this.options.electionTimeoutTicks;
    this.randomizedElectionTimeout =
      timeout + this.options.random.nextInt(timeout) + higher.size * Math.ceil(timeout / 2);
  }

  private quorumActive(): boolean {
    const voters = votersOf(this.configuration());
    const active = new Map<MemberId, boolean>();
    for (const voter of voters) {
      active.set(voter, voter === this.id || this.progress.get(voter)?.recentActive === true);
    }
    return voteOutcome(voters, active) === "won";
  }

  private maybeTransferToHigherPriority(): void {
    if (this.leadTransferee !== null || !this.committedInCurrentTerm()) return;
    const configuration = this.configuration();
    const mine = memberOf(configuration, this.id);
    const myPriority = mine?.role === "voter" ? mine.priority : 0;
    let best: Member | null = null;
    for (const member of configuration.members) {
      if (member.role !== "voter" || member.id === this.id || member.priority <= myPriority) continue;
      const progress = this.progress.get(member.id);
      // Caught up: it holds every committed entry and is replicating. Under a steady stream of proposals it is
      // rarely at the very last index; the transfer itself pauses proposals and brings it there before TimeoutNow.
      if (!progress?.recentActive || progress.state !== "replicate" || progress.match < this.log.committed) continue;
      if ((this.priorityTransferBackoffUntil.get(member.id) ?? 0) > this.ticks) continue;
      if (!best || member.priority > best.priority) best = member;
    }
    if (best) this.transferLeadership(best.id);
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Replication (leader side)

  private leaderRefusal(): Refusal | null {
    if (this.role !== "leader") return { accepted: false, reason: "notLeader", leaderId: this.leaderId };
    if (this.leadTransferee !== null) return { accepted: false, reason: "transferringLeadership" };
    if (this.log.lastIndex() - this.log.committed >= this.options.maxUncommittedEntries) {
      return { accepted: false, reason: "tooManyUncommitted" };
    }
    return null;
  }

  private appendAsLeader(kind: EntryKind, data: Uint8Array): Entry {
    const entry: Entry = { index: this.log.lastIndex() + 1, term: this.term, kind, data };
    this.appendToLog([entry]);
    return entry;
  }

  /**
   * Sends an append to every member that has entries it was not sent yet or has not been told the current commit
   * index; members already up to date on both get nothing (an append sent since the news arrived carried it).
   */
  private broadcastNews(): void {
    const lastIndex = this.log.lastIndex();
    for (const [member, progress] of this.progress) {
      if (member === this.id) continue;
      if (progress.next > lastIndex && progress.sentCommitIndex >= this.log.committed) continue;
      this.sendAppend(member, true);
    }
  }

  /** Sends appends to everyone who is not paused. */
  private broadcastAppend(): void {
    for (const member of this.progress.keys()) {
      if (member !== this.id) this.sendAppend(member, true);
    }
  }

  /**
   * Sends the next append to `member` if flow control allows; returns whether a message went out. In replicate
   * state entries are pipelined optimistically; in probe state one message is outstanding at a time.
   */
  private sendAppend(member: MemberId, sendIfEmpty: boolean): boolean {
    const progress = this.progress.get(member);
    if (!progress || progress.isPaused()) return false;
    const prevIndex = progress.next - 1;
    const lastIndex = this.log.lastIndex();
    if (prevIndex > lastIndex) throw new Error(`raft: next index ${progress.next} of ${member} beyond ${lastIndex}`);
    const prevTerm = this.log.term(prevIndex);
    if (prevTerm === null) return this.startSnapshotTransfer(progress);
    // Every message is cut at the same size, whatever room the window has left: cut to that room, the message after a
    // full one carried the remainder (with entries of 16 KiB, 63 and then 1 in turn), which doubled the appends, their
    // answers and the member's durable writes while it caught up.
    const entries =
      progress.next <= lastIndex
        ? this.log.entries(
            progress.next,
            lastIndex + 1,
            this.options.maxEntriesPerMessage,
            this.options.maxBytesPerMessage,
          )
        : [];
    if (entries.length === 0 && !sendIfEmpty) return false;
    // Under load about half the appends only announce a new commit index to a member in sync; answering them would
    // double the messages for nothing (heartbeats keep the member counted as active).
    const acknowledge = !(entries.length === 0 && progress.state === "replicate" && progress.match >= prevIndex);
    const message: AppendMessage = {
      type: "append",
      from: this.id,
      to: member,
      term: this.term,
      prevIndex,
      prevTerm,
      entries,
      commitIndex: this.log.committed,
      acknowledge,
    };
    this.send(message);
    progress.sentCommitIndex = message.commitIndex;
    const last = entries[entries.length - 1];
    if (progress.state === "replicate" && last) {
      progress.next = last.index + 1;
      progress.inflights.add(last.index, entriesSizeBytes(entries));
    } else if (progress.state === "probe") {
      progress.probeSent = true;
    }
    return true;
  }

  /**
   * Starts sending the latest durable snapshot to a member behind the start of the log. Only its metadata is read
   * here; its chunks are read from the storage as the window lets them go.
   */
  private startSnapshotTransfer(progress: Progress): boolean {
    if (this.log.pendingSnapshot) return false;
    const metadata = this.options.storage.snapshotMetadata();
    if (!metadata || metadata.index < progress.next - 1) {
      throw new Error(
        `raft: member ${progress.member} needs a snapshot but storage has none covering ${progress.next - 1}`,
      );
    }
    progress.becomeSnapshot(
      new SnapshotTransfer(metadata, this.options.snapshotChunkBytes, this.options.snapshotWindowChunks),
    );
    this.sendSnapshotWindow(progress);
    return true;
  }

  /** Sends chunks until the member's window is full (at most `snapshotWindowChunks` of them). */
  private sendSnapshotWindow(progress: Progress): void {
    const transfer = progress.snapshotTransfer;
    if (!transfer) return;
    for (let chunk = transfer.takeChunk(); chunk !== null; chunk = transfer.takeChunk()) {
      const read = this.options.storage.snapshotChunk(transfer.metadata, chunk.offset, chunk.length);
      if (read === null) {
        // A newer snapshot replaced the one being sent (and the storage may drop the old one's data at any time).
        const latest = this.options.storage.snapshotMetadata();
        if (latest === null || sameSnapshot(latest, transfer.metadata) || latest.index < transfer.metadata.index) {
          throw new Error(`raft: storage cannot read snapshot ${transfer.metadata.index} that it still reports`);
        }
        this.startSnapshotTransfer(progress);
        return;
      }
      if (read.data.byteLength !== chunk.length) {
        throw new Error(
          `raft: storage read ${read.data.byteLength} bytes of snapshot ${transfer.metadata.index} at ${chunk.offset}, ` +
            `expected ${chunk.length}`,
        );
      }
      const message: SnapshotChunkMessage = {
        type: "snapshotChunk",
        from: this.id,
        to: progress.member,
        term: this.term,
        metadata: transfer.metadata,
        offset: chunk.offset,
        data: read.data,
        last: chunk.last,
        checksum: read.checksum,
      };
      this.send(message);
    }
  }

  /** A compaction made a newer snapshot durable: transfers of older ones start over with it. */
  private restartTransfersOfOlderSnapshots(): void {
    const latest = this.options.storage.snapshotMetadata();
    if (latest === null) return;
    for (const progress of this.progress.values()) {
      const transfer = progress.snapshotTransfer;
      if (progress.state === "snapshot" && transfer !== null && transfer.metadata.index < latest.index) {
        this.startSnapshotTransfer(progress);
      }
    }
  }

  private broadcastHeartbeat(): void {
    const sequence = this.reads.currentSequence();
    for (const [member, progress] of this.progress) {
      if (member === this.id) continue;
      const message: HeartbeatMessage = {
        type: "heartbeat",
        from: this.id,
        to: member,
        term: this.term,
        // Never tell a member to commit beyond what it is known to hold: its log might not match ours there yet.
        commitIndex: Math.min(progress.match, this.log.committed),
        readSequence: sequence,
      };
      this.send(message);
    }
  }

  private sendTimeoutNow(member: MemberId): void {
    this.send({ type: "timeoutNow", from: this.id, to: member, term: this.term });
  }

  private handleAppendResponse(message: AppendResponseMessage): void {
    const progress = this.progress.get(message.from);
    if (!progress) return;
    progress.recentActive = true;
    if (message.rejected) {
      if (progress.state === "snapshot") return;
      // Fast back-tracking: skip every entry of a term the member does not have, instead of one index per round.
      const hint =
        message.hintTerm > 0
          ? this.log.findConflictByTerm(message.hintIndex, message.hintTerm).index
          : message.hintIndex;
      if (progress.maybeDecreaseTo(message.index, hint)) {
        if (progress.state === "replicate") progress.becomeProbe();
        this.sendAppend(message.from, true);
      }
      return;
    }
    const wasPaused = progress.isPaused();
    const updated = progress.maybeUpdate(message.index);
    // A probe answered at the current match also proves where the logs agree, so replication can start.
    const probeConfirmed = progress.state === "probe" && progress.match === message.index;
    if (!updated && !probeConfirmed) return;
    if (progress.state === "probe") progress.becomeReplicate();
    else if (progress.state === "snapshot") {
      if (progress.match >= (progress.snapshotTransfer?.metadata.index ?? 0)) progress.becomeProbe();
    } else progress.inflights.freeUpTo(message.index);
    if (this.maybeCommit()) this.broadcastPending = true;
    else if (wasPaused) this.sendAppend(message.from, true);
    this.noteLearnerCaughtUp(progress);
    if (this.role !== "leader") return;
    // Keep the pipeline full; flow control bounds the loop.
    for (let sent = 0; sent < this.options.maxInflightMessages; sent++) {
      if (!this.sendAppend(message.from, false)) break;
    }
    if (message.from === this.leadTransferee && progress.match === this.log.lastIndex()) {
      this.sendTimeoutNow(message.from);
    }
  }

  private handleHeartbeatResponse(message: HeartbeatResponseMessage): void {
    const progress = this.progress.get(message.from);
    if (!progress) return;
    progress.recentActive = true;
    progress.probeSent = false;
    if (message.readSequence > progress.readSequence) {
      progress.readSequence = message.readSequence;
      this.confirmReads();
    }
    // A snapshot transfer resends chunks only on its own timeout: resending on every heartbeat answer multiplied
    // duplicates whenever the round trip was longer than a heartbeat.
    if (progress.state === "snapshot") return;
    if (progress.state === "replicate" && progress.inflights.full()) progress.inflights.freeFirst();
    if (progress.match < this.log.lastIndex()) this.sendAppend(message.from, true);
  }

  private handleSnapshotResponse(message: SnapshotResponseMessage): void {
    const progress = this.progress.get(message.from);
    if (!progress) return;
    progress.recentActive = true;
    const transfer = progress.snapshotTransfer;
    const current =
      progress.state === "snapshot" &&
      transfer !== null &&
      transfer.metadata.index === message.snapshotIndex &&
      transfer.metadata.term === message.snapshotTerm;
    if (message.status === "installed") {
      progress.maybeUpdate(message.matchIndex);
      // The member holds the log up to the index it names, so the entries after it are pipelined at once, as etcd
      // does, rather than after a probe's round trip (20-90 ms per join on loopback). A late answer about an older
      // snapshot, arriving while a newer one is being sent, names an index the log no longer holds: leaving the
      // snapshot state then would only start that transfer over from byte 0 (etcd guards this the same way).
      if (progress.state === "snapshot" && (current || this.log.term(progress.match) !== null)) {
        progress.becomeReplicate();
      }
      // Flow control bounds the loop; a member still in the snapshot state is paused, and nothing is sent.
      if (this.sendAppend(message.from, true)) {
        for (let sent = 1; sent < this.options.maxInflightMessages; sent++) {
          if (!this.sendAppend(message.from, false)) break;
        }
      }
      return;
    }
    // An answer about another snapshot is stale: the transfer it belonged to was replaced.
    if (!current || !transfer) return;
    if (message.status === "rejected") {
      // The member found the whole snapshot's checksum (or a chunk's size) wrong and discarded what it received.
      transfer.restart();
      this.sendSnapshotWindow(progress);
      return;
    }
    if (transfer.acknowledge(message.nextOffset)) this.sendSnapshotWindow(progress);
  }

  /** Commits the highest index a majority holds durably, but only by counting entries of the current term. */
  private maybeCommit(): boolean {
    const self = this.progress.get(this.id);
    if (self && self.match > this.log.stableLastIndex) {
      // A commit needs a majority of DURABLE copies. Appends leave before the leader's own write is durable, so its
      // copy counts only from `advance` on: a crash before then loses it.
      throw new Error(
        `raft: leader ${this.id} counts entry ${self.match} towards commit but only ${this.log.stableLastIndex} is durable`,
      );
    }
    const voters = votersOf(this.configuration());
    const index = committedIndex(voters, (member) => this.progress.get(member)?.match ?? 0);
    if (index <= this.log.committed) return false;
    // Figure 8 of the Raft paper: an entry of an earlier term is committed only indirectly, by an entry of the
    // current term after it.
    if (this.log.term(index) !== this.term) return false;
    this.log.commitTo(index);
    if (this.log.term(this.log.committed) === this.term) {
      for (const context of this.reads.takeWaiting()) this.registerRead(context);
    }
    if (!isVoter(this.configuration(), this.id) && this.log.committed >= this.history.currentIndex()) {
      // Dissertation §4.2.2: a leader removed from the group steps down once the change is committed. It hands over
      // to the most up-to-date voter first so the group does not wait for an election timeout.
      let successor: Progress | null = null;
      for (const progress of this.progress.values()) {
        if (progress.member === this.id || !isVoter(this.configuration(), progress.member)) continue;
        if (!successor || progress.match > successor.match) successor = progress;
      }
      if (successor && successor.match === this.log.lastIndex()) this.sendTimeoutNow(successor.member);
      this.becomeFollower(this.term, null);
    }
    return true;
  }

  private committedInCurrentTerm(): boolean {
    return this.log.term(this.log.committed) === this.term;
  }

  private registerRead(context: ReadContext): void {
    this.reads.add(context, this.log.committed);
    if (votersOf(this.configuration()).filter((voter) => voter !== this.id).length === 0) this.confirmReads();
    else this.broadcastHeartbeat();
  }

  private confirmReads(): void {
    const sequence = this.reads.currentSequence();
    const confirmed = committedIndex(votersOf(this.configuration()), (member) =>
      member === this.id ? sequence : (this.progress.get(member)?.readSequence ?? 0),
    );
    this.readStates.push(...this.reads.confirm(confirmed));
  }

  /** Keeps one progress record per member (voters and learners) while leading. */
  private syncProgress(): void {
    if (this.role !== "leader") return;
    const members = this.configuration().members.map((member) => member.id);
    if (!members.includes(this.id)) members.push(this.id);
    for (const member of members) {
      if (!this.progress.has(member)) {
        this.progress.set(
          member,
          new Progress(
            member,
            this.log.lastIndex() + 1,
            this.options.maxInflightMessages,
            this.options.maxInflightBytes,
          ),
        );
      }
    }
    for (const member of [...this.progress.keys()]) {
      if (!members.includes(member)) this.progress.delete(member);
    }
    if (this.leadTransferee !== null && !isVoter(this.configuration(), this.leadTransferee)) this.leadTransferee = null;
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Replication (follower side)

  private handleAppend(message: AppendMessage): void {
    if (message.prevIndex < this.log.committed) {
      this.sendAppendResponse(message.from, false, this.log.committed, 0, 0);
      return;
    }
    if (this.log.matchTerm(message.prevIndex, message.prevTerm)) {
      const conflict = this.log.findConflict(message.entries);
      if (conflict !== 0) {
        if (conflict <= this.log.committed) {
          throw new Error(`raft: Log Matching violated: entry ${conflict} conflicts with the committed log`);
        }
        this.appendToLog(message.entries.filter((entry) => entry.index >= conflict));
      }
      const lastNew = message.prevIndex + message.entries.length;
      this.log.commitTo(Math.min(message.commitIndex, lastNew));
      if (message.acknowledge !== false) this.sendAppendResponse(message.from, false, lastNew, 0, 0);
      return;
    }
    const hint = this.log.findConflictByTerm(Math.min(message.prevIndex, this.log.lastIndex()), message.prevTerm);
    this.sendAppendResponse(message.from, true, message.prevIndex, hint.index, hint.term);
  }

  private sendAppendResponse(
    to: MemberId,
    rejected: boolean,
    index: number,
    hintIndex: number,
    hintTerm: number,
  ): void {
    this.send({ type: "appendResponse", from: this.id, to, term: this.term, rejected, index, hintIndex, hintTerm });
  }

  private handleHeartbeat(message: HeartbeatMessage): void {
    this.log.commitTo(Math.min(message.commitIndex, this.log.lastIndex()));
    this.send({
      type: "heartbeatResponse",
      from: this.id,
      to: message.from,
      term: this.term,
      readSequence: message.readSequence,
    });
  }

  /**
   * Receives one chunk. Accepted chunks go to the storage in the next `Ready` (`snapshotReceipt`) and their answers
   * in its `messages`, so a chunk is acknowledged only once the storage has it (its write may still be in progress;
   * the install waits until all are durable); nothing of the snapshot stays in memory here but its metadata, the
   * bytes received and their running checksum.
   */
  private handleSnapshotChunk(message: SnapshotChunkMessage): void {
    const metadata = message.metadata;
    const respond = (status: SnapshotResponseMessage["status"], nextOffset: number, matchIndex: number): void => {
      this.send({
        type: "snapshotResponse",
        from: this.id,
        to: message.from,
        term: this.term,
        snapshotIndex: metadata.index,
        snapshotTerm: metadata.term,
        status,
        nextOffset,
        matchIndex,
      });
    };
    if (metadata.index <= this.log.committed) {
      respond("installed", 0, this.log.committed);
      return;
    }
    if (!this.receiver?.matches(metadata)) {
      // A snapshot completed since the last `Ready` is installed from what the storage received of it, so no other
      // receipt may replace that one before the `Ready` is handed out: until then chunks of another snapshot are
      // dropped unanswered, and the leader sends them again after its resend timeout.
      if (this.log.pendingSnapshot !== null && this.log.pendingSnapshot !== this.handedOutSnapshot) return;
      // Another snapshot (the leader took a newer one, or a new leader sends its own): starting its receipt discards
      // what was received before, durable or not.
      this.discardPendingReceipt();
      this.receiver = new SnapshotReceiver(metadata);
      this.pendingReceipt = { metadata, restart: true, chunks: [] };
    }
    const outcome = this.receiver.offer(message.offset, message.data, message.last, message.checksum);
    switch (outcome.status) {
      case "ignored":
        respond("continue", outcome.expectedOffset, 0);
        return;
      case "damaged":
        this.damage = { ...this.damage, chunksDamaged: this.damage.chunksDamaged + 1, lastSenderId: message.from };
        respond("continue", outcome.expectedOffset, 0);
        return;
      case "accepted":
        this.queueReceivedChunk(metadata, {
          offset: message.offset,
          data: message.data,
          checksum: outcome.chunkChecksum,
        });
        respond("continue", outcome.nextOffset, 0);
        return;
      case "rejected":
        // The next chunk from byte 0 starts the receipt over, discarding what the storage holds of it. Only a failed
        // checksum means damaged bytes; a chunk that does not fit the announced size is the sender's error.
        if (outcome.cause === "checksum") {
          this.damage = {
            ...this.damage,
            snapshotsRejected: this.damage.snapshotsRejected + 1,
            lastSenderId: message.from,
          };
        }
        this.receiver = null;
        respond("rejected", 0, 0);
        return;
      case "complete":
        if (outcome.chunkAccepted && message.data.byteLength > 0) {
          this.queueReceivedChunk(metadata, {
            offset: message.offset,
            data: message.data,
            checksum: outcome.chunkChecksum,
          });
        }
        this.receiver = null;
        this.restoreSnapshot(metadata);
        respond("installed", 0, metadata.index);
        return;
    }
  }

  /**
   * Drops the chunks accepted since the last `Ready` when another receipt replaces theirs: they will never be written,
   * so the answers acknowledging them leave the outbox too (to the leader that is like losing them: it has moved on to
   * the other snapshot anyway, and answers about the old one are stale to it).
   */
  private discardPendingReceipt(): void {
    const pending = this.pendingReceipt;
    if (pending === null) return;
    this.pendingReceipt = null;
    if (pending.chunks.length === 0) return;
    this.outbox = this.outbox.filter(
      (message) =>
        message.type !== "snapshotResponse" ||
        message.status !== "continue" ||
        message.snapshotIndex !== pending.metadata.index ||
        message.snapshotTerm !== pending.metadata.term,
    );
  }

  /** Adds an accepted chunk to the receipt the next `Ready` hands out. */
  private queueReceivedChunk(metadata: SnapshotMetadata, chunk: SnapshotChunk): void {
    if (this.pendingReceipt === null) this.pendingReceipt = { metadata, restart: false, chunks: [] };
    if (!sameSnapshot(this.pendingReceipt.metadata, metadata)) {
      throw new Error(`raft: chunk of snapshot ${metadata.index} queued into the receipt of another snapshot`);
    }
    this.pendingReceipt.chunks.push(chunk);
  }

  /** Replaces the log with a received snapshot whose data the storage holds complete and verified. */
  private restoreSnapshot(metadata: SnapshotMetadata): void {
    const { index, term, configuration } = metadata;
    if (this.log.matchTerm(index, term)) {
      // The log already holds the snapshot's last entry, so it holds everything before it: just commit.
      this.log.commitTo(index);
      return;
    }
    this.log.restore(metadata);
    this.history.reset(index, configuration);
    // A local compaction not yet handed out is superseded by the received snapshot.
    if (this.pendingCompaction && this.pendingCompaction.metadata.index <= index) this.pendingCompaction = null;
    this.syncProgress();
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Shared helpers

  /** Appends to the log (leader or follower) and keeps the configuration history in step with it. */
  private appendToLog(entries: readonly Entry[]): void {
    const first = entries[0];
    if (!first) return;
    if (this.role === "leader" && first.index <= this.log.lastIndex()) {
      throw new Error(`raft: Leader Append-Only violated: leader ${this.id} would overwrite entry ${first.index}`);
    }
    this.history.truncateFrom(first.index);
    this.log.append(entries);
    for (const entry of entries) {
      if (entry.kind !== "configuration") continue;
      this.history.append(entry.index, decodeConfiguration(entry.data));
    }
    this.syncProgress();
  }

  private scanConfigurations(fromIndex: number, toIndex: number): void {
    const batch = 1024;
    for (let start = fromIndex; start <= toIndex; start += batch) {
      const end = Math.min(toIndex + 1, start + batch);
      for (const entry of this.options.storage.entries(start, end)) {
        if (entry.kind === "configuration") this.history.append(entry.index, decodeConfiguration(entry.data));
      }
    }
  }

  private setTerm(term: number): void {
    if (term < this.term) throw new Error(`raft: term would decrease from ${this.term} to ${term}`);
    this.term = term;
  }

  private vote(member: MemberId): void {
    if (this.votedFor !== null && this.votedFor !== member) {
      throw new Error(`raft: Election Safety violated: second vote in term ${this.term} (${this.votedFor}, ${member})`);
    }
    this.votedFor = member;
  }

  private send(message: Message): void {
    this.outbox.push(message);
  }

  private hardState(): HardState {
    const hardState: HardState = { term: this.term, votedFor: this.votedFor, commitIndex: this.log.committed };
    const forced = this.forced === null ? {} : { forced: this.forced };
    const fenced = this.fencedMembers.length === 0 ? {} : { fencedMembers: this.fencedMembers };
    return { ...hardState, ...forced, ...fenced };
  }

  /**
   * Ends the forced membership once the committed log says what the membership is, and elections need a majority
   * again: when a configuration entry holding it is committed, or when any entry of a term after the force is.
   * The second covers a member that missed the forced entry's commit while the others went on changing the
   * membership (it would otherwise hold the forced membership for good, and campaign under it in vain): the first
   * leader elected after the force appended the forced configuration before anything else, so a committed entry of
   * a later term has that configuration, or a later one built on it, committed before it. Ending it at the commit
   * rather than at the append matters: an uncommitted entry can be truncated away, and the membership would then
   * fall back to the old one.
   */
  private maybeEndForcedMembership(): void {
    if (this.forced === null) return;
    const committedTerm = this.log.term(this.log.committed);
    if (committedTerm !== null && committedTerm > this.forced.sinceTerm) {
      this.forced = null;
      return;
    }
    if (this.history.currentIndex() > this.log.committed) return;
    if (!sameConfiguration(this.history.current(), this.forced.configuration)) return;
    this.forced = null;
  }

  /** Whether messages from `member` are ignored: a forced reconfiguration left it out and nothing added it back. */
  private isFenced(member: MemberId): boolean {
    return (
      this.fencedMembers.length > 0 && this.fencedMembers.includes(member) && !memberOf(this.configuration(), member)
    );
  }

  /**
   * Whether the leader accepts the promotion of learner `member`: it has been caught up (replicating, within
   * `promotionLagEntries` of the commit index) for at least `promotionStableTicks` ticks.
   */
  private promotionReady(member: MemberId): boolean {
    const learner = this.progress.get(member);
    if (learner === undefined || learner.caughtUpSinceTick === null) return false;
    return this.ticks - learner.caughtUpSinceTick >= this.options.promotionStableTicks;
  }

  /**
   * Starts a learner's caught-up time when an acknowledgement brings it within the lag, rather than at the next tick:
   * the ticks after it still each check that it stayed there (`trackLearnersCatchingUp`), so the promotion waits for
   * the same number of checks, without the part of a tick that passed before the first one.
   */
  private noteLearnerCaughtUp(progress: Progress): void {
    if (progress.caughtUpSinceTick !== null || progress.state !== "replicate") return;
    if (progress.match + this.options.promotionLagEntries < this.log.committed) return;
    if (memberOf(this.configuration(), progress.member)?.role !== "learner") return;
    progress.caughtUpSinceTick = this.ticks;
  }

  /** Keeps each learner's `caughtUpSinceTick` current (leader only, once per tick). */
  private trackLearnersCatchingUp(): void {
    const configuration = this.configuration();
    for (const progress of this.progress.values()) {
      if (memberOf(configuration, progress.member)?.role !== "learner") continue;
      const caughtUp =
        progress.state === "replicate" && progress.match + this.options.promotionLagEntries >= this.log.committed;
      if (!caughtUp) progress.caughtUpSinceTick = null;
      else if (progress.caughtUpSinceTick === null) progress.caughtUpSinceTick = this.ticks;
    }
  }

  private softState(): SoftState {
    return { role: this.role, leaderId: this.leaderId, term: this.term };
  }
}

function sortedConfiguration(configuration: Configuration): Configuration {
  return { members: [...configuration.members].sort((left, right) => left.id - right.id) };
}

function validateOptions(options: RaftNodeOptions): void {
  const positive: [string, number][] = [
    ["electionTimeoutTicks", options.electionTimeoutTicks],
    ["heartbeatTimeoutTicks", options.heartbeatTimeoutTicks],
    ["maxInflightMessages", options.maxInflightMessages],
    ["maxInflightBytes", options.maxInflightBytes],
    ["maxEntriesPerMessage", options.maxEntriesPerMessage],
    ["maxBytesPerMessage", options.maxBytesPerMessage],
    ["snapshotChunkBytes", options.snapshotChunkBytes],
    ["snapshotWindowChunks", options.snapshotWindowChunks],
    ["snapshotResendTicks", options.snapshotResendTicks],
    ["maxCommittedEntriesPerReady", options.maxCommittedEntriesPerReady],
    ["maxPendingReads", options.maxPendingReads],
    ["maxUncommittedEntries", options.maxUncommittedEntries],
    ["promotionStableTicks", options.promotionStableTicks],
  ];
  for (const [name, value] of positive) {
    if (!Number.isInteger(value) || value < 1) throw new Error(`raft: option ${name} must be a positive integer`);
  }
  if (!Number.isInteger(options.promotionLagEntries) || options.promotionLagEntries < 0) {
    throw new Error("raft: option promotionLagEntries must be a non-negative integer");
  }
  if (options.heartbeatTimeoutTicks >= options.electionTimeoutTicks) {
    throw new Error("raft: heartbeatTimeoutTicks must be smaller than electionTimeoutTicks");
  }
}
