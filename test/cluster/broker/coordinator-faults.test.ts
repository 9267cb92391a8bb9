/**
 * A change's acceptance under faults a review found (2026-11-30): a forced change beside a normal one, a chosen
 * change not yet recorded, answers lost after a member accepted, and a member that holds the version already. Each
 * coordinator here runs the real `ChangeCoordinator` against members that answer with the pure acceptor rules, with
 * each request answered, answered but its answer lost, or not delivered, as the test says.
 */
import pino from "pino";
import { describe, expect, it } from "vitest";
import { ChangeCoordinator, type CoordinatorContext } from "../../../src/cluster/broker/coordinator.js";
import {
  type AcceptAnswer,
  type AcceptorState,
  type AcceptorStep,
  accept,
  type ClusterConfiguration,
  decodeConfiguration,
  encodeConfiguration,
  initialConfiguration,
  mergeConfigurations,
  prepare,
  roundRobinDistribution,
  startChange,
} from "../../../src/cluster/topology/index.js";

const startedAt = "2026-11-30T00:00:00.000Z";

function brokers(count: number, partitionCount: number, replicationFactor: number): ClusterConfiguration {
  const ids = Array.from({ length: count }, (_, id) => id);
  return initialConfiguration({
    clusterSize: count,
    partitionCount,
    replicationFactor,
    distribution: roundRobinDistribution(ids, partitionCount, replicationFactor),
    nowIso: startedAt,
  });
}

type Delivery = "answer" | "lost-answer" | "drop";

/** Members holding configurations and acceptor states; coordinators on them see what `delivery` lets through. */
class Members {
  readonly held = new Map<number, ClusterConfiguration>();
  readonly states = new Map<number, AcceptorState | null>();
  delivery: (from: number, to: number, phase: "prepare" | "accept") => Delivery = () => "answer";
  /** Replaces a member's accept answer once its state changed (a member that heard of the version meanwhile). */
  acceptHook: ((to: number, configuration: string, answer: AcceptAnswer) => AcceptAnswer) | null = null;

  constructor(base: ClusterConfiguration) {
    for (const brokerId of base.members.keys()) this.held.set(brokerId, base);
  }

  private step<Answer>(to: number, step: AcceptorStep<Answer>, delivery: Delivery): Answer | null {
    if (step.state !== null) this.states.set(to, step.state);
    return delivery === "lost-answer" ? null : step.answer;
  }

  acceptorsOf(from: number): Pick<CoordinatorContext, "prepareChange" | "acceptChange"> {
    return {
      prepareChange: async (to, version, ballot, othersHoldNothing) => {
        const delivery = this.delivery(from, to, "prepare");
        if (delivery === "drop") return null;
        const held = this.held.get(to)?.version ?? 0;
        const state = this.states.get(to) ?? null;
        return this.step(to, prepare(state, held, version, ballot, othersHoldNothing === true), delivery);
      },
      acceptChange: async (to, version, ballot, configuration) => {
        const delivery = this.delivery(from, to, "accept");
        if (delivery === "drop") return null;
        const held = this.held.get(to)?.version ?? 0;
        const step = accept(this.states.get(to) ?? null, held, version, ballot, configuration);
        const answer = this.acceptHook?.(to, configuration, step.answer) ?? step.answer;
        return this.step(to, { answer, state: step.state }, delivery);
      },
    };
  }

  coordinatorAt(nodeId: number, reachable: (brokerId: number) => boolean): ChangeCoordinator {
    return new ChangeCoordinator({
      ...this.acceptorsOf(nodeId),
      nodeId,
      logger: pino({ level: "silent" }),
      partitionScalingEnabled: false,
      configuration: () => this.held.get(nodeId) as ClusterConfiguration,
      merge: async (next) => {
        const merged = mergeConfigurations(this.held.get(nodeId) as ClusterConfiguration, next).configuration;
        this.held.set(nodeId, merged);
        return merged;
      },
      configurationOf: async (brokerId) => (reachable(brokerId) ? (this.held.get(brokerId) ?? null) : null),
      isReachable: reachable,
      knownBrokers: () => [0, 1, 2, 3, 4, 5],
      now: () => startedAt,
    });
  }
}

