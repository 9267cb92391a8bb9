/**
 * One replica's share of a backup: the part of its partition it writes while it leads, and what that asks of its
 * snapshots.
 *
 * A checkpoint applied while the replica leads reserves the part (`reserve`); the part starts once no snapshot of the
 * replica is on its way to the core, and is written in the background, a chunk per turn, stepping back while the
 * broker is busy. A replica that becomes leader finishes the part its predecessor left unfinished
 * (`considerTakeover`). Meanwhile the replica's own snapshots hold still: a reserved part needs the snapshot and the
 * log it is made of to stay where they are, and the parts being written anywhere on the broker defer every replica's
 * snapshot (bounded), so that the two do not compete for the same processors and disk.
 *
 * It belongs to one `PartitionReplica` and is called from that replica's driver; what it reads of the replica comes
 * through `ReplicaBackupContext`.
 */

import { setTimeout as sleepFor } from "node:timers/promises";
import type { Logger } from "pino";
import { BackupActivity } from "../backup/backup-activity.js";
import {
  admitPart,
  BackupPacer,
  type PartitionBackupSource,
  writePartitionBackup,
} from "../backup/partition-backup.js";
import type { BackupPartManifest, BackupStore } from "../backup/store.js";
import type { Checkpoint, PartitionEngine } from "../engine/index.js";
import type { NodeStatus } from "../raft/index.js";
import type { MemberStorage } from "../raft/storage/member-storage.js";
import { boundedReason } from "./bounded-reason.js";

/**
 * Snapshot intervals of log a replica may grow while a part of a backup is being written on its broker: the leader's
 * part steps back for a busy broker, and every replica of the broker defers its own snapshot (see `deferSnapshot`).
 * Beyond them the part runs at full speed to its end and the other replicas take their snapshots, so a long backup
 * cannot make the log grow without limit.
 */
const BACKUP_LOG_LIMIT_INTERVALS = 3;

/**
 * Snapshot intervals of log the writing leader's own part may hold back from its snapshot. Why: its part holds the
 * snapshot and log it reads, and a store that stops answering (a hard-mounted network file system) never ends the
 * part, so the log would grow until the disk is full and the broker stops. Past this bound the part is given up (it
 * ends FAILED with that reason once its writer returns) and the snapshot is taken. A store that answers at all ends a
 * part long before: past `BACKUP_LOG_LIMIT_INTERVALS` the part no longer gives way to the broker's work.
 */
export const BACKUP_PART_LOG_LIMIT_INTERVALS = 10;

/** What a replica needs to write its partition's part of a backup (see backup/partition-backup.ts). */
export interface ReplicaBackupOptions {
  readonly store: BackupStore;
  /** The flowplane version recorded in the manifest. */
  readonly flowplaneVersion: string;
  /** Called once a part ends, COMPLETED or FAILED (for logs and metrics). */
  readonly onPartEnded?: (manifest: BackupPartManifest) => void;
  /**
   * Whether the broker that writes the parts still runs (absent: always): a final manifest the store refused is
   * written again in the background while it does, whether or not this replica was restarted meanwhile.
   */
  readonly brokerRunning?: () => boolean;
  /**
   * The parts being written (and checkpoints being proposed) on this replica's broker, shared by all its replicas: each
   * defers its own snapshots meanwhile (see `ReplicaBackup.deferSnapshot`). Absent: only this replica's own count.
   */
  readonly activity?: BackupActivity;
}

/** What a replica's backup share reads of the replica. */
export interface ReplicaBackupContext {
  readonly partitionId: number;
  readonly memberId: number;
  readonly logger: Logger;
  readonly snapshotIntervalEntries: number;
  /** Where parts are written; absent: this replica writes none. */
  readonly backups: ReplicaBackupOptions | undefined;
  readonly storage: MemberStorage;
  /** The replica's clock: milliseconds since the epoch, sleeps and turns of the event loop. */
  now(): number;
  sleep(delayMs: number): Promise<void>;
  yieldTurn(): Promise<void>;
  /** The engine now (an installed snapshot replaces it). */
  engine(): PartitionEngine;
  /** Index of the latest snapshot the replica holds. */
  snapshotIndex(): number;
  /** The Raft node's status as of the driver's last turn. */
  status(): NodeStatus;
  /** Whether the replica was closed (its storage may be closing). */
  closed(): boolean;
  /** Whether the replica's driver runs. */
  running(): boolean;
  /** Whether a snapshot of the replica is on its way to the core (taken, not yet compacted into the log). */
  snapshotOnItsWay(): boolean;
  /** Has the driver take another turn. */
  nudge(): void;
}

