import { crc32c } from "@node-rs/crc32";
import pino from "pino";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import {
  PartitionReplica,
  type PartitionReplicaOptions,
  type ReceiptDamageReport,
  type ReplicaClock,
  type SnapshotReport,
  systemClock,
} from "../../../src/cluster/broker/partition-replica.js";
import type { PublishMessageCommand, PublishMessageResponse } from "../../../src/cluster/broker/protocol.js";
import type { Message } from "../../../src/cluster/raft/core/messages.js";
import { StorageEnvironment } from "../../../src/cluster/raft/storage/environment.js";
import type { SnapshotMetadata } from "../../../src/cluster/raft/types.js";
import { detachedMessage } from "../../support/replica-messages.js";
import { removeDirectory, temporaryDirectory, waitFor } from "./support.js";

/** The most bytes one CRC-32C call read at once: a whole snapshot checksummed in one go shows here. */
const checksums = vi.hoisted(() => ({ largestBytes: 0 }));

vi.mock("@node-rs/crc32", async (importOriginal) => {
  const original = await importOriginal<typeof import("@node-rs/crc32")>();
  return {
    ...original,
    crc32c: (input: string | Uint8Array, initialState?: number): number => {
      checksums.largestBytes = Math.max(checksums.largestBytes, input.length);
      return original.crc32c(input, initialState);
    },
  };
});

function command(overrides: Partial<PublishMessageCommand> = {}): PublishMessageCommand {
  return {
    name: "tick",
    correlationKey: "",
    timeToLiveMs: 600_000,
    variables: {},
    tenantId: "<default>",
    ...overrides,
  };
}

