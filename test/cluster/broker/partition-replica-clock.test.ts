/**
 * A replica on an injected clock (`PartitionReplicaOptions.clock`, as the real-driver simulation runs it): it ticks
 * only when that clock says so, stamps publications and expires reads with that clock's time, waits on it while
 * handing leadership over, and its election timeouts follow `randomSeed`; counted in its heartbeats, a learner it leads
 * is promoted one heartbeat after it caught up.
 */
import pino from "pino";
import { afterEach, describe, expect, it } from "vitest";
import type { MembershipAnswer } from "../../../src/cluster/broker/membership.js";
import { PartitionReplica, type ReplicaClock } from "../../../src/cluster/broker/partition-replica.js";
import type { Message } from "../../../src/cluster/raft/index.js";
import { StorageEnvironment } from "../../../src/cluster/raft/storage/environment.js";
import { detachedMessage } from "../../support/replica-messages.js";
import { removeDirectory, temporaryDirectory } from "./support.js";

const HEARTBEAT_MS = 10;

/** A clock that moves only when told to. */
class ManualClock implements ReplicaClock {
  nowMs = Date.UTC(2030, 0, 1);
  readonly ticks = new Set<() => void>();
  private sleepers: { readonly atMs: number; readonly resolve: () => void }[] = [];

  now(): number {
    return this.nowMs;
  }

  monotonicNow(): number {
    return this.nowMs;
  }

  repeat(_intervalMs: number, tick: () => void): () => void {
    this.ticks.add(tick);
    return () => this.ticks.delete(tick);
  }

  sleep(delayMs: number): Promise<void> {
    return new Promise((resolve) => this.sleepers.push({ atMs: this.nowMs + delayMs, resolve }));
  }

  yieldTurn(): Promise<void> {
    return new Promise((resolve) => setImmediate(resolve));
  }

  /** Moves time by `ms`, ticks every replica once and wakes the sleepers due by then. */
  advance(ms: number): void {
    this.nowMs += ms;
    for (const tick of this.ticks) tick();
    const due = this.sleepers.filter((sleeper) => sleeper.atMs <= this.nowMs);
    this.sleepers = this.sleepers.filter((sleeper) => sleeper.atMs > this.nowMs);
    for (const sleeper of due) sleeper.resolve();
  }
}

const realPause = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

