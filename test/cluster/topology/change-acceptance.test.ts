/**
 * Accepting a new change by a majority: the acceptor's rules, the tallies, the state read back from disk, and a
 * seeded property over competing proposers whose requests are lost, delayed and reordered: at most one change is
 * ever chosen for a version, and a later proposer records that change rather than its own.
 */
import { describe, expect, it } from "vitest";
import { SeededRandom } from "../../../src/cluster/raft/core/random.js";
import {
  type AcceptAnswer,
  type AcceptorState,
  accept,
  type Ballot,
  compareBallots,
  type PrepareAnswer,
  parseAcceptorState,
  prepare,
  tallyAcceptances,
  tallyPromises,
} from "../../../src/cluster/topology/index.js";

const ballot = (round: number, brokerId: number): Ballot => ({ round, brokerId });

describe("an acceptor", () => {
  it("promises a ballot above any it promised for the version, and reports what it accepted", () => {
    const first = prepare(null, 4, 5, ballot(1, 0));
    expect(first).toEqual({
      answer: { outcome: "promised", accepted: null },
      state: { version: 5, promised: ballot(1, 0), accepted: null },
    });
    const accepted = accept(first.state, 4, 5, ballot(1, 0), "change of broker 0");
    expect(accepted.answer).toEqual({ outcome: "accepted" });
    // A higher ballot is promised, and learns what the member accepted under the lower one.
    expect(prepare(accepted.state, 4, 5, ballot(1, 1)).answer).toEqual({
      outcome: "promised",
      accepted: { ballot: ballot(1, 0), configuration: "change of broker 0" },
    });
    // The same or a lower ballot is refused with the promise that stands.
    expect(prepare(accepted.state, 4, 5, ballot(1, 0)).answer).toEqual({ outcome: "rejected", promised: ballot(1, 0) });
    expect(prepare(accepted.state, 4, 5, ballot(0 + 1, 0)).state).toBeNull();
  });

  it("accepts only under a ballot at or above its promise", () => {
    const promised = prepare(null, 4, 5, ballot(2, 1)).state;
    expect(accept(promised, 4, 5, ballot(1, 2), "older").answer).toEqual({
      outcome: "rejected",
      promised: ballot(2, 1),
    });
    expect(accept(promised, 4, 5, ballot(2, 1), "promised").answer).toEqual({ outcome: "accepted" });
    expect(accept(promised, 4, 5, ballot(3, 0), "higher").state).toEqual({
      version: 5,
      promised: ballot(3, 0),
      accepted: { ballot: ballot(3, 0), configuration: "higher" },
    });
  });

  it("answers behind when it holds the version already or promised for a later one, and forgets spent versions", () => {
    expect(prepare(null, 5, 5, ballot(1, 0))).toEqual({ answer: { outcome: "behind" }, state: null });
    expect(accept(null, 6, 5, ballot(1, 0), "late")).toEqual({ answer: { outcome: "behind" }, state: null });
    const later: AcceptorState = { version: 7, promised: ballot(1, 2), accepted: null };
    expect(prepare(later, 5, 6, ballot(9, 0)).answer).toEqual({ outcome: "behind" });
    // A promise about version 5, which the member holds now, says nothing about version 6.
    const spent: AcceptorState = { version: 5, promised: ballot(9, 2), accepted: null };
    expect(prepare(spent, 5, 6, ballot(1, 0)).answer).toEqual({ outcome: "promised", accepted: null });
  });

  it("refuses requests no coordinator sends", () => {
    expect(() => prepare(null, 0, 1, ballot(1, 0))).toThrow(/invalid version/);
    expect(() => prepare(null, 0, 2, ballot(0, 0))).toThrow(/invalid ballot/);
    // A round far above the promise is no coordinator's: it would use up the version's rounds at once.
    expect(() => prepare(null, 1, 2, ballot(1_001, 0))).toThrow(/more than 1000 above the promise/);
    const promised = prepare(null, 1, 2, ballot(5, 0)).state;
    expect(prepare(promised, 1, 2, ballot(1_005, 1)).answer.outcome).toBe("promised");
    expect(() => accept(promised, 1, 2, ballot(1_006, 1), "value")).toThrow(/above the promise/);
  });
});

