/**
 * How a coordinator gets a new change accepted before it answers 202: one decision per configuration version, made
 * by a majority of the members, in the manner of single-decree Paxos. Pure: the broker persists an acceptor's state
 * and carries the requests (change-acceptor.ts, coordinator.ts).
 *
 * Why: the acting coordinator is the lowest-id member a broker hears from, so while a broker is paused or cut off
 * from some members two brokers can both act as coordinator. Each recorded its own change at the same version, each
 * answered 202 with the same change id, and the gossip merge then kept one of them: the other request had been
 * acknowledged and silently vanished. Now a change is recorded only once a majority of the members accepted it for
 * that version, and a member accepts at most one change per version unless a proposal with a higher ballot, which
 * must carry any change a majority may already have accepted, replaces it. Two different changes can therefore
 * never both be accepted by a majority, and a coordinator that crashed after its change was accepted leaves it to be
 * recorded by the next one rather than lost.
 *
 * Phase 1 (`prepare`): the coordinator asks every member to promise a ballot for version N (the one after the
 * version it holds); a member promises unless it promised a higher ballot for N, and reports the change it accepted
 * for N, if any. Phase 2 (`accept`): with promises from a majority, the coordinator proposes the accepted change of
 * the highest ballot among the promises, or its own when none reported one; a member accepts unless it promised a
 * higher ballot since. A change accepted by a majority is chosen: the coordinator records it (merge and gossip).
 * Every quorum must overlap every other for that to hold: a majority of the members does; a forced change is
 * decided by every broker it keeps, which overlaps any majority as long as it keeps at least half of them.
 * A member that already holds version N or a later one answers `behind` with its configuration: the coordinator
 * planned on a view that lags and must plan again.
 */
import { ConfigurationDecodeError, decodeConfiguration } from "./codec.js";
import type { ClusterConfiguration } from "./configuration.js";

/**
 * Highest ballot round: rounds only grow by one per refused attempt, so this is never reached in use; with
 * `MAX_BALLOT_ROUND_STEP` it keeps a round past 2^53 out of the state.
 */
export const MAX_BALLOT_ROUND = 2 ** 31 - 1;

/**
 * Most a ballot's round may exceed the round a member promised for the version (or 0): a coordinator goes one round
 * above what it saw refused, so a larger step is no coordinator's, and refusing it keeps one request from using up
 * the rounds of a version.
 */
export const MAX_BALLOT_ROUND_STEP = 1_000;

/** A proposal number: the higher round wins, and at equal rounds the higher broker id, so no two brokers share one. */
export interface Ballot {
  readonly round: number;
  readonly brokerId: number;
}

/** Orders ballots: negative when `left` is lower than `right`, 0 when they are the same ballot. */
export function compareBallots(left: Ballot, right: Ballot): number {
  return left.round !== right.round ? left.round - right.round : left.brokerId - right.brokerId;
}

/** A change a member accepted: the ballot it came with and the whole configuration recording it (encoded). */
export interface AcceptedChange {
  readonly ballot: Ballot;
  readonly configuration: string;
}

/** What a member promised and accepted for one configuration version; persisted before it answers. */
export interface AcceptorState {
  /** The configuration version the promise and the acceptance are about. */
  readonly version: number;
  readonly promised: Ballot;
  readonly accepted: AcceptedChange | null;
  /**
   * The member abstains for `version`: it started without its data (a replaced disk) while it was a member, so it
   * cannot know what it promised for that version before, and answers no proposal for it. Later versions are normal.
   */
  readonly abstaining?: true;
}

/** A member's answer to `prepare`. */
export type PrepareAnswer =
  | { readonly outcome: "promised"; readonly accepted: AcceptedChange | null }
  | { readonly outcome: "rejected"; readonly promised: Ballot }
  /** The member holds `version` or a later one already: the asker planned on a view that lags. */
  | { readonly outcome: "behind" }
  /** The member abstains for `version` (see `AcceptorState.abstaining`): it counts as no answer. */
  | { readonly outcome: "abstaining" };

/** A member's answer to `accept`. */
export type AcceptAnswer =
  | { readonly outcome: "accepted" }
  | { readonly outcome: "rejected"; readonly promised: Ballot }
  | { readonly outcome: "behind" }
  | { readonly outcome: "abstaining" };

/** An answer and the state the member must persist before sending it (null: the state did not change). */
export interface AcceptorStep<Answer> {
  readonly answer: Answer;
  readonly state: AcceptorState | null;
}

/**
 * Checks a request for `version` under `ballot` and answers what a member's state says of it: `behind` when the
 * member holds the version already or promised for a later one (the asker lags), `rejected` when it promised a
 * higher ballot for the version (or the same one, when `sameBallotAllowed` is false), else the state that counts
 * for the version (null when none: a state about an earlier version is spent, since that version was decided).
 */
