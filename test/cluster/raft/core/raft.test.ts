import { describe, expect, it } from "vitest";
import { votersOf } from "../../../../src/cluster/raft/core/configuration.js";
import type {
  AppendResponseMessage,
  Message,
  SnapshotChunkMessage,
  VoteResponseMessage,
} from "../../../../src/cluster/raft/core/messages.js";
import type { RaftNodeOptions } from "../../../../src/cluster/raft/core/raft.js";
import { SeededRandom } from "../../../../src/cluster/raft/core/random.js";
import type { Ready } from "../../../../src/cluster/raft/core/ready.js";
import { snapshotChecksum } from "../../../../src/cluster/raft/core/snapshot-transfer.js";
import type { Entry, Member } from "../../../../src/cluster/raft/types.js";
import { SimulatedDisk } from "../../../simulation/disk.js";
import { drain, loneNode, persistReady, ScriptedGroup, texts, voters } from "./scripted-group.js";

const encoder = new TextEncoder();

function entry(index: number, term: number, text = `e${index}`): Entry {
  return { index, term, kind: "normal", data: encoder.encode(text) };
}

function voteResponses(messages: readonly Message[]): VoteResponseMessage[] {
  return messages.filter((message): message is VoteResponseMessage => message.type === "voteResponse");
}

function appendResponses(messages: readonly Message[]): AppendResponseMessage[] {
  return messages.filter((message): message is AppendResponseMessage => message.type === "appendResponse");
}

/** A node whose disk already holds the bootstrap entry for voters 1..3 plus `extra` entries at `term`. */
function nodeWithLog(
  extra: readonly Entry[],
  term: number,
  id = 1,
): { node: ReturnType<typeof loneNode>; disk: SimulatedDisk } {
  const disk = new SimulatedDisk();
  const bootstrap = loneNode(id, disk, { members: voters(1, 2, 3) });
  drain(bootstrap, disk);
  disk.appendSync(extra, { term, votedFor: null, commitIndex: 1 });
  return { node: loneNode(id, disk, null), disk };
}

/** Ticks a lone node until it has sent its (pre-)vote requests. */
function tickUntilCampaign(node: ReturnType<typeof loneNode>, disk: SimulatedDisk): Message[] {
  for (let tick = 0; tick < 100; tick++) {
    node.tick();
    const messages = drain(node, disk);
    if (messages.some((message) => message.type === "voteRequest")) return messages;
  }
  throw new Error("node never campaigned");
}

/** Makes member 1 of nodeWithLog leader, with member 2 granting its votes. */
function electLone(node: ReturnType<typeof loneNode>, disk: SimulatedDisk): void {
  const preVote = tickUntilCampaign(node, disk)[0];
  if (!preVote) throw new Error("no pre-vote request");
  node.step({ type: "voteResponse", from: 2, to: 1, term: preVote.term, preVote: true, granted: true });
  drain(node, disk);
  const term = node.status().term;
  node.step({ type: "voteResponse", from: 2, to: 1, term, preVote: false, granted: true });
  drain(node, disk);
  expect(node.status().role).toBe("leader");
}

describe("Raft rules (paper and dissertation)", () => {
  it("Election Safety: a member grants at most one vote per term", () => {
    const disk = new SimulatedDisk();
    const node = loneNode(1, disk, { members: voters(1, 2, 3) });
    drain(node, disk);
    const request = {
      type: "voteRequest",
      to: 1,
      term: 2,
      preVote: false,
      transfer: false,
      lastIndex: 1,
      lastTerm: 1,
    } as const;
    node.step({ ...request, from: 2 });
    node.step({ ...request, from: 3 });
    node.step({ ...request, from: 2 });
    const responses = voteResponses(drain(node, disk));
    expect(responses.map((response) => [response.to, response.granted])).toEqual([
      [2, true],
      [3, false],
      [2, true],
    ]);
    expect(disk.hardState()).toMatchObject({ term: 2, votedFor: 2 });
  });

  it("Election Safety: a group elects at most one leader per term", () => {
    const group = new ScriptedGroup(voters(1, 2, 3, 4, 5));
    const leadersByTerm = new Map<number, Set<number>>();
    for (let tick = 0; tick < 400; tick++) {
      if (tick % 60 === 0) group.isolate(1 + ((tick / 60) % 5));
      if (tick % 60 === 30) group.heal();
      group.tick();
      for (const member of group.members.values()) {
        const status = member.node?.status();
        if (status?.role !== "leader") continue;
        const leaders = leadersByTerm.get(status.term) ?? new Set<number>();
        leaders.add(status.id);
        leadersByTerm.set(status.term, leaders);
      }
    }
    expect(leadersByTerm.size).toBeGreaterThan(1);
    for (const leaders of leadersByTerm.values()) expect(leaders.size).toBe(1);
  });

  it("Election restriction: a member denies its vote to a candidate whose log is less up to date", () => {
    const { node, disk } = nodeWithLog([entry(2, 2)], 2);
    node.step({
      type: "voteRequest",
      from: 3,
      to: 1,
      term: 3,
      preVote: false,
      transfer: false,
      lastIndex: 5,
      lastTerm: 1,
    });
    node.step({
      type: "voteRequest",
      from: 2,
      to: 1,
      term: 3,
      preVote: false,
      transfer: false,
      lastIndex: 2,
      lastTerm: 2,
    });
    const responses = voteResponses(drain(node, disk));
    expect(responses.map((response) => [response.to, response.granted])).toEqual([
      [3, false],
      [2, true],
    ]);
  });

  it("Log Matching: a follower rejects an append whose previous entry does not match and replaces a conflicting suffix", () => {
    const { node, disk } = nodeWithLog([entry(2, 2), entry(3, 2)], 2);
    node.step({
      type: "append",
      from: 3,
      to: 1,
      term: 3,
      prevIndex: 3,
      prevTerm: 3,
      entries: [entry(4, 3)],
      commitIndex: 1,
      acknowledge: true,
    });
    const rejection = appendResponses(drain(node, disk))[0];
    expect(rejection).toMatchObject({ rejected: true, index: 3, hintIndex: 3, hintTerm: 2 });
    node.step({
      type: "append",
      from: 3,
      to: 1,
      term: 3,
      prevIndex: 2,
      prevTerm: 2,
      entries: [entry(3, 3, "new")],
      commitIndex: 1,
      acknowledge: true,
    });
    const accepted = appendResponses(drain(node, disk))[0];
    expect(accepted).toMatchObject({ rejected: false, index: 3 });
    expect(disk.term(3)).toBe(3);
    expect(texts(disk.entries(2, 4))).toEqual(["e2", "new"]);
  });

  it("Leader Append-Only: a leader never overwrites or deletes entries in its own log", () => {
    const group = new ScriptedGroup(voters(1, 2, 3));
    const leader = group.electLeader();
    for (let index = 0; index < 5; index++) group.propose(`v${index}`);
    const disk = group.members.get(leader)?.disk;
    if (!disk) throw new Error("no disk");
    const before = disk.entries(1, disk.lastIndex() + 1);
    const term = group.node(leader).status().term;
    // Stale or hostile rejections asking to back up to index 1 only change what the leader sends, never its log.
    for (const follower of [1, 2, 3].filter((id) => id !== leader)) {
      group.deliver({
        type: "appendResponse",
        from: follower,
        to: leader,
        term,
        rejected: true,
        index: 6,
        hintIndex: 1,
        hintTerm: 1,
      });
    }
    group.flush();
    expect(disk.entries(1, before.length + 1)).toEqual(before);
    expect(group.node(leader).status().role).toBe("leader");
  });

  it("Leader Completeness: a newly elected leader holds every committed entry", () => {
    const group = new ScriptedGroup(voters(1, 2, 3));
    const first = group.electLeader();
    const committed = [1, 2, 3, 4, 5].map((value) => group.propose(`c${value}`));
    const commitIndex = group.node(first).status().commitIndex;
    expect(commitIndex).toBeGreaterThanOrEqual(Math.max(...committed));
    group.crash(first);
    group.tick(100);
    const second = group.leader();
    expect(second).not.toBeNull();
    expect(second).not.toBe(first);
    const newDisk = group.members.get(second ?? 0)?.disk;
    const oldDisk = group.members.get(first)?.disk;
    for (let index = 1; index <= commitIndex; index++) expect(newDisk?.term(index)).toBe(oldDisk?.term(index));
  });

  it("State Machine Safety: every member applies the same entry at each index despite crashes and partitions", () => {
    const group = new ScriptedGroup(voters(1, 2, 3, 4, 5));
    group.electLeader();
    for (let round = 0; round < 12; round++) {
      const leader = group.leader();
      if (leader !== null) {
        try {
          group.propose(`r${round}`);
        } catch {
          // A leader that is stepping down refuses; the next round proposes again.
        }
      }
      if (round % 3 === 0 && leader !== null) group.crash(leader);
      if (round % 3 === 1) group.isolate(1 + (round % 5));
      if (round % 3 === 2) {
        group.heal();
        for (const member of group.members.values()) if (!member.node) group.restart(member.id);
      }
      group.tick(40);
    }
    group.heal();
    group.tick(100);
    const byIndex = new Map<number, string>();
    let compared = 0;
    for (const member of group.members.values()) {
      for (const applied of member.applied) {
        const key = `${applied.term}:${new TextDecoder().decode(applied.data)}`;
        const known = byIndex.get(applied.index);
        if (known !== undefined) {
          expect(key).toBe(known);
          compared++;
        }
        byIndex.set(applied.index, key);
      }
    }
    expect(compared).toBeGreaterThan(10);
  });

  it("commit only current-term entries by counting (Figure 8): an old-term entry on a majority is not committed", () => {
    const { node, disk } = nodeWithLog([entry(2, 2)], 3);
    electLone(node, disk);
    const term = node.status().term;
    expect(term).toBe(4);
    expect(disk.term(3)).toBe(4);
    // Member 2 now holds index 2 (term 2): a majority holds it, but it is not from the current term.
    node.step({ type: "appendResponse", from: 2, to: 1, term, rejected: false, index: 2, hintIndex: 0, hintTerm: 0 });
    drain(node, disk);
    expect(node.status().commitIndex).toBe(1);
    // Once the current term's no-op is on a majority, both commit.
    node.step({ type: "appendResponse", from: 2, to: 1, term, rejected: false, index: 3, hintIndex: 0, hintTerm: 0 });
    drain(node, disk);
    expect(node.status().commitIndex).toBe(3);
  });

  it("durability: a leader counts its own entries towards a commit only after the driver acknowledges them", () => {
    const disk = new SimulatedDisk();
    const node = loneNode(1, disk, { members: voters(1) });
    for (let tick = 0; tick < 50 && node.status().role !== "leader"; tick++) {
      node.tick();
      drain(node, disk);
    }
    expect(node.status().role).toBe("leader");
    const result = node.propose(encoder.encode("x"));
    if (!result.accepted) throw new Error("refused");
    expect(node.status().commitIndex).toBeLessThan(result.index);
    const ready = node.ready();
    expect(ready?.entriesToPersist.map((persisted) => persisted.index)).toContain(result.index);
    expect(node.status().commitIndex).toBeLessThan(result.index);
    if (!ready) throw new Error("no ready");
    disk.appendSync(ready.entriesToPersist, ready.hardState);
    node.advance(ready);
    expect(node.status().commitIndex).toBe(result.index);
  });

  it("fast back-tracking: a follower with a long conflicting suffix is repaired in a few round trips", () => {
    const group = new ScriptedGroup(voters(1, 2, 3));
    const old = group.electLeader();
    const [second, third] = [1, 2, 3].filter((id) => id !== old) as [number, number];
    group.isolate(old);
    for (let index = 0; index < 30; index++) group.node(old).propose(encoder.encode(`lost${index}`));
    group.flush();
    group.tick(60);
    for (let index = 0; index < 40; index++) group.propose(`kept${index}`);
    // The leader that repairs the old one must start probing far beyond the divergence: crash the current leader
    // and let the remaining one win with the old leader's vote.
    const interim = group.leader() ?? 0;
    group.crash(interim);
    group.heal();
    const before = group.delivered.length;
    group.tick(80);
    const repairer = group.leader();
    expect(repairer).toBe(interim === second ? third : second);
    const rejections = group.delivered
      .slice(before)
      .filter((message) => message.type === "appendResponse" && message.from === old && message.rejected);
    // Without hints the leader would back up one index per round trip (about 40 rejections).
    expect(rejections.length).toBeGreaterThan(0);
    expect(rejections.length).toBeLessThanOrEqual(2);
    const applied = texts(group.members.get(old)?.applied ?? []);
    expect(applied).toContain("kept39");
    expect(applied.some((text) => text.startsWith("lost"))).toBe(false);
  });
});