/** The part of a backup a replica is writing. */
interface RunningPart {
  /** The checkpoint it is the part of; a later checkpoint may be reserved meanwhile and starts next. */
  readonly checkpoint: Checkpoint;
  /** Ends the part's count on its broker's backup activity; calling it again changes nothing. */
  readonly endActivity: () => void;
  /** Why the part was given up (`releasePastLogLimit`), which its writer reads as its interruption. */
  givenUpReason: string | null;
}

/** A new leader's look in the backup store for a part its predecessor left unfinished (`considerTakeover`). */
interface TakeoverLook {
  readonly checkpoint: Checkpoint;
}

/** One replica's share of a backup; see the module comment. */
export class ReplicaBackup {
  /**
   * The checkpoint whose part of a backup this leader is about to write, or writes: while set, the replica takes no
   * snapshot (below the log bound, see `holdsSnapshots`), so the snapshot and the log the part is made of stay where
   * they are until it is written. A checkpoint applied while a part runs replaces it here and starts next.
   */
  private checkpoint: Checkpoint | null = null;
  /** The part being written, null when none is. */
  private runningPart: RunningPart | null = null;
  /**
   * The look, while this new leader looks in the backup store whether its predecessor left the part of the latest
   * checkpoint unfinished (`considerTakeover`); like `checkpoint` it holds snapshots back meanwhile. One object per
   * look, so that a look given up and followed by another cannot clear the later one when it settles.
   */
  private takeoverLook: TakeoverLook | null = null;
  /** The parts of backups being written on this broker (see `ReplicaBackupOptions.activity`). */
  private readonly activity: BackupActivity;
  /**
   * Ends the deferrals of checkpoints answered (`proposeCheckpoint`), once their part runs and counts itself or no part
   * waits to start.
   */
  private readonly endAfterPartStart: (() => void)[] = [];
  /** The reserved checkpoint whose start was last put off for the log bound (`maybeStart`), so that it is said once. */
  private waitingForSnapshot: Checkpoint | null = null;
  /** Whether this replica's snapshot was deferred for the broker's backup parts when it last looked. */
  private snapshotDeferred = false;

  constructor(private readonly context: ReplicaBackupContext) {
    // A replica may lead and write a part of a backup: the store readies its writing now, not during a backup.
    context.backups?.store.prepareWrites?.();
    this.activity = context.backups?.activity ?? new BackupActivity();
  }

  /** Whether a part of this replica is being written. */
  get running(): boolean {
    return this.runningPart !== null;
  }

  /**
   * Whether the replica must not start a snapshot: a part is reserved, or a new leader looks for an unfinished one,
   * and the log past the snapshot is within `BACKUP_PART_LOG_LIMIT_INTERVALS` (beyond it the snapshot comes first).
   */
  get holdsSnapshots(): boolean {
    return (this.checkpoint !== null || this.takeoverLook !== null) && this.logPastPartLimit() === null;
  }

  /**
   * Runs `propose`, the proposal of a checkpoint (a backup reaches the broker here first): from now on the broker's
   * snapshots hold still (see `deferSnapshot`), so that the checkpoint commits and the part starts without competing
   * with them. The deferral ends after the driver's next look at starting a part (`endDeferralsOnceStarted`), from
   * which on the part itself counts.
   */
  async proposeCheckpoint<T>(propose: () => Promise<T>): Promise<T> {
    const endActivity = this.activity.begin();
    try {
      return await propose();
    } finally {
      if (this.context.running()) this.endAfterPartStart.push(endActivity);
      else endActivity();
    }
  }

