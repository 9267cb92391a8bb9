import { crc32c } from "@node-rs/crc32";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { MemberStorage } from "../../../../src/cluster/raft/storage/member-storage.js";
import type { Entry, HardState, Snapshot } from "../../../../src/cluster/raft/types.js";
import { withTemporaryDirectory } from "./temp-directory.js";

/** The obviously correct reference: everything in memory, following the same rules as the storage contract. */
interface Model {
  hardState: HardState;
  logStart: { index: number; term: number };
  lastIndex: number;
  entries: Map<number, Entry>;
  snapshot: Snapshot | null;
}

function modelTerm(model: Model, index: number): number | null {
  if (index === model.logStart.index) {
    return model.logStart.term;
  }
  if (index === 0) {
    return 0;
  }
  if (index < model.logStart.index || index > model.lastIndex) {
    return null;
  }
  return model.entries.get(index)?.term ?? null;
}

function dropThrough(model: Model, index: number): void {
  for (const key of [...model.entries.keys()]) {
    if (key <= index) {
      model.entries.delete(key);
    }
  }
}

type Operation =
  | { kind: "append"; back: number; count: number; termBump: number; commitAdvance: number; withHardState: boolean }
  | { kind: "compact"; offset: number }
  | { kind: "snapshot"; offset: number; conflicting: boolean; sizeBytes: number }
  | { kind: "restart" };

const operation: fc.Arbitrary<Operation> = fc.oneof(
  {
    weight: 5,
    arbitrary: fc.record({
      kind: fc.constant("append" as const),
      back: fc.nat(4),
      count: fc.nat(4),
      termBump: fc.nat(1),
      commitAdvance: fc.nat(3),
      withHardState: fc.boolean(),
    }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("compact" as const), offset: fc.nat(5) }) },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant("snapshot" as const),
      offset: fc.nat(6),
      conflicting: fc.boolean(),
      sizeBytes: fc.nat(40),
    }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("restart" as const) }) },
);

/** Applies `op` to the model and returns the storage call that must have the same effect (null for a restart). */
function applyToModel(model: Model, op: Operation, step: number): ((storage: MemberStorage) => Promise<void>) | null {
  switch (op.kind) {
    case "append": {
      const first = Math.min(
        model.lastIndex + 1,
        Math.max(model.logStart.index + 1, model.hardState.commitIndex + 1, model.lastIndex + 1 - op.back),
      );
      const term = Math.max(modelTerm(model, first - 1) ?? 0, model.hardState.term) + op.termBump;
      const entries: Entry[] = Array.from({ length: op.count }, (_, offset) => ({
        index: first + offset,
        term,
        kind: offset % 3 === 2 ? "noop" : "normal",
        data: new TextEncoder().encode(`step ${step} entry ${offset}`),
      }));
      const newLast = entries.length > 0 ? first + entries.length - 1 : model.lastIndex;
      const hardState: HardState | null = op.withHardState
        ? {
            term: Math.max(model.hardState.term, term),
            votedFor: term > model.hardState.term ? step % 3 : model.hardState.votedFor,
            commitIndex: Math.max(
              model.hardState.commitIndex,
              Math.min(newLast, model.hardState.commitIndex + op.commitAdvance),
            ),
          }
        : null;
      if (entries.length > 0) {
        for (let index = first; index <= model.lastIndex; index += 1) {
          model.entries.delete(index);
        }
        for (const entry of entries) {
          model.entries.set(entry.index, entry);
        }
        model.lastIndex = newLast;
      }
      if (hardState !== null) {
        model.hardState = hardState;
      }
      return (storage) => storage.append(entries, hardState);
    }
    case "compact": {
      // Only compaction behind the snapshot is allowed, and installing the snapshot already dropped those entries.
      const index = Math.min(model.snapshot?.metadata.index ?? 0, model.logStart.index, op.offset);
      return (storage) => storage.compact(index);
    }
    case "snapshot": {
      const index = model.logStart.index + op.offset;
      const existingTerm = modelTerm(model, index);
      const term = existingTerm === null ? model.hardState.term + 1 : op.conflicting ? existingTerm + 1 : existingTerm;
      const data = new Uint8Array(op.sizeBytes).map((_, position) => (position + step) & 0xff);
      const snapshot: Snapshot = {
        metadata: {
          index,
          term,
          configuration: { members: [{ id: 1, role: "voter", priority: 1 }] },
          sizeBytes: data.byteLength,
          checksum: crc32c(data),
        },
        data,
      };
      if (index <= (model.snapshot?.metadata.index ?? 0)) {
        return (storage) => storage.installSnapshot(snapshot);
      }
      if (existingTerm === term && index <= model.lastIndex) {
        dropThrough(model, index);
      } else {
        model.entries.clear();
        model.lastIndex = index;
      }
      model.logStart = { index, term };
      model.lastIndex = Math.max(model.lastIndex, index);
      model.snapshot = snapshot;
      return (storage) => storage.installSnapshot(snapshot);
    }
    case "restart":
      return null;
  }
}

