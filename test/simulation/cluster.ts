/**
 * Deterministic simulation of one Raft group: 3–7 members in one process with a simulated clock, network and disk,
 * a client workload of reads (read index) and writes on a key-value map, membership and priority changes, forced
 * reconfiguration, crashes, restarts and disk errors. Everything random comes from one seed, so a seed replays
 * exactly.
 *
 * Forced reconfiguration is checked with the full set of safety checkers: the harness forces only to sets that
 * contain the member with the most up-to-date durable log, and the core requires every forced voter to vote in the
 * first election, so no committed (let alone acknowledged) entry can be lost. Members left out of the forced set are
 * stopped for good at that moment, as an operator would do, and the checkers forget what only they held (see
 * `forgetLeftOutHistory`).
 */
import { decodeConfiguration, sameConfiguration, votersOf } from "../../src/cluster/raft/core/configuration.js";
import { type NodeStatus, RaftNode } from "../../src/cluster/raft/core/raft.js";
import { SeededRandom } from "../../src/cluster/raft/core/random.js";
import type { Ready } from "../../src/cluster/raft/core/ready.js";
import {
  type Configuration,
  compactionSnapshot,
  type Entry,
  type Member,
  type MemberId,
} from "../../src/cluster/raft/types.js";
import { SimulatedClock } from "./clock.js";
import { SimulatedDisk } from "./disk.js";
import { checkRegister, type RegisterOperation } from "./linearizability.js";
import { SimulatedNetwork } from "./network.js";
import { decodeWrite, encodeWrite, KeyValueStateMachine } from "./state-machine.js";

/** Knobs of one run. */
export interface SimulationOptions {
  readonly seed: number;
  /** Ticks during which faults are injected. */
  readonly chaosTicks: number;
  /** After faults stop, a leader must be elected and a new write must commit within this many ticks. */
  readonly livenessBoundTicks: number;
  /** Minimum election timeout of every member (default 10 ticks). */
  readonly electionTimeoutTicks?: number;
}

/** Outcome of one run. */
export interface SimulationResult {
  readonly seed: number;
  readonly violations: string[];
  readonly ticks: number;
  readonly committedEntries: number;
  readonly operations: number;
  readonly leadersElected: number;
  readonly messagesSent: number;
  readonly membershipChanges: number;
  readonly forcedReconfigurations: number;
  readonly snapshotsInstalled: number;
  /** Learners whose promotion to voter was committed. */
  readonly learnersPromoted: number;
  /** Members crashed (and later restarted) by the fault injector. */
  readonly crashes: number;
  /** Restarts whose durable commit index was below what the member had applied (it was never synced). */
  readonly restartsBehindApplied: number;
  readonly inconclusiveHistories: number;
}

interface ClientOperation {
  readonly client: number;
  readonly kind: "write" | "read";
  readonly key: string;
  value: string | null;
  readonly invokedAt: number;
  respondedAt: number | null;
  status: "pending" | "ok" | "indeterminate" | "failed";
}

interface PendingWrite {
  readonly operation: ClientOperation;
  readonly term: number;
  readonly value: string;
}

interface PendingRead {
  readonly operation: ClientOperation;
  index: number | null;
}

interface SimulatedMember {
  readonly id: MemberId;
  readonly disk: SimulatedDisk;
  readonly random: SeededRandom;
  readonly founding: boolean;
  node: RaftNode | null;
  machine: KeyValueStateMachine;
  inFlight: { readonly ready: Ready; readonly durableAt: number } | null;
  restartAt: number | null;
  /** What the member had applied when it last crashed. */
  appliedBeforeCrash: number;
  decommissioned: boolean;
  readonly writes: Map<number, PendingWrite>;
  readonly reads: Map<string, PendingRead>;
}

interface Client {
  readonly id: number;
  operation: ClientOperation | null;
  member: MemberId | null;
  nextAt: number;
  sequence: number;
}

type MembershipGoal =
  | { readonly kind: "join"; readonly member: MemberId; readonly priority: number }
  | { readonly kind: "remove"; readonly member: MemberId }
  | { readonly kind: "priority"; readonly member: MemberId; readonly priority: number };

const MAX_MEMBERS = 7;
const MAX_READY_PER_TICK = 8;
/**
 * Chance that a member crashes right after applying a batch that did not sync, while its durable commit index is
 * behind what it applied: the window the lazy commit-index write opens, which random crashes alone rarely hit.
 */
const CRASH_AFTER_UNSYNCED_APPLY_PROBABILITY = 0.01;
/**
 * Chance that a member crashes while writing a batch that carries snapshot chunks, after a random prefix of them (and
 * perhaps the installation they complete) became durable: the torn writes a receipt must resume from.
 */
const TORN_SNAPSHOT_WRITE_PROBABILITY = 0.02;

/** Thrown inside the harness to stop a run at its first violation. */
class Violation extends Error {}

