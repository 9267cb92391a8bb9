/**
 * The coordinator deciding from a view that lags behind the other brokers': it gathers their configurations first,
 * so a cancel neither erases operations that ran meanwhile nor undoes a started scale-up (and a change that adds
 * partitions is cancelled only with a majority of the brokers heard), and a new change is not recorded beside one
 * another broker recorded.
 */
import pino from "pino";
import { describe, expect, it } from "vitest";
import { ChangeCoordinator, type CoordinatorContext } from "../../../src/cluster/broker/coordinator.js";
import type { ClusterChangeResponse } from "../../../src/cluster/broker/protocol.js";
import { SeededRandom } from "../../../src/cluster/raft/core/random.js";
import {
  beginOperation,
  type ClusterConfiguration,
  type ClusterOperation,
  completeOperation,
  decodeConfiguration,
  encodeConfiguration,
  initialConfiguration,
  mergeConfigurations,
  roundRobinDistribution,
  startChange,
} from "../../../src/cluster/topology/index.js";
import { MemberAcceptors } from "./support.js";

const startedAt = "2026-11-28T00:00:00.000Z";
const cancelledAt = "2026-11-28T00:00:05.000Z";

function threeBrokers(partitionCount: number): ClusterConfiguration {
  return initialConfiguration({
    clusterSize: 3,
    partitionCount,
    replicationFactor: 1,
    distribution: roundRobinDistribution([0, 1, 2], partitionCount, 1),
    nowIso: startedAt,
  });
}

/** `configuration` with its first `count` pending operations begun and completed, as their brokers do. */
function progressed(configuration: ClusterConfiguration, count: number): ClusterConfiguration {
  let result = configuration;
  for (let step = 0; step < count; step += 1) result = completeOperation(beginOperation(result, startedAt), startedAt);
  return result;
}

/**
 * Broker 0's coordinator, holding `own`; the other brokers answer with what `held` gives them (null: no answer), and
 * accept a change as members holding that configuration do. Returns it with a way to read broker 0's configuration.
 */
function coordinatorOf(
  own: ClusterConfiguration,
  held: (brokerId: number) => ClusterConfiguration | null,
): { coordinator: ChangeCoordinator; configuration: () => ClusterConfiguration; asked: number[] } {
  let current = own;
  const asked: number[] = [];
  const acceptors = new MemberAcceptors((brokerId) => (brokerId === 0 ? current : held(brokerId))?.version ?? null);
  const context: CoordinatorContext = {
    ...acceptors.context(),
    nodeId: 0,
    logger: pino({ level: "silent" }),
    partitionScalingEnabled: true,
    configuration: () => current,
    merge: async (next) => {
      current = mergeConfigurations(current, next).configuration;
      return current;
    },
    configurationOf: async (brokerId) => {
      asked.push(brokerId);
      return held(brokerId);
    },
    isReachable: () => true,
    knownBrokers: () => [0, 1, 2],
    now: () => cancelledAt,
  };
  return { coordinator: new ChangeCoordinator(context), configuration: () => current, asked };
}

