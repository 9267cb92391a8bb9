/**
 * The coordinator's part of backups (the management port's `/actuator/backups`): taking backup `id` proposes a
 * checkpoint record with that id to every partition's leader (each leader then writes its partition's part in the
 * background, see partition-replica.ts), and the state of a backup is read from the backup store, part by part.
 *
 * Rules: backup ids are non-negative integers above every earlier id and never reused: the store keeps the highest id
 * it ever recorded, deleted backups' included, and a partition ignores a checkpoint at or below its latest; no backup
 * is taken while a cluster change runs, and no cluster change starts while a backup is in progress (`blockingBackup`),
 * since message relocation and moving replicas while a backup is cut would make its parts hard to reason about.
 *
 * Before it proposes any checkpoint, taking a backup writes the backup's record to the store (backup/store.ts): the
 * partition count of the configuration it checked, which is the backup's count from then on. Leaders write parts only
 * of recorded backups and partitions, deleting a backup removes its record first, and a backup the store holds only
 * stray parts of (no record, every part written against one) is not listed: it was deleted.
 *
 * Ids are 0..2^63 − 1 (bigints). The first one above 2^53 − 1 is taken only when every broker of the configuration
 * says it applies such checkpoint ids (`largeCheckpointIds` of its `describe` answer): a broker of an earlier version
 * rejects the records that carry one, so its replicas would apply them differently from the others'. Once the store
 * holds such an id, a broker that does not answer no longer blocks a take (the running brokers applied such ids
 * already), and a cluster change adds no broker and places no replica on one that does not say it applies them
 * (`largeBackupIdProblem`, asked by the change coordinator).
 *
 * A part whose writer is gone is not left IN_PROGRESS forever: a broker marks the parts it left IN_PROGRESS FAILED
 * when it starts again (`failAbandonedParts`), and a part of a broker that is unreachable is reported FAILED.
 */
import type { Logger } from "pino";
import { compareAscending } from "../../json/int64.js";
import {
  type BackupPartManifest,
  type BackupStore,
  backupPartitionCount,
  type StoredBackupRecord,
} from "../backup/store.js";
import { encodedCheckpointId, MAX_SAFE_CHECKPOINT_ID } from "../engine/index.js";
import { brokerIdsOf, type ClusterConfiguration, encodeConfiguration, partitionIdsOf } from "../topology/index.js";
import { actingCoordinator } from "./change-executor.js";
import type { CheckpointAnswer } from "./peer-requests.js";
import type { BackupListResponse, BackupPartitionView, BackupRefusal, BackupResponse, BackupView } from "./protocol.js";

/** What the backup coordinator needs of its broker. */
export interface BackupCoordinatorContext {
  readonly nodeId: number;
  readonly logger: Logger;
  /** The backup store; null when backups are switched off (`service.backup.store=none`). */
  readonly store: BackupStore | null;
  configuration(): ClusterConfiguration;
  isReachable(brokerId: number): boolean;
  /** Asks the partition's leader to take the checkpoint; null when no leader answered. */
  checkpoint(partitionId: number, checkpointId: bigint): Promise<CheckpointReply | null>;
  /** What `brokerIds` (this broker aside) answer when asked whether they apply checkpoint ids above 2^53 − 1. */
  largeCheckpointIdSupport(brokerIds: readonly number[]): Promise<LargeCheckpointIdSupport>;
  /** Milliseconds since the epoch (the times backups record). */
  nowMs(): number;
  /** A monotonic clock in milliseconds, for how long ago this broker took a backup (a wall clock may step). */
  monotonicNowMs(): number;
  /** The flowplane version recorded in each backup's record. */
  readonly flowplaneVersion: string;
}

/**
 * How long after its checkpoint a partition without a part yet counts as IN_PROGRESS rather than MISSING: its leader
 * writes the first manifest right after applying the checkpoint, unless it waits for a snapshot being taken.
 */
const PART_START_GRACE_MS = 60_000;

