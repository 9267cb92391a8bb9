/**
 * The change executor settling a broker's own replicas between the operations of changes, against real partition
 * replicas with real storage whose messages the test delivers in process (and may hold back): a replica that just
 * joined stays in its group even while its own view of the group still shows it as a learner, a replica whose
 * data was lost is removed from its group and added anew, and a replica the configuration no longer lists leaves its
 * group before its data goes (or keeps its data when the group cannot lose it). Also how a failing operation is
 * retried.
 */
import pino from "pino";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { ChangeExecutor, estimateSecondsLeft } from "../../../src/cluster/broker/change-executor.js";
import type { MembershipChange } from "../../../src/cluster/broker/membership.js";
import type { ChangeContext } from "../../../src/cluster/broker/operations.js";
import { PartitionReplica } from "../../../src/cluster/broker/partition-replica.js";
import type { PeerRequest } from "../../../src/cluster/broker/peer-requests.js";
import type { PublishMessageCommand } from "../../../src/cluster/broker/protocol.js";
import { ReplicaHost } from "../../../src/cluster/broker/replica-host.js";
import { type Member, type Message, votersOf } from "../../../src/cluster/raft/index.js";
import type { StorageEnvironment } from "../../../src/cluster/raft/storage/environment.js";
import {
  type ClusterConfiguration,
  initialConfiguration,
  roundRobinDistribution,
  startChange,
  withoutReplica,
} from "../../../src/cluster/topology/index.js";
import { detachedMessage } from "../../support/replica-messages.js";
import { inProcessReplicaOptions, MemberEnvironments, publishThroughLeader, waitFor } from "./support.js";

const PARTITION_ID = 1;
/** The broker whose executor the tests run; brokers 0, 1 and 2 only host the partition's other replicas. */
const SETTLING_BROKER = 3;

const voter = (id: number, priority = 1): Member => ({ id, role: "voter", priority });

function command(name: string): PublishMessageCommand {
  return { name, correlationKey: name, timeToLiveMs: 600_000, variables: {}, tenantId: "<default>" };
}

/** The cluster configuration once the change that gave broker 3 its replica has completed: all four ACTIVE. */
function fourBrokersOnePartition(): ClusterConfiguration {
  return initialConfiguration({
    clusterSize: 4,
    partitionCount: 1,
    replicationFactor: 4,
    distribution: roundRobinDistribution([0, 1, 2, SETTLING_BROKER], 1, 4),
    nowIso: "2026-11-28T00:00:00.000Z",
  });
}

