import pino from "pino";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import type { MembershipAnswer } from "../../../src/cluster/broker/membership.js";
import { applyOperationHere, askPartitionLeader, type ChangeContext } from "../../../src/cluster/broker/operations.js";
import type { ReplicaHost } from "../../../src/cluster/broker/replica-host.js";
import {
  type ClusterConfiguration,
  initialConfiguration,
  roundRobinDistribution,
} from "../../../src/cluster/topology/index.js";

/** Partition 1 replicated on brokers 0, 1 and 2. */
function onePartitionOnThreeBrokers(): ClusterConfiguration {
  return initialConfiguration({
    clusterSize: 3,
    partitionCount: 1,
    replicationFactor: 3,
    distribution: roundRobinDistribution([0, 1, 2], 1, 3),
    nowIso: "2026-11-25T00:00:00.000Z",
  });
}

/**
 * A joining broker (3) whose partition leader (broker 0) answers every promotion request with the same catch-up view,
 * as it does while it streams a snapshot: the learner's match index stands still until the snapshot is installed.
 * `receivedBytes` is what the joining replica has received so far.
 */
function joiningBroker(receivedBytes: () => number): { context: ChangeContext; promotionRequests: () => number } {
  const configuration = onePartitionOnThreeBrokers();
  const replica = {
    membership: () => ({ receivedBytes: receivedBytes() }),
    report: () => ({ leaderId: 0, appliedIndex: 0 }),
  };
  const replicas = {
    ensure: async () => replica,
    get: () => replica,
    isDead: () => false,
    deadReason: () => null,
  } as unknown as ReplicaHost;
  let promotionRequests = 0;
  const requestPeer = async (_nodeId: number, request: { change?: { type: string } }): Promise<MembershipAnswer> => {
    if (request.change?.type === "addLearner") return { outcome: "done", members: [] };
    promotionRequests += 1;
    return {
      outcome: "in-progress",
      detail: "the learner is catching up",
      catchUp: { matchIndex: 0, commitIndex: 100, snapshotIndex: 90, snapshotSizeBytes: 1 << 30, caughtUpForMs: null },
    };
  };
  const context = {
    nodeId: 3,
    logger: pino({ level: "silent" }),
    heartbeatIntervalMs: 250,
    electionTimeoutMs: 2_500,
    replicas,
    configuration: () => configuration,
    merge: async () => {},
    isReachable: () => true,
    requestPeer,
    requestLocal: async () => {
      throw new Error("the joining broker leads nothing in this test");
    },
    now: () => new Date().toISOString(),
  } as unknown as ChangeContext;
  return { context, promotionRequests: () => promotionRequests };
}

describe("PARTITION_JOIN while a snapshot streams in", () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it("keeps the attempt alive past the stall timeout while received bytes grow, and fails once they stop", async () => {
    let received = 0;
    let growing = true;
    const { context, promotionRequests } = joiningBroker(() => {
      if (growing) received += 64 * 1024;
      return received;
    });
    const controller = new AbortController();
    const reported: number[] = [];
    const join = applyOperationHere(
      context,
      { operation: "PARTITION_JOIN", brokerId: 3, partitionId: 1, priority: 1 },
      { signal: controller.signal, reportBytes: (moved) => reported.push(moved) },
    );
    const outcome = join.then(
      () => "completed",
      (error: Error) => error.message,
    );
    // Three minutes of a transfer that only the joiner sees moving: three times the stall timeout.
    await vi.advanceTimersByTimeAsync(180_000);
    expect(await Promise.race([outcome, Promise.resolve("still running")])).toBe("still running");
    expect(reported.at(-1)).toBeGreaterThan(0);
    // Once nothing arrives any more, the attempt fails within the stall timeout (and a little polling).
    growing = false;
    await vi.advanceTimersByTimeAsync(61_000);
    expect(await Promise.race([outcome, Promise.resolve("still running")])).toMatch(/made no progress/);
    // The joiner polled at its pace (every two heartbeats), not in a tight loop.
    const elapsedMs = 241_000;
    expect(promotionRequests()).toBeGreaterThan(elapsedMs / 500 / 2);
    expect(promotionRequests()).toBeLessThanOrEqual(elapsedMs / 500 + 1);
    controller.abort();
  });
});