  /**
   * Reserves the part of `checkpoint`, just applied, when this replica leads; a replica that becomes leader later does
   * not start one of its own accord (see `considerTakeover`).
   */
  reserve(checkpoint: Checkpoint, leading: boolean): void {
    if (this.context.backups !== undefined && leading) this.checkpoint = checkpoint;
  }

  /**
   * Ends the deferrals of answered checkpoints once their part runs or none waits to start: a checkpoint whose part
   * cannot start yet (a snapshot on its way to the core) keeps the broker's snapshots deferred until it does, or other
   * replicas could start snapshots in the turns in between.
   */
  endDeferralsOnceStarted(): void {
    // Past the log bound a reserved part waits for the replica's snapshot, which the deferrals would hold back.
    if (this.runningPart !== null || this.checkpoint === null || this.logPastPartLimit() !== null) {
      for (const endActivity of this.endAfterPartStart.splice(0)) endActivity();
    }
  }

  /** Ends every deferral this replica counts on its broker (it stopped or failed: its part cannot go on). */
  endAll(): void {
    for (const endActivity of this.endAfterPartStart.splice(0)) endActivity();
    this.runningPart?.endActivity();
  }

  /**
   * Starts writing the part of the reserved checkpoint once no snapshot of this replica is on its way to the core or
   * being installed (later ones wait for the backup). A snapshot still being taken holds still until the part ends
   * (the replica's `snapshotTurn`) instead of delaying it; one that passed its last hold before the part started may
   * still replace the stored snapshot, and the part then starts over from it. The part is written in the background, a
   * chunk per turn, off the write path, stepping back while the broker is busy (`BackupPacer`); only one at a time.
   * None starts while the log is past `BACKUP_PART_LOG_LIMIT_INTERVALS`: the replica's snapshot comes first, and a part
   * whose checkpoint that snapshot passed then ends FAILED saying so.
   */
  maybeStart(): void {
    const checkpoint = this.checkpoint;
    const backups = this.context.backups;
    if (checkpoint === null || backups === undefined || this.runningPart !== null) return;
    if (this.context.snapshotOnItsWay()) return;
    const past = this.logPastPartLimit();
    if (past !== null) {
      if (this.waitingForSnapshot !== checkpoint) {
        this.waitingForSnapshot = checkpoint;
        this.context.logger.warn(
          { partitionId: this.context.partitionId, backupId: checkpoint.id, logEntries: past.logEntries },
          "backup part waits for the replica's snapshot: the log is past its bound",
        );
      }
      return;
    }
    const part: RunningPart = { checkpoint, endActivity: this.activity.begin(), givenUpReason: null };
    this.runningPart = part;
    const context = this.context;
    const term = context.status().term;
    const { memberId, partitionId, storage } = context;
    const pacer = new BackupPacer(
      {
        now: () => performance.now(),
        sleep: (delayMs) => context.sleep(delayMs),
        yieldTurn: () => context.yieldTurn(),
      },
      () => context.engine().lastAppliedIndex,
      // No snapshot is taken while the backup runs: past a few intervals of log, the backup stops giving way.
      () =>
        context.engine().lastAppliedIndex - context.snapshotIndex() >=
        BACKUP_LOG_LIMIT_INTERVALS * context.snapshotIntervalEntries,
    );
    const source: PartitionBackupSource = {
      snapshotMetadata: () => (context.closed() ? null : storage.snapshotMetadata()),
      snapshotChunk: (metadata, offset, maxBytes) => storage.snapshotChunk(metadata, offset, maxBytes)?.data ?? null,
      storedEntrySizes: (fromIndex, toIndex, maxBytes) => storage.storedEntrySizes(fromIndex, toIndex, maxBytes),
      readStoredEntries: (fromIndex, targets) => storage.readStoredEntries(fromIndex, targets),
      running: () => backups.brokerRunning?.() ?? true,
      interruption: () => {
        if (part.givenUpReason !== null) return part.givenUpReason;
        if (context.closed() || !context.running()) return `broker ${memberId} stopped its replica during the backup`;
        const status = context.status();
        if (status.role !== "leader" || status.term !== term) {
          return `broker ${memberId} lost the leadership of partition ${partitionId} during the backup`;
        }
        return null;
      },
      yieldTurn: () => pacer.pause(),
    };
    // A part only of a backup the store records, with the recorded partition count (see backup/store.ts).
    void admitPart(backups.store, checkpoint.id, partitionId)
      .then((admission) => {
        if (admission.admitted) {
          return writePartitionBackup(source, backups.store, {
            backupId: checkpoint.id,
            partitionId,
            brokerId: memberId,
            checkpointPosition: checkpoint.position,
            partitionCount: admission.partitionCount,
            flowplaneVersion: backups.flowplaneVersion,
            now: () => new Date(context.now()).toISOString(),
            // Real time, and a timer that keeps no process alive: a background write of the final manifest may
            // still wait when the broker closes.
            sleep: (delayMs) => sleepUnreferenced(delayMs),
          });
        }
        const fields = { partitionId, backupId: checkpoint.id, reason: admission.reason };
        if (admission.expected) context.logger.info(fields, "no backup part written");
        else context.logger.warn(fields, "no backup part written");
        return null;
      })
      .then((manifest) => {
        this.endPart(part);
        if (manifest === null) return;
        const fields = { partitionId, backupId: checkpoint.id, state: manifest.state };
        if (manifest.state === "COMPLETED") context.logger.info(fields, "backup part written");
        else context.logger.warn({ ...fields, reason: manifest.failureReason }, "backup part failed");
        backups.onPartEnded?.(manifest);
      })
      .catch((error: unknown) => {
        // The admission and the writer resolve even when the part fails, but a fault in them, or a throwing
        // `onPartEnded`, must still end the part (below), as a failed part does: the store may show the part
        // IN_PROGRESS, as after a failed final manifest, and the error is logged instead of rejecting unhandled.
        context.logger.warn(
          { partitionId, backupId: checkpoint.id, reason: boundedReason(error) },
          "backup part ended with an unexpected error",
        );
      })
      .finally(() => {
        this.endPart(part);
        context.nudge();
      });
  }

