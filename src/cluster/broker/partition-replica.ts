/**
 * One partition replica on a broker: a member of the partition's Raft group with its storage (its records in the
 * broker's storage environment) and its partition engine, plus the driver that runs them. The driver follows the
 * `Ready` contract of the core: send the messages that may leave early (a leader's appends and heartbeats), apply
 * committed entries, persist (snapshot, entries and hard state, compaction) durably, only then send the other
 * messages (after a snapshot: restore, then apply), serve reads, and finally advance; only one `Ready` is
 * outstanding at a time.
 *
 * Proposals (publish) and linearizable reads (get-message) come from request handlers; each waits for its entry to
 * be applied (or its read index to be reached) and is answered with the protocol's outcome. Everything waiting is
 * bounded. A proposal is answered exactly: once its index is applied, `published` when the entry there is its own
 * and `not-leader` when another leader's entry replaced it, even when this replica lost leadership meanwhile (the
 * next leader may still commit it, so answering earlier would invite a retry that publishes twice). Such proposals
 * of a lost leadership are "in doubt": they no longer count against the proposal bound or hold up a shutdown, and
 * are answered `unknown` when their index is not applied within `inDoubtTimeoutMs`, when the replica stops (a
 * broker shutting down does not wait for them), or when a snapshot skips past their index. Reads fail with
 * `not-leader` when this replica loses leadership, everything else with `unavailable` when it stops.
 */
import type { Logger } from "pino";
import {
  type ApplyResult,
  type EngineRecord,
  type EngineSnapshotEncoder,
  encodeRecord,
  PartitionEngine,
  type PublishMessageRecord,
  RecordValidationError,
  type RelocatedMessage,
  type SlabStatistics,
} from "../engine/index.js";
import {
  type Configuration,
  type Entry,
  type Member,
  type Message,
  type NodeStatus,
  type PreparedSnapshotData,
  RaftNode,
  type Ready,
  type ReceiptDamage,
  type Refusal,
  SeededRandom,
  sameConfiguration,
} from "../raft/index.js";
import type { StorageEnvironment } from "../raft/storage/environment.js";
import { MemberStorage } from "../raft/storage/member-storage.js";
import { IncomingRestore } from "./incoming-restore.js";
import { LeaderMembership } from "./leader-membership.js";
import type { MembershipAnswer, MembershipChange } from "./membership.js";
import type { BufferedMessages } from "./message-memory.js";
import type { RelocationProgress } from "./peer-requests.js";
import type {
  GetMessageResponse,
  MessageView,
  PartitionRedirect,
  PublishMessageCommand,
  PublishMessageResponse,
  ReplicaHealth,
  ReplicaReport,
  ReplicaRole,
} from "./protocol.js";
import { type HandOver, type RelocationLimits, relocateMisplacedMessages } from "./relocation.js";
import { ReplicaBackup, type ReplicaBackupOptions } from "./replica-backup.js";

/** Explicit options of a replica. */
export interface PartitionReplicaOptions {
  readonly partitionId: number;
  /** This broker's id, which is this replica's Raft member id. */
  readonly memberId: number;
  /** The broker's storage environment; the replica's records are kept there under its partition id. */
  readonly environment: StorageEnvironment;
  /**
   * The founding members with their priorities, written as the group's first configuration when the storage is
   * empty; null for a replica that joins an existing group (or rejoins one after losing its data), which learns the
   * membership from the leader and neither votes nor campaigns before it has.
   */
  readonly bootstrap: readonly Member[] | null;
  /** Tick period; a leader heartbeats every tick. */
  readonly heartbeatIntervalMs: number;
  /** Minimum time without a leader before campaigning. */
  readonly electionTimeoutMs: number;
  /** Applied entries between two snapshots (log compactions). */
  readonly snapshotIntervalEntries: number;
  /**
   * Chunks of a snapshot in flight per member receiving it (default `DEFAULT_SNAPSHOT_WINDOW_CHUNKS`): a wider window
   * lets the receiver write more chunks per durable commit, and bounds the memory a transfer holds on both sides.
   */
  readonly snapshotWindowChunks?: number;
  /**
   * Largest chunk of a snapshot, sent and stored (default 1 MiB). The simulation uses small ones, so that its small
   * states still travel in many chunks.
   */
  readonly snapshotChunkBytes?: number;
  /** Proposals waiting for their commit at once; beyond it publish answers `unavailable`. */
  readonly maxPendingProposals: number;
  /** Why the broker refuses new publications now (its buffered messages fill its memory), or null; asked per publish. */
  readonly publicationRefusal?: () => string | null;
  /** A replica whose applied index trails the commit index it knows by more than this is unhealthy. */
  readonly maxApplyLagEntries: number;
  /**
   * How long a proposal of a lost leadership waits for its index to be applied before it is answered `unknown`
   * (default: `IN_DOUBT_TIMEOUT_ELECTIONS` election timeouts).
   */
  readonly inDoubtTimeoutMs?: number;
  /**
   * Hands a Raft message to the transport (fire and forget; Raft tolerates loss). The message must be encoded, or
   * copied, before this returns: the bytes of a snapshot chunk are reused for the next chunk read afterwards.
   */
  readonly send: (to: number, message: Message) => void;
  /**
   * Called once when the replica fails (an invariant broke or storage failed), to log it loudly; the replica no
   * longer serves anything and reports itself inactive and unhealthy.
   */
  readonly onFailure: (error: Error) => void;
  /** Called after each snapshot this replica takes is encoded and its chunks are durable (for metrics). */
  readonly onSnapshot?: (snapshot: SnapshotReport) => void;
  /**
   * Called when snapshot data from the partition's leader arrived damaged (for metrics), at most once per turn of the
   * driver: `chunks` whose bytes failed the checksum sent with them, `snapshots` whose whole checksum failed after
   * their last byte. The replica also logs it; the data is received again either way.
   */
  readonly onReceiptDamage?: (damage: ReceiptDamageReport) => void;
  /**
   * The least time between two warnings about damaged snapshot data (default: one minute); a
   * warning carries the counts since the one before, so a leader whose data arrives damaged on every resend makes
   * one line per interval, not one per resend.
   */
  readonly receiptDamageLogIntervalMs?: number;
  readonly logger: Logger;
  /** Where this replica writes its partition's part of a backup while it leads; absent: it writes none. */
  readonly backups?: ReplicaBackupOptions;
  /** Time and timers (default: the system's); the simulation passes a simulated clock. */
  readonly clock?: ReplicaClock;
  /**
   * The times publications are stamped with and messages expire by (default: the clock's `now()` for both); a broker
   * passes the middle of its brokers' clocks (cluster-clock.ts).
   */
  readonly messageClock?: MessageClock;
  /** Seed of the Raft node's randomized election timeouts (default: derived from the clock and the member id). */
  readonly randomSeed?: number;
}

/**
 * Where a replica gets its time and timers: ticks, publication times, read expiry and leadership hand-over waits.
 * The default is the system clock; a simulation passes one it advances itself, so a whole cluster of real replicas
 * runs on simulated time.
 */
export interface ReplicaClock {
  /** Milliseconds since the epoch, for times of day (when a part of a backup started and ended). */
  now(): number;
  /** Milliseconds on a clock that steps of the wall clock do not move, for deadlines and durations. */
  monotonicNow(): number;
  /** Calls `tick` every `intervalMs` until the returned function is called. */
  repeat(intervalMs: number, tick: () => void): () => void;
  /** Resolves after `delayMs`. */
  sleep(delayMs: number): Promise<void>;
  /**
   * Resolves once other pending work had a turn: between two slices of a snapshot's encoding, and between two
   * received chunks decoded while their write is made durable.
   */
  yieldTurn(): Promise<void>;
}

/** The system's clock and timers, which production uses. */
export const systemClock: ReplicaClock = {
  now: () => Date.now(),
  monotonicNow: () => performance.now(),
  repeat: (intervalMs, tick) => {
    const timer = setInterval(tick, intervalMs);
    return () => clearInterval(timer);
  },
  sleep: (delayMs) => new Promise((resolve) => setTimeout(resolve, delayMs)),
  yieldTurn: () => new Promise((resolve) => setImmediate(resolve)),
};