describe("PartitionReplica (a single-member group with real storage)", () => {
  let directory: string;
  let environment: StorageEnvironment;
  let replica: PartitionReplica | undefined;
  const failures: Error[] = [];

  function options(overrides: Partial<PartitionReplicaOptions> = {}): PartitionReplicaOptions {
    return {
      partitionId: 2,
      memberId: 0,
      environment,
      bootstrap: [{ id: 0, role: "voter", priority: 1 }],
      heartbeatIntervalMs: 10,
      electionTimeoutMs: 50,
      snapshotIntervalEntries: 10,
      maxPendingProposals: 64,
      maxApplyLagEntries: 100,
      send: () => {
        throw new Error("a single member sends nothing");
      },
      onFailure: (error) => failures.push(error),
      logger: pino({ level: "silent" }),
      ...overrides,
    };
  }

  async function openLeader(overrides: Partial<PartitionReplicaOptions> = {}): Promise<PartitionReplica> {
    const opened = await PartitionReplica.open(options(overrides));
    replica = opened;
    await waitFor(() => opened.report().role === "leader" && opened.report().health === "healthy", "replica leads");
    return opened;
  }

  beforeEach(async () => {
    directory = await temporaryDirectory("replica");
    environment = StorageEnvironment.open({ directory, synchronousCommit: true });
    failures.length = 0;
  });

  afterEach(async () => {
    await replica?.close();
    replica = undefined;
    await environment.close();
    await removeDirectory(directory);
    expect(failures).toEqual([]);
  });

  it("fails when a snapshot's chunks cannot be written, even while its work queue is full", async () => {
    const leader = await openLeader({ snapshotIntervalEntries: 1_000_000 });
    // Reaching into the driver: a disk that refuses the chunks, and request handlers that filled the queue.
    const internals = leader as unknown as {
      storage: { prepareSnapshotFrom(source: unknown): Promise<void> };
      engine: { snapshotEncoder(): unknown };
      queue: { run(): void; fail(detail: string): void }[];
      takeSnapshot(encoder: unknown): Promise<void>;
    };
    internals.storage.prepareSnapshotFrom = async () => {
      throw new Error("no space left on device");
    };
    for (let position = 0; position < 16_384; position += 1) internals.queue.push({ run: () => {}, fail: () => {} });
    await internals.takeSnapshot(internals.engine.snapshotEncoder());
    await waitFor(() => leader.failed, "the replica failed");
    expect(failures.map((failure) => failure.message)).toEqual(["no space left on device"]);
    failures.length = 0;
  });

  it("takes a large snapshot in turns: other work gets one per MiB while its bytes are stored", async () => {
    const MiB = 1024 * 1024;
    // Only snapshots yield through the clock here (no backup runs).
    let turns = 0;
    const clock: ReplicaClock = {
      ...systemClock,
      yieldTurn: () => {
        turns += 1;
        return systemClock.yieldTurn();
      },
    };
    const reports: SnapshotReport[] = [];
    const leader = await openLeader({
      clock,
      snapshotIntervalEntries: 20,
      onSnapshot: (report) => reports.push(report),
    });
    const variables = { blob: "x".repeat(200_000) };
    checksums.largestBytes = 0;
    for (let sequence = 0; sequence < 24; sequence += 1) {
      const published = await leader.publish(command({ name: `large-${sequence}`, variables }));
      if (published.outcome !== "published") throw new Error(JSON.stringify(published));
    }
    await waitFor(() => reports.length > 0 && leader.latestSnapshotIndex > 0, "a snapshot taken");
    const report = reports[0] as SnapshotReport;
    expect(report.sizeBytes).toBeGreaterThan(3 * MiB);
    // A turn after every full MiB cut into stored chunks.
    expect(turns).toBeGreaterThanOrEqual(Math.ceil(report.sizeBytes / MiB) - 1);
    // And not many more: one per MiB, a few for the hand-over to the core, and the replica's own turns meanwhile.
    expect(turns).toBeLessThanOrEqual(3 * Math.ceil(report.sizeBytes / MiB) + 20);
    // The compaction records the checksum computed while the chunks were cut: nothing checksums the whole snapshot.
    expect(checksums.largestBytes).toBeLessThanOrEqual(MiB);
  });

  it("restores its engine from a large stored snapshot a chunk per turn when it opens", async () => {
    const MiB = 1024 * 1024;
    const reports: SnapshotReport[] = [];
    const leader = await openLeader({ snapshotIntervalEntries: 20, onSnapshot: (report) => reports.push(report) });
    const variables = { blob: "x".repeat(200_000) };
    for (let sequence = 0; sequence < 24; sequence += 1) {
      const published = await leader.publish(command({ name: `large-${sequence}`, variables }));
      if (published.outcome !== "published") throw new Error(JSON.stringify(published));
    }
    await waitFor(() => reports.length > 0 && leader.latestSnapshotIndex > 0, "a snapshot taken");
    const snapshotIndex = leader.latestSnapshotIndex;
    const buffered = leader.bufferedMessageCount;
    await leader.close();
    replica = undefined;
    const sizeBytes = (reports.at(-1) as SnapshotReport).sizeBytes;
    expect(sizeBytes).toBeGreaterThan(3 * MiB);

    let turnsWhileOpening = 0;
    let opening = true;
    const clock: ReplicaClock = {
      ...systemClock,
      yieldTurn: () => {
        if (opening) turnsWhileOpening += 1;
        return systemClock.yieldTurn();
      },
    };
    const reopened = await PartitionReplica.open(options({ clock, bootstrap: null }));
    opening = false;
    replica = reopened;
    // A turn after every stored chunk (1 MiB) of the snapshot, and the same engine as before.
    expect(turnsWhileOpening).toBeGreaterThanOrEqual(Math.ceil(sizeBytes / MiB));
    expect(reopened.latestSnapshotIndex).toBe(snapshotIndex);
    // The entries after the snapshot are applied on top of the restored engine once the replica leads again.
    await waitFor(() => reopened.bufferedMessageCount === buffered, "every message buffered again");
  });

  it("answers a proposal whose own work item fails the replica", async () => {
    const leader = await openLeader();
    const internals = leader as unknown as { node: { propose(data: Uint8Array): unknown } };
    internals.node.propose = () => {
      throw new Error("invariant violated: a test's broken log");
    };
    const hung = new Promise<"hung">((resolve) => setTimeout(() => resolve("hung"), 5_000).unref());
    expect(await Promise.race([leader.publish(command()), hung])).toMatchObject({ outcome: "unavailable" });
    expect(leader.pendingProposalCount).toBe(0);
    expect(failures.map((failure) => failure.message)).toEqual(["invariant violated: a test's broken log"]);
    failures.length = 0;
  });

  it("answers the work queued behind an item that fails the replica", async () => {
    const leader = await openLeader();
    const internals = leader as unknown as { queue: { run(): void; fail(detail: string): void }[] };
    internals.queue.push({
      run: () => {
        throw new Error("invariant violated: a test's broken work item");
      },
      fail: () => {},
    });
    const hung = new Promise<"hung">((resolve) => setTimeout(() => resolve("hung"), 5_000).unref());
    const answer = await Promise.race([leader.publish(command()), hung]);
    expect(answer).toMatchObject({ outcome: "unavailable" });
    expect(failures.map((failure) => failure.message)).toEqual(["invariant violated: a test's broken work item"]);
    failures.length = 0;
  });

  it("snapshots every N applied entries, keeps the log bounded, and restores the engine on restart", async () => {
    const leader = await openLeader();
    const keys: string[] = [];
    for (let sequence = 0; sequence < 35; sequence += 1) {
      const published = await leader.publish(command({ name: `m-${sequence}`, messageId: `id-${sequence}` }));
      if (published.outcome !== "published") throw new Error(JSON.stringify(published));
      keys.push(published.key);
    }
    await waitFor(() => leader.latestSnapshotIndex >= 30, "a snapshot covers the first 30 entries");
    expect(leader.logSizeEntries()).toBeLessThanOrEqual(20);
    expect(leader.report().logSizeEntries).toBe(leader.logSizeEntries());
    const appliedBefore = leader.report().appliedIndex;
    await leader.close();

    const restarted = await openLeader();
    expect(restarted.latestSnapshotIndex).toBeGreaterThanOrEqual(30);
    expect(restarted.report().appliedIndex).toBeGreaterThanOrEqual(appliedBefore);
    expect(restarted.bufferedMessageCount).toBe(35);
    for (const [sequence, key] of keys.entries()) {
      expect(await restarted.getMessage(key)).toMatchObject({
        outcome: "found",
        message: { key, name: `m-${sequence}` },
      });
    }
    // The message ids survived the snapshot: a duplicate is still refused.
    expect(await restarted.publish(command({ messageId: "id-3" }))).toMatchObject({
      outcome: "rejected",
      reason: "duplicate-message-id",
    });
  });

  it("expires messages by proposing an expiry record once their deadline passes", async () => {
    const leader = await openLeader();
    const shortLived = await leader.publish(command({ timeToLiveMs: 1 }));
    const longLived = await leader.publish(command({ timeToLiveMs: 600_000 }));
    if (shortLived.outcome !== "published" || longLived.outcome !== "published") throw new Error("not published");
    await waitFor(() => leader.bufferedMessageCount === 1, "the short-lived message expired");
    expect(await leader.getMessage(shortLived.key)).toEqual({ outcome: "not-found" });
    expect(await leader.getMessage(longLived.key)).toMatchObject({ outcome: "found" });
    // A message id is free again once its message expired.
    const reused = await leader.publish(command({ messageId: "again", timeToLiveMs: 1 }));
    expect(reused.outcome).toBe("published");
    await waitFor(() => leader.bufferedMessageCount === 1, "the second short-lived message expired");
    expect((await leader.publish(command({ messageId: "again" }))).outcome).toBe("published");
  });

  it("answers unavailable beyond its pending-proposal bound and after it stopped", async () => {
    const leader = await openLeader({ maxPendingProposals: 2 });
    const answers = await Promise.all(
      Array.from({ length: 6 }, (_, index) => leader.publish(command({ name: `b-${index}` }))),
    );
    const outcomes = answers.map((answer) => answer.outcome);
    expect(outcomes.filter((outcome) => outcome === "published")).toHaveLength(2);
    expect(outcomes.filter((outcome) => outcome === "unavailable")).toHaveLength(4);
    await leader.close();
    expect((await leader.publish(command())).outcome).toBe("unavailable");
    expect((await leader.getMessage("1")).outcome).toBe("unavailable");
    expect(leader.report().role).toBe("inactive");
  });

  it("rejects an invalid record without proposing it", async () => {
    const leader = await openLeader();
    const applied = leader.report().appliedIndex;
    expect(await leader.publish(command({ timeToLiveMs: -1 }))).toMatchObject({
      outcome: "rejected",
      reason: "invalid-record",
    });
    expect(leader.report().appliedIndex).toBe(applied);
  });
});