describe("ChangeExecutor settling this broker's replicas", () => {
  const environments = new MemberEnvironments("executor");
  /** The replicas of brokers 0, 1 and 2; broker 3's lives in `host`. */
  const others = new Map<number, PartitionReplica>();
  let host: ReplicaHost;
  let executor: ChangeExecutor | undefined;
  /** While set, messages to broker 3 wait in `heldForSettlingBroker` instead of being delivered. */
  let holdingSettlingBroker = false;
  let heldForSettlingBroker: Message[] = [];
  /** The membership changes broker 3's executor asked of the partition's leader, in order. */
  let askedChanges: MembershipChange["type"][] = [];
  /** How many membership requests broker 3's executor asked of its own replica. */
  let askedOwnReplica = 0;

  function replicaOf(memberId: number): PartitionReplica | undefined {
    return memberId === SETTLING_BROKER ? host.get(PARTITION_ID) : others.get(memberId);
  }

  function deliver(to: number, message: Message): void {
    if (to === SETTLING_BROKER && holdingSettlingBroker) {
      heldForSettlingBroker.push(detachedMessage(message));
      return;
    }
    replicaOf(to)?.receive(detachedMessage(message));
  }

  function releaseSettlingBroker(): void {
    holdingSettlingBroker = false;
    for (const message of heldForSettlingBroker.splice(0)) replicaOf(SETTLING_BROKER)?.receive(message);
  }

  function replicaOptions(memberId: number, environment: StorageEnvironment, bootstrap: readonly Member[] | null) {
    return inProcessReplicaOptions({ memberId, environment, bootstrap, send: (to, message) => deliver(to, message) });
  }

  /** Opens the replicas of brokers 0, 1 and 2, each bootstrapped with `group`. */
  async function openOthers(group: readonly Member[]): Promise<void> {
    for (const member of group) {
      if (member.id === SETTLING_BROKER) continue;
      const environment = await environments.of(member.id);
      others.set(member.id, await PartitionReplica.open(replicaOptions(member.id, environment, group)));
    }
  }

  /** Broker 3's replica host, opening its replica over broker 3's storage environment as a broker does. */
  async function openHost(): Promise<ReplicaHost> {
    const environment = await environments.of(SETTLING_BROKER);
    return new ReplicaHost({
      replicaOptions: (_partitionId, bootstrap) => replicaOptions(SETTLING_BROKER, environment, bootstrap),
      logger: pino({ level: "silent" }),
      restartBackoffMs: 1_000,
      maxRestartBackoffMs: 1_000,
    });
  }

  /** Broker 3's executor; its membership requests reach the in-process replicas, and are recorded. */
  function startExecutor(configuration: ClusterConfiguration): ChangeExecutor {
    let current = configuration;
    const answer = (memberId: number, request: PeerRequest) => {
      if (request.type !== "partition-membership") throw new Error(`unexpected request ${request.type}`);
      if (memberId !== SETTLING_BROKER) askedChanges.push(request.change.type);
      else askedOwnReplica += 1;
      const replica = replicaOf(memberId);
      if (replica === undefined) return Promise.resolve({ outcome: "unavailable", detail: "no replica" });
      return replica.changeMembership(request.change, request.waitMs ?? 0);
    };
    const context = {
      nodeId: SETTLING_BROKER,
      logger: pino({ level: "silent" }),
      heartbeatIntervalMs: 10,
      electionTimeoutMs: 80,
      replicas: host,
      configuration: () => current,
      merge: async (next: ClusterConfiguration) => {
        current = next;
      },
      isReachable: () => true,
      requestPeer: (memberId: number, request: PeerRequest) => answer(memberId, request),
      requestLocal: (request: PeerRequest) => answer(SETTLING_BROKER, request),
      now: () => new Date().toISOString(),
    } as unknown as ChangeContext;
    const started = new ChangeExecutor(context, { pollIntervalMs: 20, retryBackoffMs: 20, maxRetryBackoffMs: 200 });
    started.start();
    return started;
  }

  /** Broker 0's replica once it leads, as it does for its highest priority. */
  async function primary(): Promise<PartitionReplica> {
    await waitFor(() => others.get(0)?.report().role === "leader", "broker 0 leads");
    return others.get(0) as PartitionReplica;
  }

  /** Publishes `count` messages through whichever replica leads. */
  async function publish(prefix: string, count: number): Promise<void> {
    for (let sequence = 0; sequence < count; sequence += 1) {
      await publishThroughLeader(() => others.values(), command(`${prefix}-${sequence}`));
    }
  }

  beforeEach(async () => {
    holdingSettlingBroker = false;
    heldForSettlingBroker = [];
    askedChanges = [];
    askedOwnReplica = 0;
    executor = undefined;
    host = await openHost();
  });

  afterEach(async () => {
    await executor?.close();
    await host.close();
    for (const replica of others.values()) await replica.close();
    others.clear();
    await environments.removeAll();
  });

  it("leaves a replica that just joined in its group while its own view still shows it as a learner", async () => {
    await openOthers([voter(0, 3), voter(1), voter(2)]);
    await publish("before", 120);
    // Broker 3 joins as PARTITION_JOIN does: its replica opens without data, the leader adds it as a learner and
    // catches it up (through a snapshot: the interval is 50 entries), then promotes it.
    const joined = await host.ensure(PARTITION_ID, null);
    const leader = await primary();
    expect(
      await leader.changeMembership({ type: "addLearner", member: SETTLING_BROKER, priority: 1 }, 5_000),
    ).toMatchObject({ outcome: "done" });
    await waitFor(() => joined.report().appliedIndex >= leader.report().commitIndex, "the learner caught up");
    expect(joined.installedSnapshotCount).toBeGreaterThanOrEqual(1);
    // The promotion is committed by brokers 0, 1 and 2 while what tells broker 3 about it is still on its way, as
    // under load the leader's answer to the joining broker can arrive before the append carrying the commit.
    holdingSettlingBroker = true;
    const promoted = await leader.changeMembership({ type: "promote", member: SETTLING_BROKER }, 5_000);
    expect(promoted.outcome === "done" ? votersOf({ members: promoted.members }) : promoted).toEqual([0, 1, 2, 3]);
    expect(votersOf(joined.committedConfiguration())).not.toContain(SETTLING_BROKER);

    // The join has completed: the configuration says broker 3's replica is ACTIVE, and nothing else falls to it.
    executor = startExecutor(fourBrokersOnePartition());
    await waitFor(() => askedChanges.length >= 4, "the executor settled the replica a few times");
    // It asked to be a member, which it already is as a voter in the leader's answer, so it asked no promotion, and
    // it never asked to be removed as a replica without data.
    expect(new Set(askedChanges)).toEqual(new Set(["addLearner"]));
    expect(votersOf(leader.committedConfiguration())).toEqual([0, 1, 2, 3]);

    releaseSettlingBroker();
    await waitFor(
      () => votersOf(joined.committedConfiguration()).includes(SETTLING_BROKER),
      "broker 3 learned its promotion",
    );
    await waitFor(() => joined.report().health === "healthy", "broker 3's replica healthy");
    expect(votersOf(leader.committedConfiguration())).toEqual([0, 1, 2, 3]);
  });

  it("asks the leader to remove a voter the configuration no longer lists (a stale cancel erased its join) before deleting it", async () => {
    const group = [voter(0, 3), voter(1), voter(2), voter(SETTLING_BROKER)];
    await openOthers(group);
    await host.ensure(PARTITION_ID, group);
    await publish("before", 20);
    const leader = await primary();
    // The configuration that won by its higher version never saw broker 3's join: it gives broker 3 nothing.
    const erased = withoutReplica(fourBrokersOnePartition(), SETTLING_BROKER, PARTITION_ID, "2026-11-28T00:00:01.000Z");
    executor = startExecutor(erased);
    await waitFor(() => host.get(PARTITION_ID) === undefined, "broker 3 deleted its replica");
    expect(askedChanges[0]).toBe("remove");
    // The group lost the voter through a membership change, so its quorum is that of three voters and it commits.
    expect(votersOf(leader.committedConfiguration())).toEqual([0, 1, 2]);
    await publish("after", 5);
  });

  it("keeps, with its data, a replica the configuration no longer lists when it is its group's only voter", async () => {
    await host.ensure(PARTITION_ID, [voter(SETTLING_BROKER)]);
    await publishThroughLeader(() => [host.get(PARTITION_ID)], command("only-copy"));
    const erased = withoutReplica(fourBrokersOnePartition(), SETTLING_BROKER, PARTITION_ID, "2026-11-28T00:00:01.000Z");
    executor = startExecutor(erased);
    // It asked its own replica, the leader, which refused: removing it would lose the partition.
    await waitFor(() => askedOwnReplica >= 3, "the executor settled the replica a few times");
    expect(host.get(PARTITION_ID)?.bufferedMessageCount).toBe(1);
  });

  it("adds an ACTIVE replica back to its group when the leader removed it without its knowing", async () => {
    const group = [voter(0, 3), voter(1), voter(2), voter(SETTLING_BROKER)];
    await openOthers(group);
    const own = await host.ensure(PARTITION_ID, group);
    await publish("before", 20);
    const leader = await primary();
    await waitFor(() => own.report().appliedIndex >= leader.report().commitIndex, "broker 3 holds everything");
    // The leader removes broker 3 while nothing reaches it: its own view still shows it a voter, and it hears no leader.
    holdingSettlingBroker = true;
    expect(await leader.changeMembership({ type: "remove", member: SETTLING_BROKER }, 5_000)).toMatchObject({
      outcome: "done",
    });
    expect(votersOf(own.committedConfiguration())).toContain(SETTLING_BROKER);
    await waitFor(() => own.report().health === "unhealthy", "broker 3 hears no leader");
    // The configuration says broker 3's replica is ACTIVE: the executor has it added back and promoted.
    executor = startExecutor(fourBrokersOnePartition());
    await waitFor(() => askedChanges.includes("addLearner"), "broker 3 asked to be added back");
    releaseSettlingBroker();
    await waitFor(
      () => votersOf(leader.committedConfiguration()).includes(SETTLING_BROKER),
      "broker 3 a voter of its group again",
    );
    await waitFor(() => own.report().health === "healthy", "broker 3 healthy again");
  });

  it("removes a replica that lost its data from its group and adds it anew", async () => {
    const group = [voter(0, 3), voter(1), voter(2), voter(SETTLING_BROKER)];
    await openOthers(group);
    await host.ensure(PARTITION_ID, group);
    await publish("before", 60);
    const leader = await primary();
    await waitFor(
      () => (host.get(PARTITION_ID)?.report().appliedIndex ?? 0) >= leader.report().commitIndex,
      "broker 3 holds everything",
    );
    // Broker 3's disk is replaced: its replica opens again without data, while its leader still believes it holds
    // what it acknowledged.
    await host.close();
    await environments.lose(SETTLING_BROKER);
    host = await openHost();
    const replaced = await host.ensure(PARTITION_ID, null);

    executor = startExecutor(fourBrokersOnePartition());
    await waitFor(
      () => votersOf(replaced.committedConfiguration()).includes(SETTLING_BROKER),
      "broker 3 a voter of its group again",
    );
    expect(askedChanges[0]).toBe("remove");
    expect(askedChanges).toContain("addLearner");
    await waitFor(() => replaced.report().appliedIndex >= leader.report().commitIndex, "broker 3 caught up again");
    expect(replaced.bufferedMessageCount).toBe(leader.bufferedMessageCount);
  });
});