/** The times messages are stamped with and expire by, in milliseconds since the epoch. */
export interface MessageClock {
  /** The time a leader stamps a publication with. */
  publicationNowMs(): number;
  /** The time messages expire by: a leader proposes the expiry of, and its reads skip, messages past it. */
  expiryNowMs(): number;
}

/** Snapshot data a replica received damaged since its last report (`PartitionReplicaOptions.onReceiptDamage`). */
export interface ReceiptDamageReport {
  readonly partitionId: number;
  readonly chunks: number;
  readonly snapshots: number;
}

/** One snapshot a replica took. */
export interface SnapshotReport {
  readonly partitionId: number;
  /** The log index it covers. */
  readonly index: number;
  readonly sizeBytes: number;
  /** Buffered messages it holds. */
  readonly messages: number;
  /** From the start of its encoding until its chunks were durable. */
  readonly durationMs: number;
}

/** How a proposal ended, once that is known. */
export type ProposalOutcome =
  /** Its entry was committed and applied, with this result. */
  | { readonly kind: "applied"; readonly result: ApplyResult }
  /** Another leader's entry took its index: it was never committed. */
  | { readonly kind: "replaced"; readonly leaderId: number | null }
  /** This replica cannot tell whether it was committed. */
  | { readonly kind: "unknown"; readonly detail: string };

/** How a proposal ended, or why it was not even proposed (only then may the caller simply retry). */
export type ProposalEnd = ProposalOutcome | { readonly kind: "refused"; readonly redirect: PartitionRedirect };

interface WaitingProposal {
  readonly term: number;
  readonly resolve: (outcome: ProposalOutcome) => void;
}

/** A proposal of a leadership this replica lost, waiting for its index to be applied or for its deadline. */
interface InDoubtProposal extends WaitingProposal {
  /** The tick (`PartitionReplica.tickCount`) after which it is answered `unknown`. */
  readonly deadlineTick: number;
}

/**
 * How long a proposal of a lost leadership waits for its index to be applied, in election timeouts. The next leader
 * commits within a few election timeouts when it can; and the gateway stops waiting after its request timeout
 * (10 s by default) anyway, so a longer wait would only hold the request's slot on the connection.
 */
const IN_DOUBT_TIMEOUT_ELECTIONS = 10;

interface WaitingRead {
  readonly key: string;
  /** Set once the leader confirmed the read; the read is answered once applied up to it. */
  index: number | null;
  readonly resolve: (response: GetMessageResponse) => void;
}

/**
 * Snapshot intervals a leader may go without compacting while it sends its snapshot to a member (see `maybeCompact`):
 * the log grows up to this many intervals of entries instead of the transfer starting over.
 */
const SNAPSHOT_TRANSFER_COMPACTION_DEFERRAL = 4;
/** How often a snapshot held back for a backup part looks whether it may go on. */
const SNAPSHOT_BACKUP_PAUSE_MS = 20;
/** Largest chunk of a snapshot, unless `snapshotChunkBytes` says otherwise. */
const DEFAULT_SNAPSHOT_CHUNK_BYTES = 1024 * 1024;

/** Chunks of a snapshot in flight per member receiving it, unless `snapshotWindowChunks` says otherwise. */
const DEFAULT_SNAPSHOT_WINDOW_CHUNKS = 16;

/**
 * Least time between two warnings about damaged snapshot data, unless `receiptDamageLogIntervalMs` says otherwise:
 * a fault that damages every resend makes one line a minute, and the first damage is logged when it happens.
 */
const RECEIPT_DAMAGE_LOG_INTERVAL_MS = 60_000;

/** Work for the driver: from request handlers (bounded by `MAX_QUEUED_WORK`), or the replica's own snapshots. */
interface QueuedWork {
  readonly run: () => void;
  readonly fail: (detail: string) => void;
}

/** Most proposals and reads queued for the driver at once (proposals are also bounded per partition). */
const MAX_QUEUED_WORK = 16_384;

/** Most inbound Raft messages queued for the driver; the core's flow control keeps traffic far below this. */
const MAX_INBOX_MESSAGES = 65_536;

/** Most ticks accumulated while the driver is busy; more are pointless (the core only counts them). */
const MAX_PENDING_TICKS = 1_000;

/** A running replica; see the module comment. */
export class PartitionReplica {
  readonly partitionId: number;
  private readonly options: PartitionReplicaOptions;
  private readonly storage: MemberStorage;
  private readonly node: RaftNode;
  private engine: PartitionEngine;
  private readonly inbox: Message[] = [];
  private readonly queue: QueuedWork[] = [];
  private queuedProposalCount = 0;
  private pendingTicks = 0;
  private wake: (() => void) | null = null;
  private loop: Promise<void> = Promise.resolve();
  /** Stops the tick timer; null when it is not running. */
  private stopTicks: (() => void) | null = null;
  private readonly clock: ReplicaClock;
  private readonly messageClock: MessageClock;
  private running = true;
  private failure: Error | null = null;
  private lastPersistSucceeded = true;
  private snapshotIndex: number;
  private compactionRequestedAt = 0;
  /** Whether a snapshot is being encoded and written (`takeSnapshot`); one at a time. */
  private snapshotInProgress = false;
  /** The snapshot whose chunks are written and whose compaction the core has not handed out yet. */
  private preparedSnapshot: { readonly index: number; readonly data: PreparedSnapshotData } | null = null;
  private installedSnapshots = 0;
  private snapshotsRestoredWhileReceiving = 0;
  /** The core's record of damaged snapshot data that `reportReceiptDamage` reported last. */
  private reportedDamage: ReceiptDamage = { chunksDamaged: 0, snapshotsRejected: 0, lastSenderId: null };
  /** Damaged snapshot data reported but not logged yet, and when the last warning about it was logged. */
  private unloggedDamage = { chunks: 0, snapshots: 0, loggedAtMs: null as number | null };
  /** Whether `relocateMessages` is running (one run at a time). */
  private relocating = false;
  /** Size of the latest snapshot this replica holds (taken or installed), for joining replicas' progress. */
  private snapshotSizeBytes = 0;
  /** Log entry and snapshot bytes received from leaders since the replica opened (a joining replica's progress). */
  private receivedBytes = 0;
  /** The engine being restored from a leader's snapshot while its chunks arrive (`incoming-restore.ts`). */
  private readonly incomingRestore: IncomingRestore;
  /** Callbacks waiting for the next batch to be durable (a forced membership must be before it is reported). */
  private awaitingDurability: (() => void)[] = [];
  /** This replica's share of backups: the part it writes while it leads, and its hold on snapshots meanwhile. */
  private readonly backup: ReplicaBackup;
  /** Milliseconds the snapshot being taken was held back for backup parts (left out of its reported duration). */
  private snapshotPausedMs = 0;
  /** Whether a snapshot taken is queued for the core's compaction (`takeSnapshot`), past its last hold. */
  private snapshotQueuedForCore = false;
  /** The term in which this replica handed its leadership over before stopping; null when it is not leaving. */
  private leavingTerm: number | null = null;
  private newerTermSeen = false;
  private closed = false;
  /** Proposals of this replica's current leadership (all of term `proposalsTerm`), by index. */
  private readonly proposals = new Map<number, WaitingProposal>();
  private proposalsTerm = 0;
  /**
   * Proposals of leaderships this replica lost, by index (several terms may have left one at the same index). They
   * no longer count against the proposal bound or hold up a shutdown; at most `maxPendingProposals` are kept.
   */
  private readonly inDoubt = new Map<number, InDoubtProposal[]>();
  private inDoubtCount = 0;
  /** Ticks handed to the core since the replica opened: the clock of the in-doubt deadlines. */
  private tickCount = 0;
  private readonly reads = new Map<string, WaitingRead>();
  private readSequence = 0;
  /** Index of the expiry record this leader proposed and has not applied yet, so it proposes one at a time. */
  private pendingExpiryIndex: number | null = null;
  private status: NodeStatus;
  private committedConfigurationValue: Configuration;
  /** Membership requests this replica answers as its partition's leader. */
  private readonly leaderMembership: LeaderMembership;

