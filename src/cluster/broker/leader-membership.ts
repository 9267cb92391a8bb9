/**
 * The leader's side of membership requests (`membership.ts`): it answers a broker asking for a change of the
 * partition's group from the Raft node's state, proposes the change when it can, holds requests that asked to wait
 * until their outcome moves, and picks the voter a leading replica hands its leadership to.
 *
 * It belongs to one `PartitionReplica` and runs only inside that replica's driver (between two readies), as every
 * call on the Raft node does; the replica tells it when to look again (`settle`) and when to give up (`failAll`).
 */
import type { Logger } from "pino";
import type { NodeStatus, RaftNode } from "../raft/index.js";
import {
  type CatchUpProgress,
  type MembershipAnswer,
  type MembershipChange,
  membershipRefusal,
  showsChange,
} from "./membership.js";

/** Most membership requests waiting at once for their change to take hold; more are answered at once. */
const MAX_MEMBERSHIP_WAITERS = 64;

/** A membership request waiting for its change to take hold (see `LeaderMembership.answer`). */
interface MembershipWaiter {
  readonly change: MembershipChange;
  /** On the replica's clock: the request is answered with the state of its change by then. */
  readonly deadlineMs: number;
  readonly resolve: (answer: MembershipAnswer) => void;
  /**
   * This leader is removing itself and handed its leadership over: it waits for the hand-over to end (then answers
   * `not-leader` with the new leader) and proposes nothing meanwhile.
   */
  readonly handingOver: boolean;
}

/** What the leader's membership side reads of the replica it belongs to. */
export interface LeaderMembershipContext {
  readonly partitionId: number;
  readonly memberId: number;
  readonly node: RaftNode;
  readonly logger: Logger;
  readonly heartbeatIntervalMs: number;
  /** The replica's monotonic clock, in milliseconds: the waits' deadlines. */
  monotonicNowMs(): number;
  /** Ticks handed to the node since the replica opened. */
  tickCount(): number;
  /** Index and size of the replica's latest snapshot (what a learner behind the log's start receives first). */
  latestSnapshot(): { readonly index: number; readonly sizeBytes: number };
}

/** Membership requests as the partition's leader answers them; see the module comment. */
export class LeaderMembership {
  private readonly waiters: MembershipWaiter[] = [];
  /** Term and commit index when the waiting requests were last looked at (see `settle`). */
  private lookedAt = { term: -1, commitIndex: -1 };
  /** Learners this leader last saw within the promotion lag (for the log line when one catches up). */
  private readonly learnersCaughtUp = new Set<number>();

  constructor(private readonly context: LeaderMembershipContext) {}

  /**
   * Answers a request for `change` through `resolve`: at once, or, with `waitMs` and an answer that would be
   * `in-progress`, once the outcome is anything else or the wait is over. A leader removing itself that found no voter
   * to hand over to yet answers at once: asked again, it looks for one again, which waiting here would not.
   */
  answer(change: MembershipChange, waitMs: number, resolve: (answer: MembershipAnswer) => void): void {
    const answer = this.answerNow(change);
    if (answer.outcome !== "in-progress" || waitMs <= 0 || this.waiters.length >= MAX_MEMBERSHIP_WAITERS) {
      resolve(answer);
      return;
    }
    const removesItself = change.type === "remove" && change.member === this.context.memberId;
    if (removesItself && !this.handingOverLeadership()) {
      resolve(answer);
      return;
    }
    this.waiters.push({
      change,
      deadlineMs: this.context.monotonicNowMs() + waitMs,
      resolve,
      handingOver: removesItself,
    });
  }

  /**
   * Looks at each waiting request's change again (proposing it when it can be now) and answers those whose outcome is
   * no longer `in-progress` or whose wait is over. Only a tick (a learner ready for promotion, a wait over), a commit or
   * a new term can change an outcome, so without a tick it looks only when the term or the commit index moved: the
   * many turns of a snapshot transfer in between skip it.
   */
  settle(ticked: boolean): void {
    if (this.waiters.length === 0) return;
    const status = this.context.node.status();
    if (!ticked && status.term === this.lookedAt.term && status.commitIndex === this.lookedAt.commitIndex) return;
    this.lookedAt = { term: status.term, commitIndex: status.commitIndex };
    const nowMs = this.context.monotonicNowMs();
    const waiting = this.waiters.splice(0);
    for (const waiter of waiting) {
      if (waiter.handingOver) {
        // The new leader is known once it was heard from; the broker asks it next, at once.
        if (status.role !== "leader" && status.leaderId !== null) {
          waiter.resolve({ outcome: "not-leader", leaderId: status.leaderId });
        } else if (nowMs >= waiter.deadlineMs || (status.role === "leader" && !this.handingOverLeadership())) {
          waiter.resolve({ outcome: "in-progress", detail: "handing leadership over before leaving" });
        } else this.waiters.push(waiter);
        continue;
      }
      const answer = this.answerNow(waiter.change);
      if (answer.outcome === "in-progress" && nowMs < waiter.deadlineMs) this.waiters.push(waiter);
      else waiter.resolve(answer);
    }
  }

