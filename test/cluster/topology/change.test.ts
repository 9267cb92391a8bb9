import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  applyChange,
  applyOperation,
  beginOperation,
  cancelChange,
  completeOperation,
  OperationError,
  type OperationRule,
  operationInProgress,
  operationShapeProblems,
  startChange,
} from "../../../src/cluster/topology/change.js";
import { encodeConfiguration } from "../../../src/cluster/topology/codec.js";
import {
  type ClusterConfiguration,
  type ClusterOperation,
  MAX_EARLIER_CHANGES,
} from "../../../src/cluster/topology/configuration.js";
import { mergeConfigurations } from "../../../src/cluster/topology/merge.js";
import { planForcedRemoval, planScale } from "../../../src/cluster/topology/planner.js";
import { configurationOf, laterIso, layoutOfConfiguration, nowIso, roundRobinConfiguration } from "./fixtures.js";

const add = (brokerId: number): ClusterOperation => ({ operation: "BROKER_ADD", brokerId });
const remove = (brokerId: number): ClusterOperation => ({ operation: "BROKER_REMOVE", brokerId });
const join = (brokerId: number, partitionId: number, priority: number): ClusterOperation => ({
  operation: "PARTITION_JOIN",
  brokerId,
  partitionId,
  priority,
});
const leave = (brokerId: number, partitionId: number): ClusterOperation => ({
  operation: "PARTITION_LEAVE",
  brokerId,
  partitionId,
});
const reconfigure = (brokerId: number, partitionId: number, priority: number): ClusterOperation => ({
  operation: "PARTITION_RECONFIGURE_PRIORITY",
  brokerId,
  partitionId,
  priority,
});
const bootstrap = (brokerId: number, partitionId: number, priority: number): ClusterOperation => ({
  operation: "PARTITION_BOOTSTRAP",
  brokerId,
  partitionId,
  priority,
});
const coordinator = (
  operation: "START_PARTITION_SCALE_UP" | "AWAIT_REDISTRIBUTION" | "AWAIT_RELOCATION",
): ClusterOperation => ({ operation, brokerId: 0 });

/** The rule of the OperationError `action` throws, with its message; fails when it throws nothing or something else. */
function refusalOf(action: () => unknown): { rule: OperationRule; message: string } {
  try {
    action();
  } catch (error) {
    if (error instanceof OperationError) return { rule: error.rule, message: error.message };
    throw error;
  }
  throw new Error("expected an OperationError, but nothing was thrown");
}

/** Runs the whole change with begin and complete at `time`. */
function runChange(configuration: ClusterConfiguration, operations: readonly ClusterOperation[], time = nowIso) {
  let current = startChange(configuration, operations, time);
  for (let index = 0; index < operations.length; index += 1) {
    current = completeOperation(beginOperation(current, time), time);
  }
  return current;
}

/** Completes every operation of the pending change at `laterIso`. */
function runChangeFrom(started: ClusterConfiguration): ClusterConfiguration {
  let current = started;
  while (current.pendingChange !== null) current = completeOperation(current, laterIso);
  return current;
}