  private constructor(
    options: PartitionReplicaOptions,
    storage: MemberStorage,
    node: RaftNode,
    engine: PartitionEngine,
  ) {
    this.options = options;
    this.clock = options.clock ?? systemClock;
    const clock = this.clock;
    this.messageClock = options.messageClock ?? { publicationNowMs: () => clock.now(), expiryNowMs: () => clock.now() };
    this.partitionId = options.partitionId;
    this.incomingRestore = new IncomingRestore(options.partitionId, options.logger);
    this.storage = storage;
    this.node = node;
    this.engine = engine;
    // A restored engine sits exactly at the stored snapshot's index (checked when it was restored).
    this.snapshotIndex = engine.lastAppliedIndex;
    this.snapshotSizeBytes = storage.snapshotMetadata()?.sizeBytes ?? 0;
    this.status = node.status();
    this.committedConfigurationValue = node.committedConfiguration();
    this.backup = new ReplicaBackup({
      partitionId: options.partitionId,
      memberId: options.memberId,
      logger: options.logger,
      snapshotIntervalEntries: options.snapshotIntervalEntries,
      backups: options.backups,
      storage,
      now: () => this.clock.now(),
      sleep: (delayMs) => this.clock.sleep(delayMs),
      yieldTurn: () => this.clock.yieldTurn(),
      engine: () => this.engine,
      snapshotIndex: () => this.snapshotIndex,
      status: () => this.status,
      closed: () => this.closed,
      running: () => this.running,
      snapshotOnItsWay: () => this.snapshotQueuedForCore || this.preparedSnapshot !== null,
      nudge: () => this.nudge(),
    });
    this.leaderMembership = new LeaderMembership({
      partitionId: options.partitionId,
      memberId: options.memberId,
      node,
      logger: options.logger,
      heartbeatIntervalMs: options.heartbeatIntervalMs,
      monotonicNowMs: () => this.clock.monotonicNow(),
      tickCount: () => this.tickCount,
      latestSnapshot: () => ({ index: this.snapshotIndex, sizeBytes: this.snapshotSizeBytes }),
    });
  }

  /**
   * Opens the replica's storage (restoring the engine from its snapshot when there is one), creates the Raft node
   * and starts the driver and the tick timer.
   */
  static async open(options: PartitionReplicaOptions): Promise<PartitionReplica> {
    if (options.heartbeatIntervalMs < 1 || options.electionTimeoutMs <= options.heartbeatIntervalMs) {
      throw new Error("invariant violated: the election timeout must be longer than the heartbeat interval");
    }
    const snapshotChunkBytes = options.snapshotChunkBytes ?? DEFAULT_SNAPSHOT_CHUNK_BYTES;
    const storage = MemberStorage.openIn(options.environment, { scope: options.partitionId, snapshotChunkBytes });
    for (const damage of storage.damageFoundOnOpen) {
      options.logger.warn(
        { partitionId: options.partitionId, damage },
        "data set aside while opening the replica's storage (a crash's unsynced bytes or damage); received again from the leader",
      );
    }
    try {
      const persisted = await storage.load();
      const engine =
        (await restoreEngine(storage, options.partitionId, options.clock ?? systemClock)) ??
        new PartitionEngine({ partitionId: options.partitionId });
      const electionTimeoutTicks = Math.max(2, Math.round(options.electionTimeoutMs / options.heartbeatIntervalMs));
      const node = new RaftNode({
        id: options.memberId,
        storage,
        persisted,
        bootstrap: options.bootstrap === null ? null : { members: options.bootstrap },
        electionTimeoutTicks,
        heartbeatTimeoutTicks: 1,
        maxInflightMessages: 64,
        maxInflightBytes: 8 * 1024 * 1024,
        maxEntriesPerMessage: 1024,
        maxBytesPerMessage: 1024 * 1024,
        snapshotChunkBytes,
        // Resent after an election timeout without progress.
        snapshotWindowChunks: options.snapshotWindowChunks ?? DEFAULT_SNAPSHOT_WINDOW_CHUNKS,
        snapshotResendTicks: electionTimeoutTicks,
        maxCommittedEntriesPerReady: 1024,
        maxPendingReads: 1024,
        maxUncommittedEntries: 8192,
        // One append message's worth of entries, at the acknowledgement that brought the learner there and again at
        // the next heartbeat: a learner that keeps that close under load is as good as caught up, and its promotion
        // cannot make the group wait for it. Each further heartbeat of waiting delayed every join by as much, with
        // nothing gained, since the lag already bounds what the group could wait for.
        promotionLagEntries: 1024,
        promotionStableTicks: 1,
        // Election timeouts only need to differ between members; the seed is not security-relevant.
        random: new SeededRandom(
          options.randomSeed ?? (options.clock ?? systemClock).now() ^ (options.memberId * 7919 + options.partitionId),
        ),
        preVote: true,
        checkQuorum: true,
      });
      const replica = new PartitionReplica(options, storage, node, engine);
      replica.start();
      return replica;
    } catch (error) {
      await storage.close();
      throw error;
    }
  }

  /**
   * Hands work that touches the Raft node to the driver. Only the driver calls the node, and only between two
   * readies: while a ready is being persisted the storage may already have dropped entries (a compaction) that the
   * node still believes it holds, so a proposal or read handled then could make it read a missing entry.
   */
  private enqueue(work: QueuedWork): void {
    if (this.queue.length >= MAX_QUEUED_WORK) {
      work.fail(`partition ${this.partitionId} has too much work queued; retry later`);
      return;
    }
    this.queue.push(work);
    this.nudge();
  }

  /** Queues a Raft message from another member for the driver. */
  receive(message: Message): void {
    if (!this.running) return;
    if (this.leavingTerm !== null && message.term > this.leavingTerm) {
      // This replica handed leadership over and is about to stop. It ignores the new term: otherwise the new leader
      // would see it caught up and, its priority being higher, hand leadership straight back to a replica that is
      // going away, leaving the partition refusing requests until that transfer times out.
      this.newerTermSeen = true;
      return;
    }
    if (this.inbox.length >= MAX_INBOX_MESSAGES) {
      // Dropping is safe: Raft retransmits; unbounded queues are not.
      this.options.logger.warn({ partitionId: this.partitionId }, "raft inbox full; dropping a message");
      return;
    }
    this.inbox.push(message);
    this.nudge();
  }

  /** Proposes a publication and answers once it is committed by a quorum and applied. */
  publish(command: PublishMessageCommand): Promise<PublishMessageResponse> {
    const unavailable = this.unavailableReason();
    if (unavailable !== null) return Promise.resolve({ outcome: "unavailable", detail: unavailable });
    if (this.status.role !== "leader") {
      return Promise.resolve({ outcome: "not-leader", leaderId: this.status.leaderId });
    }
    const refusal = this.options.publicationRefusal?.() ?? null;
    if (refusal !== null) return Promise.resolve({ outcome: "unavailable", detail: refusal });
    const waiting = this.proposals.size + this.queuedProposalCount;
    if (waiting >= this.options.maxPendingProposals) {
      return Promise.resolve({
        outcome: "unavailable",
        detail: `partition ${this.partitionId} has ${waiting} proposals waiting; retry later`,
      });
    }
    const record: PublishMessageRecord = {
      kind: "publishMessage",
      name: command.name,
      correlationKey: command.correlationKey,
      timeToLiveMs: command.timeToLiveMs,
      ...(command.messageId === undefined ? {} : { messageId: command.messageId }),
      variables: command.variables,
      tenantId: command.tenantId,
      publishedAtMs: this.messageClock.publicationNowMs(),
    };
    let data: Uint8Array;
    try {
      data = encodeRecord(record);
    } catch (error) {
      if (error instanceof RecordValidationError) {
        return Promise.resolve({ outcome: "rejected", reason: "invalid-record", detail: error.message });
      }
      throw error;
    }
    const tenantId = command.tenantId;
    return new Promise((resolve) => {
      this.proposeData(data, (end) => resolve(publishResponse(end, this.partitionId, tenantId)));
    });
  }

  /**
   * Proposes an engine record of the partition's own (routing, relocation) and resolves with how it ended. The same
   * exactness as publications: an applied outcome only once the entry is committed and applied.
   */
  proposeRecord(record: EngineRecord): Promise<ProposalEnd> {
    const unavailable = this.unavailableReason();
    if (unavailable !== null) {
      return Promise.resolve({ kind: "refused", redirect: { outcome: "unavailable", detail: unavailable } });
    }
    if (this.status.role !== "leader") {
      return Promise.resolve({
        kind: "refused",
        redirect: { outcome: "not-leader", leaderId: this.status.leaderId },
      });
    }
    const data = encodeRecord(record);
    return new Promise((resolve) => this.proposeData(data, resolve));
  }

