/**
 * Brokers whose wall clocks step or differ, with real in-process brokers: how long ago a broker was heard from is
 * measured on the monotonic clock, so a step back of the wall clock (an NTP correction) does not make a dead broker
 * look alive again, and the next broker keeps acting as the coordinator; a leader whose clock runs hours ahead
 * of the others' expires no message early, since leaders go by the median of the brokers' clocks; and a step of a
 * leader's own clock moves neither the time it stamps publications with nor the time it expires them by.
 */
import { afterEach, describe, expect, it, vi } from "vitest";
import { Broker } from "../../../src/cluster/broker/broker.js";
import type {
  BrokerRequest,
  ClusterStatusResponse,
  GetMessageResponse,
  PublishMessageCommand,
} from "../../../src/cluster/broker/protocol.js";
import { TransportClient } from "../../../src/cluster/transport/index.js";
import { testClusterCredentials } from "../../support/cluster-secret.js";
import {
  leaderOf,
  partitionSettled,
  partitionSettledOnPriorityLeader,
  publishThroughLeadingBroker,
  removeDirectory,
  startBrokers,
  temporaryDirectory,
  testBrokerOptions,
  waitFor,
} from "./support.js";

const TWO_HOURS_MS = 2 * 60 * 60 * 1000;

describe("brokers whose wall clock steps", () => {
  const client = new TransportClient<BrokerRequest, unknown>({ credentials: testClusterCredentials() });
  const cleanups: (() => Promise<void> | void)[] = [];
  afterEach(async () => {
    vi.restoreAllMocks();
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });

  /** Starts three brokers in a directory of their own, both removed after the test, and waits for their partitions. */
  async function startSettledBrokers(
    name: string,
    overrides?: Parameters<typeof startBrokers>[2],
  ): Promise<{ root: string; brokers: Broker[] }> {
    const root = await temporaryDirectory(name);
    cleanups.push(() => removeDirectory(root));
    const brokers = await startBrokers(root, 3, overrides);
    cleanups.push(async () => {
      await Promise.all(brokers.map((broker) => broker.close()));
    });
    for (const partitionId of [1, 2, 3]) {
      await waitFor(() => partitionSettled(brokers, partitionId, 3), `partition ${partitionId} settled`, 2_000);
    }
    return { root, brokers };
  }

  it("keeps a stopped broker unreachable, and the next one coordinating, when the wall clock steps back", async () => {
    const { brokers } = await startSettledBrokers("wall-clock-step");
    const [first, second] = brokers as [Broker, Broker, Broker];
    await first.close();
    await waitFor(() => !second.isReachable(0), "broker 1 notices that broker 0 stopped", 2_000);
    const status = async (): Promise<ClusterStatusResponse> =>
      (await client.request(
        second.clusterAddress,
        { type: "cluster-status" },
        { timeoutMs: 2_000 },
      )) as ClusterStatusResponse;
    expect((await status()).outcome).toBe("status");

    const realNow = Date.now.bind(Date);
    vi.spyOn(Date, "now").mockImplementation(() => realNow() - TWO_HOURS_MS);
    // Longer than the liveness timeout (twice the election timeout of the test brokers).
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    expect(second.isReachable(0)).toBe(false);
    expect(second.liveness().find((peer) => peer.nodeId === 0)?.reachable).toBe(false);
    expect((await status()).outcome).toBe("status");
  });

  it("reaches a broker restarted on another port after its clock stepped back", async () => {
    const { root, brokers } = await startSettledBrokers("wall-clock-restart");
    const [first, , third] = brokers as [Broker, Broker, Broker];
    await (brokers[1] as Broker).close();
    // Restarted on a new port (the tests' cluster port is 0) with a clock two hours behind its first start.
    brokers[1] = await Broker.start(
      testBrokerOptions(root, 1, {
        contactPoints: [first.clusterAddress, third.clusterAddress],
        clusterSize: 3,
        wallClockMs: () => Date.now() - TWO_HOURS_MS,
      }),
    );
    for (const partitionId of [1, 2, 3]) {
      await waitFor(() => partitionSettled(brokers, partitionId, 3), `partition ${partitionId} settled again`, 5_000);
    }
    expect(first.isReachable(1) && third.isReachable(1)).toBe(true);
  });

  it("expires no message early when the partition's new leader has a clock three hours ahead", async () => {
    const aheadMs = 3 * 60 * 60 * 1000;
    const { brokers } = await startSettledBrokers("wall-clock-ahead", (nodeId) =>
      nodeId === 2 ? { wallClockMs: () => Date.now() + aheadMs } : {},
    );
    // Partition 2's replicas by priority: brokers 1, 2, 0. Published while broker 1 leads, with an hour to live.
    const partitionId = 2;
    expect(leaderOf(brokers, partitionId)?.configuration).toBeDefined();
    const message: PublishMessageCommand = {
      name: "order-paid",
      correlationKey: "order-7",
      timeToLiveMs: 60 * 60 * 1000,
      variables: {},
      tenantId: "<default>",
    };
    const key = await publishThroughLeadingBroker(client, brokers, partitionId, message, {
      attempts: 100,
      timeoutMs: 2_000,
    });
    // Broker 2 has heard the others' clocks by now (gossip every 100 ms in tests).
    await new Promise((resolve) => setTimeout(resolve, 300));
    const [, leading, ahead] = brokers as [Broker, Broker, Broker];
    await leading.close();
    await waitFor(() => ahead.replica(partitionId)?.report().role === "leader", "broker 2 leads partition 2", 2_000);
    // Many ticks of the new leader, each of which would propose the expiry of a message past its deadline.
    await new Promise((resolve) => setTimeout(resolve, 500));
    const answer = (await client.request(
      ahead.clusterAddress,
      { type: "get-message", partitionId, key },
      { timeoutMs: 2_000 },
    )) as GetMessageResponse;
    expect(answer.outcome).toBe("found");
  });

  it("stamps publications by the brokers' clocks, not by a leader's own clock stepped forward", async () => {
    let steppedMs = 0;
    const { brokers } = await startSettledBrokers("wall-clock-step-forward", (nodeId) =>
      nodeId === 2 ? { wallClockMs: () => Date.now() + steppedMs } : {},
    );
    const stepping = brokers[2] as Broker;
    // Broker 2 leads the partition where its priority is highest once the leaderships settled on priority.
    let partitionId: number | undefined;
    await waitFor(
      () => {
        partitionId = [1, 2, 3].find(
          (id) => partitionSettledOnPriorityLeader(brokers, id) && leaderOf(brokers, id) === stepping,
        );
        return partitionId !== undefined;
      },
      "broker 2 leads a partition",
      5_000,
    );
    if (partitionId === undefined) throw new Error("broker 2 leads no partition");
    // Eight gossip rounds (100 ms in tests) and more: each peer's offset is the largest of its last eight samples.
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    steppedMs = 3 * 60 * 60 * 1000;
    const message: PublishMessageCommand = {
      name: "order-paid",
      correlationKey: "order-8",
      timeToLiveMs: 60 * 60 * 1000,
      variables: {},
      tenantId: "<default>",
    };
    // At once and over the next second, while the samples taken before the step are still the peers' latest.
    for (const waitMs of [0, 150, 400, 800]) {
      await new Promise((resolve) => setTimeout(resolve, waitMs));
      const key = await publishThroughLeadingBroker(client, brokers, partitionId as number, message, {
        attempts: 20,
        timeoutMs: 2_000,
      });
      const answer = (await client.request(
        stepping.clusterAddress,
        { type: "get-message", partitionId, key },
        { timeoutMs: 2_000 },
      )) as GetMessageResponse;
      if (answer.outcome !== "found") throw new Error(`message ${key}: ${answer.outcome}`);
      expect(Math.abs(Date.parse(answer.message.publishedAt) - Date.now())).toBeLessThan(60_000);
    }
  });

  it("takes the time of the brokers' majority, whose clocks the leaders follow", async () => {
    const aheadMs = 3 * 60 * 60 * 1000;
    const { brokers } = await startSettledBrokers("wall-clock-majority", (nodeId) =>
      nodeId === 0 ? {} : { wallClockMs: () => Date.now() + aheadMs },
    );
    await new Promise((resolve) => setTimeout(resolve, 300));
    // Whichever broker leads, broker 0's included: it is outvoted by the other two.
    for (const partitionId of [1, 2, 3]) {
      const key = await publishThroughLeadingBroker(
        client,
        brokers,
        partitionId,
        {
          name: "order-paid",
          correlationKey: `order-${partitionId}`,
          timeToLiveMs: 60_000,
          variables: {},
          tenantId: "<default>",
        },
        { attempts: 100, timeoutMs: 2_000 },
      );
      const leader = leaderOf(brokers, partitionId) as Broker;
      const answer = (await client.request(
        leader.clusterAddress,
        { type: "get-message", partitionId, key },
        { timeoutMs: 2_000 },
      )) as GetMessageResponse;
      if (answer.outcome !== "found") throw new Error(`message ${key}: ${answer.outcome}`);
      expect(Math.abs(Date.parse(answer.message.publishedAt) - (Date.now() + aheadMs))).toBeLessThan(60_000);
    }
  });
});
