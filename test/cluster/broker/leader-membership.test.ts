/**
 * The leader's side of membership requests against real Raft nodes of a scripted group: which answer each state
 * gives, how held requests are settled, bounded, and released, and which voter a leader hands over to.
 */
import { pino } from "pino";
import { describe, expect, it } from "vitest";
import { LeaderMembership } from "../../../src/cluster/broker/leader-membership.js";
import type { MembershipAnswer, MembershipChange } from "../../../src/cluster/broker/membership.js";
import type { NodeStatus } from "../../../src/cluster/raft/index.js";
import type { Member, MemberId } from "../../../src/cluster/raft/types.js";
import { ScriptedGroup, voters } from "../raft/core/scripted-group.js";

const HEARTBEAT_INTERVAL_MS = 100;

/** A group of `members` with an elected leader and the leader's membership side on a clock the test moves. */
function setUp(members: readonly Member[], options: { promotionStableTicks?: number } = {}) {
  const group = new ScriptedGroup(members, { promotionLagEntries: 0, ...options });
  const leader = group.electLeader();
  const clock = { nowMs: 0, ticks: 0 };
  const logLines: { msg: string; member?: number }[] = [];
  const logger = pino({ level: "info" }, { write: (line: string) => logLines.push(JSON.parse(line)) });
  const membership = new LeaderMembership({
    partitionId: 1,
    memberId: leader,
    node: group.node(leader),
    logger,
    heartbeatIntervalMs: HEARTBEAT_INTERVAL_MS,
    monotonicNowMs: () => clock.nowMs,
    tickCount: () => clock.ticks,
    latestSnapshot: () => ({ index: 7, sizeBytes: 4096 }),
  });
  /** One heartbeat: every member ticks, messages flow, and the leader's driver settles what waits, as a replica's. */
  const tick = (count = 1) => {
    for (let round = 0; round < count; round++) {
      group.tick();
      clock.ticks += 1;
      clock.nowMs += HEARTBEAT_INTERVAL_MS;
      membership.settle(true);
      const status = group.node(leader).status();
      if (status.role === "leader") membership.noticeLearnersCaughtUp(status);
    }
  };
  return { group, leader, clock, membership, logLines, tick };
}

/** Asks for `change` and collects every answer it gets (a request must be answered exactly once). */
function ask(membership: LeaderMembership, change: MembershipChange, waitMs = 0): MembershipAnswer[] {
  const answers: MembershipAnswer[] = [];
  membership.answer(change, waitMs, (answer) => answers.push(answer));
  return answers;
}

function roleOf(group: ScriptedGroup, leader: MemberId, member: MemberId): string | undefined {
  return group
    .node(leader)
    .committedConfiguration()
    .members.find((candidate) => candidate.id === member)?.role;
}