  /** Queues `data` for proposal; `resolve` hears how it ended (see `ProposalEnd`). */
  private proposeData(data: Uint8Array, resolve: (end: ProposalEnd) => void): void {
    this.queuedProposalCount += 1;
    let queued = true;
    // Once only: an item whose `run` throws is also failed.
    const leaveQueue = (): void => {
      if (queued) this.queuedProposalCount -= 1;
      queued = false;
    };
    this.enqueue({
      run: () => {
        leaveQueue();
        const result = this.node.propose(data);
        if (!result.accepted) {
          resolve({ kind: "refused", redirect: refusalAnswer(result, this.partitionId) });
          return;
        }
        // Proposals of an earlier leadership that this replica did not see end are in doubt now, like any other.
        if (result.term !== this.proposalsTerm) this.setProposalsInDoubt(result.term);
        this.proposals.set(result.index, { term: result.term, resolve });
      },
      fail: (detail) => {
        leaveQueue();
        resolve({ kind: "refused", redirect: { outcome: "unavailable", detail } });
      },
    });
  }

  /** A linearizable read of one buffered message: confirmed leadership, then answered once applied that far. */
  getMessage(key: string): Promise<GetMessageResponse> {
    const unavailable = this.unavailableReason();
    if (unavailable !== null) return Promise.resolve({ outcome: "unavailable", detail: unavailable });
    if (this.status.role !== "leader") {
      return Promise.resolve({ outcome: "not-leader", leaderId: this.status.leaderId });
    }
    return new Promise((resolve) => {
      this.enqueue({
        run: () => {
          this.readSequence += 1;
          const context = `${this.partitionId}/${this.readSequence}`;
          const result = this.node.readIndex(context);
          if (!result.accepted) {
            resolve(refusalAnswer(result, this.partitionId));
            return;
          }
          this.reads.set(context, { key, index: null, resolve });
        },
        fail: (detail) => resolve({ outcome: "unavailable", detail }),
      });
    });
  }

  /**
   * As the partition's leader: from now on own only the correlation keys that hash here over `correlationCount`
   * partitions (see the engine's routing). Resolves once the routing record is applied, or with the reason it was
   * not (a redirect, or an unknown outcome the caller retries: proposing the same routing again is harmless).
   */
  async routeMessages(correlationCount: number, basePartitionCount: number, relocating: boolean): Promise<ProposalEnd> {
    return this.proposeRecord({ kind: "routeMessages", correlationCount, basePartitionCount, relocating });
  }

  /**
   * As the leader of the partition that owns the relocated messages' keys now: buffers them (idempotently per source
   * key) and resolves with their keys here, in order, null for one that had expired on the way.
   */
  async receiveRelocated(messages: readonly RelocatedMessage[], checkpointId: bigint | null): Promise<ProposalEnd> {
    return this.proposeRecord({ kind: "relocateIn", messages, nowMs: this.messageClock.expiryNowMs(), checkpointId });
  }

  /** The id of the latest checkpoint this replica applied, or null: what its hand-overs carry. */
  get latestCheckpointId(): bigint | null {
    return this.engine.latestCheckpoint?.id ?? null;
  }

  /**
   * As the partition's leader: proposes checkpoint `checkpointId` (a backup) and resolves once it is applied, with
   * the checkpoint taken (or the later one the partition held already), or the reason it was not applied.
   */
  async takeCheckpoint(checkpointId: bigint): Promise<ProposalEnd> {
    return this.backup.proposeCheckpoint(() => this.proposeRecord({ kind: "checkpoint", checkpointId }));
  }

  /**
   * As the partition's leader, moves up to `maxBatches` batches of the messages whose correlation key another
   * partition owns now (`relocateMisplacedMessages`), and resolves with how many remain, so the caller repeats until
   * none does; one run at a time.
   */
  async relocateMessages(send: HandOver, limits: RelocationLimits): Promise<RelocationProgress | PartitionRedirect> {
    if (this.relocating) {
      return { outcome: "unavailable", detail: `partition ${this.partitionId} is relocating already` };
    }
    if (this.status.role !== "leader") return { outcome: "not-leader", leaderId: this.status.leaderId };
    // What is misplaced is read from the engine: it must have applied everything committed, the routing included.
    if (this.engine.messageRouting === null || this.engine.lastAppliedIndex < this.status.commitIndex) {
      return { outcome: "unavailable", detail: `partition ${this.partitionId} is still applying its log` };
    }
    this.relocating = true;
    try {
      return await relocateMisplacedMessages(
        {
          engine: () => this.engine,
          latestCheckpointId: () => this.latestCheckpointId,
          proposeRecord: (record) => this.proposeRecord(record),
        },
        send,
        limits,
      );
    } finally {
      this.relocating = false;
    }
  }

  /**
   * Answers a broker asking this replica, as the partition's leader, for a membership change (see membership.ts):
   * `done` once the committed configuration shows it, `in-progress` after proposing it or while it waits (for its
   * commit, for a learner to catch up, or for this leader to hand over before removing itself).
   *
   * With `waitMs`, an answer that would be `in-progress` waits instead: the leader looks at the change again after
   * every step of its driver (a tick, a message, a commit), proposes it as soon as it can (a learner's promotion in
   * the turn it became ready), and answers as soon as the outcome is anything but `in-progress`, or with the latest
   * state once `waitMs` passed. The broker applying a join is then told of each step when it happens instead of
   * finding out at its next poll. A leader removing itself answers at once: it hands its leadership over first.
   */
  changeMembership(change: MembershipChange, waitMs = 0): Promise<MembershipAnswer> {
    const unavailable = this.unavailableReason();
    if (unavailable !== null) return Promise.resolve({ outcome: "unavailable", detail: unavailable });
    return new Promise((resolve) => {
      this.enqueue({
        run: () => this.leaderMembership.answer(change, waitMs, resolve),
        fail: (detail) => resolve({ outcome: "unavailable", detail }),
      });
    });
  }

  /**
   * Replaces the group's membership with `members` without the old quorum (`RaftNode.forceReconfigure`) and resolves
   * once the forced membership is durable here. Does nothing when the membership already is `members` and nothing is
   * forced, so that repeating the request after a crash does not start another election.
   */
  forceMembership(members: readonly Member[]): Promise<void> {
    const unavailable = this.unavailableReason();
    if (unavailable !== null) return Promise.reject(new Error(unavailable));
    return new Promise((resolve, reject) => {
      this.enqueue({
        run: () => {
          const status = this.node.status();
          const target: Configuration = { members };
          if (!status.forced && sameConfiguration(this.node.committedConfiguration(), target)) {
            resolve();
            return;
          }
          if (status.forced && sameConfiguration(status.configuration, target)) {
            resolve();
            return;
          }
          this.node.forceReconfigure(members, { acceptDataLoss: true });
          this.awaitingDurability.push(resolve);
        },
        fail: (detail) => reject(new Error(detail)),
      });
    });
  }

  /** What a broker applying a membership operation needs to know about this replica's own view of its group. */
  membership(): { readonly configuration: Configuration; readonly forced: boolean; readonly receivedBytes: number } {
    return { configuration: this.status.configuration, forced: this.status.forced, receivedBytes: this.receivedBytes };
  }

  /** The replica's committed configuration (it never shows a change that could still be undone). */
  committedConfiguration(): Configuration {
    return this.committedConfigurationValue;
  }

  /** Stops the replica and removes everything it stored (it left its group). */
  async destroy(): Promise<void> {
    await this.stop();
    await this.storage.destroy();
  }

  /**
   * Before a clean shutdown: hands leadership to the most up-to-date other voter so the partition does not wait an
   * election timeout for a new leader. Resolves once this replica no longer leads or after `timeoutMs`.
   */
  async handOverLeadership(timeoutMs: number): Promise<void> {
    if (this.failure !== null || !this.running || this.status.role !== "leader") return;
    this.enqueue({
      run: () => {
        const status = this.node.status();
        if (status.role !== "leader") return;
        const target = this.leaderMembership.handOverTarget(status);
        if (target === null || !this.node.transferLeadership(target).accepted) return;
        this.leavingTerm = status.term;
      },
      fail: () => {},
    });
    const deadlineMs = this.clock.monotonicNow() + timeoutMs;
    while (
      this.clock.monotonicNow() < deadlineMs &&
      this.running &&
      this.status.role === "leader" &&
      !this.newerTermSeen
    ) {
      await this.clock.sleep(this.options.heartbeatIntervalMs / 2);
    }
  }