/** One seeded simulation run. */
export class Simulation {
  private readonly clock = new SimulatedClock();
  private readonly random: SeededRandom;
  private readonly faultRandom: SeededRandom;
  private readonly clientRandom: SeededRandom;
  private readonly network: SimulatedNetwork;
  private readonly members = new Map<MemberId, SimulatedMember>();
  private readonly clients: Client[] = [];
  private readonly history: ClientOperation[] = [];
  private readonly keys: string[];
  private readonly electionTimeoutTicks: number;
  private readonly heartbeatTimeoutTicks: number;
  private readonly initialConfiguration: Configuration;
  private nextMemberId: number;

  // Checker state.
  private readonly leadersByTerm = new Map<number, MemberId>();
  private readonly entryRegistry = new Map<string, { readonly content: string; readonly previousTerm: number }>();
  private readonly appliedRegistry = new Map<number, { readonly term: number; readonly content: string }>();
  private readonly acknowledged: { index: number; term: number; value: string }[] = [];
  private committedConfiguration: { index: number; configuration: Configuration };

  // Fault and workload state.
  private chaos = true;
  private diskErrorProbability: number;
  private readonly crashProbability: number;
  private readonly newLeaderFaultProbability: number;
  private readonly scheduledFaults: { at: number; member: MemberId; kind: "crash" | "isolate" }[] = [];
  private readonly maxEntriesPerMessage: number;
  private readonly maxInflightMessages: number;
  private readonly snapshotWindowChunks: number;
  private readonly snapshotResendTicks: number;
  private goal: {
    goal: MembershipGoal;
    stage: "add" | "promote" | "change";
    deadline: number;
    nextTry: number;
  } | null = null;
  private pendingForce: Configuration | null = null;
  private forceAt: number | null;

  // Statistics.
  private leadersElected = 0;
  private membershipChanges = 0;
  private forcedReconfigurations = 0;
  private snapshotsInstalled = 0;
  private learnersPromoted = 0;
  private crashes = 0;
  private restartsBehindApplied = 0;

  constructor(private readonly options: SimulationOptions) {
    this.random = new SeededRandom(options.seed);
    this.faultRandom = this.random.fork();
    this.clientRandom = this.random.fork();
    this.network = new SimulatedNetwork(this.random.fork());
    this.electionTimeoutTicks = options.electionTimeoutTicks ?? 10;
    this.heartbeatTimeoutTicks = 3;
    // Profiles: some seeds crash members (leaders above all) often, some send one entry per message, so
    // acknowledgements of a new leader's old entries arrive apart from its own (the Figure 8 window).
    this.crashProbability = [0.002, 0.006, 0.02][this.faultRandom.nextInt(3)] ?? 0.006;
    this.maxEntriesPerMessage = this.faultRandom.chance(0.3) ? 1 : 1 + this.faultRandom.nextInt(8);
    this.maxInflightMessages = 1 + this.faultRandom.nextInt(4);
    // Snapshot transfers: windows of one to four chunks, and resend timeouts from below the longest round trip (so
    // windows that were not lost are resent too) to well above it.
    this.snapshotWindowChunks = 1 + this.faultRandom.nextInt(4);
    this.snapshotResendTicks =
      [3, this.electionTimeoutTicks, 3 * this.electionTimeoutTicks][this.faultRandom.nextInt(3)] ?? 10;
    // Some seeds hit newly elected leaders within a few ticks, before their first entries spread: the interleavings
    // of Figure 8 of the Raft paper need exactly that, and uniform faults almost never produce them.
    this.newLeaderFaultProbability = this.faultRandom.chance(0.5) ? 0.5 : 0;
    let size = 3 + this.faultRandom.nextInt(3);
    if (this.faultRandom.chance(0.25)) {
      // The "Figure 8" profile: three members, one entry per message, and almost every new leader hit early.
      size = 3;
      this.maxEntriesPerMessage = 1;
      this.newLeaderFaultProbability = 0.8;
    }
    const members: Member[] = [];
    for (let id = 1; id <= size; id++) {
      members.push({ id, role: "voter", priority: 1 + this.faultRandom.nextInt(3) });
    }
    this.initialConfiguration = { members };
    this.committedConfiguration = { index: 1, configuration: this.initialConfiguration };
    this.nextMemberId = size + 1;
    for (const member of members) this.addMember(member.id, true);
    this.keys = Array.from({ length: 3 + this.clientRandom.nextInt(3) }, (_, index) => `k${index}`);
    for (let id = 0; id < 3; id++) this.clients.push({ id, operation: null, member: null, nextAt: 0, sequence: 0 });
    this.network.faults = {
      dropProbability: this.faultRandom.chance(0.3) ? 0 : this.faultRandom.nextInt(10) / 100,
      duplicateProbability: this.faultRandom.nextInt(5) / 100,
      snapshotCorruptionProbability: this.faultRandom.chance(0.3) ? 0.05 : 0,
      minDelayTicks: 1,
      maxDelayTicks: 1 + this.faultRandom.nextInt(5),
    };
    this.diskErrorProbability = this.faultRandom.chance(0.5) ? 0.002 : 0;
    this.forceAt = this.faultRandom.chance(0.15)
      ? Math.floor(options.chaosTicks / 3) + this.faultRandom.nextInt(Math.max(1, Math.floor(options.chaosTicks / 3)))
      : null;
  }