describe("PARTITION_JOIN with a leader that holds its requests", () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it("asks the leader to hold each request and completes the moment the promotion is committed, without polling", async () => {
    let committed = false;
    let commit: () => void = () => {};
    const requests: { change: string; waitMs: number | undefined }[] = [];
    const { context } = joiningBroker(() => 0);
    // The leader holds a request until its change took hold or the wait is over, as PartitionReplica does.
    (context as { requestPeer: unknown }).requestPeer = async (
      _nodeId: number,
      request: { change: { type: string }; waitMs?: number },
    ): Promise<MembershipAnswer> => {
      requests.push({ change: request.change.type, waitMs: request.waitMs });
      if (request.change.type === "addLearner") return { outcome: "done", members: [] };
      if (committed) return { outcome: "done", members: [] };
      return new Promise((resolve) => {
        const timer = setTimeout(
          () => resolve({ outcome: "in-progress", detail: "broker 3 is catching up" }),
          request.waitMs ?? 0,
        );
        commit = () => {
          clearTimeout(timer);
          committed = true;
          resolve({ outcome: "done", members: [] });
        };
      });
    };
    const controller = new AbortController();
    const join = applyOperationHere(
      context,
      { operation: "PARTITION_JOIN", brokerId: 3, partitionId: 1, priority: 1 },
      { signal: controller.signal, reportBytes: () => {} },
    );
    const outcome = join.then(
      () => "completed",
      (error: Error) => error.message,
    );
    // Two held promotion requests came back with the learner still catching up; the third is held now.
    await vi.advanceTimersByTimeAsync(2_500);
    expect(requests.every((request) => (request.waitMs ?? 0) > 0)).toBe(true);
    expect(requests.filter((request) => request.change === "promote")).toHaveLength(3);
    commit();
    // No pause between the held answer and the completion: no timer needs to fire.
    await vi.advanceTimersByTimeAsync(0);
    expect(await Promise.race([outcome, Promise.resolve("still running")])).toBe("completed");
    controller.abort();
  });
});

describe("askPartitionLeader", () => {
  /** Broker 3 asks partition 1, replicated on brokers 0, 1 and 2, whose brokers answer as `answers` says. */
  function askingBroker(answers: Record<number, () => Promise<unknown>>): ChangeContext {
    const configuration = onePartitionOnThreeBrokers();
    return {
      nodeId: 3,
      logger: pino({ level: "silent" }),
      replicas: { get: () => undefined } as unknown as ReplicaHost,
      configuration: () => configuration,
      requestPeer: async (nodeId: number) => (answers[nodeId] ?? (async () => ({ outcome: "unavailable" })))(),
    } as unknown as ChangeContext;
  }
  const checkpoint = { type: "partition-checkpoint", partitionId: 1, checkpointId: 6n } as const;
  const held = { outcome: "checkpointed", checkpointId: 6n, position: 40, taken: false } as const;

  it("says an earlier attempt may have proposed the request when a broker asked before did not answer", async () => {
    const attempts = { uncertain: false };
    const context = askingBroker({
      0: async () => {
        throw new Error("timed out");
      },
      1: async () => held,
    });
    expect(await askPartitionLeader(context, checkpoint, attempts)).toEqual(held);
    expect(attempts.uncertain).toBe(true);
  });

  it("says so when a broker asked before lost track of its proposal (unavailable)", async () => {
    const attempts = { uncertain: false };
    const context = askingBroker({
      0: async () => ({ outcome: "unavailable", detail: "the leadership changed" }),
      1: async () => held,
    });
    expect(await askPartitionLeader(context, checkpoint, attempts)).toEqual(held);
    expect(attempts.uncertain).toBe(true);
  });

  it("does not when the brokers asked before only pointed at the leader", async () => {
    const attempts = { uncertain: false };
    const context = askingBroker({
      0: async () => ({ outcome: "not-leader", leaderId: 2 }),
      2: async () => held,
    });
    expect(await askPartitionLeader(context, checkpoint, attempts)).toEqual(held);
    expect(attempts.uncertain).toBe(false);
  });
});
