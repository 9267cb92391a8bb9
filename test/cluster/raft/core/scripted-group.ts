/**
 * A small, fully scripted driver for unit tests of the core: members exchange messages instantly (unless blocked),
 * persist synchronously to in-memory disks and apply committed entries to a list. Tests decide every tick.
 */
import type { Message } from "../../../../src/cluster/raft/core/messages.js";
import { RaftNode, type RaftNodeOptions } from "../../../../src/cluster/raft/core/raft.js";
import { SeededRandom } from "../../../../src/cluster/raft/core/random.js";
import type { Ready } from "../../../../src/cluster/raft/core/ready.js";
import {
  type Configuration,
  compactionSnapshot,
  type Entry,
  type Member,
  type MemberId,
} from "../../../../src/cluster/raft/types.js";
import { SimulatedDisk } from "../../../simulation/disk.js";

/** One member of a scripted group. */
export interface ScriptedMember {
  readonly id: MemberId;
  readonly disk: SimulatedDisk;
  node: RaftNode | null;
  applied: Entry[];
  readonly reads: { context: string; index: number }[];
  readonly droppedReads: string[];
  readonly founding: boolean;
}

/** Default options for unit tests; individual tests override some. */
export function testOptions(
  overrides: Partial<RaftNodeOptions> = {},
): Omit<RaftNodeOptions, "id" | "storage" | "persisted"> {
  return {
    bootstrap: null,
    electionTimeoutTicks: 10,
    heartbeatTimeoutTicks: 2,
    maxInflightMessages: 4,
    maxInflightBytes: 1 << 20,
    maxEntriesPerMessage: 64,
    maxBytesPerMessage: 1 << 20,
    snapshotChunkBytes: 16,
    snapshotWindowChunks: 4,
    snapshotResendTicks: 10,
    maxCommittedEntriesPerReady: 1024,
    maxPendingReads: 16,
    maxUncommittedEntries: 1000,
    promotionLagEntries: 0,
    promotionStableTicks: 2,
    random: new SeededRandom(1),
    preVote: true,
    checkQuorum: true,
    ...overrides,
  };
}

/** A group of members wired together by an instant, scriptable network. */
export class ScriptedGroup {
  readonly members = new Map<MemberId, ScriptedMember>();
  private readonly blocked = new Set<string>();
  private readonly dropFilter: ((message: Message) => boolean)[] = [];
  readonly delivered: Message[] = [];
  private readonly configuration: Configuration;

  constructor(
    members: readonly Member[],
    private readonly overrides: Partial<RaftNodeOptions> = {},
  ) {
    this.configuration = { members };
    for (const member of members) this.add(member.id, true);
  }

  /** Adds a member process (founding members bootstrap the initial configuration). */
  add(id: MemberId, founding: boolean): ScriptedMember {
    const member: ScriptedMember = {
      id,
      disk: new SimulatedDisk(),
      node: null,
      applied: [],
      reads: [],
      droppedReads: [],
      founding,
    };
    this.members.set(id, member);
    this.start(member);
    return member;
  }

  private start(member: ScriptedMember): void {
    member.node = new RaftNode({
      ...testOptions(this.overrides),
      random: new SeededRandom(member.id * 7919),
      bootstrap: member.founding ? this.configuration : null,
      id: member.id,
      storage: member.disk,
      persisted: member.disk.loadSync(),
    });
    member.applied = [];
  }

  /** The node of a running member. */
  node(id: MemberId): RaftNode {
    const node = this.members.get(id)?.node;
    if (!node) throw new Error(`member ${id} is not running`);
    return node;
  }

  /** Ticks every running member `count` times, delivering messages after each tick. */
  tick(count = 1): void {
    for (let round = 0; round < count; round++) {
      for (const member of this.members.values()) member.node?.tick();
      this.flush();
    }
  }

  /** Processes ready batches and delivers messages until nothing moves. */
  flush(): void {
    for (let round = 0; round < 10_000; round++) {
      let moved = false;
      const outgoing: Message[] = [];
      for (const member of this.members.values()) {
        const ready = member.node?.ready();
        if (!ready) continue;
        moved = true;
        // Delivery is instant but happens after every member persisted, so sending the early messages first only
        // keeps the contract's order; tests of the window before persistence drive a node by hand.
        outgoing.push(...ready.messagesBeforePersist);
        this.persist(member, ready);
        outgoing.push(...ready.messages);
        member.node?.advance(ready);
      }
      for (const message of outgoing) this.deliver(message);
      if (!moved) return;
    }
    throw new Error("scripted group did not quiesce");
  }

  /** Delivers one message now (if not blocked and the target runs). */
  deliver(message: Message): void {
    if (this.blocked.has(`${message.from}>${message.to}`)) return;
    if (this.dropFilter.some((filter) => filter(message))) return;
    const target = this.members.get(message.to)?.node;
    if (!target) return;
    this.delivered.push(message);
    target.step(message);
  }