/** Members 2 and 3 tell leader 1 they hold its log up to `index`. */
function acknowledgeFromFollowers(node: ReturnType<typeof loneNode>, term: number, index: number): void {
  for (const from of [2, 3]) {
    node.step({ type: "appendResponse", from, to: 1, term, rejected: false, index, hintIndex: 0, hintTerm: 0 });
  }
}

/** Elects member 1 of nodeWithLog and has members 2 and 3 acknowledge its log, so it replicates to both. */
function electReplicatingLeader(node: ReturnType<typeof loneNode>, disk: SimulatedDisk): number {
  electLone(node, disk);
  const { term, lastIndex } = node.status();
  acknowledgeFromFollowers(node, term, lastIndex);
  drain(node, disk);
  expect(node.status().commitIndex).toBe(lastIndex);
  return term;
}

describe("sending before persistence (dissertation §10.2.1)", () => {
  it("a leader's append may be sent before its own entries are durable", () => {
    const { node, disk } = nodeWithLog([], 3);
    electReplicatingLeader(node, disk);
    const result = node.propose(encoder.encode("x"));
    if (!result.accepted) throw new Error("refused");
    const ready = node.ready();
    if (!ready) throw new Error("no ready");
    expect(ready.entriesToPersist.map((persisted) => persisted.index)).toEqual([result.index]);
    const early = ready.messagesBeforePersist.filter((message) => message.type === "append");
    expect(early.map((message) => message.to).sort()).toEqual([2, 3]);
    for (const message of early) {
      expect(message.type === "append" ? message.entries.map((sent) => sent.index) : []).toContain(result.index);
    }
    expect(ready.messages.filter((message) => message.type === "append")).toEqual([]);
  });

  it("a new term is never sent before it is durable: a campaign's vote requests wait for the write", () => {
    const { node, disk } = nodeWithLog([], 3);
    const preVote = tickUntilCampaign(node, disk)[0];
    if (!preVote) throw new Error("no pre-vote request");
    node.step({ type: "voteResponse", from: 2, to: 1, term: preVote.term, preVote: true, granted: true });
    const ready = node.ready();
    if (!ready) throw new Error("no ready");
    expect(ready.hardState?.term).toBe(preVote.term);
    expect(ready.hardState?.votedFor).toBe(1);
    expect(ready.messagesBeforePersist).toEqual([]);
    expect(ready.messages.filter((message) => message.type === "voteRequest").length).toBe(2);
  });

  it("a term change holds back every message of the batch, even a leader's heartbeats of its old term", () => {
    const { node, disk } = nodeWithLog([], 3);
    const term = electReplicatingLeader(node, disk);
    node.tick();
    node.tick();
    // A newer term arrives before the driver asks for the batch with the heartbeats: the member steps down.
    node.step({ type: "heartbeatResponse", from: 2, to: 1, term: term + 1, readSequence: 0 });
    const ready = node.ready();
    if (!ready) throw new Error("no ready");
    expect(ready.hardState?.term).toBe(term + 1);
    expect(ready.messagesBeforePersist).toEqual([]);
    expect(ready.messages.some((message) => message.type === "heartbeat" && message.term === term)).toBe(true);
  });

  it("a leader that steps down before its next batch never sends the appends of its proposals", () => {
    const { node, disk } = nodeWithLog([], 3);
    const term = electReplicatingLeader(node, disk);
    const result = node.propose(encoder.encode("x"));
    if (!result.accepted) throw new Error("refused");
    node.step({ type: "heartbeatResponse", from: 2, to: 1, term: term + 1, readSequence: 0 });
    const ready = node.ready();
    if (!ready) throw new Error("no ready");
    expect([...ready.messagesBeforePersist, ...ready.messages].some((message) => message.type === "append")).toBe(
      false,
    );
  });

  it("announces a new commit index to a follower in sync without asking for an answer", () => {
    const { node, disk } = nodeWithLog([], 3);
    electReplicatingLeader(node, disk);
    if (!node.propose(encoder.encode("x")).accepted) throw new Error("refused");
    const first = node.ready();
    if (!first) throw new Error("no ready");
    const withEntries = first.messagesBeforePersist.filter((message) => message.type === "append");
    expect(withEntries.every((message) => message.type === "append" && message.acknowledge)).toBe(true);
    disk.appendSync(first.entriesToPersist, first.hardState);
    node.advance(first);
    const { term, lastIndex } = node.status();
    acknowledgeFromFollowers(node, term, lastIndex);
    const announcements = drain(node, disk).filter((message) => message.type === "append");
    expect(announcements.map((message) => message.to).sort()).toEqual([2, 3]);
    for (const announcement of announcements) {
      if (announcement.type !== "append") throw new Error("not an append");
      expect(announcement).toMatchObject({ entries: [], commitIndex: lastIndex, acknowledge: false });
    }
  });

  it("a follower answers an unacknowledged announcement only when it rejects it", () => {
    const { node, disk } = nodeWithLog([entry(2, 2), entry(3, 2)], 2);
    const announcement = { type: "append" as const, from: 3, to: 1, term: 3, entries: [], acknowledge: false };
    node.step({ ...announcement, prevIndex: 3, prevTerm: 2, commitIndex: 3 });
    expect(appendResponses(drain(node, disk))).toEqual([]);
    expect(node.status().commitIndex).toBe(3);
    node.step({ ...announcement, prevIndex: 3, prevTerm: 3, commitIndex: 3 });
    expect(appendResponses(drain(node, disk))).toMatchObject([{ rejected: true, index: 3 }]);
  });

  it("proposals made between two batches reach each follower as one append carrying all of them", () => {
    const { node, disk } = nodeWithLog([], 3);
    electReplicatingLeader(node, disk);
    for (let count = 0; count < 5; count++) {
      if (!node.propose(encoder.encode(`entry ${count}`)).accepted) throw new Error("refused");
    }
    const ready = node.ready();
    if (!ready) throw new Error("no ready");
    const appends = ready.messagesBeforePersist.filter((message) => message.type === "append");
    expect(appends.map((message) => message.to).sort()).toEqual([2, 3]);
    for (const append of appends) {
      if (append.type !== "append") throw new Error("not an append");
      expect(append.entries.map((entry) => new TextDecoder().decode(entry.data))).toEqual([
        "entry 0",
        "entry 1",
        "entry 2",
        "entry 3",
        "entry 4",
      ]);
    }
  });

  it("a vote response waits for the write even when the term does not change", () => {
    const { node, disk } = nodeWithLog([], 3, 2);
    // Member 2 restarts in term 3 without a vote and without a known leader, so it may vote in term 3.
    node.step({
      type: "voteRequest",
      from: 1,
      to: 2,
      term: 3,
      preVote: false,
      transfer: false,
      lastIndex: 1,
      lastTerm: 1,
    });
    const ready = node.ready();
    if (!ready) throw new Error("no ready");
    expect(ready.hardState).toEqual({ term: 3, votedFor: 1, commitIndex: 1 });
    expect(ready.messagesBeforePersist).toEqual([]);
    expect(voteResponses(ready.messages).map((response) => response.granted)).toEqual([true]);
    expect(disk.hardState().votedFor).toBeNull();
  });

  it("a leader does not count its own unpersisted entries toward commit", () => {
    const { node, disk } = nodeWithLog([], 3);
    const term = electReplicatingLeader(node, disk);
    const result = node.propose(encoder.encode("x"));
    if (!result.accepted) throw new Error("refused");
    const ready = node.ready();
    if (!ready) throw new Error("no ready");
    // Member 2 persisted the early append and acknowledges it while the leader's own write is still in flight: one
    // durable copy of three is not a majority.
    node.step({
      type: "appendResponse",
      from: 2,
      to: 1,
      term,
      rejected: false,
      index: result.index,
      hintIndex: 0,
      hintTerm: 0,
    });
    expect(node.status().commitIndex).toBeLessThan(result.index);
    expect(node.progressOf(1)?.match).toBeLessThan(result.index);
    // Once the leader's write is durable, its copy counts: two of three.
    disk.appendSync(ready.entriesToPersist, ready.hardState);
    node.advance(ready);
    expect(node.status().commitIndex).toBe(result.index);
  });

  it("a leader that crashes after sending but before persisting restarts without the entry, never having committed it", () => {
    const { node, disk } = nodeWithLog([], 3);
    const term = electReplicatingLeader(node, disk);
    const result = node.propose(encoder.encode("x"));
    if (!result.accepted) throw new Error("refused");
    const ready = node.ready();
    if (!ready) throw new Error("no ready");
    expect(ready.messagesBeforePersist.some((message) => message.type === "append")).toBe(true);
    node.step({
      type: "appendResponse",
      from: 2,
      to: 1,
      term,
      rejected: false,
      index: result.index,
      hintIndex: 0,
      hintTerm: 0,
    });
    expect(node.status().commitIndex).toBeLessThan(result.index);
    // The crash loses the write; the restarted member keeps its durable term and vote, so it cannot lead this term
    // again and propose something else at that index.
    const restarted = loneNode(1, disk, null);
    expect(restarted.status().lastIndex).toBe(result.index - 1);
    expect(restarted.status().term).toBe(term);
    expect(restarted.status().votedFor).toBe(1);
  });
});