describe("LeaderMembership", () => {
  it("proposes a change it can make now, answers in-progress, and done once the committed configuration shows it", () => {
    const { group, leader, membership, tick } = setUp(voters(1, 2, 3));
    group.add(4, false);
    const first = ask(membership, { type: "addLearner", member: 4, priority: 1 });
    expect(first).toEqual([{ outcome: "in-progress", detail: expect.stringMatching(/^proposed at index \d+$/) }]);
    // Asked again before the commit: the change is in the log, so nothing is proposed twice.
    const lastIndex = group.node(leader).status().lastIndex;
    expect(ask(membership, { type: "addLearner", member: 4, priority: 1 })).toEqual([
      { outcome: "in-progress", detail: "the change is in the log and waits for its commit" },
    ]);
    expect(group.node(leader).status().lastIndex).toBe(lastIndex);
    tick();
    expect(roleOf(group, leader, 4)).toBe("learner");
    expect(ask(membership, { type: "addLearner", member: 4, priority: 1 })).toMatchObject([{ outcome: "done" }]);
  });

  it("answers not-leader with the leader's id on a follower, and refuses a change that can never be made", () => {
    const { group, leader, membership } = setUp(voters(1, 2, 3));
    const follower = [1, 2, 3].find((id) => id !== leader) ?? 0;
    const onFollower = new LeaderMembership({
      partitionId: 1,
      memberId: follower,
      node: group.node(follower),
      logger: pino({ level: "silent" }),
      heartbeatIntervalMs: HEARTBEAT_INTERVAL_MS,
      monotonicNowMs: () => 0,
      tickCount: () => 0,
      latestSnapshot: () => ({ index: 0, sizeBytes: 0 }),
    });
    expect(ask(onFollower, { type: "promote", member: 4 }, 1_000)).toEqual([
      { outcome: "not-leader", leaderId: leader },
    ]);
    expect(ask(membership, { type: "promote", member: 9 })).toMatchObject([{ outcome: "refused" }]);
  });

  it("holds a request for a learner that is behind, promotes it in the heartbeat it is ready, and answers done at the commit", () => {
    const { group, leader, membership, logLines, tick } = setUp(voters(1, 2, 3), { promotionStableTicks: 3 });
    group.add(4, false);
    ask(membership, { type: "addLearner", member: 4, priority: 1 });
    group.isolate(4);
    tick();
    const held = ask(membership, { type: "promote", member: 4 }, 10_000);
    expect(held).toEqual([]);
    tick(3);
    // Still cut off: nothing to answer yet, and no promotion proposed.
    expect(held).toEqual([]);
    expect(roleOf(group, leader, 4)).toBe("learner");
    expect(logLines.filter((line) => line.msg === "a learner caught up")).toEqual([]);
    group.heal();
    let heartbeats = 0;
    while (held.length === 0 && heartbeats < 20) {
      tick();
      heartbeats += 1;
    }
    expect(held).toMatchObject([{ outcome: "done" }]);
    expect(roleOf(group, leader, 4)).toBe("voter");
    // Caught up for the 3 heartbeats of stability, then one to propose and commit: no poll interval in between.
    expect(heartbeats).toBeGreaterThanOrEqual(3);
    expect(heartbeats).toBeLessThanOrEqual(6);
    // The learner's catching up was logged once, when it happened, however many heartbeats it stayed caught up.
    expect(logLines.filter((line) => line.msg === "a learner caught up")).toMatchObject([{ member: 4 }]);
  });

  it("answers a held request with its progress once its wait is over, and looks again only after a tick or a commit", () => {
    const { group, leader, clock, membership, tick } = setUp(voters(1, 2, 3));
    group.add(4, false);
    ask(membership, { type: "addLearner", member: 4, priority: 1 });
    group.isolate(4);
    tick();
    const held = ask(membership, { type: "promote", member: 4 }, 250);
    membership.settle(false);
    expect(held).toEqual([]);
    clock.nowMs += 1_000;
    // Past its deadline, but neither a tick nor a commit nor a new term came: the driver's turns in between skip it.
    membership.settle(false);
    expect(held).toEqual([]);
    membership.settle(true);
    expect(held).toEqual([
      {
        outcome: "in-progress",
        detail: "broker 4 is catching up",
        catchUp: {
          matchIndex: 0,
          commitIndex: group.node(leader).status().commitIndex,
          snapshotIndex: 7,
          snapshotSizeBytes: 4096,
          caughtUpForMs: null,
        },
      },
    ]);
  });

  it("holds at most 64 requests: the next is answered at once, and failAll answers every held one exactly once", () => {
    const { group, membership } = setUp(voters(1, 2, 3));
    group.add(4, false);
    ask(membership, { type: "addLearner", member: 4, priority: 1 });
    group.isolate(4);
    group.tick();
    const held = Array.from({ length: 64 }, () => ask(membership, { type: "promote", member: 4 }, 60_000));
    expect(held.every((answers) => answers.length === 0)).toBe(true);
    expect(ask(membership, { type: "promote", member: 4 }, 60_000)).toMatchObject([{ outcome: "in-progress" }]);
    membership.failAll({ outcome: "unavailable", detail: "stopping" });
    expect(held.every((answers) => answers.length === 1 && answers[0]?.outcome === "unavailable")).toBe(true);
    membership.settle(true);
    expect(held.every((answers) => answers.length === 1)).toBe(true);
  });

  it("a leader asked to remove itself hands over first and answers not-leader with its successor", () => {
    const { group, leader, membership, tick } = setUp([
      { id: 1, role: "voter", priority: 1 },
      { id: 2, role: "voter", priority: 1 },
      { id: 3, role: "voter", priority: 1 },
    ]);
    const held = ask(membership, { type: "remove", member: leader }, 10_000);
    expect(held).toEqual([]);
    expect(group.node(leader).status().leadTransferee).not.toBeNull();
    let heartbeats = 0;
    while (held.length === 0 && heartbeats < 20) {
      tick();
      heartbeats += 1;
    }
    const successor = group.leader();
    expect(successor).not.toBe(leader);
    expect(held).toEqual([{ outcome: "not-leader", leaderId: successor }]);
    // Nothing was proposed: the successor removes the old leader when asked.
    expect(
      group
        .node(leader)
        .configuration()
        .members.map((member) => member.id),
    ).toContain(leader);
  });

  it("hands over to the highest-priority voter holding every committed entry, not to one behind", () => {
    const { group, leader, membership, tick } = setUp(voters(1, 2, 3));
    const [low = 0, high = 0] = [1, 2, 3].filter((id) => id !== leader);
    // The priorities as a configuration would give them (a real change would move the leadership to `high` itself).
    const withPriorities = (status: NodeStatus): NodeStatus => ({
      ...status,
      configuration: {
        members: status.configuration.members.map((member) => ({
          ...member,
          priority: member.id === high ? 5 : member.id === low ? 2 : 1,
        })),
      },
    });
    tick();
    expect(membership.handOverTarget(withPriorities(group.node(leader).status()))).toBe(high);
    // The preferred voter falls behind: the caught-up one wins over priority.
    group.isolate(high);
    group.propose("while cut off");
    expect(membership.handOverTarget(withPriorities(group.node(leader).status()))).toBe(low);
    // Back and caught up, it is preferred again.
    group.heal();
    tick();
    expect(membership.handOverTarget(withPriorities(group.node(leader).status()))).toBe(high);
  });

  it("has no one to hand over to in a group of one", () => {
    const { group, leader, membership } = setUp(voters(1));
    expect(membership.handOverTarget(group.node(leader).status())).toBeNull();
    expect(ask(membership, { type: "remove", member: leader })).toMatchObject([{ outcome: "refused" }]);
  });
});