  /** Runs to completion and reports violations (at most the first, since a run stops there). */
  run(): SimulationResult {
    const violations: string[] = [];
    try {
      for (let tick = 0; tick < this.options.chaosTicks; tick++) this.step();
      this.heal();
      const healedAt = this.clock.now();
      while (!this.livenessReached(healedAt)) {
        if (this.clock.now() - healedAt > this.options.livenessBoundTicks) {
          const leaders = this.runningMembers().filter((member) => member.node?.status().role === "leader");
          throw new Violation(
            `liveness: no write invoked after faults stopped (tick ${healedAt}) committed within ` +
              `${this.options.livenessBoundTicks} ticks; leaders: [${leaders.map((member) => member.id).join(",")}]`,
          );
        }
        this.step();
      }
      this.finalChecks();
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      const kind = error instanceof Violation ? "" : "core assertion: ";
      violations.push(`tick ${this.clock.now()}: ${kind}${message}`);
    }
    let inconclusive = 0;
    if (violations.length === 0) {
      const verdict = this.checkLinearizability();
      inconclusive = verdict.inconclusive;
      if (verdict.violation) violations.push(`linearizability: ${verdict.violation}`);
    }
    return {
      seed: this.options.seed,
      violations,
      ticks: this.clock.now(),
      committedEntries: this.appliedRegistry.size,
      operations: this.history.length,
      leadersElected: this.leadersElected,
      messagesSent: this.network.sent,
      membershipChanges: this.membershipChanges,
      forcedReconfigurations: this.forcedReconfigurations,
      snapshotsInstalled: this.snapshotsInstalled,
      learnersPromoted: this.learnersPromoted,
      crashes: this.crashes,
      restartsBehindApplied: this.restartsBehindApplied,
      inconclusiveHistories: inconclusive,
    };
  }

  // ---------------------------------------------------------------------------------------------------------------
  // The tick loop

  private step(): void {
    const now = this.clock.advance();
    if (this.chaos) this.injectFaults(now);
    for (const member of this.members.values()) {
      if (member.restartAt !== null && member.restartAt <= now && !member.decommissioned) this.restart(member);
    }
    for (const message of this.network.deliverDue(now)) {
      const member = this.members.get(message.to);
      if (!member?.node || member.decommissioned) continue;
      member.node.step(message);
    }
    for (const member of this.runningMembers()) member.node?.tick();
    for (const member of this.runningMembers()) this.processReady(member);
    this.serveReads();
    this.driveClients(now);
    this.driveMembership(now);
    this.compactLogs(now);
    this.checkLeaders();
  }

  private runningMembers(): SimulatedMember[] {
    return [...this.members.values()].filter((member) => member.node !== null && !member.decommissioned);
  }

  private processReady(member: SimulatedMember): void {
    const now = this.clock.now();
    for (let round = 0; round < MAX_READY_PER_TICK; round++) {
      if (!member.node) return;
      if (member.inFlight) {
        if (member.inFlight.durableAt > now) return;
        const ready = member.inFlight.ready;
        member.inFlight = null;
        this.complete(member, ready);
        continue;
      }
      const ready = member.node.ready();
      if (!ready) return;
      // A leader's appends leave before its own write starts, so a crash or a disk error while the write is in flight
      // leaves followers holding entries the leader lost: the case the "count only durable copies" rule guards.
      for (const message of ready.messagesBeforePersist) this.network.send(message, now);
      // A batch that need not sync writes nothing, so nothing waits for a disk.
      const latency = !ready.mustSync || this.faultRandom.chance(0.7) ? 0 : 1 + this.faultRandom.nextInt(3);
      if (latency === 0) this.complete(member, ready);
      else {
        member.inFlight = { ready, durableAt: now + latency };
        return;
      }
    }
  }