describe("elections: pre-vote, check-quorum, priorities, transfer", () => {
  function ticksUntilCampaign(id: number, seed: number, members: Member[]): number {
    const disk = new SimulatedDisk();
    const node = loneNode(id, disk, { members }, { random: new SeededRandom(seed) });
    drain(node, disk);
    for (let tick = 1; tick <= 200; tick++) {
      node.tick();
      if (drain(node, disk).some((message) => message.type === "voteRequest")) return tick;
    }
    throw new Error("never campaigned");
  }

  it("randomized election timeouts: members wait between one and two election timeouts, not all the same", () => {
    const waits = [1, 2, 3, 4, 5, 6].map((seed) => ticksUntilCampaign(1, seed, voters(1, 2, 3)));
    for (const wait of waits) {
      expect(wait).toBeGreaterThanOrEqual(10);
      expect(wait).toBeLessThan(20);
    }
    expect(new Set(waits).size).toBeGreaterThan(1);
  });

  it("priority election: a member's election timeout shrinks with higher priority", () => {
    const members: Member[] = [
      { id: 1, role: "voter", priority: 1 },
      { id: 2, role: "voter", priority: 2 },
      { id: 3, role: "voter", priority: 3 },
    ];
    for (const seed of [1, 2, 3]) {
      const top = ticksUntilCampaign(3, seed, members);
      const bottom = ticksUntilCampaign(1, seed, members);
      expect(top).toBeLessThan(20);
      expect(bottom).toBeGreaterThanOrEqual(20);
    }
  });

  it("pre-vote: a partitioned member rejoining does not disrupt the leader", () => {
    const group = new ScriptedGroup(voters(1, 2, 3));
    const leader = group.electLeader();
    const term = group.node(leader).status().term;
    const outsider = [1, 2, 3].find((id) => id !== leader) ?? 0;
    group.isolate(outsider);
    group.tick(200);
    expect(group.node(outsider).status().term).toBe(term);
    group.heal();
    group.tick(30);
    expect(group.leader()).toBe(leader);
    expect(group.node(leader).status().term).toBe(term);
  });

  it("check-quorum: a leader that stops hearing from a majority steps down", () => {
    const group = new ScriptedGroup(voters(1, 2, 3));
    const leader = group.electLeader();
    group.isolate(leader);
    group.tick(25);
    expect(group.node(leader).status().role).not.toBe("leader");
  });

  it("leader lease: with check-quorum a follower ignores a vote request while it hears from its leader", () => {
    const group = new ScriptedGroup(voters(1, 2, 3));
    const leader = group.electLeader();
    const follower = [1, 2, 3].find((id) => id !== leader) ?? 0;
    const term = group.node(follower).status().term;
    group.deliver({
      type: "voteRequest",
      from: 9,
      to: follower,
      term: term + 5,
      preVote: false,
      transfer: false,
      lastIndex: 99,
      lastTerm: 99,
    });
    group.flush();
    expect(group.node(follower).status().term).toBe(term);
    expect(group.leader()).toBe(leader);
  });

  it("priority election: the member with the highest priority ends up leader in a healthy group", () => {
    const group = new ScriptedGroup([
      { id: 1, role: "voter", priority: 1 },
      { id: 2, role: "voter", priority: 1 },
      { id: 3, role: "voter", priority: 5 },
    ]);
    group.tick(300);
    expect(group.leader()).toBe(3);
  });

  it("priority election: lower-priority members still elect a leader when the highest-priority member is down", () => {
    const group = new ScriptedGroup([
      { id: 1, role: "voter", priority: 1 },
      { id: 2, role: "voter", priority: 2 },
      { id: 3, role: "voter", priority: 5 },
    ]);
    group.crash(3);
    group.tick(200);
    expect([1, 2]).toContain(group.leader());
  });

  it("priority transfer: a leader hands leadership to a caught-up voter of higher priority with TimeoutNow", () => {
    const group = new ScriptedGroup(voters(1, 2, 3));
    const leader = group.electLeader();
    const preferred = [1, 2, 3].find((id) => id !== leader) ?? 0;
    const result = group
      .node(leader)
      .proposeConfigurationChange({ type: "setPriority", member: preferred, priority: 9 });
    expect(result.accepted).toBe(true);
    group.tick(40);
    expect(group.leader()).toBe(preferred);
    expect(group.delivered.some((message) => message.type === "timeoutNow" && message.to === preferred)).toBe(true);
  });

  it("leadership transfer: the target campaigns at once and wins, and proposals are refused meanwhile", () => {
    const group = new ScriptedGroup(voters(1, 2, 3));
    const leader = group.electLeader();
    const target = [1, 2, 3].find((id) => id !== leader) ?? 0;
    group.block(leader, target);
    expect(group.node(leader).transferLeadership(target).accepted).toBe(true);
    const refused = group.node(leader).propose(encoder.encode("during"));
    expect(refused).toMatchObject({ accepted: false, reason: "transferringLeadership" });
    group.heal();
    group.tick(5);
    expect(group.leader()).toBe(target);
  });
});