async function expectSameAs(storage: MemberStorage, model: Model): Promise<void> {
  expect(await storage.load()).toEqual({
    hardState: model.hardState,
    snapshot: model.snapshot?.metadata ?? null,
    firstIndex: model.logStart.index + 1,
    lastIndex: model.lastIndex,
    incomingSnapshot: null,
  });
  const expectedEntries = [...model.entries.values()].sort((left, right) => left.index - right.index);
  expect(storage.entries(model.logStart.index + 1, model.lastIndex + 1)).toEqual(expectedEntries);
  for (let index = Math.max(0, model.logStart.index - 1); index <= model.lastIndex + 1; index += 1) {
    expect(storage.term(index)).toBe(modelTerm(model, index));
  }
  expect(storage.snapshot()).toEqual(model.snapshot);
  expect(storage.snapshotMetadata()).toEqual(model.snapshot?.metadata ?? null);
}

/** Both commit modes; the small entry cache makes reads mix memory and disk. */
const modes = [
  { name: "on LMDB's writer thread, default entry cache", synchronousCommit: false, entryCacheBytes: undefined },
  { name: "on the calling thread, a 300-byte entry cache", synchronousCommit: true, entryCacheBytes: 300 },
];

describe.each(modes)("MemberStorage against an in-memory model, committing $name", (mode) => {
  const options = (directory: string) => ({
    directory,
    snapshotChunkBytes: 16,
    synchronousCommit: mode.synchronousCommit,
    ...(mode.entryCacheBytes === undefined ? {} : { entryCacheBytes: mode.entryCacheBytes }),
  });

  it("agrees on every read after random sequences of concurrent writes and restarts", async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(fc.array(operation, { minLength: 1, maxLength: 3 }), { maxLength: 12 }), (groups) =>
        withTemporaryDirectory(async (directory) => {
          const model: Model = {
            hardState: { term: 0, votedFor: null, commitIndex: 0 },
            logStart: { index: 0, term: 0 },
            lastIndex: 0,
            entries: new Map(),
            snapshot: null,
          };
          let storage = MemberStorage.open(options(directory));
          try {
            let step = 0;
            for (const group of groups) {
              // Operations of one group are issued without waiting, so they share group-commit transactions.
              const pending: Promise<void>[] = [];
              for (const op of group) {
                step += 1;
                const call = applyToModel(model, op, step);
                if (call === null) {
                  await Promise.all(pending.splice(0));
                  await storage.close();
                  storage = MemberStorage.open(options(directory));
                } else {
                  pending.push(call(storage));
                }
              }
              await Promise.all(pending);
              await expectSameAs(storage, model);
            }
          } finally {
            await storage.close();
          }
        }),
      ),
      { numRuns: 100 },
    );
    // A hundred runs of up to 36 operations, each durable commit a sync of the disk, take most of the suite's default
    // limit on two cores and can pass it when other work shares them: the run count bounds the work, not the clock.
  }, 120_000);
});