  /** Role, term, indexes and health, as the gateway's topology and the metrics report them. */
  report(): ReplicaReport {
    const status = this.status;
    return {
      partitionId: this.partitionId,
      role: this.role(),
      health: this.health(),
      term: status.term,
      commitIndex: status.commitIndex,
      appliedIndex: this.engine.lastAppliedIndex,
      leaderId: status.leaderId,
      logSizeEntries: this.logSizeEntries(),
    };
  }

  /** The messages this replica buffers and the bytes of their records. */
  bufferedMessages(): BufferedMessages {
    return { messages: this.engine.bufferedMessageCount, bytes: this.engine.bufferedBytes };
  }

  /** Entries held in the log (after the last snapshot), for metrics. */
  logSizeEntries(): number {
    return Math.max(0, this.status.lastIndex - this.status.firstIndex + 1);
  }

  /**
   * Whether the replica holds neither a log entry nor a snapshot: it opened without data and no leader has replicated
   * anything to it since. For a replica the cluster configuration calls ACTIVE, that means its broker lost its data (a
   * replaced disk) while its group's leader still believes it holds what it once acknowledged, and so never sends it
   * again; the broker's change executor removes such a replica from its group and adds it anew. A replica that joined
   * its group also opened without data, but its leader caught it up before promoting it, so it holds data by the time
   * its join completes.
   */
  get holdsNoData(): boolean {
    return this.status.lastIndex === 0;
  }

  /** Snapshots received from a leader and installed since this replica opened, for tests and operators. */
  get installedSnapshotCount(): number {
    return this.installedSnapshots;
  }

  /**
   * Of `installedSnapshotCount`, the snapshots whose engine was restored while their chunks arrived; the others were
   * read back from the storage once installed (a receipt resumed after a restart). For tests and benchmarks.
   */
  get snapshotsRestoredWhileReceivingCount(): number {
    return this.snapshotsRestoredWhileReceiving;
  }

  /** The memory holding the engine's restored entries (slabs, and received chunks kept where they lie), for tests. */
  restoredEntryMemory(): SlabStatistics {
    return this.engine.restoredEntryMemory();
  }

  /** Number of messages the engine buffers, for metrics and tests. */
  get bufferedMessageCount(): number {
    return this.engine.bufferedMessageCount;
  }

  /** Index of the latest snapshot (0 when none), for metrics and tests. */
  get latestSnapshotIndex(): number {
    return this.snapshotIndex;
  }

  /** Proposals of the current leadership queued or waiting for their commit (not those of a lost leadership). */
  get pendingProposalCount(): number {
    return this.proposals.size + this.queuedProposalCount;
  }

  /** Whether the replica failed and stopped serving. */
  get failed(): boolean {
    return this.failure !== null;
  }

  /** Stops the timer and the driver, fails everything waiting (see `failEverything`), and closes the storage. */
  async close(): Promise<void> {
    if (this.closed) return;
    await this.stop();
    await this.storage.close();
  }

  /** Stops the timer and the driver and fails everything waiting; the storage stays open. */
  private async stop(): Promise<void> {
    if (this.closed) throw new Error(`invariant violated: partition ${this.partitionId} replica stopped twice`);
    this.closed = true;
    this.running = false;
    this.stopTicks?.();
    this.stopTicks = null;
    this.nudge();
    await this.loop;
    this.failEverything({ outcome: "unavailable", detail: `partition ${this.partitionId} replica stopped` });
    this.backup.endAll();
  }

  private start(): void {
    this.loop = this.drive();
    this.stopTicks = this.clock.repeat(this.options.heartbeatIntervalMs, () => {
      if (this.pendingTicks < MAX_PENDING_TICKS) this.pendingTicks += 1;
      this.nudge();
    });
  }

  private role(): ReplicaRole {
    if (this.failure !== null || !this.running) return "inactive";
    return this.status.role === "leader" ? "leader" : "follower";
  }

  private health(): ReplicaHealth {
    if (this.failure !== null || !this.running || !this.lastPersistSucceeded) return "unhealthy";
    if (this.status.leaderId === null) return "unhealthy";
    if (this.status.commitIndex - this.engine.lastAppliedIndex > this.options.maxApplyLagEntries) return "unhealthy";
    return "healthy";
  }

  private unavailableReason(): string | null {
    if (this.failure !== null) return `partition ${this.partitionId} replica failed: ${this.failure.message}`;
    if (!this.running) return `partition ${this.partitionId} replica is stopping`;
    return null;
  }

  private nudge(): void {
    const wake = this.wake;
    this.wake = null;
    wake?.();
  }

  /**
   * Runs the work queued so far. When one item throws (the replica then fails), that item is failed and the items
   * after it go back to the queue, so that `failEverything` answers them instead of leaving their callers waiting.
   * Nothing the failing item appended can have left this replica: messages and writes happen only in `handleReady`.
   */
  private runQueuedWork(): void {
    const batch = this.queue.splice(0);
    for (let position = 0; position < batch.length; position += 1) {
      const work = batch[position] as QueuedWork;
      try {
        work.run();
      } catch (error) {
        this.queue.unshift(...batch.slice(position + 1));
        work.fail(`partition ${this.partitionId} replica failed`);
        throw error;
      }
    }
  }

  /**
   * Reports snapshot data that arrived damaged since the last call: bytes changed between the leader's storage and
   * this replica's (a network, memory or disk fault), which the core only retries. Called once per turn of the
   * driver; the metrics hear of every turn that saw damage, the log at most once per `receiptDamageLogIntervalMs`
   * with the counts since its previous line, so that no sender can make it grow faster than that.
   */
  private reportReceiptDamage(): void {
    const damage = this.node.receiptDamage();
    const chunks = damage.chunksDamaged - this.reportedDamage.chunksDamaged;
    const snapshots = damage.snapshotsRejected - this.reportedDamage.snapshotsRejected;
    if (chunks > 0 || snapshots > 0) {
      this.reportedDamage = damage;
      this.unloggedDamage.chunks += chunks;
      this.unloggedDamage.snapshots += snapshots;
      this.options.onReceiptDamage?.({ partitionId: this.partitionId, chunks, snapshots });
    }
    const unlogged = this.unloggedDamage;
    if (unlogged.chunks === 0 && unlogged.snapshots === 0) return;
    const nowMs = this.clock.monotonicNow();
    const intervalMs = this.options.receiptDamageLogIntervalMs ?? RECEIPT_DAMAGE_LOG_INTERVAL_MS;
    if (unlogged.loggedAtMs !== null && nowMs - unlogged.loggedAtMs < intervalMs) return;
    this.options.logger.warn(
      {
        partitionId: this.partitionId,
        leaderId: this.reportedDamage.lastSenderId,
        damagedChunks: unlogged.chunks,
        rejectedSnapshots: unlogged.snapshots,
      },
      "snapshot data from the partition's leader arrived damaged and is received again",
    );
    this.unloggedDamage = { chunks: 0, snapshots: 0, loggedAtMs: nowMs };
  }