describe("membership changes (single-server)", () => {
  it("learner promotion: a new member joins as a learner, catches up, then is promoted; a lagging learner is not", () => {
    const group = new ScriptedGroup(voters(1, 2, 3));
    const leader = group.electLeader();
    for (let index = 0; index < 5; index++) group.propose(`before${index}`);
    group.add(4, false);
    group.isolate(4);
    expect(group.node(leader).proposeConfigurationChange({ type: "addLearner", member: 4, priority: 1 }).accepted).toBe(
      true,
    );
    group.tick(4);
    expect(group.node(leader).proposeConfigurationChange({ type: "promote", member: 4 })).toMatchObject({
      accepted: false,
      reason: "learnerBehind",
    });
    expect(
      group
        .node(leader)
        .configuration()
        .members.find((member) => member.id === 4)?.role,
    ).toBe("learner");
    group.heal();
    group.tick(10);
    expect(texts(group.members.get(4)?.applied ?? [])).toEqual(["before0", "before1", "before2", "before3", "before4"]);
    expect(group.node(4).status().role).toBe("follower");
    expect(group.node(leader).proposeConfigurationChange({ type: "promote", member: 4 }).accepted).toBe(true);
    group.tick(5);
    expect(votersOf(group.node(4).configuration())).toEqual([1, 2, 3, 4]);
  });

  it("learner promotion within a bounded lag: a learner a few entries behind is promoted once it stayed caught up", () => {
    const group = new ScriptedGroup(voters(1, 2, 3), { promotionLagEntries: 3, promotionStableTicks: 3 });
    const leader = group.electLeader();
    group.add(4, false);
    expect(group.node(leader).proposeConfigurationChange({ type: "addLearner", member: 4, priority: 1 }).accepted).toBe(
      true,
    );
    group.tick(1);
    // Caught up, but not for long enough yet.
    expect(group.node(leader).proposeConfigurationChange({ type: "promote", member: 4 })).toMatchObject({
      accepted: false,
      reason: "learnerBehind",
    });
    group.tick(3);
    // Under a steady write load the learner trails the commit index by the entries in flight: here two entries it
    // does not hold yet. Requiring match ≥ commit would refuse the promotion at every such instant.
    group.isolate(4);
    group.propose("in-flight-1");
    group.propose("in-flight-2");
    group.tick(1);
    const status = group.node(leader).status();
    expect(group.node(leader).progressOf(4)?.match).toBe(status.commitIndex - 2);
    expect(group.node(leader).proposeConfigurationChange({ type: "promote", member: 4 }).accepted).toBe(true);
    group.heal();
    group.tick(5);
    expect(votersOf(group.node(4).configuration())).toEqual([1, 2, 3, 4]);
  });

  it("learner promotion: a learner further behind than the bound is refused, and its caught-up time restarts", () => {
    const group = new ScriptedGroup(voters(1, 2, 3), { promotionLagEntries: 3, promotionStableTicks: 3 });
    const leader = group.electLeader();
    group.add(4, false);
    group.node(leader).proposeConfigurationChange({ type: "addLearner", member: 4, priority: 1 });
    group.tick(5);
    group.isolate(4);
    for (let index = 0; index < 5; index++) group.propose(`behind${index}`);
    group.tick(1);
    expect(group.node(leader).progressOf(4)?.caughtUpSinceTick).toBeNull();
    expect(group.node(leader).proposeConfigurationChange({ type: "promote", member: 4 })).toMatchObject({
      accepted: false,
      reason: "learnerBehind",
    });
    group.heal();
    group.tick(1);
    expect(group.node(leader).proposeConfigurationChange({ type: "promote", member: 4 }).accepted).toBe(false);
    group.tick(6);
    expect(group.node(leader).proposeConfigurationChange({ type: "promote", member: 4 }).accepted).toBe(true);
  });

  it("learner promotion: the caught-up time starts at the acknowledgement that brings the learner within the lag", () => {
    const group = new ScriptedGroup(voters(1, 2, 3), { promotionLagEntries: 3, promotionStableTicks: 3 });
    const leader = group.electLeader();
    for (let index = 0; index < 5; index++) group.propose(`before${index}`);
    group.add(4, false);
    expect(group.node(leader).proposeConfigurationChange({ type: "addLearner", member: 4, priority: 1 }).accepted).toBe(
      true,
    );
    // Delivered without a tick: the learner's acknowledgements alone start its caught-up time.
    group.flush();
    const progress = group.node(leader).progressOf(4);
    expect(progress?.state).toBe("replicate");
    expect(progress?.caughtUpSinceTick).not.toBeNull();
    // Each of the next three ticks finds it still caught up, which makes it ready; two do not.
    group.tick(2);
    expect(group.node(leader).proposeConfigurationChange({ type: "promote", member: 4 })).toMatchObject({
      accepted: false,
      reason: "learnerBehind",
    });
    group.tick(1);
    expect(group.node(leader).proposeConfigurationChange({ type: "promote", member: 4 }).accepted).toBe(true);
  });

  it("a member grants no vote to a candidate its configuration does not list", () => {
    const group = new ScriptedGroup(voters(1, 2, 3));
    const leader = group.electLeader();
    const follower = [1, 2, 3].find((id) => id !== leader) ?? 0;
    group.isolate(leader);
    group.tick(40);
    const term = group.node(follower).status().term + 5;
    const lastIndex = group.node(follower).status().lastIndex + 10;
    for (const preVote of [true, false]) {
      group.node(follower).step({
        type: "voteRequest",
        from: 9,
        to: follower,
        term,
        preVote,
        transfer: true,
        lastIndex,
        lastTerm: term,
      });
      const ready = group.node(follower).ready();
      const responses = voteResponses([...(ready?.messagesBeforePersist ?? []), ...(ready?.messages ?? [])]);
      expect(responses).toHaveLength(1);
      expect(responses[0]?.granted).toBe(false);
      if (ready) {
        group.members.get(follower)?.disk.appendSync(ready.entriesToPersist, ready.hardState);
        group.node(follower).advance(ready);
      }
    }
    expect(group.node(follower).status().votedFor).not.toBe(9);
  });

  it("a member that knows no configuration yet (joining, or after losing its disk) votes for nobody", () => {
    const group = new ScriptedGroup(voters(1, 2, 3));
    group.electLeader();
    const joining = group.add(4, false);
    joining.node?.step({
      type: "voteRequest",
      from: 1,
      to: 4,
      term: 50,
      preVote: false,
      transfer: true,
      lastIndex: 100,
      lastTerm: 50,
    });
    const ready = joining.node?.ready();
    expect(voteResponses(ready?.messages ?? []).map((response) => response.granted)).toEqual([false]);
    expect(joining.node?.status().votedFor).toBeNull();
  });

  it("learners never campaign and do not count towards a commit", () => {
    const group = new ScriptedGroup(voters(1, 2, 3));
    const leader = group.electLeader();
    group.add(4, false);
    group.node(leader).proposeConfigurationChange({ type: "addLearner", member: 4, priority: 9 });
    group.tick(5);
    const others = [1, 2, 3].filter((id) => id !== leader);
    for (const other of others) group.isolate(other);
    const result = group.node(leader).propose(encoder.encode("needs-a-voter"));
    group.tick(3);
    if (!result.accepted) throw new Error("refused");
    expect(group.node(leader).status().commitIndex).toBeLessThan(result.index);
    group.heal();
    group.isolate(leader);
    group.tick(200);
    expect(group.node(4).status().role).toBe("follower");
    expect(group.node(4).status().term).toBeLessThanOrEqual(group.node(others[0] ?? 0).status().term);
  });

  it("single-server changes: a second change is refused while one is uncommitted", () => {
    const group = new ScriptedGroup(voters(1, 2, 3));
    const leader = group.electLeader();
    for (const id of [1, 2, 3]) if (id !== leader) group.isolate(id);
    expect(group.node(leader).proposeConfigurationChange({ type: "addLearner", member: 4, priority: 1 }).accepted).toBe(
      true,
    );
    expect(group.node(leader).proposeConfigurationChange({ type: "addLearner", member: 5, priority: 1 })).toMatchObject(
      {
        accepted: false,
        reason: "changeInProgress",
      },
    );
  });

  it("a configuration takes effect when appended, before it commits", () => {
    const group = new ScriptedGroup(voters(1, 2, 3));
    const leader = group.electLeader();
    for (const id of [1, 2, 3]) if (id !== leader) group.isolate(id);
    group.node(leader).proposeConfigurationChange({ type: "addLearner", member: 4, priority: 1 });
    group.flush();
    expect(
      group
        .node(leader)
        .configuration()
        .members.map((member) => member.id),
    ).toContain(4);
    expect(group.node(leader).status().commitIndex).toBeLessThan(group.node(leader).status().lastIndex);
  });

  it("removal of the leader: a removed leader steps down once the change commits and the rest elect a new leader", () => {
    const group = new ScriptedGroup(voters(1, 2, 3));
    const leader = group.electLeader();
    expect(group.node(leader).proposeConfigurationChange({ type: "remove", member: leader }).accepted).toBe(true);
    group.tick(3);
    expect(group.node(leader).status().role).toBe("follower");
    group.tick(60);
    const next = group.leader();
    expect(next).not.toBeNull();
    expect(next).not.toBe(leader);
    expect(votersOf(group.node(next ?? 0).configuration())).toEqual([1, 2, 3].filter((id) => id !== leader));
    group.propose("after-removal");
    expect(texts(group.members.get(next ?? 0)?.applied ?? [])).toContain("after-removal");
  });

  it("a member that crashes mid-join resumes catching up after its restart", () => {
    const group = new ScriptedGroup(voters(1, 2, 3), { maxEntriesPerMessage: 2 });
    const leader = group.electLeader();
    for (let index = 0; index < 10; index++) group.propose(`j${index}`);
    group.add(4, false);
    let appendsTo4 = 0;
    group.dropWhen((message) => message.to === 4 && message.type === "append" && ++appendsTo4 > 3);
    group.node(leader).proposeConfigurationChange({ type: "addLearner", member: 4, priority: 1 });
    group.tick(2);
    const partial = group.members.get(4)?.disk.lastIndex() ?? 0;
    expect(partial).toBeGreaterThan(0);
    expect(partial).toBeLessThan(group.node(leader).status().lastIndex);
    group.crash(4);
    group.clearDrops();
    group.tick(5);
    group.restart(4);
    group.tick(10);
    expect(group.members.get(4)?.disk.lastIndex()).toBe(group.node(leader).status().lastIndex);
    expect(group.node(leader).proposeConfigurationChange({ type: "promote", member: 4 }).accepted).toBe(true);
  });
});