describe("ChangeCoordinator deciding from a view that lags", () => {
  it("merges what the other brokers hold first, so the operations that ran meanwhile stay applied", async () => {
    // Partition 1 moves from broker 0 to broker 1: broker 1 joined it, which broker 0 has not heard yet.
    const plan: ClusterOperation[] = [
      { operation: "PARTITION_JOIN", brokerId: 1, partitionId: 1, priority: 1 },
      { operation: "PARTITION_LEAVE", brokerId: 0, partitionId: 1 },
    ];
    const started = startChange(threeBrokers(1), plan, startedAt);
    const joined = progressed(started, 1);
    const { coordinator, configuration, asked } = coordinatorOf(started, (brokerId) =>
      brokerId === 1 ? joined : started,
    );

    const answer = await coordinator.cancel(started.pendingChange!.id);
    expect(answer.outcome).toBe("status");
    expect(asked.sort()).toEqual([1, 2]);
    const cancelled = configuration();
    expect(cancelled.lastChange).toMatchObject({ id: started.pendingChange!.id, status: "CANCELLED" });
    // The join stays applied: broker 1 hosts the partition, ACTIVE, as the group it joined counts it.
    expect(cancelled.members.get(1)?.partitions.get(1)?.state).toBe("ACTIVE");
    expect(cancelled.members.get(0)?.partitions.get(1)?.state).toBe("ACTIVE");
    if (answer.outcome === "status") expect(decodeConfiguration(answer.configuration)).toEqual(cancelled);
  });

  const scaleUp: ClusterOperation[] = [
    { operation: "START_PARTITION_SCALE_UP", brokerId: 0 },
    { operation: "PARTITION_BOOTSTRAP", brokerId: 1, partitionId: 4, priority: 1 },
    { operation: "AWAIT_REDISTRIBUTION", brokerId: 0 },
    { operation: "AWAIT_RELOCATION", brokerId: 0 },
  ];

  it("refuses to cancel a scale-up whose routing another broker started to change while this one lagged", async () => {
    const started = startChange(threeBrokers(3), scaleUp, startedAt);
    // Broker 1 acted as coordinator while broker 0 was paused: new partition 4 takes messages already.
    const redistributed = progressed(started, 3);
    expect(redistributed.routing.messageCorrelation.partitionCount).toBe(4);
    const { coordinator, configuration } = coordinatorOf(started, (brokerId) =>
      brokerId === 1 ? redistributed : null,
    );

    expect(await coordinator.cancel(started.pendingChange!.id)).toMatchObject({
      outcome: "refused",
      status: 409,
      detail: expect.stringContaining("has started to change the routing"),
    });
    // Broker 0 took the progress it heard of, and the change runs on.
    expect(configuration().pendingChange?.completed).toHaveLength(3);
    expect(configuration().members.get(1)?.partitions.has(4)).toBe(true);
  });

  it("cancels a scale-up that has not started only with a majority of the brokers heard", async () => {
    const started = startChange(threeBrokers(3), scaleUp, startedAt);
    const changeId = started.pendingChange!.id;
    // Cut off from brokers 1 and 2, broker 0 cannot tell whether one of them went on with the change.
    const alone = coordinatorOf(started, () => null);
    expect(await alone.coordinator.cancel(changeId)).toEqual({
      outcome: "refused",
      status: 409,
      detail:
        `change ${changeId} adds partitions, and cancelling it needs the configurations of a majority of the brokers, ` +
        "to be sure its routing has not started to change: brokers 1, 2 did not answer; try again once most brokers " +
        "run and are reachable",
    });
    expect(alone.configuration().pendingChange?.id).toBe(changeId);
    // With broker 2 heard, two of three: cancelled.
    const withTwo = coordinatorOf(started, (brokerId) => (brokerId === 2 ? started : null));
    expect((await withTwo.coordinator.cancel(changeId)).outcome).toBe("status");
    expect(withTwo.configuration().lastChange?.status).toBe("CANCELLED");
  });

  it("cancels any other change even when no other broker answers (a change stuck on dead brokers)", async () => {
    const plan: ClusterOperation[] = [{ operation: "PARTITION_JOIN", brokerId: 1, partitionId: 1, priority: 1 }];
    const started = startChange(threeBrokers(1), plan, startedAt);
    const { coordinator, configuration } = coordinatorOf(started, () => null);
    expect((await coordinator.cancel(started.pendingChange!.id)).outcome).toBe("status");
    expect(configuration().lastChange?.status).toBe("CANCELLED");
  });

  it("refuses a change while another broker holds one this broker has not heard of yet, instead of recording a second under the same id", async () => {
    const quiet = threeBrokers(1);
    const plan: ClusterOperation[] = [{ operation: "PARTITION_JOIN", brokerId: 1, partitionId: 1, priority: 1 }];
    // Broker 1 coordinated while broker 0 was paused, and recorded a change broker 0 has not heard of.
    const recordedElsewhere = startChange(quiet, plan, startedAt);
    const { coordinator, configuration } = coordinatorOf(quiet, (brokerId) =>
      brokerId === 1 ? recordedElsewhere : quiet,
    );
    expect(await coordinator.change({ kind: "add-broker", brokerId: 3 }, false)).toEqual({
      outcome: "refused",
      status: 409,
      detail: `Another configuration change [${recordedElsewhere.pendingChange!.id}] is in progress`,
    });
    expect(configuration().pendingChange).toEqual(recordedElsewhere.pendingChange);
  });
});