describe("an abstaining acceptor", () => {
  const abstaining: AcceptorState = { version: 5, promised: ballot(1, 0), accepted: null, abstaining: true };

  it("answers nothing for its version until the others are seen to hold nothing, and normally after it", () => {
    expect(prepare(abstaining, 4, 5, ballot(3, 1))).toEqual({ answer: { outcome: "abstaining" }, state: null });
    expect(accept(abstaining, 4, 5, ballot(3, 1), "value").answer).toEqual({ outcome: "abstaining" });
    expect(prepare(abstaining, 4, 5, ballot(3, 1), true)).toEqual({
      answer: { outcome: "promised", accepted: null },
      state: { version: 5, promised: ballot(3, 1), accepted: null },
    });
    expect(prepare(abstaining, 5, 6, ballot(1, 1)).answer).toEqual({ outcome: "promised", accepted: null });
    // It counts as no answer.
    expect(tallyPromises([{ outcome: "promised", accepted: null }, { outcome: "abstaining" }])).toEqual({
      outcome: "no-majority",
      highestRound: 0,
      answered: 1,
    });
  });
});

describe("the tallies", () => {
  const promisedNothing: PrepareAnswer = { outcome: "promised", accepted: null };

  it("need a majority of the members, not of those that answered", () => {
    expect(tallyPromises([promisedNothing, null, null])).toEqual({
      outcome: "no-majority",
      highestRound: 0,
      answered: 1,
    });
    expect(tallyPromises([promisedNothing, promisedNothing, null, null]).outcome).toBe("no-majority");
    expect(tallyPromises([promisedNothing, promisedNothing, null])).toEqual({ outcome: "majority", adopt: null });
    const accepted: AcceptAnswer = { outcome: "accepted" };
    expect(tallyAcceptances([accepted, accepted, null, { outcome: "rejected", promised: ballot(4, 1) }, null])).toEqual(
      { outcome: "no-majority", highestRound: 4, answered: 3, accepted: 2 },
    );
    expect(tallyAcceptances([accepted])).toEqual({ outcome: "chosen" });
  });

  it("adopt the change accepted under the highest ballot", () => {
    const answers: PrepareAnswer[] = [
      { outcome: "promised", accepted: { ballot: ballot(1, 2), configuration: "first" } },
      { outcome: "promised", accepted: { ballot: ballot(2, 0), configuration: "second" } },
      promisedNothing,
    ];
    expect(tallyPromises(answers)).toEqual({
      outcome: "majority",
      adopt: { ballot: ballot(2, 0), configuration: "second" },
    });
  });

  it("answer behind for phase 1, but a majority of acceptances decides before a member that holds the version", () => {
    expect(tallyPromises([promisedNothing, promisedNothing, { outcome: "behind" }])).toEqual({ outcome: "behind" });
    const accepted: AcceptAnswer = { outcome: "accepted" };
    expect(tallyAcceptances([accepted, accepted, { outcome: "behind" }])).toEqual({ outcome: "chosen" });
    expect(tallyAcceptances([accepted, null, { outcome: "behind" }])).toEqual({ outcome: "behind" });
  });
});

describe("an acceptor's state read back", () => {
  it("is taken only whole and consistent", () => {
    const state: AcceptorState = {
      version: 3,
      promised: ballot(2, 1),
      accepted: { ballot: ballot(1, 0), configuration: "{}" },
    };
    expect(parseAcceptorState(JSON.parse(JSON.stringify(state)))).toEqual(state);
    expect(parseAcceptorState({ ...state, accepted: null })).toEqual({ ...state, accepted: null });
    expect(parseAcceptorState({ ...state, version: 1 })).toMatch(/version/);
    expect(parseAcceptorState({ ...state, promised: { round: 0, brokerId: 1 } })).toMatch(/promised/);
    expect(parseAcceptorState({ ...state, accepted: { ballot: ballot(3, 0), configuration: "{}" } })).toMatch(
      /above the promised/,
    );
    expect(parseAcceptorState({ ...state, accepted: { ballot: ballot(1, 0) } })).toMatch(/configuration/);
    expect(parseAcceptorState("state")).toMatch(/object/);
  });
});

/**
 * Proposers and acceptors as they run in the brokers, each request and answer a message that the seeded scheduler
 * delivers in any order, loses, or duplicates; a proposer may stop between its phases (a coordinator that crashed)
 * and a later one takes over with a higher ballot.
 */
