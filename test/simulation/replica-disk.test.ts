import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { SeededRandom } from "../../src/cluster/raft/core/random.js";
import { MemberStorage } from "../../src/cluster/raft/storage/member-storage.js";
import type { Entry } from "../../src/cluster/raft/types.js";
import { type DiskLatency, SimulatedReplicaDisk } from "./replica-disk.js";

const IMMEDIATE: DiskLatency = { immediateProbability: 1, maxTicks: 1 };
const ONE_TICK: DiskLatency = { immediateProbability: 0, maxTicks: 1 };

function entry(index: number): Entry {
  return { index, term: 1, kind: "normal", data: new Uint8Array([index]) };
}

async function lastIndexIn(directory: string): Promise<number> {
  const disk = SimulatedReplicaDisk.open(directory, new SeededRandom(1), IMMEDIATE, () => 0);
  try {
    const storage = MemberStorage.openIn(disk.environment, { scope: 1 });
    const persisted = await storage.load();
    await storage.close();
    return persisted.lastIndex;
  } finally {
    await disk.close();
  }
}

describe("simulated disk in front of a real storage environment", () => {
  let directory: string;
  let tick: number;

  beforeEach(async () => {
    directory = await mkdtemp(join(tmpdir(), "flowplane-replica-disk-"));
    tick = 0;
  });

  afterEach(async () => {
    await rm(directory, { recursive: true, force: true });
  });

  it("holds a commit until its tick, then writes it; a crash loses only what was still queued", async () => {
    const disk = SimulatedReplicaDisk.open(directory, new SeededRandom(7), ONE_TICK, () => tick);
    const storage = MemberStorage.openIn(disk.environment, { scope: 1 });
    let durable = false;
    const first = storage.append([entry(1), entry(2)], { term: 1, votedFor: null, commitIndex: 0 }).then(() => {
      durable = true;
    });
    await new Promise((resolve) => setImmediate(resolve));
    expect(durable).toBe(false);
    expect(disk.queuedWrites).toBe(1);
    tick = 1;
    disk.release();
    await first;
    expect(durable).toBe(true);

    let lostOneSettled = false;
    void storage.append([entry(3)], null).finally(() => {
      lostOneSettled = true;
    });
    await new Promise((resolve) => setImmediate(resolve));
    expect(await disk.crash(true, new SeededRandom(3))).toBe(true);
    expect(disk.lostWrites).toBe(1);
    // The replica that submitted the lost write never learns its fate, as a process that died would not.
    await new Promise((resolve) => setImmediate(resolve));
    expect(lostOneSettled).toBe(false);
    // The torn record the crash left at the journal's tail is cut away; what was durable is all there is.
    expect(await lastIndexIn(directory)).toBe(2);
  });

  it("lets the replica see chunk writes complete only when released", async () => {
    const disk = SimulatedReplicaDisk.open(directory, new SeededRandom(7), IMMEDIATE, () => tick);
    const storage = MemberStorage.openIn(disk.environment, { scope: 1 });
    let prepared = false;
    const preparing = storage.prepareSnapshot(new Uint8Array(100)).then(() => {
      prepared = true;
    });
    expect(disk.chunkWritesPending).toBe(true);
    await disk.chunkWritesSettled();
    await new Promise((resolve) => setImmediate(resolve));
    expect(prepared).toBe(false);
    // The frames' write first, then the file's sync, each seen complete only once released.
    disk.releaseSettledChunkWrites();
    await new Promise((resolve) => setImmediate(resolve));
    expect(disk.chunkWritesPending).toBe(true);
    await disk.chunkWritesSettled();
    await new Promise((resolve) => setImmediate(resolve));
    expect(prepared).toBe(false);
    disk.releaseSettledChunkWrites();
    await preparing;
    expect(prepared).toBe(true);
    await storage.close();
    await disk.close();
  });
});
