/**
 * Seeded simulation of one partition over the real replica driver and storage: 3–5 `PartitionReplica`s, each with its
 * own `StorageEnvironment` (journal and LMDB) in a temporary directory, on a simulated clock (`replica-clock.ts`), a
 * simulated network (`network.ts`: delays, drops, duplicates, damaged snapshot chunks, partitions) and a simulated
 * disk in front of the real files (`replica-disk.ts`: write latency, crashes losing what was not written, torn journal
 * tails). Clients publish and read through whichever replica leads (`replica-history.ts` checks what they saw).
 *
 * Faults and changes: crashes (a replica and its storage stop dead and reopen from their directory), clean restarts
 * (the leader hands leadership over first), partitions, membership changes through `changeMembership` as a broker
 * asks them (a replica joining as a learner then promoted, a replica removed and destroyed, priority changes), and
 * forced reconfigurations through `forceMembership` to a subset holding the most up-to-date durable log (so no
 * acknowledged publication may be lost; the replicas left out are stopped for good and the checkers forget their
 * leaderships, as `cluster.ts` does).
 *
 * Checked: at most one leader per term (from the replicas' reports); a replica reopened after a crash holds exactly
 * what was durable when it crashed; no replica fails; every request is answered within a bound; the client history
 * (`PublicationHistory.check`); after the faults stop, a new publication is acknowledged within a bound (liveness), a
 * voter of the highest priority leads, every acknowledged publication reads back with its content, and every member
 * reaches the same applied index and, rebuilt from its own storage (snapshot plus log), the same engine state.
 *
 * One simulated step is one heartbeat interval: the clock advances (every replica ticks), due messages are delivered,
 * due disk writes reach the files, clients and the membership driver send their requests, and then the harness lets
 * the event loop run until the cluster is settled: no replica has work it could do without the next step (see
 * `settle`). Faults happen between steps, where every write that reached an environment is complete.
 */