/**
 * Brokers 0 and 1 both acting as coordinator (each cut off from the other's view for a moment), each asked for a
 * different change at the same moment, while gossip and the members' answers arrive in an order a seed decides.
 */
async function twoCoordinators(seed: number): Promise<{
  outcomes: ClusterChangeResponse[];
  held: ClusterConfiguration[];
  asked: number;
}> {
  const random = new SeededRandom(seed);
  const held = [threeBrokers(1), threeBrokers(1), threeBrokers(1)];
  const gossipOnce = (): void => {
    const from = random.nextInt(3);
    const to = random.nextInt(3);
    held[to] = mergeConfigurations(held[to]!, held[from]!).configuration;
  };
  const pause = async (): Promise<void> => {
    for (let turn = random.nextInt(4); turn > 0; turn--) {
      if (random.chance(0.3)) gossipOnce();
      await new Promise((resolve) => setImmediate(resolve));
    }
  };
  // Each request may be lost (the member is slow or unreachable for this coordinator).
  const acceptors = new MemberAcceptors((brokerId) => (random.chance(0.15) ? null : held[brokerId]!.version), pause);
  const coordinatorAt = (nodeId: number): ChangeCoordinator =>
    new ChangeCoordinator({
      ...acceptors.context(),
      nodeId,
      logger: pino({ level: "silent" }),
      partitionScalingEnabled: false,
      configuration: () => held[nodeId]!,
      merge: async (next) => {
        await pause();
        held[nodeId] = mergeConfigurations(held[nodeId]!, next).configuration;
        return held[nodeId]!;
      },
      configurationOf: async (brokerId) => {
        await pause();
        return random.chance(0.2) ? null : held[brokerId]!;
      },
      // Broker 1 does not hear broker 0 for the moment, so it coordinates too.
      isReachable: (brokerId) => nodeId === 0 || brokerId !== 0,
      knownBrokers: () => [0, 1, 2, 3, 4],
      now: () => startedAt,
    });
  const outcomes = await Promise.all([
    coordinatorAt(0).change({ kind: "add-broker", brokerId: 3 }, false),
    coordinatorAt(1).change({ kind: "add-broker", brokerId: 4 }, false),
  ]);
  // Gossip runs until every broker holds the same configuration.
  for (let round = 0; round < 3; round++) {
    for (const from of [0, 1, 2]) {
      for (const to of [0, 1, 2]) held[to] = mergeConfigurations(held[to]!, held[from]!).configuration;
    }
  }
  return { outcomes, held, asked: acceptors.answered.prepare };
}