describe("PartitionReplica on an injected clock", () => {
  const cleanups: (() => Promise<void>)[] = [];

  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });

  /** Where a replica sends its messages, and what it logs (silent unless `logLines` is given). */
  interface Wiring {
    readonly memberId: number;
    readonly bootstrap: boolean;
    readonly send: (to: number, message: Message) => void;
    readonly logLines?: Record<string, unknown>[];
  }

  async function openReplica(
    clock: ManualClock,
    randomSeed = 42,
    wiring: Wiring = { memberId: 0, bootstrap: true, send: () => {} },
  ): Promise<PartitionReplica> {
    const directory = await temporaryDirectory("clock");
    const environment = StorageEnvironment.open({ directory, synchronousCommit: true });
    const logLines = wiring.logLines;
    const replica = await PartitionReplica.open({
      partitionId: 1,
      memberId: wiring.memberId,
      environment,
      bootstrap: wiring.bootstrap ? [{ id: wiring.memberId, role: "voter", priority: 1 }] : null,
      heartbeatIntervalMs: HEARTBEAT_MS,
      electionTimeoutMs: 50,
      snapshotIntervalEntries: 1_000,
      maxPendingProposals: 16,
      maxApplyLagEntries: 100,
      send: wiring.send,
      onFailure: (error) => {
        throw error;
      },
      logger:
        logLines === undefined
          ? pino({ level: "silent" })
          : pino({ level: "info" }, { write: (line: string) => logLines.push(JSON.parse(line)) }),
      clock,
      randomSeed,
    });
    cleanups.push(async () => {
      await replica.close();
      await environment.close();
      await removeDirectory(directory);
    });
    return replica;
  }

  /** Ticks the clock until the replica leads; returns how many ticks that took. */
  async function ticksUntilLeader(clock: ManualClock, replica: PartitionReplica): Promise<number> {
    for (let ticks = 1; ticks <= 200; ticks += 1) {
      clock.advance(HEARTBEAT_MS);
      await realPause(1);
      if (replica.report().role === "leader") return ticks;
    }
    throw new Error("the replica never led");
  }

  it("ticks only when the clock does, and stops its timer when closed", async () => {
    const clock = new ManualClock();
    const replica = await openReplica(clock);
    expect(clock.ticks.size).toBe(1);
    // Far more real time than an election timeout: without ticks from the clock nothing happens.
    await realPause(150);
    expect(replica.report().role).toBe("follower");
    await ticksUntilLeader(clock, replica);
    await replica.close();
    expect(clock.ticks.size).toBe(0);
  });

  it("stamps publications with the clock's time and expires reads by it", async () => {
    const clock = new ManualClock();
    const replica = await openReplica(clock);
    await ticksUntilLeader(clock, replica);
    const publishedAtMs = clock.now();
    const answer = await replica.publish({
      name: "n",
      correlationKey: "c",
      timeToLiveMs: 60_000,
      variables: {},
      tenantId: "<default>",
    });
    if (answer.outcome !== "published") throw new Error(`not published: ${JSON.stringify(answer)}`);
    const found = await replica.getMessage(answer.key);
    expect(found).toMatchObject({
      outcome: "found",
      message: { publishedAt: new Date(publishedAtMs).toISOString() },
    });
    // Past its deadline on the injected clock, the message is gone for reads (no expiry record needed).
    clock.nowMs = publishedAtMs + 60_000;
    expect(await replica.getMessage(answer.key)).toEqual({ outcome: "not-found" });
  });

  it("waits on the clock while handing leadership over", async () => {
    const clock = new ManualClock();
    const replica = await openReplica(clock);
    await ticksUntilLeader(clock, replica);
    let handedOver = false;
    // A group of one has nobody to hand over to: the replica waits until the timeout, on the injected clock.
    const handingOver = replica.handOverLeadership(100).then(() => {
      handedOver = true;
    });
    await realPause(150);
    expect(handedOver).toBe(false);
    for (let step = 0; step < 20 && !handedOver; step += 1) {
      clock.advance(HEARTBEAT_MS);
      await realPause(1);
    }
    await handingOver;
    expect(handedOver).toBe(true);
  });

  it("promotes a learner at the first heartbeat after it caught up", async () => {
    const clock = new ManualClock();
    const replicas = new Map<number, PartitionReplica>();
    const logLines: Record<string, unknown>[] = [];
    const send = (to: number, message: Message) => replicas.get(to)?.receive(detachedMessage(message));
    const leader = await openReplica(clock, 42, { memberId: 0, bootstrap: true, send, logLines });
    replicas.set(0, leader);
    replicas.set(1, await openReplica(clock, 43, { memberId: 1, bootstrap: false, send }));
    await ticksUntilLeader(clock, leader);
    for (let sequence = 0; sequence < 20; sequence += 1) {
      await leader.publish({
        name: "n",
        correlationKey: `c${sequence}`,
        timeToLiveMs: 60_000,
        variables: {},
        tenantId: "<default>",
      });
    }
    const settled = async (answer: Promise<MembershipAnswer>): Promise<MembershipAnswer> => {
      let result: MembershipAnswer | undefined;
      void answer.then((value) => {
        result = value;
      });
      for (let heartbeat = 0; heartbeat < 100 && result === undefined; heartbeat += 1) {
        clock.advance(HEARTBEAT_MS);
        await realPause(1);
      }
      if (result === undefined) throw new Error("no answer within 100 heartbeats");
      return result;
    };
    expect(
      await settled(leader.changeMembership({ type: "addLearner", member: 1, priority: 1 }, 10_000)),
    ).toMatchObject({
      outcome: "done",
    });
    // Held until the promotion commits. Count the heartbeats from the one at which the leader found the learner caught
    // up to the one after which it proposed the promotion; each heartbeat leaves the replicas real time to finish
    // their turns (the injected clock does not move meanwhile), so a slow disk cannot add a heartbeat.
    const answer = leader.changeMembership({ type: "promote", member: 1 }, 10_000);
    const promotionProposed = (line: Record<string, unknown>) =>
      line.msg === "membership change proposed" && line.change === "promote" && line.member === 1;
    const learnerCaughtUp = (line: Record<string, unknown>) => line.msg === "a learner caught up" && line.member === 1;
    const heartbeatOf = (matches: (line: Record<string, unknown>) => boolean): number | undefined =>
      logLines.find(matches)?.heartbeat as number | undefined;
    for (const line of logLines) line.heartbeat = -1;
    for (let heartbeat = 0; heartbeat < 100 && !logLines.some(promotionProposed); heartbeat += 1) {
      clock.advance(HEARTBEAT_MS);
      await realPause(20);
      for (const line of logLines) line.heartbeat ??= heartbeat;
    }
    const caughtUpAt = heartbeatOf(learnerCaughtUp);
    const proposedAt = heartbeatOf(promotionProposed);
    expect(caughtUpAt).toBeGreaterThanOrEqual(0);
    // The broker proposes the promotion at the heartbeat that finds the learner still caught up (it waited three
    // before, 0.2–0.3 s of every join).
    expect((proposedAt ?? Number.POSITIVE_INFINITY) - (caughtUpAt ?? 0)).toBeLessThanOrEqual(1);
    expect(await settled(answer)).toMatchObject({ outcome: "done" });
  });

  it("draws its election timeouts from the seed it is given", async () => {
    const counts: number[] = [];
    for (const seed of [7, 7, 7, 7]) {
      const clock = new ManualClock();
      counts.push(await ticksUntilLeader(clock, await openReplica(clock, seed)));
    }
    expect(new Set(counts).size).toBe(1);
  });
});