/** Most backups whose take this coordinator remembers (the newest); the store holds everything else. */
const MAX_REMEMBERED_BACKUPS = 64;

/**
 * Most characters of a store's error quoted in a refusal: enough for an operating system's error with a path, and
 * short enough that the advice after it survives the platform's bound on the details it relays (1,000 characters).
 */
const MAX_STORE_ERROR_CHARACTERS = 300;

/** Most backups listed at once (newest first). */
export const MAX_LISTED_BACKUPS = 1_000;

/** How the brokers asked answered whether they apply checkpoint ids above 2^53 − 1 (`describe`). */
export interface LargeCheckpointIdSupport {
  /** Brokers that did not answer in time, ascending. */
  readonly unanswered: readonly number[];
  /** Brokers that answered without saying they do (earlier versions), ascending, with the version they answered. */
  readonly unsupported: readonly { readonly brokerId: number; readonly version: string }[];
}

/** A partition leader's answer to a checkpoint request. */
export interface CheckpointReply {
  readonly answer: CheckpointAnswer;
  /**
   * Whether a broker asked before the one answering may have proposed the checkpoint anyway (it did not answer, or
   * lost track of its proposal when its leadership changed): the answering leader may then hold it from this take.
   */
  readonly afterUncertainAttempt: boolean;
}

/** What this coordinator knows of a backup it took, until the store shows every part. */
interface TakenBackup {
  /** When it was taken: on this broker's monotonic clock, or (`fromRecord`) the wall clock of the broker that did. */
  readonly takenAtMs: number;
  readonly fromRecord: boolean;
  /** Why a partition took no checkpoint, by partition id. */
  readonly missing: ReadonlyMap<number, string>;
}

/**
 * What a backup's record says of its take, for a coordinator that did not take it (the one that did failed over): a
 * partition without a part is then still given its grace from the time the record was written.
 */
function takenByRecord(stored: StoredBackupRecord | undefined): TakenBackup | undefined {
  const takenAtMs = stored?.record === null || stored === undefined ? Number.NaN : Date.parse(stored.record.takenAt);
  return Number.isFinite(takenAtMs) ? { takenAtMs, fromRecord: true, missing: new Map() } : undefined;
}

/** A 409 for a take whose id is not above `highestUsed`, which it names for a caller choosing the next id. */
function usedIdRefusal(detail: string, highestUsed: bigint): BackupRefusal {
  return { outcome: "refused", status: 409, detail, highestUsedBackupId: encodedCheckpointId(highestUsed) };
}

function refused(status: 400 | 404 | 409 | 503, detail: string): BackupRefusal {
  return { outcome: "refused", status, detail };
}

/** "broker 2" or "brokers 1, 2". */
function brokersNamed(brokerIds: readonly number[]): string {
  return `broker${brokerIds.length === 1 ? "" : "s"} ${brokerIds.join(", ")}`;
}

/**
 * What keeps the brokers of `support` from applying checkpoint ids above 2^53 − 1 and what to do about it: the brokers
 * that answered without saying they do (an earlier version) and those that did not answer, named apart; null when
 * there are none.
 */
function largeCheckpointIdObstacles(support: LargeCheckpointIdSupport): { reasons: string; remedies: string } | null {
  const reasons: string[] = [];
  const remedies: string[] = [];
  if (support.unsupported.length > 0) {
    const one = support.unsupported.length === 1;
    const versions = support.unsupported.map(({ brokerId, version }) => `${brokerId} (version ${version})`);
    reasons.push(
      `broker${one ? "" : "s"} ${versions.join(", ")} answered without saying ${one ? "it does" : "they do"}`,
    );
    remedies.push("upgrade the brokers of an earlier version");
  }
  if (support.unanswered.length > 0) {
    reasons.push(`${brokersNamed(support.unanswered)} did not answer`);
    remedies.push("make sure the brokers that did not answer run and are reachable");
  }
  return reasons.length === 0 ? null : { reasons: reasons.join("; "), remedies: remedies.join(" and ") };
}