  /** The ready's writes become durable: check them, persist them, send what waited for them, apply, advance. */
  private complete(member: SimulatedMember, ready: Ready): void {
    const node = member.node;
    if (!node) return;
    if (ready.mustSync && this.chaos && this.faultRandom.chance(this.diskErrorProbability)) {
      // An injected write error: the member fails stop, losing the batch, and restarts later from its disk.
      this.crash(member, 20 + this.faultRandom.nextInt(60));
      return;
    }
    const disk = member.disk;
    const receipt = ready.snapshotReceipt;
    if (receipt && this.chaos && this.faultRandom.chance(TORN_SNAPSHOT_WRITE_PROBABILITY)) {
      // The broker's storage writes a batch's snapshot chunks, the installation of a complete snapshot and the rest
      // of the batch in separate commits: a crash may leave any prefix of them durable. The restarted member must
      // resume the receipt where its durable bytes end (or install the snapshot they complete).
      disk.receiveSnapshotChunksSync({
        ...receipt,
        chunks: receipt.chunks.slice(0, this.faultRandom.nextInt(receipt.chunks.length + 1)),
      });
      if (
        ready.snapshot &&
        disk.incomingSnapshot()?.receivedBytes === ready.snapshot.sizeBytes &&
        this.faultRandom.chance(0.5)
      ) {
        disk.finishSnapshotReceiveSync();
      }
      this.crash(member, 10 + this.faultRandom.nextInt(60));
      return;
    }
    if (receipt) disk.receiveSnapshotChunksSync(receipt);
    if (ready.snapshot) {
      const installed = disk.finishSnapshotReceiveSync();
      if (installed.index !== ready.snapshot.index || installed.term !== ready.snapshot.term) {
        throw new Violation(`member ${member.id} installed snapshot ${installed.index}, not ${ready.snapshot.index}`);
      }
      this.snapshotsInstalled++;
    }
    this.checkAndRecordEntries(member, ready.entriesToPersist);
    // Like the production driver, a batch whose only change is the (volatile) commit index is not written: the next
    // synced batch carries the commit index, and a crash before then restarts from an older one.
    if (ready.mustSync) disk.appendSync(ready.entriesToPersist, ready.hardState);
    else if (ready.entriesToPersist.length > 0 || ready.snapshot || receipt) {
      throw new Violation(`member ${member.id} was handed entries or a snapshot in a batch that need not sync`);
    }
    if (ready.compaction) disk.installSnapshotSync(compactionSnapshot(ready.compaction));
    const now = this.clock.now();
    for (const message of ready.messages) this.network.send(message, now);
    if (ready.snapshot) {
      // The core hands out only the metadata: the state machine is restored from the snapshot just installed.
      const stored = disk.snapshot();
      if (stored?.metadata.index !== ready.snapshot.index) {
        throw new Violation(`member ${member.id} restores snapshot ${ready.snapshot.index} but stored another`);
      }
      member.machine.restore(stored.data, ready.snapshot.index);
      this.failWritesUpTo(member, ready.snapshot.index);
    }
    for (const entry of ready.committedEntries) this.apply(member, entry);
    for (const state of ready.readStates) {
      const read = member.reads.get(state.context);
      if (read) read.index = state.index;
    }
    for (const context of ready.droppedReads) {
      const read = member.reads.get(context);
      if (read) this.finish(read.operation, "failed", null);
      member.reads.delete(context);
    }
    node.advance(ready);
    if (
      !ready.mustSync &&
      this.chaos &&
      member.machine.appliedIndex > disk.hardState().commitIndex &&
      this.faultRandom.chance(CRASH_AFTER_UNSYNCED_APPLY_PROBABILITY)
    ) {
      this.crash(member, 10 + this.faultRandom.nextInt(60));
    }
  }

  private apply(member: SimulatedMember, entry: Entry): void {
    const content = describe(entry);
    const known = this.appliedRegistry.get(entry.index);
    if (known && (known.term !== entry.term || known.content !== content)) {
      throw new Violation(
        `State Machine Safety: member ${member.id} applied (${entry.index}, term ${entry.term}) but another member ` +
          `applied term ${known.term} there`,
      );
    }
    if (!known) this.appliedRegistry.set(entry.index, { term: entry.term, content });
    member.machine.apply(entry);
    if (entry.kind === "configuration" && entry.index > this.committedConfiguration.index) {
      const previous = this.committedConfiguration.configuration;
      this.committedConfiguration = { index: entry.index, configuration: decodeConfiguration(entry.data) };
      this.membershipChanges++;
      for (const voter of votersOf(this.committedConfiguration.configuration)) {
        if (previous.members.some((member) => member.id === voter && member.role === "learner")) {
          this.learnersPromoted++;
        }
      }
      this.onConfigurationCommitted();
    }
    const write = member.writes.get(entry.index);
    if (write) {
      member.writes.delete(entry.index);
      const ours =
        entry.kind === "normal" && entry.term === write.term && decodeWrite(entry.data).value === write.value;
      if (ours) {
        this.acknowledged.push({ index: entry.index, term: entry.term, value: write.value });
        this.finish(write.operation, "ok", this.clock.now());
      } else {
        // Another entry was committed at that index, so this write's entry was overwritten: it never happened.
        this.finish(write.operation, "failed", null);
      }
    }
  }