describe("ChangeExecutor retrying an operation", () => {
  it("counts an attempt whose begin fails, so the pause between attempts doubles", async () => {
    const base = initialConfiguration({
      clusterSize: 2,
      partitionCount: 1,
      replicationFactor: 1,
      distribution: roundRobinDistribution([0, 1], 1, 1),
      nowIso: "2026-11-28T00:00:00.000Z",
    });
    // A leave of the partition's last replica: its begin is refused, attempt after attempt.
    const started = startChange(
      base,
      [{ operation: "PARTITION_LEAVE", brokerId: 0, partitionId: PARTITION_ID }],
      "2026-11-28T00:00:00.000Z",
    );
    let failures = 0;
    const logger = pino(
      { level: "warn" },
      {
        write(line: string) {
          if (line.includes("retrying after a pause")) failures += 1;
        },
      },
    );
    const context = {
      nodeId: 0,
      logger,
      replicas: { partitionIds: () => [], get: () => undefined },
      configuration: () => started,
      merge: async () => {},
      isReachable: () => true,
      now: () => new Date().toISOString(),
    } as unknown as ChangeContext;
    const executor = new ChangeExecutor(context, {
      pollIntervalMs: 10_000,
      retryBackoffMs: 100,
      maxRetryBackoffMs: 30_000,
    });
    executor.start();
    try {
      // Attempts start at 0, 100, 300, 700 and 1,500 ms; a pause that never grew (50 ms) would make about 25.
      await new Promise((resolve) => setTimeout(resolve, 1_200));
      const progress = executor.progress();
      expect(progress?.attempts).toBe(failures);
      expect(failures).toBeGreaterThanOrEqual(2);
      expect(failures).toBeLessThanOrEqual(5);
      expect(progress?.lastError).toContain("last");
    } finally {
      await executor.close();
    }
  });
});

describe("estimateSecondsLeft", () => {
  const moving = { bytesTotal: 10_000_000, bytesMoved: 4_000_000, rateBytesPerMs: 1_000, lastMovedMs: 1_000 };

  it("divides the bytes left by the smoothed rate while bytes move", () => {
    expect(estimateSecondsLeft(moving, 2_000)).toBe(6);
  });

  it("gives none once nothing moved for 5 s, however small the decayed rate", () => {
    expect(estimateSecondsLeft(moving, 5_999)).toBe(6);
    expect(estimateSecondsLeft({ ...moving, rateBytesPerMs: 1e-30 }, 6_000)).toBeNull();
  });

  it("gives none while every byte known is moved but the operation goes on, or before a rate", () => {
    expect(estimateSecondsLeft({ ...moving, bytesMoved: 10_000_000 }, 2_000)).toBeNull();
    expect(estimateSecondsLeft({ ...moving, rateBytesPerMs: null }, 2_000)).toBeNull();
    expect(estimateSecondsLeft({ ...moving, bytesTotal: null }, 2_000)).toBeNull();
  });
});