  /**
   * Gives up what holds this replica's snapshot back on the backup store once the log past the snapshot reaches
   * `BACKUP_PART_LOG_LIMIT_INTERVALS` intervals (see there): the part being written, which then ends FAILED with that
   * reason as soon as its writer returns from the store, and a new leader's look for an unfinished part. A later
   * checkpoint reserved meanwhile stays reserved: it starts after the snapshot (`maybeStart`), and fails saying the
   * snapshot passed its checkpoint, so that no backup loses its part without a word.
   */
  releasePastLogLimit(): void {
    const past = this.logPastPartLimit();
    if (past === null) return;
    const { logEntries, limitEntries } = past;
    const context = this.context;
    const { partitionId } = context;
    if (this.takeoverLook !== null) {
      context.logger.warn(
        { partitionId, backupId: this.takeoverLook.checkpoint.id, logEntries },
        "gave up looking for an unfinished backup part: the backup store has not answered while the log grew past its bound",
      );
      this.takeoverLook = null;
    }
    const part = this.runningPart;
    if (part === null) return;
    part.givenUpReason =
      `the log of partition ${partitionId} grew by ${logEntries} entries while its part waited for the backup ` +
      `store, past the bound of ${limitEntries} (${BACKUP_PART_LOG_LIMIT_INTERVALS} snapshot intervals): the part ` +
      "was given up so that the replica could take its snapshot";
    context.logger.warn(
      { partitionId, backupId: part.checkpoint.id, logEntries },
      "backup part given up: the store is too slow or does not answer",
    );
    this.endPart(part);
  }

  /** The entries past the replica's snapshot and their bound, when they reached `BACKUP_PART_LOG_LIMIT_INTERVALS`. */
  private logPastPartLimit(): { logEntries: number; limitEntries: number } | null {
    const context = this.context;
    const logEntries = context.engine().lastAppliedIndex - context.snapshotIndex();
    const limitEntries = BACKUP_PART_LOG_LIMIT_INTERVALS * context.snapshotIntervalEntries;
    return logEntries < limitEntries ? null : { logEntries, limitEntries };
  }