  /** Answers every waiting request with `answer` (the replica stopped or failed). */
  failAll(answer: MembershipAnswer): void {
    for (const waiter of this.waiters.splice(0)) waiter.resolve(answer);
  }

  /**
   * The voter to hand leadership to: the highest priority among the voters holding every committed entry (so
   * leadership does not move again right after), else the most up-to-date voter; null when there is no other voter.
   */
  handOverTarget(status: NodeStatus): number | null {
    const candidates = status.configuration.members
      .filter((member) => member.role === "voter" && member.id !== this.context.memberId)
      .map((member) => {
        const match = this.context.node.progressOf(member.id)?.match ?? 0;
        return { member, match, caughtUp: match >= status.commitIndex };
      })
      .sort(
        (left, right) =>
          Number(right.caughtUp) - Number(left.caughtUp) ||
          (left.caughtUp ? right.member.priority - left.member.priority : right.match - left.match),
      );
    return candidates[0]?.member.id ?? null;
  }

  /** Logs each learner once when it becomes caught up (the start of its promotion's stability wait). */
  noticeLearnersCaughtUp(status: NodeStatus): void {
    for (const member of status.configuration.members) {
      if (member.role !== "learner") continue;
      const caughtUp = (this.context.node.progressOf(member.id)?.caughtUpSinceTick ?? null) !== null;
      if (caughtUp === this.learnersCaughtUp.has(member.id)) continue;
      if (!caughtUp) {
        this.learnersCaughtUp.delete(member.id);
        continue;
      }
      this.learnersCaughtUp.add(member.id);
      this.context.logger.info({ partitionId: this.context.partitionId, member: member.id }, "a learner caught up");
    }
  }

  /** Whether this leader is handing its leadership over (a transfer it started has not ended yet). */
  private handingOverLeadership(): boolean {
    return this.context.node.status().leadTransferee !== null;
  }

  /** The answer from the node's state now, proposing the change when it can be made now. */
  private answerNow(change: MembershipChange): MembershipAnswer {
    const node = this.context.node;
    const status = node.status();
    if (status.role !== "leader") return { outcome: "not-leader", leaderId: status.leaderId };
    const committed = node.committedConfiguration();
    if (showsChange(committed, change)) return { outcome: "done", members: committed.members };
    const latest = node.configuration();
    if (showsChange(latest, change)) {
      return { outcome: "in-progress", detail: "the change is in the log and waits for its commit" };
    }
    const refusal = membershipRefusal(latest, change);
    if (refusal !== null) return { outcome: "refused", detail: refusal };
    if (change.type === "remove" && change.member === this.context.memberId) {
      // Raft lets a leader remove itself, but the partition would then wait an election timeout for a new leader:
      // handing over first keeps it serving. The next leader removes this replica when asked again.
      const target = this.handOverTarget(status);
      if (target === null) return { outcome: "in-progress", detail: "no other voter is caught up to take over yet" };
      node.transferLeadership(target);
      return { outcome: "in-progress", detail: `handing leadership over to broker ${target} before leaving` };
    }
    const result = node.proposeConfigurationChange(change);
    if (result.accepted) {
      this.context.logger.info(
        { partitionId: this.context.partitionId, change: change.type, member: change.member, index: result.index },
        "membership change proposed",
      );
      return { outcome: "in-progress", detail: `proposed at index ${result.index}` };
    }
    switch (result.reason) {
      case "notLeader":
        return { outcome: "not-leader", leaderId: result.leaderId };
      case "invalid":
        return { outcome: "refused", detail: result.detail };
      case "learnerBehind":
        return {
          outcome: "in-progress",
          detail: `broker ${change.member} is catching up`,
          catchUp: this.catchUpOf(change.member),
        };
      default:
        return { outcome: "in-progress", detail: `the leader cannot change the membership yet (${result.reason})` };
    }
  }

  /** How far learner `member` has come, as this leader sees it. */
  private catchUpOf(member: number): CatchUpProgress {
    const progress = this.context.node.progressOf(member);
    const snapshot = this.context.latestSnapshot();
    const ticks = progress?.caughtUpSinceTick;
    return {
      matchIndex: progress?.match ?? 0,
      commitIndex: this.context.node.status().commitIndex,
      snapshotIndex: snapshot.index,
      snapshotSizeBytes: snapshot.sizeBytes,
      caughtUpForMs:
        ticks === null || ticks === undefined
          ? null
          : (this.context.tickCount() - ticks) * this.context.heartbeatIntervalMs,
    };
  }
}