  private persist(member: ScriptedMember, ready: Ready): void {
    persistReady(member.disk, ready);
    const snapshot = ready.snapshot;
    if (snapshot) member.applied = member.applied.filter((entry) => entry.index <= snapshot.index);
    member.applied.push(...ready.committedEntries);
    member.reads.push(...ready.readStates);
    member.droppedReads.push(...ready.droppedReads);
  }

  /** Drops messages matching the filter until `clearDrops`. */
  dropWhen(filter: (message: Message) => boolean): void {
    this.dropFilter.push(filter);
  }

  clearDrops(): void {
    this.dropFilter.length = 0;
  }

  /** Cuts every link between `id` and the others, both ways. */
  isolate(id: MemberId): void {
    for (const other of this.members.keys()) {
      if (other === id) continue;
      this.blocked.add(`${id}>${other}`);
      this.blocked.add(`${other}>${id}`);
    }
  }

  /** Blocks one direction only. */
  block(from: MemberId, to: MemberId): void {
    this.blocked.add(`${from}>${to}`);
  }

  heal(): void {
    this.blocked.clear();
  }

  crash(id: MemberId): void {
    const member = this.members.get(id);
    if (member) member.node = null;
  }

  restart(id: MemberId): void {
    const member = this.members.get(id);
    if (member) this.start(member);
  }

  /** The running leader with the highest term, if any. */
  leader(): MemberId | null {
    let best: { id: MemberId; term: number } | null = null;
    for (const member of this.members.values()) {
      const status = member.node?.status();
      if (status?.role === "leader" && (!best || status.term > best.term)) best = { id: member.id, term: status.term };
    }
    return best?.id ?? null;
  }

  /** Ticks until a leader exists (bounded) and returns it. */
  electLeader(maxTicks = 200): MemberId {
    for (let tick = 0; tick < maxTicks; tick++) {
      const leader = this.leader();
      if (leader !== null && this.node(leader).status().commitIndex >= this.node(leader).status().lastIndex) {
        return leader;
      }
      this.tick();
    }
    throw new Error("no leader elected");
  }

  /** Proposes through the current leader and returns the entry index. */
  propose(text: string): number {
    const leader = this.leader();
    if (leader === null) throw new Error("no leader");
    const result = this.node(leader).propose(new TextEncoder().encode(text));
    if (!result.accepted) throw new Error(`proposal refused: ${result.reason}`);
    this.flush();
    return result.index;
  }
}

/** Voters with priority 1 unless given. */
export function voters(...ids: MemberId[]): Member[] {
  return ids.map((id) => ({ id, role: "voter", priority: 1 }));
}

/** Decodes normal entries' data as text. */
export function texts(entries: readonly Entry[]): string[] {
  return entries.filter((entry) => entry.kind === "normal").map((entry) => new TextDecoder().decode(entry.data));
}

/**
 * Writes a ready batch to a simulated disk the way the production driver writes it to its storage: the received
 * snapshot chunks, then the received snapshot (verified and installed), then entries and hard state (unless only the
 * volatile commit index moved), then the compaction.
 */
export function persistReady(disk: SimulatedDisk, ready: Ready): void {
  if (ready.snapshotReceipt) disk.receiveSnapshotChunksSync(ready.snapshotReceipt);
  if (ready.snapshot) {
    const installed = disk.finishSnapshotReceiveSync();
    if (installed.index !== ready.snapshot.index || installed.term !== ready.snapshot.term) {
      throw new Error(`installed snapshot ${installed.index} instead of ${ready.snapshot.index}`);
    }
  }
  if (ready.mustSync) disk.appendSync(ready.entriesToPersist, ready.hardState);
  if (ready.compaction) disk.installSnapshotSync(compactionSnapshot(ready.compaction));
}

/** Persists and advances every ready batch of a lone node; returns the messages it would send. */
export function drain(node: RaftNode, disk: SimulatedDisk): Message[] {
  const messages: Message[] = [];
  for (let round = 0; round < 100; round++) {
    const ready = node.ready();
    if (!ready) return messages;
    messages.push(...ready.messagesBeforePersist);
    persistReady(disk, ready);
    messages.push(...ready.messages);
    node.advance(ready);
  }
  throw new Error("node did not quiesce");
}

/** A lone node on its own disk, bootstrapped with `configuration` unless the disk holds state. */
export function loneNode(
  id: MemberId,
  disk: SimulatedDisk,
  configuration: Configuration | null,
  overrides: Partial<RaftNodeOptions> = {},
): RaftNode {
  return new RaftNode({
    ...testOptions(overrides),
    bootstrap: configuration,
    id,
    storage: disk,
    persisted: disk.loadSync(),
  });
}