  private failWritesUpTo(member: SimulatedMember, index: number): void {
    for (const [writeIndex, write] of member.writes) {
      if (writeIndex <= index) {
        this.finish(write.operation, "indeterminate", null);
        member.writes.delete(writeIndex);
      }
    }
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Checkers

  /**
   * Log Matching, checked inductively: every (index, term) ever persisted anywhere must carry the same content and
   * follow the same previous term. Two logs with equal (index, term) then agree on everything before it.
   */
  private checkAndRecordEntries(member: SimulatedMember, entries: readonly Entry[]): void {
    let previousTerm: number | null = null;
    for (const entry of entries) {
      const before = previousTerm ?? member.disk.term(entry.index - 1);
      if (before === null) {
        throw new Violation(`Log Matching: member ${member.id} persists entry ${entry.index} after a gap`);
      }
      const key = `${entry.index}:${entry.term}`;
      const content = describe(entry);
      const known = this.entryRegistry.get(key);
      if (known && (known.content !== content || known.previousTerm !== before)) {
        throw new Violation(
          `Log Matching: entry (${entry.index}, term ${entry.term}) on member ${member.id} differs from the same ` +
            `index and term elsewhere (previous term ${before} vs ${known.previousTerm})`,
        );
      }
      if (!known) this.entryRegistry.set(key, { content, previousTerm: before });
      previousTerm = entry.term;
    }
  }

  /** Election Safety and Leader Completeness, checked whenever a new leader appears. */
  private checkLeaders(): void {
    for (const member of this.runningMembers()) {
      const status = member.node?.status();
      if (status?.role !== "leader") continue;
      const known = this.leadersByTerm.get(status.term);
      if (known !== undefined && known !== member.id) {
        throw new Violation(`Election Safety: members ${known} and ${member.id} both lead term ${status.term}`);
      }
      if (known === undefined) {
        this.leadersByTerm.set(status.term, member.id);
        this.leadersElected++;
        this.checkLeaderCompleteness(member, status);
        if (this.chaos && this.faultRandom.chance(this.newLeaderFaultProbability)) {
          this.scheduledFaults.push({
            at: this.clock.now() + 1 + this.faultRandom.nextInt(10),
            member: member.id,
            kind: this.faultRandom.chance(0.5) ? "crash" : "isolate",
          });
        }
      }
    }
  }

  private checkLeaderCompleteness(member: SimulatedMember, status: NodeStatus): void {
    const disk = member.disk;
    const snapshotIndex = disk.snapshotIndex();
    for (const [index, applied] of this.appliedRegistry) {
      if (index < snapshotIndex) continue;
      const term = disk.term(index);
      if (term !== applied.term) {
        throw new Violation(
          `Leader Completeness: leader ${member.id} of term ${status.term} lacks committed entry (${index}, term ` +
            `${applied.term}); it holds term ${term}`,
        );
      }
    }
  }

  private finalChecks(): void {
    // Leadership may be moving right now (a priority transfer, a removed leader stepping down): wait for a leader.
    let leader = this.currentLeader();
    for (let tick = 0; !leader && tick < this.options.livenessBoundTicks; tick++) {
      this.step();
      leader = this.currentLeader();
    }
    if (!leader) throw new Violation(`final: no leader within ${this.options.livenessBoundTicks} ticks`);
    // Priority election: in the healthy group a voter of the highest priority must end up leading.
    for (let tick = 0; leader && !this.leadsWithTopPriority(leader); tick++) {
      if (tick > this.options.livenessBoundTicks) {
        const status = leader.node?.status();
        throw new Violation(
          `priority: leader ${leader.id} of term ${status?.term} does not have the highest priority after ` +
            `${this.options.livenessBoundTicks} healthy ticks (${JSON.stringify(status?.configuration.members)})`,
        );
      }
      this.step();
      leader = this.currentLeader() ?? leader;
    }
    for (const write of this.acknowledged) {
      const term = leader.disk.term(write.index);
      const covered = write.index < leader.disk.snapshotIndex();
      if (!covered && term !== write.term) {
        throw new Violation(
          `acknowledged write lost: ${write.value} at (${write.index}, term ${write.term}) is not in the final ` +
            `leader ${leader.id}'s log (term there: ${term})`,
        );
      }
    }
  }

  private checkLinearizability(): { violation: string | null; inconclusive: number } {
    let inconclusive = 0;
    for (const key of this.keys) {
      const operations: RegisterOperation[] = [];
      for (const operation of this.history) {
        if (operation.key !== key) continue;
        if (operation.status === "ok" && operation.respondedAt !== null) {
          operations.push({
            kind: operation.kind,
            value: operation.value,
            invokedAt: operation.invokedAt,
            respondedAt: operation.respondedAt,
            label: `client${operation.client}`,
          });
        } else if (
          operation.kind === "write" &&
          (operation.status === "indeterminate" || operation.status === "pending")
        ) {
          operations.push({
            kind: "write",
            value: operation.value,
            invokedAt: operation.invokedAt,
            respondedAt: Number.POSITIVE_INFINITY,
            label: `client${operation.client}`,
          });
        }
      }
      const result = checkRegister(operations);
      if (result.outcome === "violation") return { violation: `key ${key}: ${result.detail}`, inconclusive };
      if (result.outcome === "unknown") inconclusive++;
    }
    return { violation: null, inconclusive };
  }

  private leadsWithTopPriority(member: SimulatedMember): boolean {
    const status = member.node?.status();
    if (status?.role !== "leader") return false;
    const voters = status.configuration.members.filter((candidate) => candidate.role === "voter");
    const top = Math.max(...voters.map((voter) => voter.priority));
    return voters.some((voter) => voter.id === member.id && voter.priority === top);
  }

  private livenessReached(healedAt: number): boolean {
    return this.history.some(
      (operation) => operation.kind === "write" && operation.status === "ok" && operation.invokedAt >= healedAt,
    );
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Faults

  private injectFaults(now: number): void {
    const random = this.faultRandom;
    if (random.chance(this.crashProbability)) {
      const running = this.runningMembers();
      const leader = this.currentLeader();
      const victim = leader && random.chance(0.5) ? leader : running[random.nextInt(Math.max(1, running.length))];
      if (victim) this.crash(victim, 10 + random.nextInt(150));
    }
    if (random.chance(0.006)) this.changePartitions();
    if (this.forceAt === now) this.forceReconfiguration();
    for (const fault of this.scheduledFaults.filter((scheduled) => scheduled.at === now)) {
      const member = this.members.get(fault.member);
      if (!member?.node || member.decommissioned) continue;
      if (fault.kind === "crash") this.crash(member, 10 + random.nextInt(100));
      else {
        this.network.heal();
        const others = [...this.members.keys()].filter((id) => id !== fault.member);
        this.network.partition([[fault.member], others]);
      }
    }
    if (this.scheduledFaults.length > 0) {
      const remaining = this.scheduledFaults.filter((scheduled) => scheduled.at > now);
      this.scheduledFaults.length = 0;
      this.scheduledFaults.push(...remaining);
    }
  }

  private changePartitions(): void {
    const random = this.faultRandom;
    const ids = [...this.members.values()].filter((member) => !member.decommissioned).map((member) => member.id);
    this.network.heal();
    const choice = random.nextInt(4);
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
      for (let link = 0; link < links; link++) {
        const from = ids[random.nextInt(ids.length)];
        const to = ids[random.nextInt(ids.length)];
        if (from !== undefined && to !== undefined && from !== to) this.network.block(from, to);
      }
    }
  }

  private heal(): void {
    this.chaos = false;
    this.network.heal();
    this.network.faults = {
      dropProbability: 0,
      duplicateProbability: 0,
      snapshotCorruptionProbability: 0,
      minDelayTicks: 1,
      maxDelayTicks: 2,
    };
    for (const member of this.members.values()) {
      if (!member.node && !member.decommissioned) this.restart(member);
    }
  }

  private crash(member: SimulatedMember, downTicks: number): void {
    this.crashes++;
    member.appliedBeforeCrash = member.machine.appliedIndex;
    member.node = null;
    member.inFlight = null;
    member.restartAt = this.clock.now() + downTicks;
    this.abandonOperations(member);
  }

  private restart(member: SimulatedMember): void {
    member.restartAt = null;
    const persisted = member.disk.loadSync();
    // A durable commit index lags (the batches that only moved it were never written) but never leads the durable
    // log; the core asserts the latter on start, this records how often a restart resumes behind what was applied.
    if (persisted.hardState.commitIndex > persisted.lastIndex) {
      throw new Violation(
        `member ${member.id} persisted commit index ${persisted.hardState.commitIndex} beyond its durable log ` +
          `(${persisted.lastIndex})`,
      );
    }
    if (persisted.hardState.commitIndex < member.appliedBeforeCrash) this.restartsBehindApplied++;
    member.machine = new KeyValueStateMachine();
    const snapshot = member.disk.snapshot();
    if (snapshot) member.machine.restore(snapshot.data, snapshot.metadata.index);
    member.node = this.createNode(member, persisted);
    if (this.pendingForce && votersOf(this.pendingForce).includes(member.id)) {
      member.node.forceReconfigure(this.pendingForce.members, { acceptDataLoss: true });
    }
  }

  private decommission(member: SimulatedMember): void {
    member.decommissioned = true;
    member.node = null;
    member.inFlight = null;
    member.restartAt = null;
    this.network.dropAllFor(member.id);
    this.abandonOperations(member);
  }

  private abandonOperations(member: SimulatedMember): void {
    for (const write of member.writes.values()) this.finish(write.operation, "indeterminate", null);
    member.writes.clear();
    for (const read of member.reads.values()) this.finish(read.operation, "failed", null);
    member.reads.clear();
  }

  /**
   * Forces the membership to a subset that contains the member with the most up-to-date durable log; every other
   * member is stopped for good.
   */
  private forceReconfiguration(): void {
    const candidates = [...this.members.values()].filter((member) => !member.decommissioned);
    let best: SimulatedMember | null = null;
    for (const member of candidates) {
      if (
        !best ||
        member.disk.lastTerm() > best.disk.lastTerm() ||
        (member.disk.lastTerm() === best.disk.lastTerm() && member.disk.lastIndex() > best.disk.lastIndex())
      ) {
        best = member;
      }
    }
    if (!best || candidates.length < 2) return;
    const others = shuffle(
      candidates.filter((member) => member !== best),
      this.faultRandom,
    );
    const keep = [best, ...others.slice(0, this.faultRandom.nextInt(others.length))];
    const members: Member[] = keep
      .map((member) => ({ id: member.id, role: "voter" as const, priority: 1 + this.faultRandom.nextInt(3) }))
      .sort((left, right) => left.id - right.id);
    this.goal = null;
    for (const member of candidates) if (!keep.includes(member)) this.decommission(member);
    this.forgetLeftOutHistory(keep);
    this.pendingForce = { members };
    this.forcedReconfigurations++;
    for (const member of keep) member.node?.forceReconfigure(members, { acceptDataLoss: true });
  }

  /**
   * The forced members elect among themselves without the members left out, so a forced leader may reuse a term
   * in which a left-out member led, and append at indexes where only left-out members hold that term's entries.
   * Both are harmless (nobody who remains holds those entries), so the checkers forget what only the left-out
   * members hold: their leaderships and the (index, term) records no remaining member has on its disk.
   */
  private forgetLeftOutHistory(keep: readonly SimulatedMember[]): void {
    for (const [term, leader] of [...this.leadersByTerm]) {
      if (!keep.some((member) => member.id === leader)) this.leadersByTerm.delete(term);
    }
    for (const key of [...this.entryRegistry.keys()]) {
      const [index, term] = key.split(":").map(Number) as [number, number];
      if (!keep.some((member) => member.disk.term(index) === term)) this.entryRegistry.delete(key);
    }
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Workload

  private driveClients(now: number): void {
    const timeoutTicks = 30 * this.electionTimeoutTicks;
    for (const client of this.clients) {
      const operation = client.operation;
      if (operation && operation.status === "pending" && now - operation.invokedAt > timeoutTicks) {
        // The client gives up: the write may or may not have happened; an unanswered read constrains nothing.
        const member = client.member === null ? undefined : this.members.get(client.member);
        if (member) {
          for (const [index, write] of member.writes) if (write.operation === operation) member.writes.delete(index);
          for (const [context, read] of member.reads) if (read.operation === operation) member.reads.delete(context);
        }
        this.finish(operation, operation.kind === "write" ? "indeterminate" : "failed", null);
      }
      if (client.operation && client.operation.status === "pending") continue;
      client.operation = null;
      if (now < client.nextAt) continue;
      const leaders = this.runningMembers().filter((member) => member.node?.status().role === "leader");
      const target = leaders[this.clientRandom.nextInt(Math.max(1, leaders.length))];
      if (!target?.node) {
        client.nextAt = now + 3;
        continue;
      }
      const key = this.keys[this.clientRandom.nextInt(this.keys.length)] ?? "k0";
      client.sequence++;
      if (this.clientRandom.chance(0.5)) {
        const value = `c${client.id}.${client.sequence}`;
        const result = target.node.propose(encodeWrite({ key, value }));
        if (!result.accepted) {
          client.nextAt = now + 2;
          continue;
        }
        const operation: ClientOperation = {
          client: client.id,
          kind: "write",
          key,
          value,
          invokedAt: now,
          respondedAt: null,
          status: "pending",
        };
        this.history.push(operation);
        target.writes.set(result.index, { operation, term: result.term, value });
        client.operation = operation;
      } else {
        const context = `c${client.id}.${client.sequence}`;
        const result = target.node.readIndex(context);
        if (!result.accepted) {
          client.nextAt = now + 2;
          continue;
        }
        const operation: ClientOperation = {
          client: client.id,
          kind: "read",
          key,
          value: null,
          invokedAt: now,
          respondedAt: null,
          status: "pending",
        };
        this.history.push(operation);
        target.reads.set(context, { operation, index: null });
        client.operation = operation;
      }
      client.member = target.id;
      client.nextAt = now + this.clientRandom.nextInt(4);
    }
  }

  private serveReads(): void {
    const now = this.clock.now();
    for (const member of this.runningMembers()) {
      for (const [context, read] of member.reads) {
        if (read.index === null || member.machine.appliedIndex < read.index) continue;
        read.operation.value = member.machine.read(read.operation.key);
        this.finish(read.operation, "ok", now);
        member.reads.delete(context);
      }
    }
  }

  private finish(operation: ClientOperation, status: ClientOperation["status"], respondedAt: number | null): void {
    if (operation.status !== "pending") return;
    operation.status = status;
    operation.respondedAt = respondedAt;
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Membership changes

  private driveMembership(now: number): void {
    if (!this.goal && this.chaos && !this.pendingForce && this.faultRandom.chance(0.01)) this.pickGoal(now);
    const state = this.goal;
    if (!state) return;
    const configuration = this.committedConfiguration.configuration;
    const goal = state.goal;
    const member = configuration.members.find((candidate) => candidate.id === goal.member);
    if (goal.kind === "join" && state.stage === "add" && member) state.stage = "promote";
    const done =
      (goal.kind === "join" && member?.role === "voter") ||
      (goal.kind === "remove" && !member) ||
      (goal.kind === "priority" && member?.priority === goal.priority);
    if (done || now > state.deadline) {
      this.goal = null;
      return;
    }
    if (now < state.nextTry) return;
    state.nextTry = now + 5;
    const leader = this.currentLeader();
    if (!leader?.node) return;
    if (goal.kind === "join") {
      leader.node.proposeConfigurationChange(
        state.stage === "add"
          ? { type: "addLearner", member: goal.member, priority: goal.priority }
          : { type: "promote", member: goal.member },
      );
    } else if (goal.kind === "remove") {
      leader.node.proposeConfigurationChange({ type: "remove", member: goal.member });
    } else {
      leader.node.proposeConfigurationChange({ type: "setPriority", member: goal.member, priority: goal.priority });
    }
  }

  private pickGoal(now: number): void {
    const configuration = this.committedConfiguration.configuration;
    const voters = votersOf(configuration);
    const choice = this.faultRandom.nextInt(3);
    const deadline = now + 60 * this.electionTimeoutTicks;
    if (choice === 0 && configuration.members.length < MAX_MEMBERS) {
      const id = this.nextMemberId++;
      this.addMember(id, false);
      this.goal = {
        goal: { kind: "join", member: id, priority: 1 + this.faultRandom.nextInt(3) },
        stage: "add",
        deadline,
        nextTry: now,
      };
    } else if (choice === 1 && voters.length > 3) {
      const member = configuration.members[this.faultRandom.nextInt(configuration.members.length)];
      if (member) this.goal = { goal: { kind: "remove", member: member.id }, stage: "change", deadline, nextTry: now };
    } else {
      const voter = voters[this.faultRandom.nextInt(voters.length)];
      if (voter !== undefined) {
        this.goal = {
          goal: { kind: "priority", member: voter, priority: 1 + this.faultRandom.nextInt(3) },
          stage: "change",
          deadline,
          nextTry: now,
        };
      }
    }
  }

  private onConfigurationCommitted(): void {
    const configuration = this.committedConfiguration.configuration;
    if (this.pendingForce && sameConfiguration(this.pendingForce, configuration)) this.pendingForce = null;
    if (this.pendingForce) return;
    for (const member of this.members.values()) {
      const joining = this.goal?.goal.kind === "join" && this.goal.goal.member === member.id;
      const present = configuration.members.some((candidate) => candidate.id === member.id);
      if (!present && !joining && !member.decommissioned) this.decommission(member);
    }
  }

  private currentLeader(): SimulatedMember | null {
    let best: SimulatedMember | null = null;
    let bestTerm = -1;
    for (const member of this.runningMembers()) {
      const status = member.node?.status();
      if (status?.role === "leader" && status.term > bestTerm) {
        best = member;
        bestTerm = status.term;
      }
    }
    return best;
  }

  private addMember(id: MemberId, founding: boolean): void {
    const member: SimulatedMember = {
      id,
      disk: new SimulatedDisk(),
      random: this.random.fork(),
      founding,
      node: null,
      machine: new KeyValueStateMachine(),
      inFlight: null,
      restartAt: null,
      appliedBeforeCrash: 0,
      decommissioned: false,
      writes: new Map(),
      reads: new Map(),
    };
    this.members.set(id, member);
    member.node = this.createNode(member, member.disk.loadSync());
  }

  private createNode(member: SimulatedMember, persisted: ReturnType<SimulatedDisk["loadSync"]>): RaftNode {
    return new RaftNode({
      id: member.id,
      storage: member.disk,
      persisted,
      bootstrap: member.founding ? this.initialConfiguration : null,
      electionTimeoutTicks: this.electionTimeoutTicks,
      heartbeatTimeoutTicks: this.heartbeatTimeoutTicks,
      maxInflightMessages: this.maxInflightMessages,
      maxInflightBytes: 4096,
      maxEntriesPerMessage: this.maxEntriesPerMessage,
      maxBytesPerMessage: 1024,
      snapshotChunkBytes: 64,
      snapshotWindowChunks: this.snapshotWindowChunks,
      snapshotResendTicks: this.snapshotResendTicks,
      maxCommittedEntriesPerReady: 32,
      maxPendingReads: 64,
      maxUncommittedEntries: 256,
      promotionLagEntries: 16,
      promotionStableTicks: 2 * this.heartbeatTimeoutTicks,
      random: member.random,
      preVote: true,
      checkQuorum: true,
    });
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Log compaction

  private compactLogs(now: number): void {
    if (now % 25 !== 0) return;
    for (const member of this.runningMembers()) {
      const node = member.node;
      if (!node || member.inFlight) continue;
      const applied = member.machine.appliedIndex;
      if (node.status().appliedIndex !== applied) continue;
      if (applied - member.disk.snapshotIndex() < 40) continue;
      node.compact(applied, member.machine.serialize());
    }
  }
}

/** Content of an entry as a comparable string. */
function describe(entry: Entry): string {
  return `${entry.kind}:${Buffer.from(entry.data.buffer, entry.data.byteOffset, entry.data.byteLength).toString("latin1")}`;
}

function shuffle<T>(items: readonly T[], random: SeededRandom): T[] {
  const result = [...items];
  for (let position = result.length - 1; position > 0; position--) {
    const other = random.nextInt(position + 1);
    const current = result[position] as T;
    result[position] = result[other] as T;
    result[other] = current;
  }
  return result;
}

/** Runs one seed with the default sizing. */
export function runSeed(seed: number, overrides: Partial<SimulationOptions> = {}): SimulationResult {
  return new Simulation({ seed, chaosTicks: 600, livenessBoundTicks: 600, ...overrides }).run();
}