describe("change: versions and change ids", () => {
  const configuration = configurationOf({ 0: { 1: 1, 2: 1 } });
  const operations = [add(1), join(1, 2, 1), leave(0, 2)];

  it("starting a change increments the version, which is the change id, with every operation pending", () => {
    const started = startChange(configuration, operations, nowIso);
    expect(started.version).toBe(2);
    expect(started.pendingChange).toEqual({
      id: 2,
      status: "IN_PROGRESS",
      startedAt: nowIso,
      completed: [],
      pending: operations,
    });
    expect(started.members).toBe(configuration.members);
    expect(operationInProgress(started)).toEqual(add(1));
    expect(operationInProgress(configuration)).toBeNull();
  });

  it("each completed operation moves to completed with completedAt; the last increments the version again", () => {
    let current = startChange(configuration, operations, nowIso);
    current = completeOperation(beginOperation(current, laterIso), laterIso);
    expect(current.version).toBe(2);
    expect(current.pendingChange?.completed).toEqual([{ ...add(1), completedAt: laterIso }]);
    expect(current.pendingChange?.pending).toEqual(operations.slice(1));
    current = completeOperation(current, laterIso);
    expect(current.version).toBe(2);
    const finished = completeOperation(current, "2026-11-21T10:17:00.000Z");
    expect(finished.version).toBe(3);
    expect(finished.pendingChange).toBeNull();
    expect(finished.lastChange).toEqual({
      id: 2,
      status: "COMPLETED",
      startedAt: nowIso,
      completedAt: "2026-11-21T10:17:00.000Z",
    });
    expect(layoutOfConfiguration(finished)).toEqual({ 0: { 1: 1 }, 1: { 2: 1 } });
  });

  it("cancelling increments the version and records CANCELLED; applied operations stay applied", () => {
    const started = startChange(configuration, operations, nowIso);
    const oneDone = completeOperation(started, nowIso);
    const begun = beginOperation(oneDone, nowIso);
    const cancelled = cancelChange(begun, laterIso);
    expect(cancelled.version).toBe(3);
    expect(cancelled.pendingChange).toBeNull();
    expect(cancelled.lastChange).toEqual({ id: 2, status: "CANCELLED", startedAt: nowIso, completedAt: laterIso });
    expect(cancelled.members.get(1)?.state).toBe("ACTIVE");
    // The begun join stays recorded as JOINING: the broker may already have started the replica.
    expect(cancelled.members.get(1)?.partitions.get(2)?.state).toBe("JOINING");
  });

  it("keeps the changes that ended before the last one, newest first and bounded", () => {
    let current = configuration;
    const ended: number[] = [];
    for (let round = 0; round < MAX_EARLIER_CHANGES + 3; round += 1) {
      // Alternate a completed change with a cancelled one, so both kinds land in the history.
      const started = startChange(current, [add(1)], nowIso);
      current = round % 2 === 0 ? runChangeFrom(started) : cancelChange(started, laterIso);
      // Broker 1 leaves again off the record, so that every round can add it.
      current = { ...current, members: configuration.members };
      ended.unshift(current.lastChange!.id);
      expect(current.earlierChanges.map((change) => change.id)).toEqual(ended.slice(1, MAX_EARLIER_CHANGES + 1));
    }
    expect(current.earlierChanges).toHaveLength(MAX_EARLIER_CHANGES);
    expect(new Set(current.earlierChanges.map((change) => change.status))).toEqual(new Set(["COMPLETED", "CANCELLED"]));
    // Starting a change leaves the history alone; only its end adds to it.
    expect(startChange(current, [add(1)], nowIso).earlierChanges).toBe(current.earlierChanges);
  });

  it("a new change always gets a higher id than the last one", () => {
    const completed = runChange(configuration, operations);
    expect(completed.lastChange?.id).toBe(2);
    const next = startChange(completed, [remove(0)], nowIso);
    expect(next.pendingChange?.id).toBe(4);
    const cancelled = cancelChange(next, nowIso);
    expect(cancelled.lastChange).toMatchObject({ id: 4, status: "CANCELLED" });
    expect(startChange(cancelled, [leave(1, 2)], nowIso).pendingChange?.id).toBe(6);
    const inconsistent: ClusterConfiguration = {
      ...configuration,
      lastChange: { id: 9, status: "COMPLETED", startedAt: nowIso, completedAt: nowIso },
    };
    expect(refusalOf(() => startChange(inconsistent, operations, nowIso)).rule).toBe("change-in-progress");
  });

  it("refuses a change while another is pending, an empty plan, malformed operations and bad times", () => {
    const started = startChange(configuration, operations, nowIso);
    expect(refusalOf(() => startChange(started, operations, nowIso))).toEqual({
      rule: "change-in-progress",
      message: "Another configuration change [2] is in progress",
    });
    expect(refusalOf(() => startChange(configuration, [], nowIso)).rule).toBe("empty-plan");
    expect(refusalOf(() => startChange(configuration, [{ operation: "PARTITION_JOIN", brokerId: 1 }], nowIso))).toEqual(
      {
        rule: "malformed-operation",
        message:
          "PARTITION_JOIN: partitionId undefined is not a positive integer; PARTITION_JOIN: priority undefined is not an integer ≥ 1",
      },
    );
    expect(refusalOf(() => startChange(configuration, operations, "yesterday")).rule).toBe("invalid-time");
    expect(refusalOf(() => completeOperation(started, "2026-11-21")).rule).toBe("invalid-time");
  });

  it("refuses to begin, complete or cancel when no change is pending", () => {
    for (const action of [beginOperation, completeOperation, cancelChange]) {
      expect(refusalOf(() => action(configuration, nowIso)).rule).toBe("no-pending-change");
    }
  });
});