describe("a change's acceptance under faults", () => {
  it("a forced change needs every broker it keeps, so it and a normal change are never both answered 202", async () => {
    const members = new Members(brokers(5, 5, 3));
    // Brokers 0, 1, 2 and 3, 4 cannot reach each other, and broker 2 does not answer broker 3.
    const side = (brokerId: number): number => (brokerId <= 2 ? 0 : 1);
    members.delivery = (from, to) => (side(from) === side(to) ? "answer" : "drop");
    const normal = await members
      .coordinatorAt(0, (brokerId) => side(brokerId) === 0)
      .change({ kind: "join", brokerId: 0, partitionId: 3, priority: 1 }, false);
    // On the other side an operator removes brokers 0 and 1 by force, keeping 2, 3 and 4.
    const forced = await members
      .coordinatorAt(3, (brokerId) => side(brokerId) === 1)
      .change({ kind: "brokers", body: [2, 3, 4], force: true }, false);
    expect(normal.outcome).toBe("planned");
    expect(forced).toEqual({
      outcome: "refused",
      status: 409,
      detail:
        "the change must be accepted by every broker it keeps (3), and only 2 answered; send the request again " +
        "once they all run and are reachable",
    });
  });

  it("a change a majority chose but nobody recorded is what a later forced change records instead of its own", async () => {
    const base = brokers(5, 5, 3);
    const members = new Members(base);
    // Broker 0's change was accepted by brokers 0, 1 and 2 (a majority of five); broker 0 crashed before recording.
    const chosen = startChange(
      base,
      [{ operation: "PARTITION_JOIN", brokerId: 0, partitionId: 3, priority: 1 }],
      startedAt,
    );
    const acceptors = members.acceptorsOf(0);
    for (const brokerId of [0, 1, 2]) {
      await acceptors.prepareChange(brokerId, 2, { round: 1, brokerId: 0 });
      await acceptors.acceptChange(brokerId, 2, { round: 1, brokerId: 0 }, encodeConfiguration(chosen));
    }
    // Broker 3 coordinates for brokers 3 and 4, which do not hear broker 0 (nor broker 2, for the moment).
    const coordinator = members.coordinatorAt(3, (brokerId) => brokerId >= 3);
    const forcedRequest = { kind: "brokers" as const, body: [2, 3, 4], force: true };
    members.delivery = (_from, to) => (to === 2 ? "drop" : "answer");
    expect(await coordinator.change(forcedRequest, false)).toMatchObject({
      outcome: "refused",
      status: 409,
      detail: expect.stringMatching(/^the change must be accepted by every broker it keeps \(3\), and only 2 answered/),
    });
    // Once broker 2 answers, its promise reports the chosen change, which is what version 2 becomes.
    members.delivery = () => "answer";
    expect(await coordinator.change(forcedRequest, false)).toEqual({
      outcome: "refused",
      status: 409,
      detail: "Another configuration change [2] is in progress",
    });
    expect(encodeConfiguration(members.held.get(3) as ClusterConfiguration)).toBe(encodeConfiguration(chosen));
  });

  it("says a change whose acceptances were lost is not recorded yet, and records it when the same request comes again", async () => {
    const members = new Members(brokers(3, 1, 1));
    // Broker 1 accepts, but its answers never arrive; broker 2 gets no accept.
    members.delivery = (_from, to, phase) =>
      phase === "accept" && to === 1 ? "lost-answer" : phase === "accept" && to === 2 ? "drop" : "answer";
    const coordinator = members.coordinatorAt(0, () => true);
    const first = await coordinator.change({ kind: "add-broker", brokerId: 3 }, false);
    expect(first).toMatchObject({
      outcome: "refused",
      status: 409,
      detail: expect.stringMatching(/^change 2 was accepted by 1 broker, but .* send the same request again/),
    });
    expect(members.held.get(0)?.pendingChange).toBeNull();
    // A majority (brokers 0 and 1) did accept it: the same request, sent again, finds it and records it.
    members.delivery = () => "answer";
    const again = await coordinator.change({ kind: "add-broker", brokerId: 3 }, false);
    expect(again).toMatchObject({ outcome: "planned", change: { changeId: 2 } });
    expect(members.held.get(0)?.pendingChange?.pending).toEqual([{ operation: "BROKER_ADD", brokerId: 3 }]);
    // Another request instead of the same one is told which change is in progress.
    expect(await coordinator.change({ kind: "add-broker", brokerId: 4 }, false)).toMatchObject({
      outcome: "refused",
      status: 409,
      detail: "Another configuration change [2] is in progress",
    });
  });

  it("answers 202 when a member that holds the version already holds this very change", async () => {
    const members = new Members(brokers(3, 1, 1));
    // Broker 1's accept answer is lost; broker 2 heard of the change by gossip before it answered (another
    // coordinator adopted and recorded it), so it answers that it holds the version.
    members.delivery = (_from, to, phase) => (phase === "accept" && to === 1 ? "lost-answer" : "answer");
    members.acceptHook = (to, configuration, answer) => {
      if (to !== 2) return answer;
      members.held.set(2, decodeConfiguration(configuration));
      return { outcome: "behind" };
    };
    const answer = await members.coordinatorAt(0, () => true).change({ kind: "add-broker", brokerId: 3 }, false);
    expect(answer).toMatchObject({ outcome: "planned", change: { changeId: 2 } });
    expect(members.held.get(0)?.pendingChange?.pending).toEqual([{ operation: "BROKER_ADD", brokerId: 3 }]);
  });

  it("lets a broker that lost its data take part once every other member holds nothing for the version", async () => {
    // Two brokers: broker 1 came back without its data and abstains for version 2, which alone would block every
    // change of this cluster for good.
    const members = new Members(brokers(2, 1, 1));
    members.states.set(1, { version: 2, promised: { round: 1, brokerId: 0 }, accepted: null, abstaining: true });
    const answer = await members.coordinatorAt(0, () => true).change({ kind: "add-broker", brokerId: 3 }, false);
    expect(answer).toMatchObject({ outcome: "planned", change: { changeId: 2 } });
    expect(members.states.get(1)).toMatchObject({ version: 2, accepted: { ballot: { brokerId: 0 } } });
    expect(members.states.get(1)?.abstaining).toBeUndefined();

    // Not when the member that does remember holds an acceptance: it may have been chosen with the abstaining one.
    const other = new Members(brokers(3, 1, 1));
    for (const brokerId of [1, 2]) {
      other.states.set(brokerId, { version: 2, promised: { round: 1, brokerId: 0 }, accepted: null, abstaining: true });
    }
    // Two of three abstain: together they are a majority, so they stay out, and the answer names them.
    expect(await other.coordinatorAt(0, () => true).change({ kind: "add-broker", brokerId: 3 }, false)).toEqual({
      outcome: "refused",
      status: 409,
      detail:
        "the change must be accepted by a majority of the 3 brokers (2), and brokers 1, 2 abstain from change 2 " +
        "(they started without their data) while only 1 others answered; they take part once every other member " +
        "answers with nothing accepted for it, so send the request again once all the others run and are reachable",
    });
  });

  it("says a change recorded meanwhile has ended, rather than only to send the request again", async () => {
    const base = brokers(3, 1, 1);
    const members = new Members(base);
    // Another coordinator recorded change 2 (the same operations), and it has completed; broker 2 holds the result.
    const recorded = startChange(base, [{ operation: "BROKER_ADD", brokerId: 3 }], startedAt);
    members.acceptHook = (to, _configuration, answer) => {
      if (to !== 2) return answer;
      members.held.set(2, {
        ...recorded,
        version: 3,
        pendingChange: null,
        lastChange: { id: 2, status: "COMPLETED", startedAt, completedAt: startedAt },
      });
      return { outcome: "behind" };
    };
    members.delivery = (_from, to, phase) => (phase === "accept" && to === 1 ? "drop" : "answer");
    expect(await members.coordinatorAt(0, () => true).change({ kind: "add-broker", brokerId: 3 }, false)).toMatchObject(
      {
        outcome: "refused",
        status: 409,
        detail: expect.stringMatching(
          /^change 2 was recorded meanwhile and has ended COMPLETED; if it was this request's/,
        ),
      },
    );
  });
});