describe("forced reconfiguration", () => {
  it("requires the explicit acknowledgement that uncommitted entries may be lost", () => {
    const group = new ScriptedGroup(voters(1, 2, 3));
    expect(() =>
      group.node(1).forceReconfigure(voters(1), { acceptDataLoss: false } as unknown as { acceptDataLoss: true }),
    ).toThrow(/acceptDataLoss/);
  });

  it("survivors replace the membership without the old quorum and commit again", () => {
    const group = new ScriptedGroup(voters(1, 2, 3, 4, 5));
    group.electLeader();
    group.propose("before");
    for (const id of [3, 4, 5]) group.crash(id);
    group.tick(40);
    expect(group.leader()).toBeNull();
    for (const id of [1, 2]) group.node(id).forceReconfigure(voters(1, 2), { acceptDataLoss: true });
    group.tick(60);
    const leader = group.leader();
    expect([1, 2]).toContain(leader);
    expect(votersOf(group.node(leader ?? 0).configuration())).toEqual([1, 2]);
    expect(group.node(leader ?? 0).status().forced).toBe(false);
    group.propose("after");
    expect(texts(group.members.get(1)?.applied ?? [])).toEqual(["before", "after"]);
  });

  it("the first forced election needs every forced voter, so the most up-to-date survivor's entries are kept", () => {
    const group = new ScriptedGroup(voters(1, 2, 3, 4, 5));
    const leader = group.electLeader();
    const survivors = [1, 2, 3, 4, 5].filter((id) => id !== leader).slice(0, 3);
    const [ahead, behindA, behindB] = survivors as [number, number, number];
    group.block(leader, behindA);
    group.block(leader, behindB);
    group.propose("only-on-some");
    for (const id of [1, 2, 3, 4, 5]) if (!survivors.includes(id)) group.crash(id);
    group.heal();
    expect(
      texts(group.members.get(ahead)?.disk.entries(1, (group.members.get(ahead)?.disk.lastIndex() ?? 0) + 1) ?? []),
    ).toContain("only-on-some");
    const members = voters(...survivors);
    for (const id of survivors) group.node(id).forceReconfigure(members, { acceptDataLoss: true });
    group.tick(100);
    const forcedLeader = group.leader();
    expect(forcedLeader).not.toBeNull();
    group.tick(10);
    for (const id of survivors) expect(texts(group.members.get(id)?.applied ?? [])).toContain("only-on-some");
  });
});