describe("change: member versions", () => {
  const configuration = configurationOf({ 0: { 1: 2, 2: 1 }, 1: { 1: 1, 2: 2 }, 2: {} });

  it("each phase that changes a member's entry increments that member's version once and sets lastUpdatedAt", () => {
    const started = startChange(configuration, [join(2, 1, 3)], nowIso);
    const begun = beginOperation(started, laterIso);
    expect(begun.members.get(2)).toMatchObject({ version: 1, lastUpdatedAt: laterIso });
    expect(begun.members.get(2)?.partitions.get(1)).toMatchObject({ state: "JOINING", priority: 3 });
    // Other members are the very same objects.
    expect(begun.members.get(0)).toBe(started.members.get(0));
    expect(begun.members.get(1)).toBe(started.members.get(1));
    // Beginning again (a restarted broker) changes nothing.
    expect(beginOperation(begun, laterIso)).toBe(begun);
    const completed = completeOperation(begun, laterIso);
    expect(completed.members.get(2)).toMatchObject({ version: 2, lastUpdatedAt: laterIso });
    expect(completed.members.get(2)?.partitions.get(1)?.state).toBe("ACTIVE");
    expect(completed.members.get(0)).toBe(started.members.get(0));
  });

  it("completing without a recorded begin applies both phases", () => {
    const completed = completeOperation(startChange(configuration, [join(2, 1, 3)], nowIso), laterIso);
    expect(completed.members.get(2)).toMatchObject({ version: 2 });
    expect(completed.members.get(2)?.partitions.get(1)?.state).toBe("ACTIVE");
  });

  it("an operation without a transitional state, or one that changes nothing, leaves versions alone", () => {
    const started = startChange(configuration, [reconfigure(0, 1, 2), reconfigure(0, 2, 3)], nowIso);
    expect(beginOperation(started, laterIso)).toBe(started);
    const unchanged = completeOperation(started, laterIso);
    expect(unchanged.members.get(0)).toBe(started.members.get(0));
    const changed = completeOperation(unchanged, laterIso);
    expect(changed.members.get(0)).toMatchObject({ version: 1, lastUpdatedAt: laterIso });
    expect(changed.members.get(0)?.partitions.get(2)?.priority).toBe(3);
  });

  it("routing stages increment the routing version, not the coordinator's member version", () => {
    const base = roundRobinConfiguration([0, 1], 2, 1);
    const plan = [coordinator("START_PARTITION_SCALE_UP"), bootstrap(0, 3, 1), coordinator("AWAIT_REDISTRIBUTION")];
    const afterStart = completeOperation(startChange(base, [...plan, coordinator("AWAIT_RELOCATION")], nowIso), nowIso);
    expect(afterStart.routing.version).toBe(2);
    expect(afterStart.members.get(0)).toBe(base.members.get(0));
  });
});