/** The higher of two used backup ids, either of which may be unknown (null). */
function highestUsedOf(latest: bigint | null, highestTaken: bigint | null): bigint | null {
  if (latest === null || highestTaken === null) return latest ?? highestTaken;
  return latest > highestTaken ? latest : highestTaken;
}

/** The highest backup id the store used: its latest backup's, or a higher one it recorded as taken. */
async function highestUsedBackupId(store: BackupStore): Promise<bigint | null> {
  return highestUsedOf((await store.backupIds()).at(-1) ?? null, await store.highestTakenBackupId());
}

/** See the module comment. */
export class BackupCoordinator {
  /** Backups this coordinator took, by id: which partitions took no checkpoint, and when (the newest few). */
  private readonly taken = new Map<bigint, TakenBackup>();
  /** The id of the backup being taken right now (its checkpoints proposed), or null. */
  private taking: bigint | null = null;
  /** Changes the change coordinator is recording (`holdForChange`): no backup is taken meanwhile. */
  private changesBeingRecorded = 0;

  constructor(private readonly context: BackupCoordinatorContext) {}

  /** Takes backup `backupId`: checks the rules, then proposes the checkpoint to every partition's leader. */
  async take(backupId: bigint): Promise<BackupResponse> {
    const redirect = this.redirect();
    if (redirect !== null) return redirect;
    const store = this.context.store;
    if (store === null) return refused(409, "backups are switched off on this cluster (service.backup.store=none)");
    const configuration = this.context.configuration();
    if (configuration.pendingChange !== null) {
      return refused(
        409,
        `cluster change ${configuration.pendingChange.id} is in progress; no backup is taken while the cluster changes`,
      );
    }
    if (this.taking !== null) return refused(409, `backup ${this.taking} is being taken`);
    if (this.changesBeingRecorded > 0) {
      return refused(409, "a cluster change is being recorded; no backup is taken while the cluster changes");
    }
    this.taking = backupId;
    try {
      const latest = (await store.backupIds()).at(-1) ?? null;
      if (latest !== null && latest >= backupId) {
        return usedIdRefusal(
          `backup ids must be above every earlier id; the latest backup is ${latest}`,
          highestUsedOf(latest, await store.highestTakenBackupId()) ?? latest,
        );
      }
      // Deleted backups' ids count too, and so do ids whose take failed after the store marked them. The store's mark
      // settles it before any partition is asked: a partition's own refusal (it holds a later checkpoint) needs an
      // answer from the first leader asked, which may not come.
      const highestTaken = await store.highestTakenBackupId();
      if (highestTaken !== null && highestTaken >= backupId) {
        return usedIdRefusal(
          `backup ids are never reused and must be above every earlier id; id ${highestTaken} is used (a backup of it was taken or attempted); take an id above ${highestTaken}`,
          highestTaken,
        );
      }
      const running = await this.inProgress(store);
      if (running !== null) return refused(409, `backup ${running} is in progress`);
      if (backupId > MAX_SAFE_CHECKPOINT_ID) {
        const problem = await this.largeBackupIdTakeProblem(configuration, highestUsedOf(latest, highestTaken));
        if (problem !== null) return refused(409, problem);
      }
      const partitionIds = partitionIdsOf(configuration);
      try {
        // The configuration first: a record (which is what makes the backup exist) then always has it beside it.
        await store.writeBackupConfiguration(backupId, encodeConfiguration(configuration));
        await store.writeBackupRecord({
          formatVersion: 1,
          backupId,
          partitionCount: partitionIds.length,
          takenAt: new Date(this.context.nowMs()).toISOString(),
          flowplaneVersion: this.context.flowplaneVersion,
        });
      } catch (error) {
        this.context.logger.warn({ err: error, backupId }, "the backup's record could not be written");
        // The configuration written before the record must not stay without one (nothing lists or deletes it then).
        await store.deleteBackup(backupId).catch(() => false);
        return refused(503, await this.unrecordedDetail(store, backupId, error));
      }
      const answers = await Promise.all(
        partitionIds.map((partitionId) => this.context.checkpoint(partitionId, backupId)),
      );
      const missing = new Map<number, string>();
      for (const [position, reply] of answers.entries()) {
        const partitionId = partitionIds[position] as number;
        const answer = reply?.answer ?? null;
        if (answer === null || answer.outcome !== "checkpointed") {
          missing.set(partitionId, `no leader of partition ${partitionId} took the checkpoint`);
          continue;
        }
        // A partition holding exactly this checkpoint after an attempt that may have proposed it (a leader that
        // lost its leadership after appending it, a request without an answer) took it in this take. Asked without
        // such an attempt, it held it before: the id of a deleted backup.
        const heldFromThisTake = answer.checkpointId === backupId && reply?.afterUncertainAttempt === true;
        if (!answer.taken && !heldFromThisTake) {
          // The partition holds a later checkpoint: the id was used before (a deleted backup). Without
          // its record, what partitions that took the checkpoint now may still write is not a backup.
          await store.deleteBackup(backupId).catch((error: unknown) => {
            this.context.logger.warn({ err: error, backupId }, "the record of a refused backup could not be removed");
          });
          return usedIdRefusal(
            `partition ${partitionId} has taken checkpoint ${answer.checkpointId} already; backup ids must be above every earlier id, deleted ones included`,
            answer.checkpointId > backupId ? answer.checkpointId : backupId,
          );
        }
      }
      this.taken.set(backupId, { takenAtMs: this.context.monotonicNowMs(), fromRecord: false, missing });
      // Bounded: ids only go up, so the first entries of the map are the oldest.
      for (const id of this.taken.keys()) {
        if (this.taken.size <= MAX_REMEMBERED_BACKUPS) break;
        this.taken.delete(id);
      }
      this.context.logger.info({ backupId, partitions: partitionIds.length, missing: missing.size }, "backup taken");
      const [stored] = await store.backupRecords(backupId);
      const backup = this.view(backupId, stored, await store.manifests(backupId));
      if (backup === null) return refused(409, `backup ${backupId} was deleted while it was taken`);
      return { outcome: "backup", backup };
    } finally {
      this.taking = null;
    }
  }