  /** The driver loop: ticks, inbound messages and one `Ready` at a time, until stopped or failed. */
  private async drive(): Promise<void> {
    try {
      while (this.running) {
        const ticked = this.pendingTicks > 0;
        for (; this.pendingTicks > 0; this.pendingTicks -= 1) {
          this.node.tick();
          this.tickCount += 1;
        }
        for (const message of this.inbox.splice(0)) this.node.step(message);
        this.reportReceiptDamage();
        this.runQueuedWork();
        // After this turn's messages and ticks, before the batch is taken: a change proposed here leaves in this
        // turn's batch.
        this.leaderMembership.settle(ticked);
        // Once per tick at most: a message past its deadline is already invisible to reads and is removed by the
        // next publication anyway, so proposing an expiry record on every turn would only add writes.
        if (ticked) this.maybeProposeExpiry();
        const ready = this.node.ready();
        if (ready !== null) await this.handleReady(ready);
        // The batch carrying what these callers wait for (it was produced after their work ran) is durable now.
        for (const resolveDurable of this.awaitingDurability.splice(0)) resolveDurable();
        // After this turn's messages and entries: an entry they commit answers its proposal exactly instead.
        if (ticked) this.expireInDoubt();
        this.refreshStatus();
        // Before any new snapshot: a checkpoint applied in this turn reserves the snapshot and log first.
        this.backup.maybeStart();
        this.backup.releasePastLogLimit();
        this.backup.endDeferralsOnceStarted();
        this.maybeCompact();
        if (ready === null) {
          await new Promise<void>((resolve) => {
            this.wake = resolve;
          });
        }
      }
    } catch (error) {
      const failure = error instanceof Error ? error : new Error(String(error));
      this.failure = failure;
      this.running = false;
      this.stopTicks?.();
      this.stopTicks = null;
      this.failEverything({ outcome: "unavailable", detail: `partition ${this.partitionId} replica failed` });
      this.backup.endAll();
      this.options.onFailure(failure);
    }
  }

  private async handleReady(ready: Ready): Promise<void> {
    // A leader's appends and heartbeats go out before its own write, so followers persist in parallel with it; the
    // core counts the leader's copy towards a commit only after `advance`, so this is safe (dissertation §10.2.1).
    for (const message of ready.messagesBeforePersist) this.options.send(message.to, message);
    // Committed entries are durable on a quorum and here already (the core hands out only entries it holds durably),
    // so applying them, and answering their proposals, need not wait for this batch's own write: under load every
    // answer would otherwise wait for one more disk sync, the one of the entries proposed after it. A snapshot to
    // install is the exception: the entries after it apply to the state it restores.
    const applyBeforePersist = ready.snapshot === null;
    if (applyBeforePersist) this.applyCommitted(ready);
    // Everything else waits for durability: no other message may leave and nothing may be acknowledged before these
    // writes are synced (when the batch must sync at all).
    if (ready.snapshotReceipt !== null) this.incomingRestore.accept(ready.snapshotReceipt);
    const persisted = this.persist(ready);
    // The thread would idle while received chunks are made durable: it decodes them into the engine meanwhile.
    if (ready.snapshotReceipt !== null) await this.decodeIncomingUntil(persisted);
    await persisted;
    if (ready.compaction !== null) {
      this.snapshotIndex = ready.compaction.metadata.index;
      if (ready.compaction.data === this.preparedSnapshot?.data) this.preparedSnapshot = null;
    }
    // A snapshot from the leader at or beyond the prepared one makes the core drop that compaction unannounced.
    const prepared = this.preparedSnapshot;
    if (ready.snapshot !== null && prepared !== null && ready.snapshot.index >= prepared.index) {
      void this.discardSnapshot(prepared.data);
    }
    for (const message of ready.messages) {
      this.options.send(message.to, message);
      if (message.type === "snapshotChunk") this.storage.recycleSnapshotChunk(message.data);
    }
    if (this.status.role !== "leader") {
      for (const entry of ready.entriesToPersist) this.receivedBytes += entry.data.byteLength;
      for (const chunk of ready.snapshotReceipt?.chunks ?? []) this.receivedBytes += chunk.data.byteLength;
    }
    // After the answers left: decoding what the write left overlaps with the leader sending the next chunks.
    this.incomingRestore.decodeAll();
    if (ready.snapshot !== null) {
      this.snapshotSizeBytes = ready.snapshot.sizeBytes;
      // The engine restored while the chunks arrived when it saw every byte of this snapshot; otherwise (a receipt
      // resumed after a restart) it is rebuilt from the snapshot just installed, read back a chunk at a time. The
      // engine holds that state anyway, but the snapshot's bytes are never held whole.
      const restoredWhileReceiving = this.incomingRestore.finish(ready.snapshot);
      if (restoredWhileReceiving !== null) this.snapshotsRestoredWhileReceiving += 1;
      const engine = restoredWhileReceiving ?? (await restoreEngine(this.storage, this.partitionId, this.clock));
      if (engine === null) throw new Error(`invariant violated: partition ${this.partitionId} lost its snapshot`);
      assertEngineMatches(engine, this.partitionId, ready.snapshot.index);
      this.engine = engine;
      this.snapshotIndex = ready.snapshot.index;
      this.installedSnapshots += 1;
      this.settleProposalsCoveredBy(ready.snapshot.index);
      this.options.logger.info(
        { partitionId: this.partitionId, snapshotIndex: ready.snapshot.index, sizeBytes: ready.snapshot.sizeBytes },
        "installed a snapshot received from the partition's leader",
      );
    }
    if (!applyBeforePersist) this.applyCommitted(ready);
    // A receipt the storage gave up (a newer snapshot or compaction replaced it) frees the engine restored from it.
    if (this.incomingRestore.active && this.storage.incomingSnapshot() === null) this.incomingRestore.abandon();
    if (ready.softState !== null && ready.softState.role !== "leader") this.loseLeadership();
    if (ready.softState !== null && ready.softState.role === "leader")
      this.backup.considerTakeover(ready.softState.term);
    this.node.advance(ready);
  }

  /**
   * Makes the batch durable: chunks of a snapshot from the leader are written as they arrive, and once complete the
   * storage verifies the snapshot's size and checksum and installs it (neither the core nor this driver holds it in
   * memory meanwhile); then the entries and hard state, and a local compaction.
   */
  private async persist(ready: Ready): Promise<void> {
    try {
      if (ready.snapshotReceipt !== null) await this.storage.receiveSnapshotChunks(ready.snapshotReceipt);
      if (ready.snapshot !== null) await this.storage.finishSnapshotReceive();
      // A batch that need not sync changes only the commit index, which is volatile: writing it would put one more
      // durable commit on the path of every write, so it is skipped and the next synced batch carries it to disk.
      if (ready.mustSync && (ready.entriesToPersist.length > 0 || ready.hardState !== null)) {
        await this.storage.append(ready.entriesToPersist, ready.hardState);
      }
      if (ready.compaction !== null) await this.storage.installSnapshot(ready.compaction);
      this.lastPersistSucceeded = true;
    } catch (error) {
      this.lastPersistSucceeded = false;
      throw error;
    }
  }

  /**
   * Decodes received chunks into the engine being restored, one per turn, until `write` settles or none is left; a
   * turn between two lets the write's completion through, so the answers it holds back wait for one chunk at most.
   */
  private async decodeIncomingUntil(write: Promise<void>): Promise<void> {
    let settled = false;
    // The caller awaits `write` itself (and so sees its failure); this only notes that it settled.
    write.then(
      () => {
        settled = true;
      },
      () => {
        settled = true;
      },
    );
    while (!settled && this.incomingRestore.decodeNext()) await this.clock.yieldTurn();
  }

  /** Applies the batch's committed entries, then settles the reads they make answerable. */
  private applyCommitted(ready: Ready): void {
    for (const entry of ready.committedEntries) this.apply(entry);
    for (const state of ready.readStates) {
      const read = this.reads.get(state.context);
      if (read !== undefined) read.index = state.index;
    }
    for (const context of ready.droppedReads) {
      const read = this.reads.get(context);
      if (read === undefined) continue;
      this.reads.delete(context);
      read.resolve({ outcome: "not-leader", leaderId: this.node.status().leaderId });
    }
    this.serveReads();
  }

  private apply(entry: Entry): void {
    if (entry.index <= this.engine.lastAppliedIndex) {
      throw new Error(
        `invariant violated: partition ${this.partitionId} re-applies entry ${entry.index} (applied ${this.engine.lastAppliedIndex})`,
      );
    }
    let result: ApplyResult | null = null;
    const checkpointBefore = this.engine.latestCheckpoint;
    if (entry.kind === "normal") result = this.engine.apply(entry.index, entry.data);
    else this.engine.markApplied(entry.index);
    const checkpoint = this.engine.latestCheckpoint;
    if (checkpoint !== checkpointBefore && checkpoint !== null) {
      this.backup.reserve(checkpoint, this.node.status().role === "leader");
    }
    if (this.pendingExpiryIndex !== null && entry.index >= this.pendingExpiryIndex) this.pendingExpiryIndex = null;
    const waiting = this.proposals.get(entry.index);
    if (waiting !== undefined) {
      this.proposals.delete(entry.index);
      this.answerApplied(waiting, entry, result);
    }
    const doubted = this.inDoubt.get(entry.index);
    if (doubted !== undefined) {
      this.inDoubt.delete(entry.index);
      this.inDoubtCount -= doubted.length;
      for (const proposal of doubted) this.answerApplied(proposal, entry, result);
    }
  }