describe("change: operation effects and preconditions", () => {
  const configuration = configurationOf({ 0: { 1: 2, 2: 1 }, 1: { 1: 1, 2: 2 }, 2: {} });

  it("BROKER_ADD: JOINING when begun, ACTIVE when completed; refused for an ACTIVE member", () => {
    const begun = beginOperation(startChange(configuration, [add(3)], nowIso), nowIso);
    expect(begun.members.get(3)).toEqual({
      state: "JOINING",
      version: 1,
      lastUpdatedAt: nowIso,
      partitions: new Map(),
    });
    expect([...begun.members.keys()]).toEqual([0, 1, 2, 3]);
    expect(applyOperation(configuration, add(3), nowIso).members.get(3)).toMatchObject({ state: "ACTIVE", version: 2 });
    expect(refusalOf(() => applyOperation(configuration, add(2), nowIso))).toEqual({
      rule: "broker-already-member",
      message: "BROKER_ADD by broker 2 cannot apply: broker 2 is already an ACTIVE member [broker-already-member]",
    });
  });

  it("BROKER_REMOVE: LEAVING, then LEFT, dropped when the change completes; refused while hosting partitions", () => {
    const begun = beginOperation(startChange(configuration, [remove(2)], nowIso), nowIso);
    expect(begun.members.get(2)).toMatchObject({ state: "LEAVING", version: 1 });
    expect(applyOperation(configuration, remove(2), nowIso).members.get(2)).toMatchObject({
      state: "LEFT",
      version: 2,
    });
    const finished = completeOperation(begun, nowIso);
    expect([...finished.members.keys()]).toEqual([0, 1]);
    expect(refusalOf(() => applyOperation(configuration, remove(0), nowIso))).toEqual({
      rule: "broker-hosts-partitions",
      message: "BROKER_REMOVE by broker 0 cannot apply: broker 0 still hosts partitions 1, 2 [broker-hosts-partitions]",
    });
    expect(refusalOf(() => applyOperation(configuration, remove(7), nowIso)).rule).toBe("broker-not-member");
  });

  it("forced BROKER_REMOVE: the coordinator marks the removed broker LEFT once its partitions are gone", () => {
    const forced = configurationOf({ 0: { 1: 1 }, 1: { 1: 2 } });
    const operations = planForcedRemoval(forced, [0]);
    const afterReconfigure = applyOperation(forced, operations[0]!, nowIso);
    expect(afterReconfigure.members.get(1)).toMatchObject({ version: 1, partitions: new Map() });
    expect(afterReconfigure.members.get(0)?.partitions.get(1)?.priority).toBe(1);
    const removed = applyOperation(afterReconfigure, operations[1]!, nowIso);
    expect(removed.members.get(1)).toMatchObject({ state: "LEFT", version: 2 });
    expect(removed.members.get(0)).toBe(afterReconfigure.members.get(0));
    expect(refusalOf(() => applyOperation(forced, operations[1]!, nowIso)).rule).toBe("broker-hosts-partitions");
  });

  it("PARTITION_JOIN: JOINING with its priority and the partition's exporters, then ACTIVE; its refusals", () => {
    const begun = beginOperation(startChange(configuration, [join(2, 1, 3)], nowIso), nowIso);
    expect(begun.members.get(2)?.partitions.get(1)).toEqual({
      state: "JOINING",
      priority: 3,
      config: configuration.members.get(0)?.partitions.get(1)?.config,
    });
    expect(refusalOf(() => applyOperation(configuration, join(2, 9, 1), nowIso))).toEqual({
      rule: "partition-unknown",
      message:
        "PARTITION_JOIN by broker 2 (partition 9, priority 1) cannot apply: partition 9 has no replica to join [partition-unknown]",
    });
    expect(refusalOf(() => applyOperation(configuration, join(0, 1, 1), nowIso)).rule).toBe("partition-already-hosted");
    expect(refusalOf(() => applyOperation(configuration, join(5, 1, 1), nowIso)).rule).toBe("broker-not-member");
    const joining = beginOperation(startChange(configuration, [add(3)], nowIso), nowIso);
    expect(refusalOf(() => applyOperation(joining, join(3, 1, 1), nowIso))).toEqual({
      rule: "broker-not-active",
      message:
        "PARTITION_JOIN by broker 3 (partition 1, priority 1) cannot apply: broker 3 is JOINING, not ACTIVE [broker-not-active]",
    });
  });

  it("PARTITION_LEAVE: LEAVING, then removed; refused for a partition's last replica or a replica not hosted", () => {
    const begun = beginOperation(startChange(configuration, [leave(1, 1)], nowIso), nowIso);
    expect(begun.members.get(1)?.partitions.get(1)?.state).toBe("LEAVING");
    expect(beginOperation(begun, nowIso)).toBe(begun);
    expect(completeOperation(begun, nowIso).members.get(1)?.partitions.has(1)).toBe(false);
    const single = configurationOf({ 0: { 1: 1 }, 1: {} });
    expect(refusalOf(() => applyOperation(single, leave(0, 1), nowIso))).toEqual({
      rule: "last-replica",
      message:
        "PARTITION_LEAVE by broker 0 (partition 1) cannot apply: partition 1 would be left with no replica [last-replica]",
    });
    expect(refusalOf(() => applyOperation(configuration, leave(2, 1), nowIso))).toEqual({
      rule: "partition-not-hosted",
      message:
        "PARTITION_LEAVE by broker 2 (partition 1) cannot apply: broker 2 does not host partition 1 [partition-not-hosted]",
    });
  });

  it("PARTITION_RECONFIGURE_PRIORITY sets the priority; refused for a replica not hosted", () => {
    expect(
      applyOperation(configuration, reconfigure(1, 1, 5), nowIso)
        .members.get(1)
        ?.partitions.get(1),
    ).toMatchObject({
      state: "ACTIVE",
      priority: 5,
    });
    expect(refusalOf(() => applyOperation(configuration, reconfigure(2, 1, 5), nowIso)).rule).toBe(
      "partition-not-hosted",
    );
  });

  it("PARTITION_FORCE_RECONFIGURE drops the partition from every other broker; the retained keep their priorities", () => {
    const wide = configurationOf({ 0: { 1: 3 }, 1: { 1: 2 }, 2: { 1: 1 } });
    const operation: ClusterOperation = {
      operation: "PARTITION_FORCE_RECONFIGURE",
      brokerId: 1,
      partitionId: 1,
      brokers: [1, 2],
    };
    expect(layoutOfConfiguration(applyOperation(wide, operation, nowIso))).toEqual({ 0: {}, 1: { 1: 2 }, 2: { 1: 1 } });
    expect(
      refusalOf(() => applyOperation(configurationOf({ 0: { 1: 1 }, 1: {}, 2: { 1: 2 } }), operation, nowIso)),
    ).toEqual({
      rule: "partition-not-hosted",
      message:
        "PARTITION_FORCE_RECONFIGURE by broker 1 (partition 1, brokers [1, 2]) cannot apply: retained broker 1 does not host partition 1 [partition-not-hosted]",
    });
  });

  it("partition scale-up: routing moves through its stages; new ids come from the PARTITION_BOOTSTRAPs that follow", () => {
    const base = roundRobinConfiguration([0, 1], 2, 2);
    const plan = [
      coordinator("START_PARTITION_SCALE_UP"),
      bootstrap(0, 3, 2),
      join(1, 3, 1),
      bootstrap(1, 4, 2),
      join(0, 4, 1),
      coordinator("AWAIT_REDISTRIBUTION"),
      coordinator("AWAIT_RELOCATION"),
    ];
    let current = startChange(base, plan, nowIso);
    current = completeOperation(current, nowIso);
    expect(current.routing).toEqual({
      version: 2,
      requestHandling: {
        strategy: "ActivePartitions",
        basePartitionCount: 2,
        additionalActivePartitions: [],
        inactivePartitions: [3, 4],
      },
      messageCorrelation: { strategy: "HashMod", partitionCount: 2 },
    });
    current = beginOperation(current, nowIso);
    expect(current.members.get(0)?.partitions.get(3)).toMatchObject({ state: "BOOTSTRAPPING", priority: 2 });
    for (let step = 0; step < 4; step += 1) current = completeOperation(current, nowIso);
    expect(current.members.get(0)?.partitions.get(3)?.state).toBe("ACTIVE");
    current = completeOperation(current, nowIso);
    expect(current.routing).toEqual({
      version: 3,
      requestHandling: {
        strategy: "ActivePartitions",
        basePartitionCount: 2,
        additionalActivePartitions: [3, 4],
        inactivePartitions: [],
      },
      messageCorrelation: { strategy: "HashMod", partitionCount: 4 },
    });
    current = completeOperation(current, nowIso);
    expect(current.routing).toEqual({
      version: 4,
      requestHandling: { strategy: "AllPartitions", partitionCount: 4 },
      messageCorrelation: { strategy: "HashMod", partitionCount: 4 },
    });
    expect(current.pendingChange).toBeNull();
  });

  it("partition scale-up refusals: no or non-contiguous bootstraps, stages out of order, a partition not started", () => {
    const base = roundRobinConfiguration([0, 1], 2, 1);
    expect(
      refusalOf(() =>
        applyOperation(base, coordinator("START_PARTITION_SCALE_UP"), nowIso, [coordinator("AWAIT_REDISTRIBUTION")]),
      ),
    ).toEqual({
      rule: "new-partitions",
      message:
        "START_PARTITION_SCALE_UP by broker 0 cannot apply: no PARTITION_BOOTSTRAP follows it before AWAIT_REDISTRIBUTION [new-partitions]",
    });
    expect(
      refusalOf(() => applyOperation(base, coordinator("START_PARTITION_SCALE_UP"), nowIso, [bootstrap(0, 4, 1)]))
        .message,
    ).toMatch(/must be 3\.\. in order; found 4 where 3 belongs/);
    expect(refusalOf(() => applyOperation(base, bootstrap(0, 3, 1), nowIso)).rule).toBe("routing-state");
    expect(refusalOf(() => applyOperation(base, coordinator("AWAIT_REDISTRIBUTION"), nowIso)).rule).toBe(
      "routing-state",
    );
    expect(refusalOf(() => applyOperation(base, coordinator("AWAIT_RELOCATION"), nowIso)).rule).toBe("routing-state");
    const started = applyOperation(base, coordinator("START_PARTITION_SCALE_UP"), nowIso, [bootstrap(0, 3, 1)]);
    expect(
      refusalOf(() => applyOperation(started, coordinator("START_PARTITION_SCALE_UP"), nowIso, [bootstrap(0, 3, 1)]))
        .rule,
    ).toBe("routing-state");
    expect(refusalOf(() => applyOperation(started, coordinator("AWAIT_RELOCATION"), nowIso)).rule).toBe(
      "routing-state",
    );
    expect(refusalOf(() => applyOperation(started, coordinator("AWAIT_REDISTRIBUTION"), nowIso))).toEqual({
      rule: "partition-unknown",
      message: "AWAIT_REDISTRIBUTION by broker 0 cannot apply: new partition 3 has no replica yet [partition-unknown]",
    });
    const bootstrapped = applyOperation(started, bootstrap(0, 3, 1), nowIso);
    expect(refusalOf(() => applyOperation(bootstrapped, bootstrap(1, 3, 1), nowIso)).rule).toBe(
      "partition-already-hosted",
    );
  });

  it("refuses malformed operations, naming the field", () => {
    expect(operationShapeProblems({ operation: "PARTITION_FORCE_RECONFIGURE", brokerId: 0, partitionId: 1 })).toEqual([
      "PARTITION_FORCE_RECONFIGURE: brokers must list the retained replicas",
    ]);
    expect(
      operationShapeProblems({ operation: "PARTITION_FORCE_RECONFIGURE", brokerId: 0, partitionId: 1, brokers: [1] }),
    ).toEqual(["PARTITION_FORCE_RECONFIGURE: broker 0 must be one of the retained brokers [1]"]);
    expect(operationShapeProblems({ operation: "BROKER_REMOVE", brokerId: 0, brokers: [1, 2] })).toEqual([
      "BROKER_REMOVE: brokers must name exactly one removed broker, got [1, 2]",
    ]);
    expect(operationShapeProblems({ operation: "BROKER_REMOVE", brokerId: 0, brokers: [0] })).toEqual([
      "BROKER_REMOVE: broker 0 cannot force its own removal",
    ]);
    expect(operationShapeProblems({ operation: "NOPE" as ClusterOperation["operation"], brokerId: 0 })).toEqual([
      'unknown operation type "NOPE"',
    ]);
    expect(refusalOf(() => applyOperation(configuration, { operation: "BROKER_ADD", brokerId: -1 }, nowIso))).toEqual({
      rule: "malformed-operation",
      message: "BROKER_ADD: brokerId -1 is not a non-negative integer",
    });
  });
});