  /**
   * Every backup in the store, newest first (at most `MAX_LISTED_BACKUPS`); with `summary`, each with only the parts
   * that carry its times (`summaryDetails`).
   */
  async list(summary = false): Promise<BackupListResponse> {
    const redirect = this.redirect();
    if (redirect !== null) return redirect;
    const store = this.context.store;
    if (store === null) return { outcome: "backups", backups: [] };
    const records = new Map((await store.backupRecords()).map((stored) => [stored.backupId, stored]));
    const byBackup = groupByBackup(await store.manifests());
    const ids = [...new Set([...records.keys(), ...byBackup.keys()])].sort((left, right) =>
      compareAscending(right, left),
    );
    const backups: BackupView[] = [];
    for (const id of ids) {
      if (backups.length === MAX_LISTED_BACKUPS) break;
      const backup = this.view(id, records.get(id), byBackup.get(id) ?? []);
      if (backup !== null) backups.push(summary ? { ...backup, details: summaryDetails(backup.details) } : backup);
    }
    return { outcome: "backups", backups };
  }

  /** One backup; 404 when the store holds none (neither a record nor a part of a backup from before records). */
  async status(backupId: bigint): Promise<BackupResponse> {
    const redirect = this.redirect();
    if (redirect !== null) return redirect;
    const backup = await this.read(backupId);
    if (backup === null) return refused(404, `there is no backup ${backupId}`);
    return { outcome: "backup", backup };
  }

