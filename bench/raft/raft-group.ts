/**
 * A 3-member Raft group in one process for the benchmark: each member is a `RaftNode` with its own LMDB storage in
 * its own directory. A driver loop per member follows the `Ready` contract (send the leader's early appends, persist
 * durably, then send the rest, then apply, then advance), messages are handed over in memory, and a timer ticks all
 * members. A proposal is acknowledged when
 * the leader applies its entry, which the core only allows once a quorum holds it durably.
 */
import { join } from "node:path";
import type { Ready } from "../../src/cluster/raft/index.js";
import { type Configuration, type Message, RaftNode, SeededRandom } from "../../src/cluster/raft/index.js";
import { MemberStorage } from "../../src/cluster/raft/storage/member-storage.js";

/** Options of the in-process group. */
export interface RaftGroupOptions {
  readonly directory: string;
  readonly memberCount: number;
  readonly tickIntervalMs: number;
  readonly seed: number;
}

interface Waiter {
  readonly term: number;
  readonly leaderId: number;
  readonly resolve: () => void;
  readonly reject: (error: Error) => void;
}

interface GroupMember {
  readonly id: number;
  readonly node: RaftNode;
  readonly storage: MemberStorage;
  readonly inbox: Message[];
  pendingTicks: number;
  wake: (() => void) | null;
  loop: Promise<void>;
}

/** Refusals after which a proposal is retried once a leader is ready; anything else is an error. */
const RETRIABLE_REFUSALS = new Set(["notLeader", "leaderNotReady", "transferringLeadership", "tooManyUncommitted"]);

/** Attempts a proposal makes while waiting for a ready leader before giving up. */
const MAX_PROPOSAL_ATTEMPTS = 500;

/** Most messages a member's inbox may hold; the core's flow control keeps it far below this. */
const MAX_INBOX_MESSAGES = 100_000;

/** The leader that accepted a proposal lost leadership before applying it; the proposal's outcome is unknown. */
class LeadershipLostError extends Error {}

/** Proposals of different leaders may share an index, so waiters are keyed by both. */
const waiterKey = (leaderId: number, index: number): string => `${leaderId}/${index}`;

const sleep = (durationMs: number) => new Promise((resolve) => setTimeout(resolve, durationMs));

/** A running in-process group with durable LMDB storage. */
export class InProcessRaftGroup {
  private readonly members = new Map<number, GroupMember>();
  /** Proposals waiting for their entry to be applied, keyed by `waiterKey(leader, index)`. */
  private readonly waiters = new Map<string, Waiter>();
  private running = true;
  private failure: Error | null = null;
  private ticker: NodeJS.Timeout | null = null;

  private constructor(private readonly options: RaftGroupOptions) {}

  /** Opens storage for every member, bootstraps the group and starts the driver loops and the tick timer. */
  static async start(options: RaftGroupOptions): Promise<InProcessRaftGroup> {
    const group = new InProcessRaftGroup(options);
    const ids = Array.from({ length: options.memberCount }, (_, position) => position + 1);
    // Member 1 has the highest priority, so the group settles with it as leader.
    const configuration: Configuration = {
      members: ids.map((id) => ({ id, role: "voter" as const, priority: id === 1 ? 3 : 1 })),
    };
    for (const id of ids) {
      const storage = MemberStorage.open({ directory: join(options.directory, `member-${id}`) });
      const node = new RaftNode({
        id,
        storage,
        persisted: await storage.load(),
        bootstrap: configuration,
        electionTimeoutTicks: 20,
        heartbeatTimeoutTicks: 3,
        maxInflightMessages: 64,
        maxInflightBytes: 8 * 1024 * 1024,
        maxEntriesPerMessage: 1024,
        maxBytesPerMessage: 1024 * 1024,
        snapshotChunkBytes: 1024 * 1024,
        snapshotWindowChunks: 4,
        snapshotResendTicks: 20,
        maxCommittedEntriesPerReady: 4096,
        maxPendingReads: 64,
        maxUncommittedEntries: 8192,
        promotionLagEntries: 1024,
        promotionStableTicks: 3,
        random: new SeededRandom(options.seed * 31 + id),
        preVote: true,
        checkQuorum: true,
      });
      group.members.set(id, { id, node, storage, inbox: [], pendingTicks: 0, wake: null, loop: Promise.resolve() });
    }
    for (const member of group.members.values()) {
      member.loop = group.drive(member);
    }
    group.ticker = setInterval(() => {
      for (const member of group.members.values()) {
        member.pendingTicks += 1;
        group.nudge(member);
      }
    }, options.tickIntervalMs);
    return group;
  }

