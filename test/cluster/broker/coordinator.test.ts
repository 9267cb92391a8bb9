/**
 * The coordinator deciding from a view that lags behind the other brokers': it gathers their configurations first,
 * so a cancel neither erases operations that ran meanwhile nor undoes a started scale-up (and a change that adds
 * partitions is cancelled only with a majority of the brokers heard), and a new change is not recorded beside one
 * another broker recorded.
 */
import pino from "pino";
import { describe, expect, it } from "vitest";
import { ChangeCoordinator, type CoordinatorContext } from "../../../src/cluster/broker/coordinator.js";
import {
  beginOperation,
  type ClusterConfiguration,
  type ClusterOperation,
  completeOperation,
  decodeConfiguration,
  initialConfiguration,
  mergeConfigurations,
  roundRobinDistribution,
  startChange,
} from "../../../src/cluster/topology/index.js";

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
 * Broker 0's coordinator, holding `own`; the other brokers answer with what `held` gives them (null: no answer).
 * Returns it with a way to read broker 0's configuration.
 */
function coordinatorOf(
  own: ClusterConfiguration,
  held: (brokerId: number) => ClusterConfiguration | null,
): { coordinator: ChangeCoordinator; configuration: () => ClusterConfiguration; asked: number[] } {
  let current = own;
  const asked: number[] = [];
  const context: CoordinatorContext = {
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