function standing(
  state: AcceptorState | null,
  heldVersion: number,
  version: number,
  ballot: Ballot,
  sameBallotAllowed: boolean,
): { readonly refusal: AcceptAnswer & PrepareAnswer } | { readonly current: AcceptorState | null } {
  if (!Number.isSafeInteger(version) || version < 2) throw new Error(`change acceptance: invalid version ${version}`);
  if (
    !Number.isSafeInteger(ballot.round) ||
    ballot.round < 1 ||
    ballot.round > MAX_BALLOT_ROUND ||
    !Number.isSafeInteger(ballot.brokerId)
  ) {
    throw new Error(`change acceptance: invalid ballot ${JSON.stringify(ballot)}`);
  }
  if (heldVersion >= version || (state !== null && state.version > version)) return { refusal: { outcome: "behind" } };
  const current = state !== null && state.version === version ? state : null;
  if (ballot.round > (current?.promised.round ?? 0) + MAX_BALLOT_ROUND_STEP) {
    throw new Error(`change acceptance: round ${ballot.round} is more than ${MAX_BALLOT_ROUND_STEP} above the promise`);
  }
  if (current === null) return { current };
  if (current.abstaining === true) return { refusal: { outcome: "abstaining" } };
  const order = compareBallots(current.promised, ballot);
  if (order > 0 || (order === 0 && !sameBallotAllowed)) {
    return { refusal: { outcome: "rejected", promised: current.promised } };
  }
  return { current };
}

/**
 * Phase 1 at a member holding configuration version `heldVersion`: promise `ballot` for `version`, or refuse.
 * `othersHoldNothing`: the coordinator saw every other member promise `ballot` with nothing accepted for `version`
 * while fewer than a majority abstain, so nothing can have been chosen for it (every majority includes a member that
 * remembers), and an abstaining member may promise (see `AcceptorState.abstaining`).
 */
export function prepare(
  state: AcceptorState | null,
  heldVersion: number,
  version: number,
  ballot: Ballot,
  othersHoldNothing = false,
): AcceptorStep<PrepareAnswer> {
  const released = othersHoldNothing && state?.version === version && state.abstaining === true ? null : state;
  const found = standing(released, heldVersion, version, ballot, false);
  if ("refusal" in found) return { answer: found.refusal, state: null };
  const accepted = found.current?.accepted ?? null;
  return { answer: { outcome: "promised", accepted }, state: { version, promised: ballot, accepted } };
}

/** Phase 2 at a member holding configuration version `heldVersion`: accept `configuration` under `ballot`, or refuse. */
export function accept(
  state: AcceptorState | null,
  heldVersion: number,
  version: number,
  ballot: Ballot,
  configuration: string,
): AcceptorStep<AcceptAnswer> {
  const found = standing(state, heldVersion, version, ballot, true);
  if ("refusal" in found) return { answer: found.refusal, state: null };
  return { answer: { outcome: "accepted" }, state: { version, promised: ballot, accepted: { ballot, configuration } } };
}

/** What phase 1 decided, from the answers of the members (null: a member that did not answer). */
export type PrepareTally =
  /** A majority promised; `adopt` is the change phase 2 must propose instead of the coordinator's own, if any. */
  | { readonly outcome: "majority"; readonly adopt: AcceptedChange | null }
  /** A member holds the version already: plan again on its configuration. */
  | { readonly outcome: "behind" }
  /** No majority promised; `highestRound`: the highest round a member had promised (retry above it). */
  | { readonly outcome: "no-majority"; readonly highestRound: number; readonly answered: number };

/**
 * Tallies phase 1: `answers` holds one entry per member asked, and `quorum` promises decide (a majority of them by
 * default; a forced change needs every broker it keeps, see `ChangeCoordinator.change`).
 */
export function tallyPromises(
  answers: readonly (PrepareAnswer | null)[],
  quorum: number = majorityOf(answers.length),
): PrepareTally {
  assertQuorum(quorum, answers.length);
  let promises = 0;
  let answered = 0;
  let highestRound = 0;
  let adopt: AcceptedChange | null = null;
  for (const answer of answers) {
    if (answer === null || answer.outcome === "abstaining") continue;
    answered++;
    if (answer.outcome === "behind") return { outcome: "behind" };
    if (answer.outcome === "rejected") {
      highestRound = Math.max(highestRound, answer.promised.round);
      continue;
    }
    promises++;
    if (answer.accepted !== null && (adopt === null || compareBallots(answer.accepted.ballot, adopt.ballot) > 0)) {
      adopt = answer.accepted;
    }
  }
  if (promises >= quorum) return { outcome: "majority", adopt };
  return { outcome: "no-majority", highestRound, answered };
}

