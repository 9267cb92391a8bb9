/**
 * Membership changes of one partition's Raft group as brokers ask them of the partition's leader: the vocabulary of
 * the `partition-membership` request and the pure rules that decide, from the leader's configurations, whether a
 * change has taken hold, is on its way, or cannot be made.
 *
 * A broker applying a cluster change (a replica joining, leaving, or changing priority) repeats its request until
 * the answer is `done`: the leader answers from its state at that moment and never waits for the commit itself, so
 * a request is short, a leader change in the middle costs one retry at the new leader, and the same request sent
 * again after a crash is harmless (every change is stated as the outcome wanted, not as a step to take).
 */
import type { Configuration, Member, MemberId } from "../raft/index.js";

/** The outcome a broker wants for one member of a partition's group. */
export type MembershipChange =
  /** The member is in the group (as a learner first, which the leader replicates to without counting its votes). */
  | { readonly type: "addLearner"; readonly member: MemberId; readonly priority: number }
  /** The member is a voter. */
  | { readonly type: "promote"; readonly member: MemberId }
  /** The member is not in the group. */
  | { readonly type: "remove"; readonly member: MemberId }
  /** The member has this election priority. */
  | { readonly type: "setPriority"; readonly member: MemberId; readonly priority: number };

/** How far a learner has come, as its leader sees it. */
export interface CatchUpProgress {
  /** The last index the leader knows the learner holds. */
  readonly matchIndex: number;
  /** The leader's commit index. */
  readonly commitIndex: number;
  /** Index and size of the leader's latest snapshot (what a learner behind the log's start receives first). */
  readonly snapshotIndex: number;
  readonly snapshotSizeBytes: number;
  /** Whether the learner is within the promotion lag, and since how many milliseconds. */
  readonly caughtUpForMs: number | null;
}

/** The leader's answer to a `partition-membership` request. */
export type MembershipAnswer =
  /** The committed configuration shows the change. */
  | { readonly outcome: "done"; readonly members: readonly Member[] }
  /** The change was proposed, or waits for something (a commit, a learner catching up, a leadership handover). */
  | { readonly outcome: "in-progress"; readonly detail: string; readonly catchUp?: CatchUpProgress }
  /** This broker's replica does not lead; ask `leaderId` when known. */
  | { readonly outcome: "not-leader"; readonly leaderId: number | null }
  /** The change can never be made as asked (e.g. it would remove the last voter). */
  | { readonly outcome: "refused"; readonly detail: string }
  /** The replica cannot answer now (stopping, failed, not hosted here). */
  | { readonly outcome: "unavailable"; readonly detail: string };

/** Whether `configuration` shows the outcome `change` asks for. */
export function showsChange(configuration: Configuration, change: MembershipChange): boolean {
  const member = configuration.members.find((candidate) => candidate.id === change.member);
  switch (change.type) {
    case "addLearner":
      return member !== undefined;
    case "promote":
      return member?.role === "voter";
    case "remove":
      return member === undefined;
    case "setPriority":
      return member?.priority === change.priority;
  }
}

/**
 * Why `change` can never be made to `configuration`, or null when it can. Adding a member that is already there, or
 * promoting a voter, are not refusals: `showsChange` reports them as done.
 */
export function membershipRefusal(configuration: Configuration, change: MembershipChange): string | null {
  const member = configuration.members.find((candidate) => candidate.id === change.member);
  const voters = configuration.members.filter((candidate) => candidate.role === "voter");
  switch (change.type) {
    case "addLearner":
    case "setPriority":
      if (!Number.isInteger(change.priority) || change.priority < 1) {
        return `priority ${change.priority} is not an integer ≥ 1`;
      }
      if (change.type === "setPriority" && member === undefined) {
        return `broker ${change.member} holds no replica of this partition`;
      }
      return null;
    case "promote":
      return member === undefined ? `broker ${change.member} is not a member of this partition's group yet` : null;
    case "remove":
      if (member?.role === "voter" && voters.length === 1) {
        return `broker ${change.member} holds the partition's only voting replica; removing it would lose the partition`;
      }
      return null;
  }
}

/** Checks a membership change received from another broker; returns it typed, or what is wrong with it. */
export function parseMembershipChange(value: unknown): MembershipChange | string {
  if (typeof value !== "object" || value === null) return "the membership change is not an object";
  const candidate = value as Record<string, unknown>;
  const member = candidate.member;
  if (!Number.isSafeInteger(member) || (member as number) < 0) return "the membership change names no member";
  const priority = candidate.priority;
  const validPriority = Number.isSafeInteger(priority) && (priority as number) >= 1;
  switch (candidate.type) {
    case "addLearner":
    case "setPriority":
      if (!validPriority) return `priority ${String(priority)} is not an integer ≥ 1`;
      return { type: candidate.type, member: member as number, priority: priority as number };
    case "promote":
    case "remove":
      return { type: candidate.type, member: member as number };
    default:
      return `unknown membership change ${JSON.stringify(candidate.type)}`;
  }
}