  /** Removes a backup from the store; 409 while it is in progress, 404 when there is none. */
  async delete(backupId: bigint): Promise<BackupResponse> {
    const redirect = this.redirect();
    if (redirect !== null) return redirect;
    const store = this.context.store;
    if (store === null) return refused(404, `there is no backup ${backupId}`);
    const backup = await this.read(backupId);
    if (backup === null) {
      // Parts left without their record (a deletion cut short, a writer admitted just before one) are no backup, but
      // their id is in use and their files must still be removable.
      if (!(await store.backupIds()).includes(backupId)) return refused(404, `there is no backup ${backupId}`);
      await store.deleteBackup(backupId);
      this.context.logger.info({ backupId }, "stray parts of a deleted backup removed");
      return refused(404, `there is no backup ${backupId}; parts a deletion left behind were removed`);
    }
    if (isRunning(backup) || this.taking === backupId) {
      return refused(409, `backup ${backupId} is in progress; delete it once it has ended`);
    }
    await store.deleteBackup(backupId);
    this.taken.delete(backupId);
    this.context.logger.info({ backupId }, "backup deleted");
    return { outcome: "backup", backup };
  }

  /**
   * Why a take of an id above 2^53 − 1 may not go on, or null, given the highest id the store used so far
   * (`highestUsed`). Before the first such id, every other broker of the configuration must say it applies them, and
   * one that does not answer blocks too (it may run an earlier version). Once the store holds one, the running brokers
   * have applied such ids already and a broker added since said so when the change added it, so only the brokers
   * reachable now are asked, and a broker that does not answer blocks nothing: a broker that is down would otherwise
   * keep every backup from being taken.
   */
  private async largeBackupIdTakeProblem(
    configuration: ClusterConfiguration,
    highestUsed: bigint | null,
  ): Promise<string | null> {
    const largeIdHeld = highestUsed !== null && highestUsed > MAX_SAFE_CHECKPOINT_ID;
    const others = brokerIdsOf(configuration).filter(
      (brokerId) => brokerId !== this.context.nodeId && (!largeIdHeld || this.context.isReachable(brokerId)),
    );
    const support = await this.context.largeCheckpointIdSupport(others);
    const obstacles = largeCheckpointIdObstacles(largeIdHeld ? { ...support, unanswered: [] } : support);
    if (obstacles === null) return null;
    // Only while an id up to 2^53 − 1 is still above every used one: ids are never reused.
    const smallerId =
      highestUsed === null || highestUsed < MAX_SAFE_CHECKPOINT_ID
        ? `, or take an id of at most ${MAX_SAFE_CHECKPOINT_ID}`
        : "";
    return `backup ids above ${MAX_SAFE_CHECKPOINT_ID} need every broker to run a version that takes them: ${obstacles.reasons}; ${obstacles.remedies}${smallerId}`;
  }

  /**
   * Why a cluster change may not add `brokerIds` to the cluster or place replicas on them, or null: once the store
   * holds a backup id above 2^53 − 1 (its checkpoint records, snapshots and hand-overs carry it), every broker that
   * hosts a replica must apply such ids, and each of them must say so. The change coordinator asks before it records
   * a change.
   */
  async largeBackupIdProblem(brokerIds: readonly number[]): Promise<string | null> {
    const store = this.context.store;
    const asked = brokerIds.filter((brokerId) => brokerId !== this.context.nodeId);
    if (store === null || asked.length === 0) return null;
    const highestUsed = await highestUsedBackupId(store);
    if (highestUsed === null || highestUsed <= MAX_SAFE_CHECKPOINT_ID) return null;
    const obstacles = largeCheckpointIdObstacles(await this.context.largeCheckpointIdSupport(asked));
    if (obstacles === null) return null;
    return `the backup store holds backup id ${highestUsed}, above ${MAX_SAFE_CHECKPOINT_ID}, so every broker that hosts a replica must run a version that applies such ids (an earlier version rejects the records that carry them): ${obstacles.reasons}; ${obstacles.remedies} before this change`;
  }