  /** The exact answer to a proposal whose index was applied: an (index, term) pair names one entry. */
  private answerApplied(waiting: WaitingProposal, entry: Entry, result: ApplyResult | null): void {
    if (waiting.term !== entry.term || result === null) {
      // Another leader's entry replaced ours at this index: our proposal was never committed.
      waiting.resolve({ kind: "replaced", leaderId: this.node.status().leaderId });
      return;
    }
    waiting.resolve({ kind: "applied", result });
  }

  private serveReads(): void {
    const applied = this.engine.lastAppliedIndex;
    for (const [context, read] of this.reads) {
      if (read.index === null || read.index > applied) continue;
      this.reads.delete(context);
      const message = this.engine.getMessage(read.key);
      if (message === undefined) {
        // A message relocated to the partition owning its key now answers there under its new key.
        const moved = this.engine.forwardOf(read.key);
        read.resolve(moved === undefined ? { outcome: "not-found" } : { outcome: "moved", key: moved });
        continue;
      }
      // The leader reads a clock, so a message past its deadline is gone even before the expiry record applies.
      if (message.deadlineMs <= this.messageClock.expiryNowMs()) {
        read.resolve({ outcome: "not-found" });
        continue;
      }
      const view: MessageView = {
        key: message.key,
        partitionId: message.partitionId,
        name: message.name,
        correlationKey: message.correlationKey,
        timeToLiveMs: message.timeToLiveMs,
        ...(message.messageId === undefined ? {} : { messageId: message.messageId }),
        variables: message.variables,
        tenantId: message.tenantId,
        publishedAt: new Date(message.publishedAtMs).toISOString(),
        expiresAt: new Date(message.deadlineMs).toISOString(),
      };
      read.resolve({ outcome: "found", message: view });
    }
  }

  /**
   * A leader that lost leadership stops tracking its expiry proposal, and its waiting proposals are in doubt: their
   * entries may still be committed by the next leader, and `apply` answers each exactly once this replica applies
   * its index (or the deadline answers it `unknown`).
   */
  private loseLeadership(): void {
    this.pendingExpiryIndex = null;
    this.setProposalsInDoubt(this.proposalsTerm);
  }

  /** Moves the current leadership's proposals to the in-doubt set; new proposals will be of `term`. */
  private setProposalsInDoubt(term: number): void {
    const timeoutMs = this.options.inDoubtTimeoutMs ?? IN_DOUBT_TIMEOUT_ELECTIONS * this.options.electionTimeoutMs;
    const deadlineTick = this.tickCount + Math.ceil(timeoutMs / this.options.heartbeatIntervalMs);
    for (const [index, waiting] of this.proposals) {
      const doubted = this.inDoubt.get(index);
      const proposal: InDoubtProposal = { ...waiting, deadlineTick };
      if (doubted === undefined) this.inDoubt.set(index, [proposal]);
      else doubted.push(proposal);
      this.inDoubtCount += 1;
    }
    this.proposals.clear();
    this.proposalsTerm = term;
    // Bounded: beyond the limit the oldest entries of the map go first.
    for (const [index, doubted] of this.inDoubt) {
      if (this.inDoubtCount <= this.options.maxPendingProposals) break;
      this.inDoubt.delete(index);
      this.inDoubtCount -= doubted.length;
      for (const proposal of doubted) proposal.resolve(this.unknownAnswer("kept too many publications in doubt"));
    }
  }

  /** Answers `unknown` to in-doubt proposals past their deadline. */
  private expireInDoubt(): void {
    if (this.inDoubtCount === 0) return;
    for (const [index, doubted] of this.inDoubt) {
      const expired = doubted.filter((proposal) => proposal.deadlineTick <= this.tickCount);
      if (expired.length === 0) continue;
      const remaining = doubted.filter((proposal) => proposal.deadlineTick > this.tickCount);
      if (remaining.length === 0) this.inDoubt.delete(index);
      else this.inDoubt.set(index, remaining);
      this.inDoubtCount -= expired.length;
      for (const proposal of expired) {
        proposal.resolve(
          this.unknownAnswer("lost its leadership and did not learn the fate of the publication in time"),
        );
      }
    }
  }

  /**
   * A snapshot installed up to `index` replaced the entries there without applying them one by one, so whether a
   * waiting proposal at or below it was committed cannot be told here any more.
   */
  private settleProposalsCoveredBy(index: number): void {
    const answer = this.unknownAnswer("caught up through a snapshot past the publication's log entry");
    for (const [proposalIndex, waiting] of this.proposals) {
      if (proposalIndex > index) continue;
      this.proposals.delete(proposalIndex);
      waiting.resolve(answer);
    }
    for (const [proposalIndex, doubted] of this.inDoubt) {
      if (proposalIndex > index) continue;
      this.inDoubt.delete(proposalIndex);
      this.inDoubtCount -= doubted.length;
      for (const proposal of doubted) proposal.resolve(answer);
    }
  }

  private unknownAnswer(why: string): ProposalOutcome {
    return {
      kind: "unknown",
      detail: `partition ${this.partitionId} replica ${why}; the publication may or may not take effect`,
    };
  }

  private maybeProposeExpiry(): void {
    if (this.pendingExpiryIndex !== null || this.node.status().role !== "leader") return;
    const deadlineMs = this.engine.nextDeadlineMs;
    const nowMs = this.messageClock.expiryNowMs();
    if (deadlineMs === undefined || nowMs < deadlineMs) return;
    const result = this.node.propose(encodeRecord({ kind: "expireMessages", nowMs }));
    if (result.accepted) this.pendingExpiryIndex = result.index;
  }

  /**
   * Starts a snapshot once `snapshotIntervalEntries` entries were applied since the last one (only between two
   * readies, when Raft's applied index equals the engine's). The snapshot is
   * encoded a slice at a time and its chunks are written to its file on the thread pool (`takeSnapshot`), so neither
   * holds the event loop: encoding 20,000 buffered messages (6 MB) and writing them in one go stopped every replica of
   * the broker for 100–250 ms under load on the development machine.
   */
  private maybeCompact(): void {
    if (this.snapshotInProgress || this.backup.holdsSnapshots) return;
    const applied = this.engine.lastAppliedIndex;
    const interval = this.options.snapshotIntervalEntries;
    if (applied - Math.max(this.snapshotIndex, this.compactionRequestedAt) < interval) {
      return;
    }
    // While this leader sends its snapshot to a member that is behind, that snapshot and the log after it stay: a
    // newer snapshot would restart the transfer from byte 0 and drop the entries the member needs after it, so a
    // transfer longer than the interval would never end. Bounded: beyond a few intervals the log wins.
    if (this.sendingSnapshot() && applied - this.snapshotIndex < SNAPSHOT_TRANSFER_COMPACTION_DEFERRAL * interval) {
      return;
    }
    if (this.backup.deferSnapshot(applied - this.snapshotIndex)) return;
    if (this.node.status().appliedIndex !== applied) {
      throw new Error(
        `invariant violated: partition ${this.partitionId} engine applied ${applied} but Raft applied ${this.node.status().appliedIndex}`,
      );
    }
    this.compactionRequestedAt = applied;
    this.snapshotInProgress = true;
    void this.takeSnapshot(this.engine.snapshotEncoder(), performance.now());
  }

  /** Whether this replica leads and sends its snapshot to a member (a joining learner, or a replica far behind). */
  private sendingSnapshot(): boolean {
    if (this.node.status().role !== "leader") return false;
    return this.node.configuration().members.some((member) => this.node.progressOf(member.id)?.state === "snapshot");
  }