describe("change: gossip", () => {
  /** Every configuration of a change, stepped through begin and complete, in order. */
  function history(configuration: ClusterConfiguration, operations: readonly ClusterOperation[]) {
    const steps = [startChange(configuration, operations, nowIso)];
    for (let index = 0; index < operations.length; index += 1) {
      steps.push(beginOperation(steps.at(-1)!, laterIso));
      steps.push(completeOperation(steps.at(-1)!, laterIso));
    }
    return steps;
  }

  const scenarios: [string, ClusterConfiguration, readonly ClusterOperation[]][] = [
    [
      "scale out with new partitions and a new replication factor",
      roundRobinConfiguration([0, 1, 2], 4, 2),
      planScale(roundRobinConfiguration([0, 1, 2], 4, 2), {
        brokers: [1, 2, 3, 4],
        replicationFactor: 3,
        partitionCount: 6,
      }),
    ],
    [
      "forced removal",
      configurationOf({ 0: { 1: 1, 2: 2 }, 1: { 1: 2 }, 2: { 2: 1 }, 3: { 3: 1 }, 4: { 3: 2 } }),
      planForcedRemoval(
        configurationOf({ 0: { 1: 1, 2: 2 }, 1: { 1: 2 }, 2: { 2: 1 }, 3: { 3: 1 }, 4: { 3: 2 } }),
        [0, 3],
      ),
    ],
  ];

  for (const [name, configuration, operations] of scenarios) {
    it(`configurations of one change merge without conflicts in both directions (${name})`, () => {
      expect(operations.length).toBeGreaterThan(3);
      const steps = history(configuration, operations);
      for (let earlier = 0; earlier < steps.length; earlier += 1) {
        for (let later = earlier; later < steps.length; later += 1) {
          const older = steps[earlier]!;
          const newer = steps[later]!;
          const forward = mergeConfigurations(older, newer);
          const backward = mergeConfigurations(newer, older);
          expect(forward.conflicts, `merging step ${later} into ${earlier}`).toEqual([]);
          expect(backward.conflicts, `merging step ${earlier} into ${later}`).toEqual([]);
          expect(encodeConfiguration(forward.configuration)).toBe(encodeConfiguration(newer));
          expect(backward.changed).toBe(false);
        }
      }
    });

    it(`brokers that apply their operations one after another and gossip partially agree in the end (${name})`, () => {
      const brokerIds = [
        ...new Set([...configuration.members.keys(), ...operations.map((operation) => operation.brokerId)]),
      ];
      const local = new Map(brokerIds.map((brokerId) => [brokerId, configuration]));
      const merge = (brokerId: number, remote: ClusterConfiguration) => {
        const result = mergeConfigurations(local.get(brokerId)!, remote);
        expect(result.conflicts).toEqual([]);
        local.set(brokerId, result.configuration);
      };
      let latest = startChange(configuration, operations, nowIso);
      local.set(0, latest);
      for (const [index, operation] of operations.entries()) {
        // The broker that acts has received the latest configuration; the others hear of it only now and then.
        merge(operation.brokerId, latest);
        const begun = beginOperation(local.get(operation.brokerId)!, laterIso);
        local.set(operation.brokerId, begun);
        for (const brokerId of brokerIds) if ((brokerId + index) % 3 === 0) merge(brokerId, begun);
        latest = completeOperation(begun, laterIso);
        local.set(operation.brokerId, latest);
        for (const brokerId of brokerIds) if ((brokerId + index) % 2 === 0) merge(brokerId, latest);
      }
      for (const brokerId of brokerIds) merge(brokerId, latest);
      for (const brokerId of brokerIds)
        expect(encodeConfiguration(local.get(brokerId)!)).toBe(encodeConfiguration(latest));
      expect(latest.pendingChange).toBeNull();
    });
  }
});

describe("change: a whole change at once", () => {
  it("applyChange equals stepping through every operation (property)", () => {
    fc.assert(
      fc.property(
        fc.uniqueArray(fc.integer({ min: 0, max: 12 }), { minLength: 1, maxLength: 8 }),
        fc.integer({ min: 1, max: 12 }),
        fc.integer({ min: 1, max: 3 }),
        fc.uniqueArray(fc.integer({ min: 0, max: 12 }), { minLength: 3, maxLength: 8 }),
        fc.integer({ min: 0, max: 4 }),
        (currentBrokers, partitionCount, replicationFactor, targetBrokers, added) => {
          const configuration = roundRobinConfiguration(currentBrokers, partitionCount, replicationFactor);
          const operations = planScale(configuration, {
            brokers: targetBrokers,
            replicationFactor: Math.min(replicationFactor, 3),
            partitionCount: partitionCount + added,
          });
          fc.pre(operations.length > 0);
          expect(applyChange(configuration, operations, nowIso)).toEqual(runChange(configuration, operations));
        },
      ),
      { numRuns: 100 },
    );
  });
});
