/**
 * Majority computations. Membership changes are single-server changes (see configuration.ts), so every decision
 * needs a majority of one voter set; there is no joint quorum.
 */
import type { MemberId } from "../types.js";

/** Number of votes a set of `voterCount` voters needs for a majority. */
export function majority(voterCount: number): number {
  return Math.floor(voterCount / 2) + 1;
}

/**
 * The highest index that a majority of voters has acknowledged, given each voter's acknowledged index (missing
 * voters count as 0). With no voters nothing can be decided, so the result is 0.
 */
export function committedIndex(voters: readonly MemberId[], acknowledged: (member: MemberId) => number): number {
  if (voters.length === 0) return 0;
  const indexes = voters.map(acknowledged).sort((left, right) => right - left);
  const value = indexes[majority(voters.length) - 1];
  if (value === undefined) throw new Error("quorum: majority position outside the voter list");
  return value;
}

/** Outcome of counting votes. */
export type VoteOutcome = "won" | "lost" | "pending";

/**
 * Counts votes among `voters`. With `requireAll` (the first election after a forced reconfiguration) every voter
 * must grant; otherwise a majority suffices.
 */
export function voteOutcome(
  voters: readonly MemberId[],
  votes: ReadonlyMap<MemberId, boolean>,
  requireAll = false,
): VoteOutcome {
  let granted = 0;
  let rejected = 0;
  for (const voter of voters) {
    const vote = votes.get(voter);
    if (vote === true) granted++;
    else if (vote === false) rejected++;
  }
  const needed = requireAll ? voters.length : majority(voters.length);
  if (voters.length === 0) return "lost";
  if (granted >= needed) return "won";
  if (voters.length - rejected < needed) return "lost";
  return "pending";
}