  /** Waits until the highest-priority member leads (or any member, after `timeoutMs`); throws if none does. */
  async waitForLeader(timeoutMs: number): Promise<number> {
    const deadlineMs = performance.now() + timeoutMs;
    let anyLeader: number | null = null;
    while (performance.now() < deadlineMs) {
      this.throwIfFailed();
      anyLeader = this.leader()?.id ?? null;
      if (anyLeader === 1) {
        return anyLeader;
      }
      await sleep(this.options.tickIntervalMs);
    }
    if (anyLeader === null) {
      throw new Error(`no leader elected within ${timeoutMs} ms`);
    }
    return anyLeader;
  }

  /**
   * Proposes `data` and resolves once the leader has applied it (committed on a durable quorum). When the leader
   * loses leadership first, the proposal is made again (the benchmark's entries are opaque, so a duplicate is
   * harmless).
   */
  async propose(data: Uint8Array): Promise<void> {
    for (let attempt = 0; attempt < MAX_PROPOSAL_ATTEMPTS; attempt += 1) {
      this.throwIfFailed();
      const leader = this.leader();
      if (leader !== null) {
        const result = leader.node.propose(data);
        if (result.accepted) {
          const committed = new Promise<void>((resolve, reject) => {
            this.waiters.set(waiterKey(leader.id, result.index), {
              term: result.term,
              leaderId: leader.id,
              resolve,
              reject,
            });
          });
          this.nudge(leader);
          try {
            return await committed;
          } catch (error) {
            if (!(error instanceof LeadershipLostError)) {
              throw error;
            }
            continue;
          }
        }
        if (!RETRIABLE_REFUSALS.has(result.reason)) {
          throw new Error(`proposal refused: ${result.reason}`);
        }
      }
      await sleep(this.options.tickIntervalMs);
    }
    throw new Error(`no leader accepted the proposal after ${MAX_PROPOSAL_ATTEMPTS} attempts`);
  }

  /** Stops the timer and the driver loops, fails waiting proposals, and closes every member's storage. */
  async stop(): Promise<void> {
    this.running = false;
    if (this.ticker !== null) {
      clearInterval(this.ticker);
    }
    for (const member of this.members.values()) {
      this.nudge(member);
    }
    await Promise.all([...this.members.values()].map((member) => member.loop));
    this.failWaiters(new Error("group stopped"));
    try {
      this.throwIfFailed();
      this.verifyCommittedPrefixesAgree();
    } finally {
      await Promise.all([...this.members.values()].map((member) => member.storage.close()));
    }
  }

  /**
   * Checks that every member durably holds the same terms for the entries all of them consider committed (the log
   * matching property), so a fast but wrong driver cannot produce a figure.
   */
  private verifyCommittedPrefixesAgree(): void {
    const members = [...this.members.values()];
    // A follower may know an index is committed before the entry is durable on it, hence the stable bound.
    const commonCommitIndex = Math.min(
      ...members.map((member) => {
        const status = member.node.status();
        return Math.min(status.commitIndex, status.stableLastIndex);
      }),
    );
    for (let index = 1; index <= commonCommitIndex; index += 1) {
      const terms = new Set(members.map((member) => member.storage.term(index)));
      if (terms.size !== 1 || terms.has(null)) {
        throw new Error(`invariant violated: members disagree on committed entry ${index} (terms ${[...terms]})`);
      }
    }
  }