  /**
   * Has the storage write the snapshot's chunks to its file, copying its bytes straight from the buffered messages' snapshot
   * entries (the engine encodes nothing here), a MiB per turn of the event loop, then hands it to the core, whose next
   * `Ready` compacts the log up to the snapshot's index (an index the replica has applied: the engine may have moved on
   * meanwhile, which the core allows). A failure fails the replica.
   */
  private async takeSnapshot(encoder: EngineSnapshotEncoder, startedAtMs: number): Promise<void> {
    this.snapshotPausedMs = 0;
    try {
      // The storage checksums the bytes as it cuts the chunks; the core records that checksum instead of reading
      // the whole snapshot again.
      const data = await this.storage.prepareSnapshotFrom(encoder, () => this.snapshotSlice());
      // Handed to the core only after the broker's backup parts: its compaction would replace the snapshot and drop
      // the log a part of this replica reads.
      await this.snapshotTurn();
      const report: SnapshotReport = {
        partitionId: this.partitionId,
        index: encoder.appliedIndex,
        sizeBytes: data.sizeBytes,
        messages: encoder.messageCount,
        durationMs: performance.now() - startedAtMs - this.snapshotPausedMs,
      };
      this.options.logger.debug(report, "snapshot written");
      this.options.onSnapshot?.(report);
      if (!this.running) {
        if (!this.closed) void this.discardSnapshot(data);
        return;
      }
      // Not subject to the limit on request work: under overload the snapshot would be lost, and with it the log's
      // compaction for another interval.
      this.snapshotQueuedForCore = true;
      this.queue.push({
        run: () => {
          this.snapshotQueuedForCore = false;
          // The core ignores a compaction a snapshot installed meanwhile already covers.
          if (encoder.appliedIndex < this.node.status().firstIndex) {
            void this.discardSnapshot(data);
            return;
          }
          this.preparedSnapshot = { index: encoder.appliedIndex, data };
          this.snapshotSizeBytes = data.sizeBytes;
          this.node.compact(encoder.appliedIndex, data);
        },
        fail: () => {
          this.snapshotQueuedForCore = false;
          void this.discardSnapshot(data);
        },
      });
      this.nudge();
    } catch (error) {
      if (!this.running) return;
      // Failing through the driver loop stops the replica as any storage failure does, overload or not.
      this.queue.push({
        run: () => {
          throw error;
        },
        fail: () => {},
      });
      this.nudge();
    } finally {
      this.snapshotInProgress = false;
    }
  }

  /**
   * Lets other work run between two slices of a snapshot being taken, and holds the snapshot there while a backup
   * part is being written on this broker (`ReplicaBackup.deferSnapshot`, bounded), or for as long as this replica's
   * own part is: a snapshot that started before a backup's checkpoint stops competing with the parts, and this
   * leader's part can start without waiting for it (`ReplicaBackup.maybeStart`).
   */
  private async snapshotTurn(): Promise<void> {
    await this.clock.yieldTurn();
    const pausedAtMs = performance.now();
    while (
      this.running &&
      (this.backup.running || this.backup.deferSnapshot(this.engine.lastAppliedIndex - this.snapshotIndex))
    ) {
      await this.clock.sleep(SNAPSHOT_BACKUP_PAUSE_MS);
    }
    this.snapshotPausedMs += performance.now() - pausedAtMs;
  }

  /**
   * The turn between two slices of a snapshot's chunks (`snapshotTurn`), which ends the snapshot when the replica
   * stopped meanwhile: the rest of its chunks would be written for nothing (the storage removes those written).
   */
  private async snapshotSlice(): Promise<void> {
    await this.snapshotTurn();
    if (!this.running) throw new Error(`partition ${this.partitionId} stopped while its snapshot was being written`);
  }

  /** Removes the file of a prepared snapshot that will not be installed (it would stay until a restart). */
  private async discardSnapshot(data: PreparedSnapshotData): Promise<void> {
    if (this.preparedSnapshot?.data === data) this.preparedSnapshot = null;
    try {
      await this.storage.discardPreparedSnapshot(data);
    } catch (error) {
      this.options.logger.warn(
        { err: error, partitionId: this.partitionId },
        "could not discard a prepared snapshot's file",
      );
    }
  }

  private refreshStatus(): void {
    this.status = this.node.status();
    const committed = this.node.committedConfiguration();
    if (this.status.role === "leader" && !sameConfiguration(committed, this.committedConfigurationValue)) {
      // A membership change took hold: operators (and the scaling benchmark's timeline) see when, on the leader.
      this.options.logger.info(
        { partitionId: this.partitionId, members: describeMembers(committed) },
        "the partition's group committed a new membership",
      );
    }
    this.committedConfigurationValue = committed;
    if (this.status.role === "leader") this.leaderMembership.noticeLearnersCaughtUp(this.status);
  }

  /**
   * Answers everything waiting when the replica stops or fails: queued work and reads `unavailable` (nothing of
   * theirs is in the log), proposals `unknown` (their entries are, and a quorum may still commit them).
   */
  private failEverything(answer: { outcome: "unavailable"; detail: string }): void {
    for (const work of this.queue.splice(0)) work.fail(answer.detail);
    const unknown: ProposalOutcome = {
      kind: "unknown",
      detail: `${answer.detail} before the publication was known to be committed; it may or may not take effect`,
    };
    for (const waiting of this.proposals.values()) waiting.resolve(unknown);
    this.proposals.clear();
    for (const doubted of this.inDoubt.values()) for (const proposal of doubted) proposal.resolve(unknown);
    this.inDoubt.clear();
    this.inDoubtCount = 0;
    for (const read of this.reads.values()) read.resolve(answer);
    this.reads.clear();
    this.leaderMembership.failAll(answer);
  }
}

/** "0 voter, 3 learner": a group's members for a log line. */
function describeMembers(configuration: Configuration): string {
  return configuration.members.map((member) => `${member.id} ${member.role}`).join(", ");
}

/**
 * Restores the engine from the stored snapshot, read and decoded a stored chunk at a time (memory bounded by a chunk
 * and the largest message, besides the engine itself), and checks it sits at the snapshot's index; null when no
 * snapshot is stored. A damaged snapshot throws: the storage verifies every chunk and the whole snapshot's checksum.
 * The clock yields a turn after every chunk: a broker opens its replicas while it serves the others' heartbeats and
 * its health checks, and a snapshot of hundreds of megabytes read in one go held all of that for seconds.
 */
async function restoreEngine(
  storage: MemberStorage,
  partitionId: number,
  clock: ReplicaClock,
): Promise<PartitionEngine | null> {
  const restorer = PartitionEngine.restorer();
  const metadata = await storage.readSnapshotInTurns(
    (data) => restorer.push(data),
    () => clock.yieldTurn(),
  );
  if (metadata === null) return null;
  const engine = restorer.finish();
  assertEngineMatches(engine, partitionId, metadata.index);
  return engine;
}

function assertEngineMatches(engine: PartitionEngine, partitionId: number, snapshotIndex: number): void {
  if (engine.partitionId !== partitionId || engine.lastAppliedIndex !== snapshotIndex) {
    throw new Error(
      `invariant violated: snapshot at ${snapshotIndex} of partition ${partitionId} holds the engine of partition ` +
        `${engine.partitionId} at ${engine.lastAppliedIndex}`,
    );
  }
}

function refusalAnswer(
  refusal: Refusal,
  partitionId: number,
): { outcome: "not-leader"; leaderId: number | null } | { outcome: "unavailable"; detail: string } {
  if (refusal.reason === "notLeader") return { outcome: "not-leader", leaderId: refusal.leaderId };
  return { outcome: "unavailable", detail: `partition ${partitionId} leader refused the request (${refusal.reason})` };
}

/** The gateway's answer to a publication that ended with `end`. */
function publishResponse(end: ProposalEnd, partitionId: number, tenantId: string): PublishMessageResponse {
  switch (end.kind) {
    case "refused":
      return end.redirect;
    case "replaced":
      return { outcome: "not-leader", leaderId: end.leaderId };
    case "unknown":
      return { outcome: "unknown", detail: end.detail };
    case "applied":
      break;
  }
  const result = end.result;
  switch (result.kind) {
    case "published":
      return { outcome: "published", key: result.key, partitionId, tenantId };
    case "rejected":
      if (result.reason === "not-owner") {
        return {
          outcome: "rejected",
          reason: "not-owner",
          detail: result.detail,
          ownerPartitionId: result.ownerPartitionId,
        };
      }
      return { outcome: "rejected", reason: result.reason, detail: result.detail };
    default:
      throw new Error(`invariant violated: a publish proposal was applied as a ${result.kind} record`);
  }
}