  /**
   * The reason of a take whose record could not be written, with the store's own error (a full disk, a permission
   * denied), which is what the operator must fix. The store marks the id taken before it writes the record, so when
   * the mark is there the id is used now, and a retry must take a higher one.
   */
  private async unrecordedDetail(store: BackupStore, backupId: bigint, error: unknown): Promise<string> {
    const cause = (error instanceof Error ? error.message : String(error)).slice(0, MAX_STORE_ERROR_CHARACTERS);
    const detail = `the backup store could not record backup ${backupId} (${cause}); no checkpoint was taken`;
    let marked: boolean;
    try {
      const highestTaken = await store.highestTakenBackupId();
      marked = highestTaken !== null && highestTaken >= backupId;
    } catch {
      // The store cannot say: the mark may be there.
      return `${detail}; id ${backupId} may be used now (the store may have marked it before it failed); take a higher id once the store works`;
    }
    return marked
      ? `${detail}; id ${backupId} is used now (a backup of it was attempted); take a higher id once the store works`
      : detail;
  }

  /**
   * Holds backups off while the change coordinator records a change: from this call until the release, which the
   * coordinator calls once its change is recorded (a take then finds it in the configuration) or refused, no take
   * starts. Both run on the coordinator's one thread, and the hold is taken before anything is awaited, so no take can
   * start between the coordinator's look at the backups and its change being recorded (the look reads the store, and
   * a take that started meanwhile would run beside the change). Answers the release, or why no change may start now
   * (a backup is being taken or in progress), with nothing held.
   */
  async holdForChange(): Promise<{ readonly release: () => void } | { readonly refusal: string }> {
    if (this.taking !== null) {
      return { refusal: `backup ${this.taking} is being taken; no cluster change starts during a backup` };
    }
    this.changesBeingRecorded += 1;
    let released = false;
    const release = (): void => {
      if (released) return;
      released = true;
      this.changesBeingRecorded -= 1;
    };
    try {
      const blocking = await this.blockingBackup();
      if (blocking === null) return { release };
      release();
      return { refusal: blocking };
    } catch (error) {
      release();
      throw error;
    }
  }

  /**
   * Why a cluster change may not start now (a backup is being taken or in progress), or null: what the monitoring
   * response reports, and what `holdForChange` checks.
   */
  async blockingBackup(): Promise<string | null> {
    if (this.taking !== null) return `backup ${this.taking} is being taken; no cluster change starts during a backup`;
    const store = this.context.store;
    if (store === null) return null;
    const running = await this.inProgress(store);
    return running === null ? null : `backup ${running} is in progress; no cluster change starts during a backup`;
  }

  /**
   * The id of a backup with a part still being written (or taken by this coordinator moments ago and not written
   * yet), or null. Such a backup may already be FAILED or INCOMPLETE as a whole, but its writers still run. Only the
   * latest backup can be running (no backup is taken while another runs), so only its manifests are read: the
   * monitoring response asks on every poll.
   */
  private async inProgress(store: BackupStore): Promise<bigint | null> {
    const candidates = new Set<bigint>();
    const latest = (await store.backupIds()).at(-1);
    if (latest !== undefined) candidates.add(latest);
    for (const [id, taken] of this.taken) {
      if (this.ageMs(taken) <= PART_START_GRACE_MS) candidates.add(id);
    }
    for (const id of candidates) {
      const backup = await this.read(id);
      if (backup !== null && isRunning(backup)) return id;
    }
    return null;
  }

  /** Backup `backupId` as the store holds it, or null when it holds none. */
  private async read(backupId: bigint): Promise<BackupView | null> {
    const store = this.context.store;
    if (store === null) return null;
    const [stored] = await store.backupRecords(backupId);
    return this.view(backupId, stored, await store.manifests(backupId));
  }

  /** The not-coordinator answer when another broker coordinates, else null. */
  private redirect(): BackupRefusal | null {
    const coordinator = actingCoordinator(this.context.configuration(), (id) => this.context.isReachable(id));
    return coordinator === null || coordinator === this.context.nodeId
      ? null
      : { outcome: "not-coordinator", coordinatorId: coordinator };
  }