describe("forced reconfiguration: durability and fencing", () => {
  it("a member restarted before the forced membership reached the log resumes it instead of reverting", () => {
    const group = new ScriptedGroup(voters(1, 2, 3, 4, 5));
    group.electLeader();
    group.propose("before");
    for (const id of [3, 4, 5]) group.crash(id);
    group.isolate(1);
    for (const id of [1, 2]) group.node(id).forceReconfigure(voters(1, 2), { acceptDataLoss: true });
    group.flush();
    expect(group.members.get(1)?.disk.hardState().forced?.configuration).toEqual({ members: voters(1, 2) });
    expect(group.members.get(1)?.disk.hardState().fencedMembers).toEqual([3, 4, 5]);
    group.crash(1);
    group.restart(1);
    expect(group.node(1).status().forced).toBe(true);
    expect(votersOf(group.node(1).configuration())).toEqual([1, 2]);
    group.heal();
    group.tick(80);
    const leader = group.leader();
    expect([1, 2]).toContain(leader);
    expect(group.node(1).status().forced).toBe(false);
    expect(votersOf(group.node(1).configuration())).toEqual([1, 2]);
    group.propose("after");
    expect(texts(group.members.get(1)?.applied ?? [])).toEqual(["before", "after"]);
  });

  it("members left out are fenced: a majority of the old membership cannot make a forced member follow or vote", () => {
    const group = new ScriptedGroup(voters(1, 2, 3, 4, 5));
    group.electLeader();
    group.propose("before");
    // The network splits {1, 2} from {3, 4, 5}; an operator on the small side forces it to {1, 2}.
    for (const left of [1, 2]) {
      for (const right of [3, 4, 5]) {
        group.block(left, right);
        group.block(right, left);
      }
    }
    for (const id of [1, 2]) group.node(id).forceReconfigure(voters(1, 2), { acceptDataLoss: true });
    group.tick(120);
    const forcedLeader =
      group.leader() === null ? null : [1, 2].find((id) => group.node(id).status().role === "leader");
    expect(forcedLeader).toBeDefined();
    // The other side still forms a majority of the old membership and elects its own leader, at a higher term.
    const oldSideLeader = [3, 4, 5].find((id) => group.node(id).status().role === "leader");
    expect(oldSideLeader).toBeDefined();
    for (let round = 0; round < 30; round++) group.node(oldSideLeader ?? 0).tick();
    group.flush();
    const termsBefore = [1, 2].map((id) => group.node(id).status().term);
    group.heal();
    group.tick(60);
    // Nothing the fenced side sent changed the forced members' terms, votes or logs.
    expect([1, 2].map((id) => group.node(id).status().term)).toEqual(termsBefore);
    expect(group.node(forcedLeader ?? 0).status().role).toBe("leader");
    for (const id of [1, 2]) {
      expect(votersOf(group.node(id).configuration())).toEqual([1, 2]);
      expect(group.node(id).status().fencedMembers).toEqual([3, 4, 5]);
    }
    const before = group.node(forcedLeader ?? 0).status().commitIndex;
    group.node(forcedLeader ?? 0).propose(encoder.encode("forced-side"));
    group.tick(3);
    expect(group.node(forcedLeader ?? 0).status().commitIndex).toBeGreaterThan(before);
  });

  it("a forced member that missed the forced entry's commit and later changes ends the forced membership once it catches up", () => {
    const group = new ScriptedGroup(voters(1, 2, 3, 4, 5));
    group.electLeader();
    for (const id of [4, 5]) group.crash(id);
    // Member 3 votes in the forced election (which needs every forced voter) but hears nothing from the leader
    // after it: not the forced entry, not its commit, not the change the others make next.
    const behind = 3;
    group.dropWhen(
      (message) =>
        (message.to === behind && ["append", "heartbeat", "snapshotChunk", "timeoutNow"].includes(message.type)) ||
        (message.from === behind && message.type === "voteRequest"),
    );
    for (const id of [1, 2, 3]) group.node(id).forceReconfigure(voters(1, 2, 3), { acceptDataLoss: true });
    group.tick(80);
    const leader = group.leader() ?? 0;
    expect([1, 2]).toContain(leader);
    expect(group.node(leader).status().forced).toBe(false);
    expect(group.node(behind).status().forced).toBe(true);
    const other = [1, 2].find((id) => id !== leader) ?? 0;
    expect(
      group.node(leader).proposeConfigurationChange({ type: "setPriority", member: other, priority: 7 }).accepted,
    ).toBe(true);
    group.tick(3);
    expect(
      group
        .node(leader)
        .committedConfiguration()
        .members.find((member) => member.id === other)?.priority,
    ).toBe(7);
    // Caught up, it holds the log's membership: the forced one is in the log, with a later change on top.
    group.clearDrops();
    group.tick(5);
    expect(group.node(behind).status().forced).toBe(false);
    expect(group.node(behind).configuration()).toEqual(group.node(leader).configuration());
    expect(group.members.get(behind)?.disk.hardState().forced).toBeUndefined();
  });

  it("a fenced member added back by a later configuration entry is heard again", () => {
    const group = new ScriptedGroup(voters(1, 2, 3));
    group.electLeader();
    group.crash(3);
    for (const id of [1, 2]) group.node(id).forceReconfigure(voters(1, 2), { acceptDataLoss: true });
    group.tick(60);
    const leader = group.leader() ?? 0;
    expect(group.node(leader).status().forced).toBe(false);
    // Broker 3 comes back with an empty disk and joins as a new learner.
    group.members.delete(3);
    group.add(3, false);
    expect(group.node(leader).proposeConfigurationChange({ type: "addLearner", member: 3, priority: 1 }).accepted).toBe(
      true,
    );
    group.tick(10);
    expect(group.node(leader).progressOf(3)?.match).toBe(group.node(leader).status().lastIndex);
    expect(group.node(leader).proposeConfigurationChange({ type: "promote", member: 3 }).accepted).toBe(true);
    group.tick(5);
    expect(votersOf(group.node(3).configuration())).toEqual([1, 2, 3]);
  });
});

describe("read index", () => {
  it("a leader releases a read only after a heartbeat round confirms its leadership", () => {
    const group = new ScriptedGroup(voters(1, 2, 3));
    const leader = group.electLeader();
    group.propose("x");
    for (const id of [1, 2, 3]) if (id !== leader) group.block(id, leader);
    expect(group.node(leader).readIndex("r1").accepted).toBe(true);
    group.tick(4);
    expect(group.members.get(leader)?.reads).toEqual([]);
    group.heal();
    group.tick(3);
    expect(group.members.get(leader)?.reads).toEqual([
      { context: "r1", index: group.node(leader).status().commitIndex },
    ]);
  });

  it("a new leader holds reads until it has committed an entry of its own term", () => {
    const { node, disk } = nodeWithLog([entry(2, 2)], 3);
    electLone(node, disk);
    const term = node.status().term;
    expect(node.readIndex("early").accepted).toBe(true);
    node.tick();
    node.tick();
    const beforeCommit = node.ready();
    expect(beforeCommit?.readStates ?? []).toEqual([]);
    // The heartbeat round before the first commit carries no read: the read waits.
    const early = beforeCommit?.messagesBeforePersist.find(
      (message) => message.type === "heartbeat" && message.to === 2,
    );
    expect(early?.type === "heartbeat" ? early.readSequence : -1).toBe(0);
    if (beforeCommit) node.advance(beforeCommit);
    node.step({ type: "heartbeatResponse", from: 2, to: 1, term, readSequence: 0 });
    const stillWaiting = node.ready();
    expect(stillWaiting?.readStates ?? []).toEqual([]);
    if (stillWaiting) node.advance(stillWaiting);
    node.step({ type: "appendResponse", from: 2, to: 1, term, rejected: false, index: 3, hintIndex: 0, hintTerm: 0 });
    const heartbeat = drain(node, disk).find((message) => message.type === "heartbeat" && message.to === 2);
    expect(heartbeat?.type === "heartbeat" ? heartbeat.readSequence : 0).toBeGreaterThan(0);
    node.step({
      type: "heartbeatResponse",
      from: 2,
      to: 1,
      term,
      readSequence: heartbeat?.type === "heartbeat" ? heartbeat.readSequence : 0,
    });
    const ready = node.ready();
    expect(ready?.readStates).toEqual([{ context: "early", index: 3 }]);
  });

  it("a deposed leader never confirms a read; it reports the read as dropped", () => {
    const group = new ScriptedGroup(voters(1, 2, 3));
    const leader = group.electLeader();
    group.isolate(leader);
    expect(group.node(leader).readIndex("stale").accepted).toBe(true);
    group.tick(30);
    expect(group.node(leader).status().role).not.toBe("leader");
    expect(group.members.get(leader)?.reads).toEqual([]);
    expect(group.members.get(leader)?.droppedReads).toEqual(["stale"]);
  });

  it("a follower refuses reads and names the leader", () => {
    const group = new ScriptedGroup(voters(1, 2, 3));
    const leader = group.electLeader();
    const follower = [1, 2, 3].find((id) => id !== leader) ?? 0;
    expect(group.node(follower).readIndex("r")).toEqual({ accepted: false, reason: "notLeader", leaderId: leader });
  });
});