import { createHash, type Hash } from "node:crypto";
import { existsSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { crc32c } from "@node-rs/crc32";
import pino from "pino";
import { type MembershipAnswer, type MembershipChange, showsChange } from "../../src/cluster/broker/membership.js";
import { PartitionReplica } from "../../src/cluster/broker/partition-replica.js";
import type { PublishMessageCommand } from "../../src/cluster/broker/protocol.js";
import { encodeKey } from "../../src/cluster/engine/keys.js";
import { PartitionEngine } from "../../src/cluster/engine/partition-engine.js";
import type { SnapshotResponseMessage } from "../../src/cluster/raft/core/messages.js";
import { type Configuration, type Member, SeededRandom, votersOf } from "../../src/cluster/raft/index.js";
import { StorageEnvironment } from "../../src/cluster/raft/storage/environment.js";
import { MemberStorage } from "../../src/cluster/raft/storage/member-storage.js";
import { detachedMessage } from "../support/replica-messages.js";
import { SimulatedNetwork } from "./network.js";
import { type ReplicaClockView, SimulatedReplicaTime } from "./replica-clock.js";
import { type DiskLatency, JOURNAL_SEGMENT_BYTES, SimulatedReplicaDisk } from "./replica-disk.js";
import { type KeyRead, type Publication, type PublicationAttempt, PublicationHistory } from "./replica-history.js";

/** Knobs of one run. */
export interface ReplicaSimulationOptions {
  readonly seed: number;
  /** Steps (heartbeat intervals) during which faults are injected. */
  readonly chaosTicks: number;
  /** After the faults stop, each final property must hold within this many steps. */
  readonly livenessBoundTicks: number;
  /** Where the run's temporary directory goes (default: /dev/shm when present, else the system's). */
  readonly temporaryRoot?: string;
}

/** Outcome of one run. */
export interface ReplicaSimulationResult {
  readonly seed: number;
  /** Empty when every check held; a run stops at its first violation. */
  readonly violations: string[];
  readonly ticks: number;
  readonly publications: number;
  readonly acknowledged: number;
  /** Publications whose outcome stayed unknown (answered `unknown`, or their replica crashed before answering). */
  readonly unknownOutcomes: number;
  readonly reads: number;
  readonly leadersElected: number;
  readonly messagesSent: number;
  /** Replicas stopped dead (their queued writes lost) and reopened later. */
  readonly crashes: number;
  /** Crashes that also left a torn record at the journal's tail. */
  readonly tornWrites: number;
  /** Writes queued on a disk and lost in a crash. */
  readonly lostWrites: number;
  /** Clean restarts (leadership handed over first when leading). */
  readonly restarts: number;
  /** Committed configuration changes seen, forced ones included. */
  readonly membershipChanges: number;
  readonly learnersPromoted: number;
  /** Replicas removed from the group and destroyed (their data deleted). */
  readonly replicasRemoved: number;
  readonly priorityChanges: number;
  /**
   * Membership requests the leader held (asked with a wait) and answered `done` in a later step than they were asked:
   * the change took hold while the request waited, instead of the broker asking again.
   */
  readonly heldRequestsAnsweredDone: number;
  /** Forced reconfigurations that were committed. */
  readonly forcedReconfigurations: number;
  readonly snapshotsTaken: number;
  /** Durable transactions the brokers' storage environments committed. */
  readonly commits: number;
  /** Snapshots received from a leader and installed. */
  readonly snapshotsInstalled: number;
  /**
   * Crashes of a replica receiving a snapshot that lost chunks it had acknowledged (it answers chunks before they are
   * durable): the restarted replica holds less than the leader was told, and the transfer must go back.
   */
  readonly acknowledgedChunksLost: number;
  /**
   * Snapshot chunks a running replica received with bytes that differ from the checksum sent with them (damaged on
   * the way): each must be asked for again, not accepted.
   */
  readonly damagedChunksDelivered: number;
  /**
   * Damaged chunks the replicas reported (`onReceiptDamage`, what their logs and metrics show). Never more than were
   * delivered damaged; fewer when a damaged chunk's bytes were never looked at: it was not the chunk its member
   * expected next (out of order, or past byte 0 of a snapshot the member was not receiving yet), its snapshot was no
   * newer than what the member had committed, an installed snapshot was waiting for its `Ready`, or the replica
   * crashed before stepping it.
   */
  readonly damagedChunksReported: number;
  /**
   * Answers rejecting a whole snapshot (its checksum did not match), as replicas sent them. The pairs of a member and a
   * snapshot they name are never more than the chunks the network damaged before their checksum was computed: a member
   * that accepted a chunk damaged on the way would reject more, which the harness reports as a violation. Each was
   * reported (`onReceiptDamage`) in the turn that produced it, before the answer left.
   */
  readonly snapshotsRejected: number;
  /** Digest of every answer, leadership, fault and change with its step: equal digests mean the same course. */
  readonly historyDigest: string;
}

/** Largest snapshot chunk of the simulated replicas. */
const SNAPSHOT_CHUNK_BYTES = 256;

/** The faults and changes a run counts, which a seed suite sums and holds to minimums. */
export const REPLICA_COVERAGE_KEYS = [
  "crashes",
  "tornWrites",
  "restarts",
  "membershipChanges",
  "learnersPromoted",
  "replicasRemoved",
  "priorityChanges",
  "heldRequestsAnsweredDone",
  "forcedReconfigurations",
  "snapshotsInstalled",
  "acknowledgedChunksLost",
  "damagedChunksDelivered",
  "damagedChunksReported",
  "snapshotsRejected",
] as const;

/** The coverage counters of one run. */
export type ReplicaCoverage = Pick<ReplicaSimulationResult, (typeof REPLICA_COVERAGE_KEYS)[number]>;

const PARTITION_ID = 1;
/** One step of simulated time; a replica ticks once per step. */
const HEARTBEAT_MS = 10;
const ELECTION_TIMEOUT_MS = 100;
const ELECTION_TIMEOUT_TICKS = ELECTION_TIMEOUT_MS / HEARTBEAT_MS;
const MAX_MEMBERS = 5;
/** Faults scheduled against new leaders at once, at most. */
const MAX_SCHEDULED_FAULTS = 16;
const CLIENTS = 3;
/** Attempts of one publication answered `not-leader` or `unavailable` before the client gives up. */
const MAX_ATTEMPTS = 20;
/**
 * A request unanswered for this many steps by a replica that is still running is a violation: a proposal of a lost
 * leadership is answered within 10 election timeouts (the in-doubt deadline), everything else sooner.
 */
const ANSWER_BOUND_TICKS = 30 * ELECTION_TIMEOUT_TICKS;
/** Turns of the event loop one settle may take; each turn runs at least one commit or one slice of work. */
const MAX_SETTLE_TURNS = 100_000;
const TENANT = "<default>";
const silentLogger = pino({ level: "silent" });

/** Thrown inside the harness to stop a run at its first violation. */
class Violation extends Error {}

/** What a member's storage holds durably, compared across a crash. */
interface DurableSummary {
  readonly lastIndex: number;
  readonly lastTerm: number;
  readonly firstIndex: number;
  readonly snapshotIndex: number;
  readonly hardState: string;
  /** Digest of every entry's index, term, kind and data. */
  readonly entriesDigest: string;
}

interface Incarnation {
  readonly replica: PartitionReplica;
  readonly disk: SimulatedReplicaDisk;
  readonly clock: ReplicaClockView;
  /** Shared with the replica's `send`: a dead incarnation's messages never leave. */
  /** `alive` until the incarnation ends; `closing` from the start of a clean shutdown or a removal. */
  readonly state: { alive: boolean; closing: boolean };
  /** A leadership hand-over before a clean restart; `finished` once it resolved. */
  handOver: { finished: boolean } | null;
}

interface Broker {
  readonly id: number;
  readonly directory: string;
  /** The founding membership (written on first start), or null for a broker that joins later. */
  readonly bootstrap: readonly Member[] | null;
  incarnation: Incarnation | null;
  restartAtTick: number | null;
  /** Removed from the group and destroyed, or left out by a forced reconfiguration: never started again. */
  gone: boolean;
  /** What its storage held durably when its last incarnation ended. */
  durable: DurableSummary | null;
  installedSnapshotsOfEndedIncarnations: number;
  /** The snapshot whose chunks its current incarnation acknowledged, and the highest offset it acknowledged. */
  acknowledgedReceipt: { readonly snapshotIndex: number; readonly offset: number } | null;
}

type ClientOperation =
  | {
      readonly kind: "publish";
      readonly publication: Publication;
      readonly attempt: PublicationAttempt;
      readonly brokerId: number;
      readonly incarnation: Incarnation;
      readonly startedAtTick: number;
    }
  | {
      readonly kind: "read";
      readonly read: KeyRead;
      readonly brokerId: number;
      readonly incarnation: Incarnation;
      readonly startedAtTick: number;
    };

interface Client {
  readonly id: number;
  operation: ClientOperation | null;
  /** A publication to attempt again (its last attempt certainly failed). */
  retry: Publication | null;
  nextAtTick: number;
}

interface MembershipGoal {
  readonly kind: "join" | "remove" | "priority";
  readonly member: number;
  readonly priority: number;
  stage: "add" | "promote" | "change";
  readonly deadlineTick: number;
  nextTryTick: number;
  /** The incarnation asked and not answered yet. */
  asking: Incarnation | null;
  /** The committed configuration shows the change (for a join: the promotion). */
  done: boolean;
}

interface PendingForce {
  readonly members: readonly Member[];
}

/** One seeded run over real replicas; see the module comment. */
export class ReplicaSimulation {
  private readonly random: SeededRandom;
  private readonly faultRandom: SeededRandom;
  private readonly clientRandom: SeededRandom;
  private readonly replicaSeeds: SeededRandom;
  private readonly diskRandom: SeededRandom;
  private readonly time = new SimulatedReplicaTime();
  private readonly network: SimulatedNetwork;
  private readonly history = new PublicationHistory();
  private readonly brokers = new Map<number, Broker>();
  private readonly clients: Client[] = [];
  private readonly digest: Hash = createHash("sha256");
  private root = "";
  private tick = 0;
  private chaos = true;
  private clientsActive = true;
  private healedAtMs = Number.POSITIVE_INFINITY;
  private nextBrokerId: number;
  private nextPublication = 0;
  private readonly initialMembers: Member[];
  private readonly latency: DiskLatency;
  private readonly crashProbability: number;
  private readonly restartProbability: number;
  private readonly snapshotIntervalEntries: number;
  /** When to force a reconfiguration (the first step from then on with no membership change under way). */
  private forceAtTick: number | null;
  private readonly newLeaderFaultProbability: number;
  private scheduledFaults: {
    readonly atTick: number;
    readonly brokerId: number;
    readonly kind: "crash" | "isolate";
  }[] = [];
  private goal: MembershipGoal | null = null;
  private pendingForce: PendingForce | null = null;
  /** Violations found inside callbacks, raised at the end of the step. */
  private readonly deferredViolations: string[] = [];

  // Checker state.
  private readonly leadersByTerm = new Map<number, number>();
  private observedConfiguration: { commitIndex: number; configuration: Configuration } | null = null;

  // Statistics.
  private leadersElected = 0;
  private crashes = 0;
  private tornWrites = 0;
  private acknowledgedChunksLost = 0;
  private damagedChunksDelivered = 0;
  private damagedChunksReported = 0;
  /** Whole snapshots the replicas reported rejected (`onReceiptDamage`). */
  private rejectedSnapshotsReported = 0;
  private lostWrites = 0;
  private restarts = 0;
  private membershipChanges = 0;
  private learnersPromoted = 0;
  private replicasRemoved = 0;
  private priorityChanges = 0;
  private heldRequestsAnsweredDone = 0;
  private forcedReconfigurations = 0;
  private snapshotsTaken = 0;
  /** Commits of environments already closed. */
  private commits = 0;

  constructor(private readonly options: ReplicaSimulationOptions) {
    this.random = new SeededRandom(options.seed);
    this.faultRandom = this.random.fork();
    this.clientRandom = this.random.fork();
    this.replicaSeeds = this.random.fork();
    this.diskRandom = this.random.fork();
    this.network = new SimulatedNetwork(this.random.fork(), { orderedSnapshotChunks: true });
    const size = 3 + this.faultRandom.nextInt(3);
    this.initialMembers = [];
    for (let id = 1; id <= size; id += 1) {
      this.initialMembers.push({ id, role: "voter", priority: 1 + this.faultRandom.nextInt(3) });
    }
    this.nextBrokerId = size + 1;
    // Profiles: some seeds crash often, some rarely; some disks answer at once, some take up to a few steps.
    this.crashProbability = [0.003, 0.008, 0.02][this.faultRandom.nextInt(3)] ?? 0.008;
    this.restartProbability = this.crashProbability / 3;
    this.latency = this.faultRandom.chance(0.2)
      ? { immediateProbability: 1, maxTicks: 1 }
      : { immediateProbability: 0.5, maxTicks: 1 + this.faultRandom.nextInt(3) };
    this.snapshotIntervalEntries = 10 + this.faultRandom.nextInt(40);
    this.newLeaderFaultProbability = this.faultRandom.chance(0.5) ? 0.5 : 0;
    this.network.faults = {
      dropProbability: this.faultRandom.chance(0.3) ? 0 : this.faultRandom.nextInt(10) / 100,
      duplicateProbability: this.faultRandom.nextInt(5) / 100,
      snapshotCorruptionProbability: this.faultRandom.chance(0.3) ? 0.05 : 0,
      minDelayTicks: 1,
      maxDelayTicks: 1 + this.faultRandom.nextInt(4),
    };
    this.forceAtTick = this.faultRandom.chance(0.4)
      ? Math.floor(options.chaosTicks / 3) + this.faultRandom.nextInt(Math.max(1, Math.floor(options.chaosTicks / 2)))
      : null;
    for (let id = 0; id < CLIENTS; id += 1) this.clients.push({ id, operation: null, retry: null, nextAtTick: 0 });
  }

  /** Runs to completion, removes its directories, and reports (a run stops at its first violation). */
  async run(): Promise<ReplicaSimulationResult> {
    const violations: string[] = [];
    this.root = await mkdtemp(join(this.options.temporaryRoot ?? defaultTemporaryRoot(), "flowplane-replica-sim-"));
    try {
      await this.execute();
    } catch (error) {
      if (error instanceof Violation) violations.push(`tick ${this.tick}: ${error.message}`);
      else {
        const detail = error instanceof Error ? (error.stack ?? error.message) : String(error);
        violations.push(`tick ${this.tick}: harness or driver error: ${detail}`);
      }
    }
    try {
      await this.shutDownEverything();
    } catch (error) {
      if (violations.length === 0) violations.push(`tick ${this.tick}: shutting down failed: ${String(error)}`);
    }
    await rm(this.root, { recursive: true, force: true });
    const publications = [...this.history.publications.values()];
    return {
      seed: this.options.seed,
      violations,
      ticks: this.tick,
      publications: publications.length,
      acknowledged: publications.filter((publication) => publication.status === "acknowledged").length,
      unknownOutcomes: publications.filter((publication) => publication.status === "unknown").length,
      reads: this.history.reads.length,
      leadersElected: this.leadersElected,
      messagesSent: this.network.sent,
      crashes: this.crashes,
      tornWrites: this.tornWrites,
      lostWrites: this.lostWrites,
      restarts: this.restarts,
      membershipChanges: this.membershipChanges,
      learnersPromoted: this.learnersPromoted,
      replicasRemoved: this.replicasRemoved,
      priorityChanges: this.priorityChanges,
      heldRequestsAnsweredDone: this.heldRequestsAnsweredDone,
      forcedReconfigurations: this.forcedReconfigurations,
      snapshotsTaken: this.snapshotsTaken,
      commits: this.commits + this.disks().reduce((sum, disk) => sum + disk.environment.transactionCount, 0),
      snapshotsInstalled: this.snapshotsInstalled(),
      acknowledgedChunksLost: this.acknowledgedChunksLost,
      damagedChunksDelivered: this.damagedChunksDelivered,
      damagedChunksReported: this.damagedChunksReported,
      snapshotsRejected: this.network.snapshotRejectionsSent,
      historyDigest: this.digest.digest("hex"),
    };
  }

  private async execute(): Promise<void> {
    for (const member of this.initialMembers) {
      await this.start(this.addBroker(member.id, this.initialMembers));
      await this.settle();
    }
    for (let step = 0; step < this.options.chaosTicks; step += 1) await this.step();
    await this.heal();
    const healedAtTick = this.tick;
    while (!this.writeAcknowledgedSinceHealing()) {
      if (this.tick - healedAtTick > this.options.livenessBoundTicks) {
        throw new Violation(
          `liveness: no publication invoked after the faults stopped (tick ${healedAtTick}) was acknowledged within ` +
            `${this.options.livenessBoundTicks} steps; leaders: [${this.leaders().map((broker) => broker.id)}]`,
        );
      }
      await this.step();
    }
    await this.finalChecks();
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Steps

  private async step(): Promise<void> {
    this.tick += 1;
    this.time.advance(HEARTBEAT_MS);
    for (const message of this.network.deliverDue(this.tick)) {
      const replica = this.brokers.get(message.to)?.incarnation?.replica;
      if (replica === undefined) continue;
      if (message.type === "snapshotChunk" && message.checksum !== crc32c(message.data) >>> 0) {
        this.damagedChunksDelivered += 1;
      }
      replica.receive(message);
    }
    for (const broker of this.brokers.values()) broker.incarnation?.disk.release();
    this.driveClients();
    this.driveMembership();
    await this.settle();
    await this.afterSettle();
    if (this.chaos) await this.injectFaults();
    for (const broker of this.brokers.values()) {
      if (broker.restartAtTick !== null && broker.restartAtTick <= this.tick && !broker.gone) {
        await this.start(broker);
        await this.settle();
      }
    }
    this.checkLeaders();
    this.observeConfiguration();
    this.checkSnapshotRejections();
    this.checkDamageReports();
    this.raiseDeferred();
  }

  /**
   * Replicas report only damage that happened, and every rejection they answer: no more damaged chunks than the
   * network delivered damaged, and no fewer snapshots rejected than rejections sent (a replica reports a rejection in
   * the turn that produced it; its answer leaves with a later `Ready`, or never if the replica crashes first).
   */
  private checkDamageReports(): void {
    if (this.damagedChunksReported > this.damagedChunksDelivered) {
      throw new Violation(
        `replicas reported ${this.damagedChunksReported} damaged snapshot chunks, but only ` +
          `${this.damagedChunksDelivered} were delivered damaged`,
      );
    }
    if (this.rejectedSnapshotsReported < this.network.snapshotRejectionsSent) {
      throw new Violation(
        `replicas sent ${this.network.snapshotRejectionsSent} rejections of a whole snapshot, but reported only ` +
          `${this.rejectedSnapshotsReported}`,
      );
    }
  }

  /**
   * Every rejection of a whole snapshot must come from a chunk damaged before its checksum was computed: one damaged on
   * the way fails its own checksum and is asked for again, so a member that accepted it would reject one snapshot too
   * many. Pairs of a member and a snapshot are counted, not answers (see `distinctSnapshotRejections`).
   */
  private checkSnapshotRejections(): void {
    const { distinctSnapshotRejections, chunksDamagedBeforeChecksum } = this.network;
    if (distinctSnapshotRejections > chunksDamagedBeforeChecksum) {
      throw new Violation(
        `members rejected ${distinctSnapshotRejections} snapshots, more than the ${chunksDamagedBeforeChecksum} chunks ` +
          "damaged before their checksum: a chunk damaged on the way was accepted",
      );
    }
  }

  /**
   * Lets the event loop run until no replica can do anything more before the next step: no commit is running in an
   * environment, no snapshot encoding waits for its next slice, and chunk writes finished on LMDB's writer thread are
   * handed back to their replicas (all at once, in broker order, so replays see them at the same point). Everything
   * else a replica waits for is simulated (ticks, messages, queued disk writes) and comes with a later step. One turn
   * is enough to see this: commits and slices are the only work queued outside the microtask queue, which drains
   * before each turn ends.
   */
  private async settle(): Promise<void> {
    for (let turn = 0; turn < MAX_SETTLE_TURNS; turn += 1) {
      await new Promise<void>((resolve) => setImmediate(resolve));
      if (this.time.pendingYields > 0) continue;
      const disks = this.disks();
      if (disks.some((disk) => disk.commitsInFlight > 0)) continue;
      const writingChunks = disks.filter((disk) => disk.chunkWritesPending);
      if (writingChunks.length === 0) return;
      await Promise.all(writingChunks.map((disk) => disk.chunkWritesSettled()));
      for (const disk of writingChunks) disk.releaseSettledChunkWrites();
    }
    throw new Error(`harness: the cluster did not settle within ${MAX_SETTLE_TURNS} turns of the event loop`);
  }

  private disks(): SimulatedReplicaDisk[] {
    const disks: SimulatedReplicaDisk[] = [];
    for (const broker of this.brokers.values()) if (broker.incarnation !== null) disks.push(broker.incarnation.disk);
    return disks;
  }

  /** Follow-ups of what the replicas answered during the step. */
  private async afterSettle(): Promise<void> {
    for (const broker of [...this.brokers.values()]) {
      const incarnation = broker.incarnation;
      if (incarnation?.handOver?.finished) {
        incarnation.handOver = null;
        await this.shutDown(broker);
        broker.restartAtTick = this.tick + 5 + this.faultRandom.nextInt(40);
      }
    }
    await this.followMembershipGoal();
    this.followForce();
  }

  private raiseDeferred(): void {
    const first = this.deferredViolations[0];
    if (first !== undefined) throw new Violation(first);
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Brokers: start, crash, clean shutdown, removal

  private addBroker(id: number, bootstrap: readonly Member[] | null): Broker {
    const broker: Broker = {
      id,
      directory: join(this.root, `broker-${id}`),
      bootstrap,
      incarnation: null,
      restartAtTick: null,
      gone: false,
      durable: null,
      installedSnapshotsOfEndedIncarnations: 0,
      acknowledgedReceipt: null,
    };
    this.brokers.set(id, broker);
    return broker;
  }

  /** Opens the broker's storage and replica; after a crash, checks the storage reopened exactly what was durable. */
  private async start(broker: Broker): Promise<void> {
    broker.restartAtTick = null;
    const disk = SimulatedReplicaDisk.open(broker.directory, this.diskRandom, this.latency, () => this.tick);
    if (broker.durable !== null) {
      const reopened = await durableSummary(disk.environment);
      const before = JSON.stringify(broker.durable);
      const after = JSON.stringify(reopened);
      if (before !== after) {
        throw new Violation(`broker ${broker.id} reopened with ${after}, but ${before} was durable when it stopped`);
      }
    }
    const clock = this.time.view();
    const state = { alive: true, closing: false };
    broker.acknowledgedReceipt = null;
    const replica = await PartitionReplica.open({
      partitionId: PARTITION_ID,
      memberId: broker.id,
      environment: disk.environment,
      bootstrap: broker.bootstrap,
      heartbeatIntervalMs: HEARTBEAT_MS,
      electionTimeoutMs: ELECTION_TIMEOUT_MS,
      snapshotIntervalEntries: this.snapshotIntervalEntries,
      maxPendingProposals: 64,
      maxApplyLagEntries: 10_000,
      // Small chunks, so that a snapshot of the simulation's small states travels in many of them, in several
      // receipts whose writes a crash can lose after they were acknowledged.
      snapshotChunkBytes: SNAPSHOT_CHUNK_BYTES,
      snapshotWindowChunks: 4,
      send: (_to, message) => {
        if (state.alive) {
          if (message.type === "snapshotResponse") noteSnapshotAnswer(broker, message);
          this.network.send(detachedMessage(message), this.tick);
        }
      },
      onFailure: (error) => {
        if (state.alive) this.deferredViolations.push(`broker ${broker.id}'s replica failed: ${error.stack}`);
      },
      onSnapshot: () => {
        this.snapshotsTaken += 1;
      },
      onReceiptDamage: (damage) => {
        this.damagedChunksReported += damage.chunks;
        this.rejectedSnapshotsReported += damage.snapshots;
      },
      logger: silentLogger,
      clock,
      randomSeed: this.replicaSeeds.nextUint32(),
    });
    broker.incarnation = { replica, disk, clock, state, handOver: null };
    this.trace(`start ${broker.id}`);
    if (this.pendingForce?.members.some((member) => member.id === broker.id)) {
      this.requestForce(broker);
    }
  }

  /** Stops the broker dead: its queued writes are lost and nothing it was doing resumes. */
  private async crash(broker: Broker, downTicks: number): Promise<void> {
    const incarnation = broker.incarnation;
    if (incarnation === null) return;
    this.endIncarnation(broker, incarnation);
    incarnation.clock.freeze();
    broker.durable = await durableSummary(incarnation.disk.environment);
    const lostBefore = incarnation.disk.lostWrites;
    const torn = await incarnation.disk.crash(this.faultRandom.chance(0.5), this.faultRandom);
    // Measured once the crash cut the snapshot files' unsynced bytes, as the restarted broker will find them.
    const acknowledged = broker.acknowledgedReceipt;
    if (acknowledged !== null) {
      const durableBytes = await durableReceiptBytes(broker.directory, acknowledged.snapshotIndex);
      if (durableBytes < acknowledged.offset) this.acknowledgedChunksLost += 1;
    }
    const lost = incarnation.disk.lostWrites - lostBefore;
    this.lostWrites += lost;
    if (torn) this.tornWrites += 1;
    this.crashes += 1;
    broker.restartAtTick = this.tick + downTicks;
    this.trace(`crash ${broker.id} lost ${lost}`);
  }

  /** Closes the broker's replica cleanly (its writes are flushed) and its storage. */
  private async shutDown(broker: Broker): Promise<void> {
    const incarnation = broker.incarnation;
    if (incarnation === null) return;
    incarnation.disk.flush();
    incarnation.state.closing = true;
    let closed = false;
    const closing = incarnation.replica.close().then(() => {
      closed = true;
    });
    await this.settle();
    if (!closed) throw new Violation(`broker ${broker.id}'s replica did not close once its writes were done`);
    await closing;
    this.endIncarnation(broker, incarnation);
    incarnation.clock.freeze();
    broker.durable = await durableSummary(incarnation.disk.environment);
    await incarnation.disk.close();
    this.trace(`shut down ${broker.id}`);
  }

  /** The replica left its group: stopped and its data destroyed, as its broker does. */
  private async destroy(broker: Broker): Promise<void> {
    const incarnation = broker.incarnation;
    broker.gone = true;
    broker.restartAtTick = null;
    if (incarnation !== null) {
      incarnation.disk.flush();
      incarnation.state.closing = true;
      let destroyed = false;
      const destroying = incarnation.replica.destroy().then(() => {
        destroyed = true;
      });
      await this.settle();
      if (!destroyed) throw new Violation(`broker ${broker.id}'s replica was not destroyed once its writes were done`);
      await destroying;
      this.endIncarnation(broker, incarnation);
      incarnation.clock.freeze();
      await incarnation.disk.environment.chunkOperationsSettled();
      if (incarnation.disk.environment.scopes().length > 0) {
        throw new Violation(`broker ${broker.id}'s storage still holds data after its replica was destroyed`);
      }
      await incarnation.disk.close();
    }
    this.network.dropAllFor(broker.id);
    await rm(broker.directory, { recursive: true, force: true });
    this.trace(`destroy ${broker.id}`);
  }

  /** Left out by a forced reconfiguration: stopped dead for good, its data deleted. */
  private async retire(broker: Broker): Promise<void> {
    const incarnation = broker.incarnation;
    broker.gone = true;
    broker.restartAtTick = null;
    if (incarnation !== null) {
      this.endIncarnation(broker, incarnation);
      incarnation.clock.freeze();
      await incarnation.disk.crash(false, this.faultRandom);
    }
    this.network.dropAllFor(broker.id);
    await rm(broker.directory, { recursive: true, force: true });
    this.trace(`retire ${broker.id}`);
  }

  /** Whatever the incarnation was doing for clients ends without an answer they could trust. */
  private endIncarnation(broker: Broker, incarnation: Incarnation): void {
    incarnation.state.alive = false;
    broker.incarnation = null;
    this.commits += incarnation.disk.environment.transactionCount;
    broker.installedSnapshotsOfEndedIncarnations += incarnation.replica.installedSnapshotCount;
    for (const client of this.clients) {
      const operation = client.operation;
      if (operation === null || operation.incarnation !== incarnation) continue;
      if (operation.kind === "publish") this.history.loseAttempt(operation.publication, operation.attempt);
      else this.history.loseRead(operation.read);
      client.operation = null;
    }
    if (this.goal?.asking === incarnation) this.goal.asking = null;
  }

  private async shutDownEverything(): Promise<void> {
    await this.settle().catch(() => undefined);
    for (const broker of this.brokers.values()) {
      const incarnation = broker.incarnation;
      if (incarnation === null) continue;
      // A run that failed may have left anything waiting: stop dead rather than wait for it.
      this.endIncarnation(broker, incarnation);
      incarnation.clock.freeze();
      await incarnation.disk.crash(false, this.faultRandom).catch(() => undefined);
    }
  }

  private snapshotsInstalled(): number {
    let installed = 0;
    for (const broker of this.brokers.values()) {
      installed += broker.installedSnapshotsOfEndedIncarnations;
      installed += broker.incarnation?.replica.installedSnapshotCount ?? 0;
    }
    return installed;
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Faults

  private async injectFaults(): Promise<void> {
    const random = this.faultRandom;
    if (random.chance(this.crashProbability)) {
      // Sometimes two at once: a leader and a follower lost together is what an entry acknowledged too early needs.
      const victims = random.chance(0.2) ? 2 : 1;
      for (let crashed = 0; crashed < victims; crashed += 1) {
        const victim = this.pickCrashVictim();
        if (victim === undefined) break;
        await this.crash(victim, 10 + random.nextInt(150));
        await this.settle();
      }
    }
    for (const fault of this.scheduledFaults.filter((scheduled) => scheduled.atTick <= this.tick)) {
      const broker = this.brokers.get(fault.brokerId);
      if (broker?.incarnation == null) continue;
      if (fault.kind === "crash") {
        await this.crash(broker, 10 + random.nextInt(100));
        await this.settle();
      } else {
        this.network.heal();
        const others = [...this.brokers.keys()].filter((id) => id !== broker.id);
        this.network.partition([[broker.id], others]);
        this.trace(`isolate ${broker.id}`);
      }
    }
    this.scheduledFaults = this.scheduledFaults.filter((scheduled) => scheduled.atTick > this.tick);
    if (random.chance(this.restartProbability)) {
      const running = this.running().filter((broker) => broker.incarnation?.handOver === null);
      const victim = running[random.nextInt(Math.max(1, running.length))];
      if (victim?.incarnation) await this.restartCleanly(victim);
    }
    if (random.chance(0.006)) this.changePartitions();
    if (this.forceAtTick !== null && this.forceAtTick <= this.tick && this.goal === null) {
      this.forceAtTick = null;
      await this.forceReconfiguration();
    }
  }

  /**
   * A broker whose disk still queues writes (a crash then loses them) in 40% of the crashes when there is one, else
   * the leader half of the time, else any running broker.
   */
  private pickCrashVictim(): Broker | undefined {
    const random = this.faultRandom;
    const running = this.running();
    const writing = running.filter((broker) => (broker.incarnation?.disk.queuedWrites ?? 0) > 0);
    if (writing.length > 0 && random.chance(0.4)) return writing[random.nextInt(writing.length)];
    const leader = this.currentLeader();
    if (leader !== null && random.chance(0.5)) return leader;
    return running[random.nextInt(Math.max(1, running.length))];
  }

  /** A clean restart: a leader hands leadership over first (on simulated time), then the replica closes. */
  private async restartCleanly(broker: Broker): Promise<void> {
    const incarnation = broker.incarnation;
    if (incarnation === null) return;
    this.restarts += 1;
    this.trace(`restart ${broker.id}`);
    if (incarnation.replica.report().role !== "leader") {
      await this.shutDown(broker);
      broker.restartAtTick = this.tick + 5 + this.faultRandom.nextInt(40);
      return;
    }
    const handOver = { finished: false };
    incarnation.handOver = handOver;
    void incarnation.replica.handOverLeadership(2 * ELECTION_TIMEOUT_MS).then(() => {
      handOver.finished = true;
    });
  }

  private changePartitions(): void {
    const random = this.faultRandom;
    const ids = [...this.brokers.values()].filter((broker) => !broker.gone).map((broker) => broker.id);
    this.network.heal();
    const choice = random.nextInt(4);
    this.trace(`partition ${choice}`);
    if (choice === 0) return;
    if (choice === 1) {
      const shuffled = shuffle(ids, random);
      const cut = 1 + random.nextInt(Math.max(1, shuffled.length - 1));
      this.network.partition([shuffled.slice(0, cut), shuffled.slice(cut)]);
    } else if (choice === 2) {
      const isolated = ids[random.nextInt(ids.length)];
      if (isolated !== undefined) this.network.partition([[isolated], ids.filter((id) => id !== isolated)]);
    } else {
      // Asymmetric: a few one-way links fail.
      const links = 1 + random.nextInt(3);
      for (let link = 0; link < links; link += 1) {
        const from = ids[random.nextInt(ids.length)];
        const to = ids[random.nextInt(ids.length)];
        if (from !== undefined && to !== undefined && from !== to) this.network.block(from, to);
      }
    }
  }

  /**
   * Forces the membership to a subset holding the member with the most up-to-date durable log (every committed entry
   * is on it), as an operator would after losing the others; the members left out are stopped for good.
   */
  private async forceReconfiguration(): Promise<void> {
    const candidates = [...this.brokers.values()].filter((broker) => !broker.gone);
    if (candidates.length < 2) return;
    let best: { broker: Broker; summary: DurableSummary } | null = null;
    for (const broker of candidates) {
      const summary =
        broker.incarnation !== null ? await durableSummary(broker.incarnation.disk.environment) : broker.durable;
      if (summary === null) continue;
      if (
        best === null ||
        summary.lastTerm > best.summary.lastTerm ||
        (summary.lastTerm === best.summary.lastTerm && summary.lastIndex > best.summary.lastIndex)
      ) {
        best = { broker, summary };
      }
    }
    if (best === null) return;
    const chosen = best.broker;
    const others = shuffle(
      candidates.filter((broker) => broker !== chosen),
      this.faultRandom,
    );
    const keep = [chosen, ...others.slice(0, this.faultRandom.nextInt(others.length))];
    const members: Member[] = keep
      .map((broker) => ({ id: broker.id, role: "voter" as const, priority: 1 + this.faultRandom.nextInt(3) }))
      .sort((left, right) => left.id - right.id);
    this.trace(`force ${members.map((member) => member.id)}`);
    for (const broker of candidates) if (!keep.includes(broker)) await this.retire(broker);
    // The forced members elect among themselves without those left out and may reuse a term one of them led.
    for (const [term, leader] of [...this.leadersByTerm]) {
      if (!keep.some((broker) => broker.id === leader)) this.leadersByTerm.delete(term);
    }
    this.pendingForce = { members };
    for (const broker of keep) if (broker.incarnation !== null) this.requestForce(broker);
    await this.settle();
  }

  private requestForce(broker: Broker): void {
    const incarnation = broker.incarnation;
    const force = this.pendingForce;
    if (incarnation === null || force === null) return;
    // Whether it took hold is judged from the committed configuration (`followForce`); only a refusal matters here.
    incarnation.replica.forceMembership(force.members).catch((error: unknown) => {
      // A clean shutdown answers what waits with "stopped": that is no refusal, and the restart asks again.
      if (incarnation.state.alive && !incarnation.state.closing) {
        this.deferredViolations.push(`broker ${broker.id} refused the force: ${error}`);
      }
    });
  }

  /** The forced membership is done once a leader's committed configuration is it and nothing is forced any more. */
  private followForce(): void {
    const force = this.pendingForce;
    if (force === null) return;
    const replica = this.currentLeader()?.incarnation?.replica;
    if (replica === undefined) return;
    const voters = votersOf(replica.committedConfiguration());
    if (
      !replica.membership().forced &&
      voters.length === force.members.length &&
      force.members.every((member) => voters.includes(member.id))
    ) {
      this.pendingForce = null;
      this.forcedReconfigurations += 1;
      this.trace("force committed");
    }
  }

  private async heal(): Promise<void> {
    this.chaos = false;
    this.healedAtMs = this.time.now();
    this.network.heal();
    this.network.faults = {
      dropProbability: 0,
      duplicateProbability: 0,
      snapshotCorruptionProbability: 0,
      minDelayTicks: 1,
      maxDelayTicks: 2,
    };
    this.trace("heal");
    for (const broker of this.brokers.values()) {
      if (broker.incarnation === null && !broker.gone) {
        await this.start(broker);
        await this.settle();
      }
    }
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Clients

  private driveClients(): void {
    for (const client of this.clients) {
      const operation = client.operation;
      if (operation !== null) {
        if (this.tick - operation.startedAtTick > ANSWER_BOUND_TICKS) {
          this.deferredViolations.push(
            `a ${operation.kind} sent to broker ${operation.brokerId} at tick ` +
              `${operation.startedAtTick} was not answered within ${ANSWER_BOUND_TICKS} steps`,
          );
        }
        continue;
      }
      if (!this.clientsActive || this.tick < client.nextAtTick) continue;
      const leaders = this.leaders();
      const target = leaders[this.clientRandom.nextInt(Math.max(1, leaders.length))];
      if (target?.incarnation == null) {
        client.nextAtTick = this.tick + 2;
        continue;
      }
      const retry = client.retry;
      client.retry = null;
      if (retry !== null) this.attemptPublication(client, retry, target);
      else if (this.clientRandom.chance(0.6)) this.attemptPublication(client, this.newPublication(), target);
      else this.read(client, this.pickReadKey(), target);
    }
  }

  private newPublication(): Publication {
    const sequence = this.nextPublication++;
    const random = this.clientRandom;
    // Most messages outlive the run; some expire within it, so reads meet expiry and leaders propose expiry records.
    const timeToLiveMs = random.chance(0.15) ? (20 + random.nextInt(200)) * HEARTBEAT_MS : 3_600_000;
    const command: PublishMessageCommand = {
      name: `p${sequence}`,
      correlationKey: `c${sequence % 7}`,
      timeToLiveMs,
      ...(random.chance(0.9) ? { messageId: `m${sequence}` } : {}),
      variables: { sequence },
      tenantId: TENANT,
    };
    return this.history.startPublication(command);
  }

  private attemptPublication(client: Client, publication: Publication, target: Broker): void {
    const incarnation = target.incarnation;
    if (incarnation === null) return;
    const attempt = this.history.startAttempt(publication, target.id, this.time.now());
    const operation: ClientOperation = {
      kind: "publish",
      publication,
      attempt,
      brokerId: target.id,
      incarnation,
      startedAtTick: this.tick,
    };
    client.operation = operation;
    void incarnation.replica.publish(publication.command).then((answer) => {
      if (client.operation !== operation) return;
      client.operation = null;
      client.nextAtTick = this.tick + this.clientRandom.nextInt(3);
      const violation = this.history.recordAnswer(publication, attempt, answer);
      if (violation !== null) this.deferredViolations.push(violation);
      this.trace(`publish ${publication.command.name} @${target.id} ${answer.outcome}`);
      if (answer.outcome === "not-leader" || answer.outcome === "unavailable") {
        if (publication.attempts.length < MAX_ATTEMPTS) client.retry = publication;
        else this.history.giveUp(publication);
      }
    });
  }

  /** A key acknowledged earlier, or any key up to a little past what the partition can have handed out. */
  private pickReadKey(): string {
    const acknowledged = this.history.acknowledged();
    const known = acknowledged[this.clientRandom.nextInt(Math.max(1, acknowledged.length))];
    if (known?.acknowledgedKey != null && this.clientRandom.chance(0.6)) return known.acknowledgedKey;
    return encodeKey(PARTITION_ID, 1 + this.clientRandom.nextInt(this.nextPublication + 2));
  }

  private read(client: Client, key: string, target: Broker): void {
    const incarnation = target.incarnation;
    if (incarnation === null) return;
    const read = this.history.startRead(key, target.id);
    const operation: ClientOperation = {
      kind: "read",
      read,
      brokerId: target.id,
      incarnation,
      startedAtTick: this.tick,
    };
    client.operation = operation;
    void incarnation.replica.getMessage(key).then((answer) => {
      if (client.operation !== operation) return;
      client.operation = null;
      client.nextAtTick = this.tick + this.clientRandom.nextInt(3);
      this.history.recordRead(read, answer, this.time.now());
      this.trace(`read ${key} @${target.id} ${answer.outcome}`);
    });
  }

  private writeAcknowledgedSinceHealing(): boolean {
    return this.history
      .acknowledged()
      .some((publication) => (publication.acknowledgedAttempt?.invokedAtMs ?? 0) >= this.healedAtMs);
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Membership changes, as a broker applying a cluster change asks them of the partition's leader

  private driveMembership(): void {
    if (this.goal === null && this.chaos && this.pendingForce === null && this.faultRandom.chance(0.01)) {
      this.pickGoal();
    }
    const goal = this.goal;
    if (goal === null || goal.done || goal.asking !== null || this.tick < goal.nextTryTick) return;
    if (this.tick > goal.deadlineTick) {
      // An abandoned join leaves its broker running: it may still become a member (the addition may commit later).
      this.trace(`abandon ${goal.kind} ${goal.member}`);
      this.goal = null;
      return;
    }
    const leader = this.currentLeader();
    const incarnation = leader?.incarnation;
    if (incarnation == null) return;
    goal.asking = incarnation;
    const change = changeOf(goal);
    // Brokers ask leaders to hold their requests until the change took hold; half the goals do so here (by the
    // member's id, which draws nothing from the seed), so held requests meet crashes and leader changes too.
    const waitMs = goal.member % 2 === 1 ? 5 * ELECTION_TIMEOUT_MS : 0;
    const askedAtTick = this.tick;
    const shownWhenAsked = showsChange(incarnation.replica.committedConfiguration(), change);
    void incarnation.replica.changeMembership(change, waitMs).then((answer) => {
      // A leader answers `done` at once only for a change its committed configuration shows; one it did not show
      // when asked, answered `done` in a later step, took hold while the request waited (a leader's driver busy with
      // a write may also run the request a step late, but then it answers `in-progress` unless the change committed
      // meanwhile, which a request not held rarely meets).
      if (waitMs > 0 && answer.outcome === "done" && !shownWhenAsked && this.tick > askedAtTick) {
        this.heldRequestsAnsweredDone += 1;
      }
      if (this.goal !== goal || goal.asking !== incarnation) return;
      goal.asking = null;
      goal.nextTryTick = this.tick + 2;
      this.trace(`membership ${change.type} ${change.member} ${answer.outcome}`);
      this.onMembershipAnswer(goal, answer);
    });
  }

  private pickGoal(): void {
    const leader = this.currentLeader();
    if (leader?.incarnation == null) return;
    const configuration = leader.incarnation.replica.committedConfiguration();
    const voters = votersOf(configuration);
    const choice = this.faultRandom.nextInt(3);
    const deadlineTick = this.tick + 60 * ELECTION_TIMEOUT_TICKS;
    const priority = 1 + this.faultRandom.nextInt(3);
    if (choice === 0 && configuration.members.length < MAX_MEMBERS) {
      const id = this.nextBrokerId++;
      this.addBroker(id, null);
      this.goal = {
        kind: "join",
        member: id,
        priority,
        stage: "add",
        deadlineTick,
        nextTryTick: 0,
        asking: null,
        done: false,
      };
    } else if (choice === 1 && voters.length > 3) {
      const member = configuration.members[this.faultRandom.nextInt(configuration.members.length)];
      if (member === undefined) return;
      this.goal = {
        kind: "remove",
        member: member.id,
        priority,
        stage: "change",
        deadlineTick,
        nextTryTick: 0,
        asking: null,
        done: false,
      };
    } else {
      const voter = configuration.members.filter((member) => member.role === "voter")[
        this.faultRandom.nextInt(voters.length)
      ];
      if (voter === undefined) return;
      this.goal = {
        kind: "priority",
        member: voter.id,
        // Another priority than today's: the change must be a real one.
        priority: 1 + ((voter.priority + this.faultRandom.nextInt(2)) % 3),
        stage: "change",
        deadlineTick,
        nextTryTick: 0,
        asking: null,
        done: false,
      };
    }
    this.trace(`goal ${this.goal.kind} ${this.goal.member}`);
  }

  private onMembershipAnswer(goal: MembershipGoal, answer: MembershipAnswer): void {
    if (answer.outcome === "refused") {
      this.trace(`refused ${goal.kind} ${goal.member}: ${answer.detail}`);
      this.goal = null;
      return;
    }
    if (answer.outcome !== "done") return;
    if (goal.kind === "join" && goal.stage === "add") {
      goal.stage = "promote";
      goal.nextTryTick = this.tick;
      return;
    }
    goal.done = true;
    if (goal.kind === "priority") this.priorityChanges += 1;
  }

  /** Starts the joining broker, and destroys a removed one, once their goal got that far. */
  private async followMembershipGoal(): Promise<void> {
    const goal = this.goal;
    if (goal === null) return;
    const broker = this.brokers.get(goal.member);
    if (goal.kind === "join" && broker !== undefined && broker.incarnation === null && !broker.gone) {
      if (broker.restartAtTick === null && broker.durable === null) {
        await this.start(broker);
        await this.settle();
      }
    }
    if (!goal.done) return;
    this.goal = null;
    if (goal.kind === "remove" && broker !== undefined && !broker.gone) {
      await this.destroy(broker);
      this.replicasRemoved += 1;
    }
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Checkers

  /** Election safety: at most one leader per term, from the replicas' own reports. */
  private checkLeaders(): void {
    for (const broker of this.running()) {
      const report = broker.incarnation?.replica.report();
      if (report?.role !== "leader") continue;
      const known = this.leadersByTerm.get(report.term);
      if (known !== undefined && known !== broker.id) {
        throw new Violation(`election safety: brokers ${known} and ${broker.id} both lead term ${report.term}`);
      }
      if (known === undefined) {
        this.leadersByTerm.set(report.term, broker.id);
        this.leadersElected += 1;
        this.trace(`leader ${broker.id} term ${report.term}`);
        // Some seeds hit new leaders within a few steps, before their first entries spread: the interleavings of
        // Figure 8 of the Raft paper need exactly that, and uniform faults almost never produce them.
        if (this.chaos && this.scheduledFaults.length < MAX_SCHEDULED_FAULTS) {
          if (this.faultRandom.chance(this.newLeaderFaultProbability)) {
            this.scheduledFaults.push({
              atTick: this.tick + 1 + this.faultRandom.nextInt(10),
              brokerId: broker.id,
              kind: this.faultRandom.chance(0.5) ? "crash" : "isolate",
            });
          }
        }
      }
    }
  }

  /** Counts committed configuration changes and promotions, from the leader with the highest commit index. */
  private observeConfiguration(): void {
    const leader = this.currentLeader();
    const replica = leader?.incarnation?.replica;
    if (replica === undefined) return;
    const commitIndex = replica.report().commitIndex;
    const configuration = replica.committedConfiguration();
    const previous = this.observedConfiguration;
    if (previous !== null && commitIndex < previous.commitIndex) return;
    this.observedConfiguration = { commitIndex, configuration };
    if (previous === null || JSON.stringify(previous.configuration) === JSON.stringify(configuration)) return;
    this.membershipChanges += 1;
    for (const member of configuration.members) {
      const before = previous.configuration.members.find((candidate) => candidate.id === member.id);
      if (before?.role === "learner" && member.role === "voter") this.learnersPromoted += 1;
    }
    this.trace(`configuration ${JSON.stringify(configuration.members)}`);
  }

  private async finalChecks(): Promise<void> {
    this.clientsActive = false;
    for (const client of this.clients) {
      // Every attempt of a publication left to retry certainly failed: it must never show up.
      if (client.retry !== null) this.history.giveUp(client.retry);
      client.retry = null;
    }
    // Leadership may be moving (a hand-over, a removed leader stepping down), and a change may still be under way. A
    // clean restart begun before the healing may still be handing leadership over, and shuts its broker down once it
    // has: the checks below read through the leader, so they start once every broker is back.
    await this.stepUntil(
      () =>
        this.goal === null &&
        this.pendingForce === null &&
        this.clients.every((client) => client.operation === null) &&
        [...this.brokers.values()].every(
          (broker) => broker.gone || (broker.incarnation !== null && broker.incarnation.handOver === null),
        ) &&
        this.currentLeader() !== null,
      "the membership change, the forced reconfiguration, clean restarts and the clients' requests to finish with a leader",
    );
    // Priority election: in the healthy group a voter of the highest priority must end up leading.
    await this.stepUntil(() => {
      const leader = this.currentLeader();
      return leader !== null && this.leadsWithTopPriority(leader);
    }, "a voter of the highest priority to lead");
    await this.stepUntil(() => this.converged(), "every member to apply the leader's commit index");
    await this.readEverythingBack();
    const problems = this.history.check();
    if (problems.length > 0) throw new Violation(`history: ${problems[0]}`);
    await this.compareStoredStates();
  }

  private async stepUntil(condition: () => boolean, what: string): Promise<void> {
    for (let step = 0; !condition(); step += 1) {
      if (step > this.options.livenessBoundTicks) {
        throw new Violation(`final: no ${what} within ${this.options.livenessBoundTicks} steps after healing`);
      }
      await this.step();
    }
  }

  private leadsWithTopPriority(broker: Broker): boolean {
    const configuration = broker.incarnation?.replica.membership().configuration;
    if (configuration === undefined) return false;
    const voters = configuration.members.filter((member) => member.role === "voter");
    const top = Math.max(...voters.map((voter) => voter.priority));
    return voters.some((voter) => voter.id === broker.id && voter.priority === top);
  }

  /** Every member of the leader's committed configuration runs and has applied the leader's commit index. */
  private converged(): boolean {
    const leader = this.currentLeader();
    const replica = leader?.incarnation?.replica;
    if (replica === undefined) return false;
    const report = replica.report();
    if (report.appliedIndex !== report.commitIndex) return false;
    for (const member of replica.committedConfiguration().members) {
      const other = this.brokers.get(member.id)?.incarnation?.replica.report();
      if (other === undefined || other.appliedIndex !== report.commitIndex || other.term !== report.term) return false;
    }
    return true;
  }

  /**
   * Reads every key the partition can have handed out through the leader; every acknowledged publication whose time
   * to live is not over must be found with its content (the history checks the content and the rest).
   */
  private async readEverythingBack(): Promise<void> {
    const keys = Array.from({ length: this.nextPublication + 1 }, (_, counter) => encodeKey(PARTITION_ID, counter + 1));
    const reads: KeyRead[] = [];
    for (let attempt = 0; attempt < 10; attempt += 1) {
      const leader = this.currentLeader();
      const incarnation = leader?.incarnation;
      if (leader === null || incarnation == null) {
        await this.step();
        continue;
      }
      reads.length = 0;
      const answered = keys.map((key) => {
        const read = this.history.startRead(key, leader.id);
        reads.push(read);
        return incarnation.replica.getMessage(key).then((answer) => {
          this.history.recordRead(read, answer, this.time.now());
        });
      });
      let done = false;
      void Promise.all(answered).then(() => {
        done = true;
      });
      await this.stepUntil(() => done, "answer to the final reads");
      if (reads.every((read) => read.outcome === "found" || read.outcome === "not-found")) break;
    }
    const scanAtMs = this.time.now();
    for (const publication of this.history.acknowledged()) {
      const deadlineMs = this.history.deadlineOf(publication);
      if (deadlineMs === null || deadlineMs <= scanAtMs) continue;
      const read = reads.find((candidate) => candidate.key === publication.acknowledgedKey);
      if (read?.outcome !== "found") {
        throw new Violation(
          `acknowledged publication ${publication.command.name} (key ${publication.acknowledgedKey}) is not ` +
            `readable after healing (${read?.outcome ?? "not read"})`,
        );
      }
    }
  }

  /**
   * Closes every replica cleanly and rebuilds each member's engine from its own storage (the snapshot plus the log up
   * to the applied index): every member must hold the same state.
   */
  private async compareStoredStates(): Promise<void> {
    // The final reads took steps, in which the leader may have appended an expiry record.
    await this.stepUntil(() => this.converged(), "every member to apply the leader's commit index after the reads");
    const leader = this.currentLeader();
    if (leader?.incarnation == null) throw new Violation("final: no leader to compare the members' states with");
    const appliedIndex = leader.incarnation.replica.report().appliedIndex;
    const members = leader.incarnation.replica.committedConfiguration().members.map((member) => member.id);
    for (const broker of [...this.brokers.values()]) if (broker.incarnation !== null) await this.shutDown(broker);
    let reference: { id: number; state: string } | null = null;
    for (const id of members) {
      const broker = this.brokers.get(id);
      if (broker === undefined) continue;
      const state = await storedEngineState(broker.directory, appliedIndex);
      if (reference === null) reference = { id, state };
      else if (reference.state !== state) {
        throw new Violation(`brokers ${reference.id} and ${id} hold different states at applied index ${appliedIndex}`);
      }
    }
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Helpers

  private running(): Broker[] {
    return [...this.brokers.values()].filter((broker) => broker.incarnation !== null);
  }

  private leaders(): Broker[] {
    return this.running().filter((broker) => broker.incarnation?.replica.report().role === "leader");
  }

  /** The running leader of the highest term, or null. */
  private currentLeader(): Broker | null {
    let best: Broker | null = null;
    let bestTerm = -1;
    for (const broker of this.leaders()) {
      const term = broker.incarnation?.replica.report().term ?? -1;
      if (term > bestTerm) {
        best = broker;
        bestTerm = term;
      }
    }
    return best;
  }

  private trace(event: string): void {
    this.digest.update(`${this.tick} ${event}\n`);
  }
}

function changeOf(goal: MembershipGoal): MembershipChange {
  switch (goal.kind) {
    case "join":
      return goal.stage === "add"
        ? { type: "addLearner", member: goal.member, priority: goal.priority }
        : { type: "promote", member: goal.member };
    case "remove":
      return { type: "remove", member: goal.member };
    case "priority":
      return { type: "setPriority", member: goal.member, priority: goal.priority };
  }
}

/** Remembers the highest offset of a snapshot a broker's replica acknowledged, until it installs or rejects it. */
function noteSnapshotAnswer(broker: Broker, message: SnapshotResponseMessage): void {
  if (message.status !== "continue") {
    broker.acknowledgedReceipt = null;
    return;
  }
  const previous = broker.acknowledgedReceipt;
  const offset =
    previous?.snapshotIndex === message.snapshotIndex
      ? Math.max(previous.offset, message.nextOffset)
      : message.nextOffset;
  broker.acknowledgedReceipt = { snapshotIndex: message.snapshotIndex, offset };
}

/**
 * The bytes of the snapshot at `snapshotIndex` that the member's storage in `directory` holds durably: what a
 * restart resumes from (infinite once that snapshot, or a newer one, is installed).
 */
async function durableReceiptBytes(directory: string, snapshotIndex: number): Promise<number> {
  const environment = StorageEnvironment.open({
    directory,
    synchronousCommit: true,
    journalSegmentBytes: JOURNAL_SEGMENT_BYTES,
  });
  try {
    const storage = MemberStorage.openIn(environment, { scope: PARTITION_ID });
    const persisted = await storage.load();
    await storage.close();
    if ((persisted.snapshot?.index ?? 0) >= snapshotIndex) return Number.POSITIVE_INFINITY;
    const incoming = persisted.incomingSnapshot;
    return incoming !== null && incoming.metadata.index === snapshotIndex ? incoming.receivedBytes : 0;
  } finally {
    await environment.close();
  }
}

/** What the member's storage in `environment` holds durably (read through a second, read-only `MemberStorage`). */
async function durableSummary(environment: StorageEnvironment): Promise<DurableSummary> {
  const storage = MemberStorage.openIn(environment, { scope: PARTITION_ID });
  try {
    const persisted = await storage.load();
    const digest = createHash("sha256");
    for (const entry of storage.entries(persisted.firstIndex, persisted.lastIndex + 1)) {
      digest.update(`${entry.index}:${entry.term}:${entry.kind}:`);
      digest.update(entry.data);
    }
    return {
      lastIndex: persisted.lastIndex,
      lastTerm: storage.term(persisted.lastIndex) ?? 0,
      firstIndex: persisted.firstIndex,
      snapshotIndex: persisted.snapshot?.index ?? 0,
      hardState: JSON.stringify(persisted.hardState),
      entriesDigest: digest.digest("hex"),
    };
  } finally {
    await storage.close();
  }
}

/** The engine state a member's storage holds at `appliedIndex`: its snapshot plus its log, applied. */
async function storedEngineState(directory: string, appliedIndex: number): Promise<string> {
  const environment = StorageEnvironment.open({
    directory,
    synchronousCommit: true,
    journalSegmentBytes: JOURNAL_SEGMENT_BYTES,
  });
  try {
    const storage = MemberStorage.openIn(environment, { scope: PARTITION_ID });
    const snapshot = storage.snapshot();
    const engine =
      snapshot === null ? new PartitionEngine({ partitionId: PARTITION_ID }) : PartitionEngine.restore(snapshot.data);
    for (const entry of storage.entries(engine.lastAppliedIndex + 1, appliedIndex + 1)) {
      if (entry.kind === "normal") engine.apply(entry.index, entry.data);
      else engine.markApplied(entry.index);
    }
    await storage.close();
    return Buffer.from(engine.snapshot()).toString("base64");
  } finally {
    await environment.close();
  }
}

function shuffle<T>(items: readonly T[], random: SeededRandom): T[] {
  const result = [...items];
  for (let position = result.length - 1; position > 0; position -= 1) {
    const other = random.nextInt(position + 1);
    const current = result[position] as T;
    result[position] = result[other] as T;
    result[other] = current;
  }
  return result;
}

/** A memory-backed directory when the system has one: the storage code is the same, and runs are much faster. */
function defaultTemporaryRoot(): string {
  return existsSync("/dev/shm") ? "/dev/shm" : tmpdir();
}

/** Runs one seed with the default sizing. */
export function runReplicaSeed(
  seed: number,
  overrides: Partial<Omit<ReplicaSimulationOptions, "seed">> = {},
): Promise<ReplicaSimulationResult> {
  return new ReplicaSimulation({ seed, chaosTicks: 1000, livenessBoundTicks: 600, ...overrides }).run();
}