describe("PartitionReplica in a three-member group whose links the test cuts", () => {
  const memberIds = [0, 1, 2];
  let directories: string[] = [];
  let environments: StorageEnvironment[] = [];
  let replicas: PartitionReplica[] = [];
  /** Links `from→to` that drop every message. */
  const cut = new Set<string>();

  /** Opens the group; proposals of a lost leadership wait `inDoubtTimeoutMs` (long unless a test is about it). */
  async function openGroup(inDoubtTimeoutMs = 60_000, snapshotIntervalEntries = 10_000): Promise<void> {
    directories = await Promise.all(memberIds.map((memberId) => temporaryDirectory(`group-${memberId}`)));
    environments = directories.map((directory) => StorageEnvironment.open({ directory, synchronousCommit: true }));
    replicas = await Promise.all(
      memberIds.map((memberId) =>
        PartitionReplica.open({
          partitionId: 1,
          memberId,
          environment: environments[memberId] as StorageEnvironment,
          bootstrap: memberIds.map((id) => ({ id, role: "voter" as const, priority: 1 })),
          heartbeatIntervalMs: 10,
          electionTimeoutMs: 60,
          snapshotIntervalEntries,
          maxPendingProposals: 64,
          maxApplyLagEntries: 100,
          inDoubtTimeoutMs,
          send: (to, message) => {
            if (!cut.has(`${memberId}→${to}`)) replicas[to]?.receive(detachedMessage(message));
          },
          onFailure: (error) => {
            throw error;
          },
          logger: pino({ level: "silent" }),
        }),
      ),
    );
  }

  beforeEach(() => {
    cut.clear();
    directories = [];
    environments = [];
    replicas = [];
  });

  afterEach(async () => {
    await Promise.all(replicas.map((replica) => replica.close()));
    await Promise.all(environments.map((environment) => environment.close()));
    await Promise.all(directories.map((directory) => removeDirectory(directory)));
  });

  /** Waits for a leader other than `excluding`; without `excluding`, also for every replica to be healthy. */
  async function leader(excluding?: number): Promise<number> {
    let found = -1;
    await waitFor(() => {
      found = replicas.findIndex((replica, memberId) => memberId !== excluding && replica.report().role === "leader");
      const healthy = excluding !== undefined || replicas.every((replica) => replica.report().health === "healthy");
      return found >= 0 && healthy;
    }, "a leader");
    return found;
  }

  function isolate(memberId: number, direction: "both" | "inbound"): void {
    for (const other of memberIds) {
      if (other === memberId) continue;
      cut.add(`${other}→${memberId}`);
      if (direction === "both") cut.add(`${memberId}→${other}`);
    }
  }

  /**
   * Has the leader `memberId` propose a publication that every follower holds but none can acknowledge (their
   * messages to it are cut), so the leader cannot commit it.
   */
  async function proposeUncommitted(memberId: number): Promise<{ pending: Promise<PublishMessageResponse> }> {
    const old = replicas[memberId] as PartitionReplica;
    isolate(memberId, "inbound");
    const sizeBefore = old.logSizeEntries();
    const pending = old.publish(command({ name: "in-doubt" }));
    await waitFor(
      () => replicas.every((replica) => replica.logSizeEntries() > sizeBefore),
      "the followers hold the entry",
    );
    // Wrapped: an async function would otherwise wait for the answer itself.
    return { pending };
  }

  it("answers published when it lost leadership before the next leader committed its entry", async () => {
    await openGroup();
    const first = await leader();
    const old = replicas[first] as PartitionReplica;
    const { pending } = await proposeUncommitted(first);
    let answered = false;
    void pending.then(() => {
      answered = true;
    });
    // Cut off completely, the old leader steps down and the others elect a leader, which commits the entry.
    isolate(first, "both");
    await leader(first);
    await waitFor(() => old.report().role !== "leader", "the old leader stepped down");
    expect(answered).toBe(false);
    cut.clear();
    const outcome = await pending;
    expect(outcome).toMatchObject({ outcome: "published" });
    if (outcome.outcome !== "published") throw new Error("not published");
    expect(await (replicas[await leader()] as PartitionReplica).getMessage(outcome.key)).toMatchObject({
      outcome: "found",
    });
  });

  it("answers not-leader when the next leader replaced its entry, so a retry publishes it once", async () => {
    await openGroup();
    const first = await leader();
    const old = replicas[first] as PartitionReplica;
    // Nobody gets the entry: the others elect a leader whose own first entry takes its index.
    isolate(first, "both");
    const pending = old.publish(command({ name: "lost" }));
    await leader(first);
    cut.clear();
    expect(await pending).toMatchObject({ outcome: "not-leader" });
  });

  it("does not count a lost leadership's proposal as pending, and answers it unknown when its fate stays unknown", async () => {
    await openGroup(500);
    const first = await leader();
    const old = replicas[first] as PartitionReplica;
    // Nobody gets the entry and the old leader stays cut off: it never learns what became of its index.
    isolate(first, "both");
    const pending = old.publish(command({ name: "cut-off" }));
    await waitFor(() => old.report().role !== "leader", "the old leader stepped down");
    // In doubt, it does not hold up a shutdown or take a slot of the proposal bound.
    expect(old.pendingProposalCount).toBe(0);
    // Its in-doubt deadline (500 ms here) answers it.
    expect(await pending).toMatchObject({ outcome: "unknown" });
  });

  it("answers unknown for a proposal in doubt when a snapshot from the new leader skips its index", async () => {
    await openGroup(60_000, 10);
    const first = await leader();
    const old = replicas[first] as PartitionReplica;
    isolate(first, "both");
    const pending = old.publish(command({ name: "skipped" }));
    const second = await leader(first);
    const successor = replicas[second] as PartitionReplica;
    // The others move on and compact their logs past everything the old leader holds.
    for (let sequence = 0; sequence < 30; sequence += 1) {
      expect((await successor.publish(command({ name: `later-${sequence}` }))).outcome).toBe("published");
    }
    await waitFor(() => successor.latestSnapshotIndex > old.report().appliedIndex + 1, "the new leader compacted");
    cut.clear();
    expect(await pending).toMatchObject({ outcome: "unknown" });
    expect(old.installedSnapshotCount).toBe(1);
  });

  it("answers unknown for a proposal still in doubt when it stops", async () => {
    await openGroup();
    const first = await leader();
    const old = replicas[first] as PartitionReplica;
    const { pending } = await proposeUncommitted(first);
    await old.close();
    expect(await pending).toMatchObject({ outcome: "unknown" });
  });
});