describe("snapshots", () => {
  function lagging(): { group: ScriptedGroup; leader: number; lagger: number; snapshotData: Uint8Array } {
    const group = new ScriptedGroup(voters(1, 2, 3), { snapshotChunkBytes: 16 });
    const leader = group.electLeader();
    const lagger = [1, 2, 3].find((id) => id !== leader) ?? 0;
    group.crash(lagger);
    for (let index = 0; index < 10; index++) group.propose(`s${index}`);
    const snapshotData = Uint8Array.from({ length: 100 }, (_, position) => position);
    const applied = group.node(leader).status().appliedIndex;
    group.node(leader).compact(applied, snapshotData);
    group.flush();
    group.propose("after-snapshot");
    return { group, leader, lagger, snapshotData };
  }

  it("compaction: the log before an applied index is dropped once the snapshot is stored", () => {
    const { group, leader } = lagging();
    const status = group.node(leader).status();
    expect(status.firstIndex).toBeGreaterThan(10);
    expect(group.members.get(leader)?.disk.snapshot()?.metadata.index).toBe(status.firstIndex - 1);
  });

  it("compaction records the checksum its caller computed instead of reading the whole snapshot again", () => {
    const disk = new SimulatedDisk();
    const node = loneNode(1, disk, { members: voters(1) });
    for (let tick = 0; tick < 50 && node.status().role !== "leader"; tick++) {
      node.tick();
      drain(node, disk);
    }
    node.propose(encoder.encode("x"));
    drain(node, disk);
    const applied = node.status().appliedIndex;
    const data = Uint8Array.from({ length: 64 }, (_, position) => position);
    // Not the data's checksum: what the core records shows it did not compute its own.
    const handedOver = (snapshotChecksum(data) + 1) >>> 0;
    expect(() => node.compact(applied, data, { sizeBytes: data.byteLength + 1, checksum: handedOver })).toThrow(
      /of 65 bytes, the snapshot holds 64/,
    );
    expect(() => node.compact(applied, data, { sizeBytes: data.byteLength, checksum: -1 })).toThrow(/not a CRC-32C/);
    node.compact(applied, data, { sizeBytes: data.byteLength, checksum: handedOver });
    expect(node.ready()?.compaction?.metadata).toMatchObject({ index: applied, sizeBytes: 64, checksum: handedOver });
  });

  it("a member behind the log start receives the snapshot in bounded chunks, then the log", () => {
    const { group, leader, lagger, snapshotData } = lagging();
    group.restart(lagger);
    group.tick(20);
    const chunks = group.delivered.filter((message) => message.type === "snapshotChunk" && message.to === lagger);
    expect(chunks.length).toBeGreaterThanOrEqual(Math.ceil(snapshotData.byteLength / 16));
    for (const chunk of chunks)
      if (chunk.type === "snapshotChunk") expect(chunk.data.byteLength).toBeLessThanOrEqual(16);
    const disk = group.members.get(lagger)?.disk;
    expect(disk?.snapshot()?.data).toEqual(snapshotData);
    expect(texts(group.members.get(lagger)?.applied ?? [])).toEqual(["after-snapshot"]);
    expect(disk?.lastIndex()).toBe(group.node(leader).status().lastIndex);
  });

  it("a snapshot transfer resumes at the lost chunk instead of starting over", () => {
    const { group, lagger } = lagging();
    let dropped = false;
    group.dropWhen((message) => {
      if (!dropped && message.type === "snapshotChunk" && message.offset === 32) {
        dropped = true;
        return true;
      }
      return false;
    });
    group.restart(lagger);
    group.tick(30);
    expect(dropped).toBe(true);
    const offsets = group.delivered
      .filter((message) => message.type === "snapshotChunk" && message.to === lagger)
      .map((message) => (message.type === "snapshotChunk" ? message.offset : -1));
    expect(offsets.filter((offset) => offset === 0)).toHaveLength(1);
    expect(offsets).toContain(32);
    expect(group.members.get(lagger)?.disk.snapshot()).not.toBeNull();
  });

  it("a member writes each chunk as it arrives, acknowledges it only after the write, and resumes after a restart", () => {
    const disk = new SimulatedDisk();
    drain(loneNode(1, disk, { members: voters(1, 2, 3) }), disk);
    let node = loneNode(1, disk, null);
    const data = Uint8Array.from({ length: 40 }, (_, position) => position);
    const metadata = {
      index: 20,
      term: 2,
      configuration: { members: voters(1, 2, 3) },
      sizeBytes: 40,
      checksum: snapshotChecksum(data),
    };
    const chunk = (offset: number): SnapshotChunkMessage => ({
      type: "snapshotChunk",
      from: 2,
      to: 1,
      term: 2,
      metadata,
      offset,
      data: data.subarray(offset, offset + 16),
      last: offset + 16 >= 40,
    });
    const answers = (ready: Ready) =>
      ready.messages.flatMap((message) =>
        message.type === "snapshotResponse" ? [`${message.status}:${message.nextOffset}:${message.matchIndex}`] : [],
      );
    const handle = (): Ready => {
      const ready = node.ready();
      if (!ready) throw new Error("no ready");
      expect(ready.messagesBeforePersist).toEqual([]);
      persistReady(disk, ready);
      node.advance(ready);
      return ready;
    };

    // Out of order: answered with the offset expected, and nothing to write but the start of the receipt.
    node.step(chunk(16));
    let ready = handle();
    expect(ready.snapshotReceipt).toEqual({ metadata, restart: true, chunks: [] });
    expect(answers(ready)).toEqual(["continue:0:0"]);

    node.step(chunk(0));
    ready = handle();
    expect(ready.mustSync).toBe(true);
    expect(ready.snapshotReceipt).toEqual({
      metadata,
      restart: false,
      chunks: [{ offset: 0, data: data.subarray(0, 16), checksum: snapshotChecksum(data.subarray(0, 16)) }],
    });
    expect(answers(ready)).toEqual(["continue:16:0"]);
    expect(disk.incomingSnapshot()?.receivedBytes).toBe(16);

    // A restart resumes at the durable offset: a repeated chunk is answered with it and not written again.
    node = loneNode(1, disk, null);
    node.step(chunk(0));
    ready = handle();
    expect(ready.snapshotReceipt).toBeNull();
    expect(answers(ready)).toEqual(["continue:16:0"]);

    // The last chunk completes the snapshot: written, verified and installed in the same batch, then acknowledged.
    node.step(chunk(16));
    node.step(chunk(32));
    ready = handle();
    expect(ready.snapshotReceipt?.chunks.map((received) => received.offset)).toEqual([16, 32]);
    expect(ready.snapshot).toEqual(metadata);
    expect(answers(ready)).toEqual(["continue:32:0", "installed:0:20"]);
    expect(disk.snapshot()?.data).toEqual(data);
    expect(disk.incomingSnapshot()).toBeNull();
    expect(node.status()).toMatchObject({ commitIndex: 20, firstIndex: 21, lastIndex: 20 });

    // A snapshot not newer than what the member has is answered `installed` with its commit index.
    node.step(chunk(0));
    expect(answers(handle())).toEqual(["installed:0:20"]);
  });

  /** A member given a whole snapshot of 4 bytes in one chunk from member 2, described as `described` says. */
  function offerWholeSnapshot(described: { readonly sizeBytes: number; readonly checksumOffset: number }) {
    const disk = new SimulatedDisk();
    const node = loneNode(1, disk, { members: voters(1, 2, 3) });
    drain(node, disk);
    const data = new Uint8Array([1, 2, 3, 4]);
    const metadata = {
      index: 20,
      term: 2,
      configuration: { members: voters(1, 2, 3) },
      sizeBytes: described.sizeBytes,
      checksum: (snapshotChecksum(data) + described.checksumOffset) >>> 0,
    };
    node.step({ type: "snapshotChunk", from: 2, to: 1, term: 2, metadata, offset: 0, data, last: true });
    const response = drain(node, disk).find((message) => message.type === "snapshotResponse");
    return { node, disk, response };
  }

  it("a member rejects a snapshot whose checksum does not match and installs nothing", () => {
    const { node, disk, response } = offerWholeSnapshot({ sizeBytes: 4, checksumOffset: 1 });
    expect(response).toMatchObject({ status: "rejected" });
    expect(disk.snapshot()).toBeNull();
    expect(node.status().commitIndex).toBe(1);
    // Counted as damage, naming the member that sent it.
    expect(node.receiptDamage()).toEqual({ chunksDamaged: 0, snapshotsRejected: 1, lastSenderId: 2 });
  });

  it("a member rejects a chunk that does not fit the snapshot's size without counting it as damaged data", () => {
    const { node, response } = offerWholeSnapshot({ sizeBytes: 2, checksumOffset: 0 });
    expect(response).toMatchObject({ status: "rejected", nextOffset: 0 });
    // A sender that frames its chunks wrongly is not a fault that changes bytes: nothing for an operator's damage
    // metrics.
    expect(node.receiptDamage()).toEqual({ chunksDamaged: 0, snapshotsRejected: 0, lastSenderId: null });
  });
});