  /**
   * The backup as the management API shows it: its parts, partition by partition, and the aggregate state; null when
   * the store holds no such backup (see `backupPartitionCount`). The partitions are those of the cut, as restore
   * counts them.
   */
  view(
    backupId: bigint,
    stored: StoredBackupRecord | undefined,
    manifests: readonly BackupPartManifest[],
  ): BackupView | null {
    const taken = this.taken.get(backupId) ?? takenByRecord(stored);
    const count = backupPartitionCount(stored, manifests);
    if (count === null) return null;
    // A damaged record leaves the backup FAILED; its partitions are then those its parts (or the cluster) show.
    const recordProblem = typeof count === "string" ? count : null;
    // One pass over the parts, grouped by partition: a backup of thousands of partitions is viewed for every list,
    // status and cluster change, and a filter per partition made each view quadratic.
    let lowestPartCount = Number.POSITIVE_INFINITY;
    const partsByPartition = new Map<number, BackupPartManifest[]>();
    for (const part of manifests) {
      if (part.damaged !== true) lowestPartCount = Math.min(lowestPartCount, part.partitionCount);
      const parts = partsByPartition.get(part.partitionId);
      if (parts === undefined) partsByPartition.set(part.partitionId, [part]);
      else parts.push(part);
    }
    const partitionCount =
      typeof count === "number"
        ? count
        : Number.isFinite(lowestPartCount)
          ? lowestPartCount
          : partitionIdsOf(this.context.configuration()).length;
    const details: BackupPartitionView[] = [];
    for (let partitionId = 1; partitionId <= partitionCount; partitionId += 1) {
      details.push(this.partitionView(partitionId, partsByPartition.get(partitionId) ?? [], taken));
    }
    const failed = details.find((detail) => detail.state === "FAILED");
    const missing = details.find((detail) => detail.state === "MISSING");
    const state = failed
      ? "FAILED"
      : missing
        ? "INCOMPLETE"
        : details.every((detail) => detail.state === "COMPLETED")
          ? "COMPLETED"
          : "IN_PROGRESS";
    const first = failed ?? missing;
    if (recordProblem !== null) {
      return {
        backupId: encodedCheckpointId(backupId),
        state: "FAILED",
        failureReason: `the backup's record: ${recordProblem}`,
        partitionCount,
        details,
      };
    }
    return {
      backupId: encodedCheckpointId(backupId),
      state,
      failureReason: first === undefined ? null : `partition ${first.partitionId}: ${first.failureReason}`,
      partitionCount,
      details,
    };
  }

  /**
   * How long ago a backup was taken. A take of this broker's is timed on its monotonic clock, which a step of the wall
   * clock does not move; a record written by another broker carries that broker's wall clock, so either way from it.
   */
  private ageMs(taken: TakenBackup): number {
    return taken.fromRecord
      ? Math.abs(this.context.nowMs() - taken.takenAtMs)
      : this.context.monotonicNowMs() - taken.takenAtMs;
  }

  private partitionView(
    partitionId: number,
    parts: readonly BackupPartManifest[],
    taken: TakenBackup | undefined,
  ): BackupPartitionView {
    const completed = parts.find((part) => part.state === "COMPLETED");
    if (completed !== undefined) return partView(completed, "COMPLETED", null);
    const writing = parts.find(
      (part) =>
        part.state === "IN_PROGRESS" &&
        (part.brokerId === this.context.nodeId || this.context.isReachable(part.brokerId)),
    );
    if (writing !== undefined) return partView(writing, "IN_PROGRESS", null);
    const last = parts[parts.length - 1];
    if (last !== undefined) {
      const reason =
        last.state === "IN_PROGRESS"
          ? `broker ${last.brokerId}, which was writing this part, is unreachable`
          : (last.failureReason ?? "the part failed");
      return partView(last, "FAILED", reason);
    }
    const why = taken?.missing.get(partitionId);
    if (taken !== undefined && why === undefined && this.ageMs(taken) <= PART_START_GRACE_MS) {
      return { ...emptyPartition(partitionId), state: "IN_PROGRESS" };
    }
    // A partition that took this broker's checkpoint and still has no part after the grace most often writes to
    // another store than this broker reads: brokers started by hand with their own data directories each default to
    // a store inside it.
    const tookCheckpoint = taken !== undefined && !taken.fromRecord && why === undefined;
    return {
      ...emptyPartition(partitionId),
      state: "MISSING",
      failureReason:
        why ??
        (tookCheckpoint
          ? `partition ${partitionId} took the checkpoint, but the backup store this broker reads holds no part of ` +
            "it: its leader writes to another store (every broker must use the same backup directory, " +
            "service.backup.filesystem.basePath) or stopped before it wrote one"
          : "the backup store holds no part of this partition"),
    };
  }
}