describe("PartitionReplica receiving a snapshot from its leader", () => {
  let directory: string;
  let environment: StorageEnvironment;
  let follower: PartitionReplica | undefined;

  beforeEach(async () => {
    directory = await temporaryDirectory("receiving");
    environment = StorageEnvironment.open({ directory, synchronousCommit: true });
  });

  afterEach(async () => {
    await follower?.close();
    follower = undefined;
    await environment.close();
    await removeDirectory(directory);
  });

  interface DamageLine {
    readonly msg: string;
    readonly partitionId?: number;
    readonly leaderId?: number;
    readonly damagedChunks?: number;
    readonly rejectedSnapshots?: number;
  }

  /** A follower of partition 4 led by member 0 (played by the test), on a monotonic clock the test can move on. */
  async function openFollower() {
    const logged: DamageLine[] = [];
    const reports: ReceiptDamageReport[] = [];
    const answers: Message[] = [];
    const clock = { skipMs: 0 };
    const members = [0, 1, 2].map((id) => ({ id, role: "voter" as const, priority: 1 }));
    const opened = await PartitionReplica.open({
      partitionId: 4,
      memberId: 1,
      environment,
      bootstrap: members,
      heartbeatIntervalMs: 10,
      // Member 0, played by the test, leads; this member never campaigns meanwhile.
      electionTimeoutMs: 60_000,
      snapshotIntervalEntries: 10_000,
      maxPendingProposals: 64,
      maxApplyLagEntries: 100,
      send: (_to, message) => answers.push(message),
      onFailure: (error) => {
        throw error;
      },
      onReceiptDamage: (damage) => reports.push(damage),
      receiptDamageLogIntervalMs: 60_000,
      clock: { ...systemClock, monotonicNow: () => systemClock.monotonicNow() + clock.skipMs },
      logger: pino({ level: "warn" }, { write: (line: string) => logged.push(JSON.parse(line)) }),
    });
    follower = opened;
    const damageLines = () => logged.filter((line) => line.msg.includes("arrived damaged"));
    return { replica: opened, members, reports, answers, clock, damageLines };
  }

  const data = new Uint8Array(64).map((_, index) => index);
  const damaged = data.slice();
  damaged[7] = (damaged[7] ?? 0) ^ 0x10;

  /** The first chunk of a snapshot from member 0, carrying `bytes` and the checksum `checksumOf` was computed on. */
  function firstChunk(metadata: SnapshotMetadata, bytes: Uint8Array, checksumOf: Uint8Array): Message {
    return {
      type: "snapshotChunk",
      from: 0,
      to: 1,
      term: 2,
      metadata,
      offset: 0,
      data: bytes,
      last: bytes.byteLength === metadata.sizeBytes,
      checksum: crc32c(checksumOf) >>> 0,
    };
  }

  it("reports every damaged chunk and logs at most one line per interval, with the counts since the last", async () => {
    const { replica, members, reports, answers, clock, damageLines } = await openFollower();
    const metadata = { index: 10, term: 2, configuration: { members }, sizeBytes: 128, checksum: 0 };
    const chunk = (bytes: Uint8Array): Message => firstChunk(metadata, bytes, data);
    replica.receive(chunk(damaged));
    await waitFor(() => answers.length === 1, "the damaged chunk answered");
    // Asked for again at its own offset, reported and logged at once.
    expect(answers[0]).toMatchObject({ type: "snapshotResponse", status: "continue", nextOffset: 0 });
    await waitFor(() => reports.length === 1, "the damage reported");
    expect(reports).toEqual([{ partitionId: 4, chunks: 1, snapshots: 0 }]);
    expect(damageLines()).toEqual([
      expect.objectContaining({ partitionId: 4, leaderId: 0, damagedChunks: 1, rejectedSnapshots: 0 }),
    ]);
    // Two more within the interval: each reported for the metrics, neither logged yet.
    replica.receive(chunk(damaged));
    await waitFor(() => reports.length === 2, "the second damage reported");
    replica.receive(chunk(damaged));
    await waitFor(() => reports.length === 3, "the third damage reported");
    expect(damageLines()).toHaveLength(1);
    // Once the interval has passed, the next turn (a tick) logs both in one line, with no new damage needed.
    clock.skipMs = 60_000;
    await waitFor(() => damageLines().length === 2, "the held counts logged");
    expect(damageLines()[1]).toMatchObject({ partitionId: 4, leaderId: 0, damagedChunks: 2, rejectedSnapshots: 0 });
    // An intact chunk is accepted and reports nothing.
    replica.receive(chunk(data));
    await waitFor(() => answers.length === 4, "the intact chunk answered");
    expect(answers[3]).toMatchObject({ type: "snapshotResponse", status: "continue", nextOffset: 64 });
    // Nothing held back is left to log, even once another interval has passed (ticks every 10 ms meanwhile).
    clock.skipMs = 120_000;
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(reports).toHaveLength(3);
    expect(damageLines()).toHaveLength(2);
  });

  it("reports and logs a snapshot whose whole checksum fails, and answers that it starts over", async () => {
    const { replica, members, reports, answers, damageLines } = await openFollower();
    // Each chunk matches its own checksum, but the bytes are not the snapshot's: damaged before the leader computed
    // the chunk's checksum, which only the whole snapshot's shows.
    const metadata = { index: 10, term: 2, configuration: { members }, sizeBytes: 64, checksum: crc32c(data) >>> 0 };
    replica.receive(firstChunk(metadata, damaged, damaged));
    await waitFor(() => answers.length === 1, "the snapshot answered");
    expect(answers[0]).toMatchObject({ type: "snapshotResponse", status: "rejected", nextOffset: 0 });
    await waitFor(() => reports.length === 1, "the damage reported");
    expect(reports).toEqual([{ partitionId: 4, chunks: 0, snapshots: 1 }]);
    expect(damageLines()).toEqual([
      expect.objectContaining({ partitionId: 4, leaderId: 0, damagedChunks: 0, rejectedSnapshots: 1 }),
    ]);
  });
});