/** What phase 2 decided. */
export type AcceptTally =
  | { readonly outcome: "chosen" }
  | { readonly outcome: "behind" }
  /** `accepted`: how many members accepted the change under this ballot (a later proposal may still adopt it). */
  | {
      readonly outcome: "no-majority";
      readonly highestRound: number;
      readonly answered: number;
      readonly accepted: number;
    };

/** Tallies phase 2: `answers` holds one entry per member asked, and `quorum` acceptances choose (see `tallyPromises`). */
export function tallyAcceptances(
  answers: readonly (AcceptAnswer | null)[],
  quorum: number = majorityOf(answers.length),
): AcceptTally {
  assertQuorum(quorum, answers.length);
  let acceptances = 0;
  let answered = 0;
  let highestRound = 0;
  let behind = false;
  for (const answer of answers) {
    if (answer === null || answer.outcome === "abstaining") continue;
    answered++;
    if (answer.outcome === "accepted") acceptances++;
    else if (answer.outcome === "rejected") highestRound = Math.max(highestRound, answer.promised.round);
    else behind = true;
  }
  // A member that holds the version already may have recorded this very change (the coordinator's gossip can reach
  // it between the phases), so a majority of acceptances decides before `behind` does.
  if (acceptances >= quorum) return { outcome: "chosen" };
  if (behind) return { outcome: "behind" };
  return { outcome: "no-majority", highestRound, answered, accepted: acceptances };
}

/** The smallest majority of `count` members. */
export function majorityOf(count: number): number {
  return Math.floor(count / 2) + 1;
}

function assertQuorum(quorum: number, memberCount: number): void {
  if (!Number.isSafeInteger(quorum) || quorum < majorityOf(memberCount) || quorum > memberCount) {
    throw new Error(`change acceptance: a quorum of ${quorum} of ${memberCount} members`);
  }
}

/** Checks a ballot received from another broker or read back from disk; returns it typed or a description. */
export function parseBallot(value: unknown): Ballot | string {
  if (typeof value !== "object" || value === null) return "a ballot must be an object";
  const { round, brokerId } = value as Record<string, unknown>;
  if (!Number.isSafeInteger(round) || (round as number) < 1 || (round as number) > MAX_BALLOT_ROUND) {
    return `a ballot's round must be an integer from 1 to ${MAX_BALLOT_ROUND}`;
  }
  if (!Number.isSafeInteger(brokerId) || (brokerId as number) < 0) return "a ballot's brokerId must be an integer ≥ 0";
  return { round: round as number, brokerId: brokerId as number };
}

/** Checks an acceptor state read back from disk; returns it typed or a description of what is wrong. */
export function parseAcceptorState(value: unknown): AcceptorState | string {
  if (typeof value !== "object" || value === null) return "the state must be an object";
  const { version, promised, accepted, abstaining } = value as Record<string, unknown>;
  if (!Number.isSafeInteger(version) || (version as number) < 2) return "version must be an integer ≥ 2";
  const promisedBallot = parseBallot(promised);
  if (typeof promisedBallot === "string") return `promised: ${promisedBallot}`;
  if (abstaining !== undefined && abstaining !== true) return "abstaining must be true or absent";
  if (abstaining === true) {
    if (accepted !== null) return "an abstaining member accepted nothing";
    return { version: version as number, promised: promisedBallot, accepted: null, abstaining: true };
  }
  if (accepted === null) return { version: version as number, promised: promisedBallot, accepted: null };
  if (typeof accepted !== "object" || accepted === undefined) return "accepted must be an object or null";
  const { ballot, configuration } = accepted as Record<string, unknown>;
  const acceptedBallot = parseBallot(ballot);
  if (typeof acceptedBallot === "string") return `accepted: ${acceptedBallot}`;
  if (typeof configuration !== "string") return "accepted.configuration must be a string";
  if (compareBallots(acceptedBallot, promisedBallot) > 0) return "the accepted ballot is above the promised one";
  return {
    version: version as number,
    promised: promisedBallot,
    accepted: { ballot: acceptedBallot, configuration },
  };
}

/**
 * Why `configuration` (encoded) is no configuration of version `version` recording a new change, or null when it is
 * one. A member checks this before it accepts: a value it accepted may be chosen and must be recorded by every later
 * coordinator, so one that does not decode would stop every later change.
 */
export function recordedChangeProblem(configuration: string, version: number): string | null {
  let decoded: ClusterConfiguration;
  try {
    decoded = decodeConfiguration(configuration);
  } catch (error) {
    if (error instanceof ConfigurationDecodeError) return error.message.slice(0, 200);
    throw error;
  }
  if (decoded.version !== version) return `the configuration is of version ${decoded.version}, not ${version}`;
  if (decoded.pendingChange?.id !== version) return `the configuration records no change ${version}`;
  return null;
}