  private leader(): GroupMember | null {
    for (const member of this.members.values()) {
      if (member.node.status().role === "leader") {
        return member;
      }
    }
    return null;
  }

  private nudge(member: GroupMember): void {
    const wake = member.wake;
    member.wake = null;
    wake?.();
  }

  private throwIfFailed(): void {
    if (this.failure !== null) {
      throw this.failure;
    }
  }

  private failWaiters(error: Error): void {
    for (const waiter of this.waiters.values()) {
      waiter.reject(error);
    }
    this.waiters.clear();
  }

  /** Puts messages into their recipients' inboxes and wakes the recipients. */
  private deliver(messages: readonly Message[]): void {
    for (const message of messages) {
      const recipient = this.members.get(message.to);
      if (recipient === undefined) {
        continue;
      }
      if (recipient.inbox.length >= MAX_INBOX_MESSAGES) {
        throw new Error(`invariant violated: inbox of member ${recipient.id} exceeds ${MAX_INBOX_MESSAGES} messages`);
      }
      recipient.inbox.push(message);
      this.nudge(recipient);
    }
  }

  /** The driver loop of one member. */
  private async drive(member: GroupMember): Promise<void> {
    try {
      while (this.running) {
        for (; member.pendingTicks > 0; member.pendingTicks -= 1) {
          member.node.tick();
        }
        for (const message of member.inbox.splice(0)) {
          member.node.step(message);
        }
        const ready = member.node.ready();
        if (ready === null) {
          await new Promise<void>((resolve) => {
            member.wake = resolve;
          });
          continue;
        }
        await this.handleReady(member, ready);
      }
    } catch (error) {
      this.failure = error instanceof Error ? error : new Error(String(error));
      this.running = false;
      this.failWaiters(this.failure);
    }
  }

  private async handleReady(member: GroupMember, ready: Ready): Promise<void> {
    // A leader's appends and heartbeats go out before its own write, so followers persist in parallel with it (the
    // core counts the leader's own copy only after `advance`).
    this.deliver(ready.messagesBeforePersist);
    // Durability first for the rest: nothing below (other messages, acknowledgements) may happen before these writes
    // are synced.
    // Received snapshot chunks are written as they arrive; a complete snapshot is then verified and installed.
    if (ready.snapshotReceipt !== null) {
      await member.storage.receiveSnapshotChunks(ready.snapshotReceipt);
    }
    if (ready.snapshot !== null) {
      await member.storage.finishSnapshotReceive();
    }
    // A batch that need not sync changes only the (volatile) commit index: it is not written, so applying and
    // answering do not wait for one more durable commit; the next synced batch carries the commit index to disk.
    if (ready.mustSync && (ready.entriesToPersist.length > 0 || ready.hardState !== null)) {
      await member.storage.append(ready.entriesToPersist, ready.hardState);
    }
    if (ready.compaction !== null) {
      await member.storage.installSnapshot(ready.compaction);
    }
    this.deliver(ready.messages);
    const isLeader = member.node.status().role === "leader";
    for (const entry of ready.committedEntries) {
      const key = waiterKey(member.id, entry.index);
      const waiter = this.waiters.get(key);
      if (waiter !== undefined) {
        this.waiters.delete(key);
        if (waiter.term === entry.term) {
          waiter.resolve();
        } else {
          waiter.reject(new LeadershipLostError(`entry ${entry.index} was replaced by one of term ${entry.term}`));
        }
      }
    }
    if (!isLeader) {
      // A member that no longer leads cannot acknowledge the proposals it accepted; their outcome is unknown.
      for (const [key, waiter] of this.waiters) {
        if (waiter.leaderId === member.id) {
          this.waiters.delete(key);
          waiter.reject(new LeadershipLostError(`member ${member.id} lost leadership`));
        }
      }
    }
    member.node.advance(ready);
  }
}