  /**
   * A replica that became leader in `term` finishes its partition's part of the latest backup when its predecessor left
   * it unfinished: the backup store holds a part of this partition for the latest checkpoint, none COMPLETED and none
   * of this broker's. It can when it still holds a snapshot at or before the checkpoint and the log after it (a
   * follower compacts on its own, so it may not); the predecessor's part fails on its own (or is reported FAILED
   * once its broker is unreachable or restarts), and the partition counts as COMPLETED by this leader's part.
   */
  considerTakeover(term: number): void {
    const context = this.context;
    const backups = context.backups;
    const checkpoint = context.engine().latestCheckpoint;
    if (backups === undefined || checkpoint === null || this.checkpoint !== null) return;
    if (context.snapshotIndex() > checkpoint.position || this.takeoverLook !== null) return;
    const look: TakeoverLook = { checkpoint };
    this.takeoverLook = look;
    const { memberId, partitionId } = context;
    void backups.store
      .manifests(checkpoint.id)
      .then(
        (manifests) => {
          // A look given up meanwhile (`releasePastLogLimit`) decides nothing: the snapshot went ahead of it.
          if (this.takeoverLook !== look) return;
          const parts = manifests.filter((part) => part.partitionId === partitionId);
          const status = context.status();
          const unfinished =
            parts.length > 0 &&
            !parts.some((part) => part.state === "COMPLETED" || part.brokerId === memberId) &&
            status.role === "leader" &&
            status.term === term &&
            context.engine().latestCheckpoint === checkpoint &&
            this.checkpoint === null &&
            context.snapshotIndex() <= checkpoint.position;
          if (!unfinished) return;
          context.logger.info(
            { partitionId, backupId: checkpoint.id },
            "finishing the backup part a previous leader left unfinished",
          );
          this.checkpoint = checkpoint;
        },
        (error: unknown) =>
          context.logger.warn(
            { err: error, partitionId, backupId: checkpoint.id },
            "could not read the backup store after becoming leader",
          ),
      )
      .finally(() => {
        // A look given up meanwhile (`releasePastLogLimit`) may have been followed by another one, which stays.
        if (this.takeoverLook === look) this.takeoverLook = null;
        context.nudge();
      });
  }

  /**
   * Whether this replica's snapshot waits for the backup parts being written on its broker (by any of its replicas,
   * leader or not, counted from their checkpoint's proposal, see `proposeCheckpoint`): the snapshot's encoding, copies,
   * checksums and writes would compete with the parts' reads, checks and writes for the same processors and disk, and
   * the broker's writes would pay for both. The snapshot starts at the driver's first turn after the last part ended
   * (every tick makes one). Bounded: once `logEntries`, the entries past the last snapshot, reach
   * `BACKUP_LOG_LIMIT_INTERVALS` intervals, the snapshot is taken anyway, so a long or stuck backup cannot make the log
   * grow without limit. A snapshot already being taken holds still meanwhile (the replica's `snapshotTurn`).
   */
  deferSnapshot(logEntries: number): boolean {
    const writing = this.activity.writing;
    const deferred = writing && logEntries < BACKUP_LOG_LIMIT_INTERVALS * this.context.snapshotIntervalEntries;
    // Logged once each time a deferral starts, and once when the bound ends it (not on every look).
    const fields = { partitionId: this.context.partitionId, logEntries };
    if (deferred && !this.snapshotDeferred) {
      this.context.logger.debug(fields, "snapshot deferred until the backup parts written on this broker end");
    } else if (!deferred && this.snapshotDeferred && writing) {
      this.context.logger.info(fields, "snapshot taken during a backup: the log reached its bound");
    }
    this.snapshotDeferred = deferred;
    return deferred;
  }

  /**
   * Ends `part` in this replica's state and on its broker's count; idempotent, so that both a settled part and its
   * final clean-up may call it. A later checkpoint applied meanwhile keeps its reservation and starts next.
   */
  private endPart(part: RunningPart): void {
    part.endActivity();
    if (this.runningPart !== part) return;
    this.runningPart = null;
    if (this.checkpoint === part.checkpoint) this.checkpoint = null;
  }
}

/** Waits `delayMs` on a timer that does not keep the process alive. */
function sleepUnreferenced(delayMs: number): Promise<void> {
  return sleepFor(delayMs, undefined, { ref: false });
}