describe("two brokers coordinating at the same moment", () => {
  it("answer 202 for at most one change, and that change is the one every broker holds, over 300 seeds", async () => {
    let planned = 0;
    let refusedByOther = 0;
    let bothRefused = 0;
    const winners = new Set<number>();
    for (let seed = 1; seed <= 300; seed++) {
      const { outcomes, held } = await twoCoordinators(seed);
      const accepted = outcomes.flatMap((outcome, nodeId) =>
        outcome.outcome === "planned" ? [{ outcome, nodeId }] : [],
      );
      expect(accepted.length, `seed ${seed}`).toBeLessThanOrEqual(1);
      const pending = held[0]!.pendingChange;
      for (const configuration of held) expect(encodeConfiguration(configuration)).toBe(encodeConfiguration(held[0]!));
      const winner = accepted[0];
      if (winner !== undefined && winner.outcome.outcome === "planned") {
        planned++;
        winners.add(winner.nodeId);
        expect(pending?.id, `seed ${seed}`).toBe(winner.outcome.change.changeId);
        expect(pending?.pending[0], `seed ${seed}`).toMatchObject({
          operation: "BROKER_ADD",
          brokerId: 3 + winner.nodeId,
        });
      } else {
        bothRefused++;
      }
      for (const outcome of outcomes) {
        if (outcome.outcome === "refused" && outcome.detail.startsWith("Another configuration change"))
          refusedByOther++;
      }
    }
    // Coverage: either broker won some seeds, the loser was told why, and some seeds recorded nothing at all.
    expect(winners).toEqual(new Set([0, 1]));
    expect(planned).toBeGreaterThan(150);
    expect(refusedByOther).toBeGreaterThan(30);
    expect(bothRefused).toBeGreaterThan(0);
  });

  it("records the change a coordinator had accepted before it crashed, instead of the next request's", async () => {
    const quiet = threeBrokers(1);
    const held = [quiet, quiet, quiet];
    const acceptors = new MemberAcceptors((brokerId) => held[brokerId]!.version);
    // Broker 0 had its change accepted by brokers 0 and 1, and crashed before it recorded it.
    const crashed = startChange(quiet, [{ operation: "BROKER_ADD", brokerId: 3, brokers: [] }], startedAt);
    const ballot = { round: 1, brokerId: 0 };
    for (const brokerId of [0, 1]) {
      expect(await acceptors.context().prepareChange(brokerId, 2, ballot)).toMatchObject({ outcome: "promised" });
      expect(await acceptors.context().acceptChange(brokerId, 2, ballot, encodeConfiguration(crashed))).toEqual({
        outcome: "accepted",
      });
    }
    const coordinator = new ChangeCoordinator({
      ...acceptors.context(),
      nodeId: 1,
      logger: pino({ level: "silent" }),
      partitionScalingEnabled: false,
      configuration: () => held[1]!,
      merge: async (next) => {
        held[1] = mergeConfigurations(held[1]!, next).configuration;
        return held[1]!;
      },
      isReachable: (brokerId) => brokerId !== 0,
      knownBrokers: () => [0, 1, 2, 3, 4],
      now: () => cancelledAt,
    });
    expect(await coordinator.change({ kind: "add-broker", brokerId: 4 }, false)).toEqual({
      outcome: "refused",
      status: 409,
      detail: "Another configuration change [2] is in progress",
    });
    expect(held[1]!.pendingChange?.pending).toEqual([{ operation: "BROKER_ADD", brokerId: 3, brokers: [] }]);
    // The change that was chosen is what broker 1 records, at the version it was chosen for.
    expect(encodeConfiguration(held[1]!)).toBe(encodeConfiguration(crashed));
  });

  it("refuses with the reason when too few brokers answer, and decides a forced change by the brokers it keeps", async () => {
    // Brokers 1 and 2 are gone; broker 0 alone is no majority of three.
    const { coordinator, configuration } = coordinatorOf(threeBrokers(2), () => null);
    expect(await coordinator.change({ kind: "join", brokerId: 0, partitionId: 2, priority: 1 }, false)).toEqual({
      outcome: "refused",
      status: 409,
      detail:
        "the change must be accepted by a majority of the 3 brokers (2), and only 1 answered; send the request " +
        "again once most brokers run and are reachable",
    });
    expect(configuration().pendingChange).toBeNull();
    // Removing them by force is decided by broker 0, the one broker kept. Partition 1 lives on broker 0 only.
    const unreachable = coordinatorOf(threeBrokers(1), () => null);
    const forced = await unreachable.coordinator.change({ kind: "brokers", body: [0], force: true }, false);
    expect(forced.outcome).toBe("planned");
    expect(unreachable.configuration().pendingChange?.pending.map((operation) => operation.operation)).toContain(
      "BROKER_REMOVE",
    );
  });
});