describe("flow control", () => {
  it("a leader refuses proposals beyond maxUncommittedEntries until entries commit", () => {
    const group = new ScriptedGroup(voters(1, 2, 3), { maxUncommittedEntries: 3 });
    const leader = group.electLeader();
    for (const id of [1, 2, 3]) if (id !== leader) group.isolate(id);
    const results = [1, 2, 3, 4].map(() => group.node(leader).propose(encoder.encode("p")).accepted);
    expect(results).toEqual([true, true, true, false]);
    group.heal();
    group.tick(3);
    expect(group.node(leader).propose(encoder.encode("p")).accepted).toBe(true);
  });

  /**
   * The entries of each append a leader sends to a follower whose answers never arrive, while ten entries of 60 bytes
   * are proposed: one at a time (each flushed before the next), or all at once.
   */
  function appendsToUnansweringFollower(
    overrides: Partial<RaftNodeOptions>,
    proposing: "one at a time" | "all at once",
  ): number[] {
    const group = new ScriptedGroup(voters(1, 2, 3), overrides);
    const leader = group.electLeader();
    group.propose("warm-up");
    const follower = [1, 2, 3].find((id) => id !== leader) ?? 0;
    group.block(follower, leader);
    const before = group.delivered.length;
    for (let index = 0; index < 10; index++) {
      group.node(leader).propose(new Uint8Array(60));
      if (proposing === "one at a time") group.flush();
    }
    group.flush();
    return group.delivered
      .slice(before)
      .filter((message) => message.type === "append" && message.to === follower && message.entries.length > 0)
      .map((message) => (message.type === "append" ? message.entries.length : 0));
  }

  function inflightAppends(maxInflightMessages: number, maxInflightBytes: number): number {
    const overrides = { maxInflightMessages, maxInflightBytes, maxEntriesPerMessage: 1 };
    return appendsToUnansweringFollower(overrides, "one at a time").length;
  }

  it("a leader keeps at most maxInflightMessages appends in flight to a replicating member", () => {
    expect(inflightAppends(3, 1 << 20)).toBe(3);
  });

  it("a message cut when the window is nearly full still carries a whole message's entries, not the window's rest", () => {
    // Entries of 60 bytes (84 counted in flight): a message carries 3 (180 bytes of data); the window is full at 300.
    const overrides = { maxInflightMessages: 100, maxInflightBytes: 300, maxBytesPerMessage: 180 };
    // Cut to the 48 bytes left after the first, the second message carried a single entry.
    expect(appendsToUnansweringFollower(overrides, "all at once")).toEqual([3, 3]);
  });

  it("a leader keeps at most maxInflightBytes of entries in flight to a replicating member", () => {
    // Each message carries one 60-byte entry (84 bytes with overhead): the window fills after the second.
    expect(inflightAppends(100, 100)).toBe(2);
  });
});

describe("the commit index is volatile (Figure 2): batches that only move it need no sync", () => {
  it("a ready whose only change is the commit index does not require a sync", () => {
    const { node, disk } = nodeWithLog([], 3);
    const term = electReplicatingLeader(node, disk);
    // Electing the leader committed its no-op in a batch that only moved the commit index, so nothing wrote it.
    const committedBefore = node.status().commitIndex;
    expect(disk.hardState().commitIndex).toBeLessThan(committedBefore);
    const result = node.propose(encoder.encode("x"));
    if (!result.accepted) throw new Error("refused");
    const withEntries = node.ready();
    if (!withEntries) throw new Error("no ready");
    expect(withEntries.mustSync).toBe(true);
    expect(withEntries.hardState?.commitIndex).toBe(committedBefore);
    disk.appendSync(withEntries.entriesToPersist, withEntries.hardState);
    node.advance(withEntries);
    const durableCommitIndex = disk.hardState().commitIndex;
    expect(durableCommitIndex).toBe(committedBefore);
    node.step({
      type: "appendResponse",
      from: 2,
      to: 1,
      term,
      rejected: false,
      index: result.index,
      hintIndex: 0,
      hintTerm: 0,
    });
    const commitOnly = node.ready();
    if (!commitOnly) throw new Error("no ready");
    expect(commitOnly.hardState?.commitIndex).toBe(result.index);
    expect(commitOnly.hardState?.term).toBe(term);
    expect(commitOnly.entriesToPersist).toEqual([]);
    expect(commitOnly.snapshot).toBeNull();
    expect(commitOnly.mustSync).toBe(false);
    expect(texts(commitOnly.committedEntries)).toEqual(["x"]);
    // The driver writes nothing and applies at once: the durable commit index stays behind what was applied.
    node.advance(commitOnly);
    expect(disk.hardState().commitIndex).toBe(durableCommitIndex);
    // The next batch that syncs carries the commit index the skipped batch did not write, although it did not move.
    const next = node.propose(encoder.encode("y"));
    if (!next.accepted) throw new Error("refused");
    const carrying = node.ready();
    if (!carrying) throw new Error("no ready");
    expect(carrying.mustSync).toBe(true);
    expect(carrying.hardState?.commitIndex).toBe(result.index);
    disk.appendSync(carrying.entriesToPersist, carrying.hardState);
    node.advance(carrying);
    expect(disk.hardState().commitIndex).toBe(result.index);
  });

  it("a term change requires a sync even without entries", () => {
    const { node, disk } = nodeWithLog([], 3, 2);
    node.step({ type: "heartbeat", from: 1, to: 2, term: 5, commitIndex: 1, readSequence: 0 });
    const ready = node.ready();
    if (!ready) throw new Error("no ready");
    expect(ready.entriesToPersist).toEqual([]);
    expect(ready.hardState?.term).toBe(5);
    expect(ready.mustSync).toBe(true);
    expect(disk.hardState().term).toBe(3);
  });

  it("a restart with an older persisted commit index catches up without violating safety", () => {
    const group = new ScriptedGroup(voters(1, 2, 3));
    const leader = group.electLeader();
    const indexes = ["a", "b", "c"].map((text) => group.propose(text));
    const last = indexes[indexes.length - 1] ?? 0;
    group.tick(10);
    const follower = [...group.members.keys()].find((id) => id !== leader) ?? 0;
    const followerMember = group.members.get(follower);
    if (!followerMember) throw new Error("no follower");
    expect(texts(followerMember.applied)).toEqual(["a", "b", "c"]);
    // Every member applied c, but the batches that committed it were never written: the disks lag.
    for (const member of group.members.values()) {
      expect(member.disk.hardState().commitIndex).toBeLessThan(last);
      expect(member.disk.hardState().commitIndex).toBeLessThanOrEqual(member.disk.lastIndex());
    }
    // The follower restarts from the older durable commit index, re-applies up to it, then learns the rest.
    group.crash(follower);
    group.restart(follower);
    expect(group.node(follower).status().commitIndex).toBe(followerMember.disk.hardState().commitIndex);
    expect(group.node(follower).status().commitIndex).toBeLessThan(last);
    group.tick(10);
    expect(texts(followerMember.applied)).toEqual(["a", "b", "c"]);
    // The leader restarts behind too; whoever leads next keeps every applied entry, and members agree index by index.
    group.crash(leader);
    group.restart(leader);
    expect(group.node(leader).status().commitIndex).toBeLessThan(last);
    group.tick(100);
    const next = group.electLeader();
    group.propose("d");
    group.tick(10);
    for (const member of group.members.values()) {
      expect(texts(member.applied)).toEqual(["a", "b", "c", "d"]);
    }
    const byIndex = new Map<number, number>();
    for (const member of group.members.values()) {
      for (const applied of member.applied) {
        const known = byIndex.get(applied.index);
        if (known !== undefined) expect(applied.term).toBe(known);
        byIndex.set(applied.index, applied.term);
      }
    }
    expect(group.node(next).status().commitIndex).toBeGreaterThan(last);
  });
});