/**
 * Marks the parts `brokerId` left IN_PROGRESS FAILED: their writer was this broker's previous process, which is
 * gone. Called when a broker starts, before its replicas can write new parts, and again later while the store could
 * not be read or written then; `startedBefore` (this process's start, ISO 8601) then keeps the parts its own replicas
 * began meanwhile out of it.
 */
export async function failAbandonedParts(
  store: BackupStore,
  brokerId: number,
  nowIso: string,
  startedBefore: string,
): Promise<number> {
  let failed = 0;
  for (const part of await store.manifests()) {
    if (part.brokerId !== brokerId || part.state !== "IN_PROGRESS" || part.startedAt >= startedBefore) continue;
    await store.writeManifest({
      ...part,
      state: "FAILED",
      failureReason: `broker ${brokerId} stopped while it wrote this part`,
      finishedAt: nowIso,
    });
    failed += 1;
  }
  return failed;
}

/**
 * The parts of a backup that carry its earliest `createdAt` and its latest `lastUpdated`, in partition order: what a
 * summary shows of a backup besides its state (one part when a single one carries both, none when no part has a time).
 */
export function summaryDetails(details: readonly BackupPartitionView[]): BackupPartitionView[] {
  let earliest: BackupPartitionView | null = null;
  let latest: BackupPartitionView | null = null;
  for (const detail of details) {
    if (detail.createdAt !== null && (earliest === null || detail.createdAt < (earliest.createdAt as string))) {
      earliest = detail;
    }
    if (detail.lastUpdated !== null && (latest === null || detail.lastUpdated > (latest.lastUpdated as string))) {
      latest = detail;
    }
  }
  return details.filter((detail) => detail === earliest || detail === latest);
}

/** Whether a part of `backup` is still being written. */
function isRunning(backup: BackupView): boolean {
  return backup.details.some((detail) => detail.state === "IN_PROGRESS");
}

function groupByBackup(manifests: readonly BackupPartManifest[]): Map<bigint, BackupPartManifest[]> {
  const byBackup = new Map<bigint, BackupPartManifest[]>();
  for (const part of manifests) {
    const parts = byBackup.get(part.backupId);
    if (parts === undefined) byBackup.set(part.backupId, [part]);
    else parts.push(part);
  }
  return byBackup;
}

function emptyPartition(partitionId: number): BackupPartitionView {
  return {
    partitionId,
    state: "MISSING",
    brokerId: null,
    failureReason: null,
    checkpointPosition: null,
    createdAt: null,
    lastUpdated: null,
    brokerVersion: null,
    sizeBytes: 0,
  };
}

function partView(
  part: BackupPartManifest,
  state: BackupPartitionView["state"],
  failureReason: string | null,
): BackupPartitionView {
  return {
    partitionId: part.partitionId,
    state,
    brokerId: part.brokerId,
    failureReason,
    checkpointPosition: part.checkpointPosition,
    createdAt: part.startedAt,
    lastUpdated: part.finishedAt ?? part.startedAt,
    brokerVersion: part.flowplaneVersion,
    sizeBytes: part.writtenBytes,
  };
}