function runProposals(seed: number): {
  chosen: Set<string>;
  recorded: Map<number, string>;
  adopted: number;
  lost: number;
} {
  const random = new SeededRandom(seed);
  const memberCount = 3 + random.nextInt(3);
  const states = new Map<number, AcceptorState | null>();
  const chosen = new Set<string>();
  const recorded = new Map<number, string>();
  let adopted = 0;
  let lost = 0;
  const ask = <Answer>(
    member: number,
    step: (state: AcceptorState | null) => { answer: Answer; state: AcceptorState | null },
  ) => {
    if (random.chance(0.2)) {
      lost++;
      return null;
    }
    const result = step(states.get(member) ?? null);
    if (result.state !== null) states.set(member, result.state);
    // An answer lost on its way back: the member's state changed all the same.
    if (random.chance(0.1)) {
      lost++;
      return null;
    }
    return result.answer;
  };
  // Proposers run interleaved: each step of one of them is one phase, and a proposer may stop after any phase.
  const proposers = Array.from({ length: 2 + random.nextInt(3) }, (_, index) => ({
    brokerId: index,
    round: 1 + random.nextInt(2),
    own: `change of proposer ${index}`,
    phase: "prepare" as "prepare" | "accept" | "done",
    value: "",
    attempts: 0,
  }));
  for (let step = 0; step < 200 && proposers.some((proposer) => proposer.phase !== "done"); step++) {
    const running = proposers.filter((proposer) => proposer.phase !== "done");
    const proposer = running[random.nextInt(running.length)]!;
    const members = Array.from({ length: memberCount }, (_, member) => member);
    // Members are asked in any order.
    members.sort(() => random.nextInt(3) - 1);
    const current = ballot(proposer.round, proposer.brokerId);
    if (proposer.phase === "prepare") {
      const answers = members.map((member) => ask(member, (state) => prepare(state, 1, 2, current)));
      const tally = tallyPromises(answers);
      if (tally.outcome === "majority") {
        proposer.value = tally.adopt?.configuration ?? proposer.own;
        if (tally.adopt !== null) adopted++;
        proposer.phase = "accept";
      } else if (tally.outcome === "no-majority") {
        proposer.round = Math.max(proposer.round, tally.highestRound) + 1;
      }
    } else {
      const answers = members.map((member) => ask(member, (state) => accept(state, 1, 2, current, proposer.value)));
      const tally = tallyAcceptances(answers);
      if (tally.outcome === "chosen") {
        chosen.add(proposer.value);
        recorded.set(proposer.brokerId, proposer.value);
        proposer.phase = "done";
      } else {
        proposer.round = Math.max(proposer.round, tally.outcome === "no-majority" ? tally.highestRound : 0) + 1;
        proposer.phase = "prepare";
      }
    }
    proposer.attempts++;
    // A proposer that crashed, or whose client gave up.
    if (proposer.phase !== "done" && (random.chance(0.05) || proposer.attempts > 12)) proposer.phase = "done";
  }
  return { chosen, recorded, adopted, lost };
}

describe("competing proposers", () => {
  it("never choose two changes for one version, over 2,000 seeds, and a later proposer records the chosen change", () => {
    let choices = 0;
    let adoptions = 0;
    let messagesLost = 0;
    let contested = 0;
    for (let seed = 1; seed <= 2_000; seed++) {
      const { chosen, recorded, adopted, lost } = runProposals(seed);
      expect(chosen.size, `seed ${seed}`).toBeLessThanOrEqual(1);
      choices += chosen.size;
      adoptions += adopted;
      messagesLost += lost;
      if (recorded.size > 1) contested++;
    }
    // The harness must have exercised what it claims to: choices, adoptions of another proposer's change, lost
    // messages, and seeds in which two proposers each recorded (the same) change.
    expect(choices).toBeGreaterThan(1_000);
    expect(adoptions).toBeGreaterThan(100);
    expect(messagesLost).toBeGreaterThan(10_000);
    expect(contested).toBeGreaterThan(50);
  });

  it("orders ballots by round, then by broker id", () => {
    expect(compareBallots(ballot(2, 0), ballot(1, 9))).toBeGreaterThan(0);
    expect(compareBallots(ballot(1, 1), ballot(1, 2))).toBeLessThan(0);
    expect(compareBallots(ballot(3, 3), ballot(3, 3))).toBe(0);
  });
});
