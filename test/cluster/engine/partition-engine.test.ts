import { createHash } from "node:crypto";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { encodeKey } from "../../../src/cluster/engine/keys.js";
import { type ApplyResult, PartitionEngine } from "../../../src/cluster/engine/partition-engine.js";
import {
  DEFAULT_TENANT_ID,
  encodeRecord,
  engineCodec,
  type PublishMessageRecord,
} from "../../../src/cluster/engine/records.js";
import { NO_RESTORED_ENTRY_MEMORY } from "./support.js";

/** SHA-256 of the snapshot of the fixed state of the pinned-bytes test (computed by this version and 46af34b). */
const PINNED_SNAPSHOT_SHA256 = "1f9a01b2bf9b734e9a79f2e430bb0cef5efbbc4fc01287e03b95cc3ff6975b2d";

function publish(overrides: Partial<PublishMessageRecord> = {}): Uint8Array {
  return encodeRecord({
    kind: "publishMessage",
    name: "order-paid",
    correlationKey: "order-1",
    timeToLiveMs: 100,
    variables: { amount: 3 },
    tenantId: DEFAULT_TENANT_ID,
    publishedAtMs: 1_000,
    ...overrides,
  });
}

function expire(nowMs: number): Uint8Array {
  return encodeRecord({ kind: "expireMessages", nowMs });
}

/** Applies `records` at consecutive indexes after the engine's last applied index. */
function applyAll(engine: PartitionEngine, records: readonly Uint8Array[]): ApplyResult[] {
  return records.map((record) => engine.apply(engine.lastAppliedIndex + 1, record));
}

describe("PartitionEngine", () => {
  it("buffers a published message under a key of its partition", () => {
    const engine = new PartitionEngine({ partitionId: 3 });
    const result = engine.apply(5, publish({ messageId: "m-1", variables: { a: [1, { b: "c" }] } }));
    expect(result).toEqual({ kind: "published", key: encodeKey(3, 1) });
    expect(engine.lastAppliedIndex).toBe(5);
    expect(engine.getMessage(encodeKey(3, 1))).toEqual({
      key: encodeKey(3, 1),
      partitionId: 3,
      name: "order-paid",
      correlationKey: "order-1",
      timeToLiveMs: 100,
      messageId: "m-1",
      variables: { a: [1, { b: "c" }] },
      tenantId: DEFAULT_TENANT_ID,
      publishedAtMs: 1_000,
      deadlineMs: 1_100,
    });
    expect(engine.bufferedMessageCount).toBe(1);
    expect(engine.bufferedBytes).toBeGreaterThan(0);
    expect(engine.nextDeadlineMs).toBe(1_100);
    expect(engine.apply(6, publish())).toEqual({ kind: "published", key: encodeKey(3, 2) });
  });

  it("finds nothing for unknown, malformed or foreign keys", () => {
    const engine = new PartitionEngine({ partitionId: 1 });
    engine.apply(1, publish());
    expect(engine.getMessage(encodeKey(1, 2))).toBeUndefined();
    expect(engine.getMessage(encodeKey(2, 1))).toBeUndefined();
    expect(engine.getMessage("not-a-key")).toBeUndefined();
  });

  it("expires a message exactly when the expiry time reaches its deadline", () => {
    const engine = new PartitionEngine({ partitionId: 1 });
    const results = applyAll(engine, [publish({ publishedAtMs: 1_000, timeToLiveMs: 100 }), expire(1_099)]);
    expect(results[1]).toEqual({ kind: "expired", count: 0 });
    expect(engine.getMessage(encodeKey(1, 1))).toBeDefined();
    expect(applyAll(engine, [expire(1_100)])).toEqual([{ kind: "expired", count: 1 }]);
    expect(engine.getMessage(encodeKey(1, 1))).toBeUndefined();
    expect(engine.bufferedMessageCount).toBe(0);
    expect(engine.bufferedBytes).toBe(0);
    expect(engine.nextDeadlineMs).toBeUndefined();
  });

  it("buffers a message with time to live 0 until the next expiry record at or after its publication", () => {
    const engine = new PartitionEngine({ partitionId: 1 });
    applyAll(engine, [publish({ publishedAtMs: 500, timeToLiveMs: 0 })]);
    expect(engine.getMessage(encodeKey(1, 1))?.deadlineMs).toBe(500);
    expect(applyAll(engine, [expire(499), expire(500)])).toEqual([
      { kind: "expired", count: 0 },
      { kind: "expired", count: 1 },
    ]);
  });

  it("removes what expired by a publication's time when it applies, freeing the expired message's id", () => {
    const engine = new PartitionEngine({ partitionId: 2 });
    const [first, duplicate, afterDeadline] = applyAll(engine, [
      publish({ messageId: "pay-1", publishedAtMs: 0, timeToLiveMs: 10 }),
      publish({ messageId: "pay-1", publishedAtMs: 9, timeToLiveMs: 10 }),
      publish({ messageId: "pay-1", publishedAtMs: 10, timeToLiveMs: 10 }),
    ]);
    expect(first).toEqual({ kind: "published", key: encodeKey(2, 1) });
    expect(duplicate).toMatchObject({ kind: "rejected", reason: "duplicate-message-id" });
    expect(afterDeadline).toEqual({ kind: "published", key: encodeKey(2, 2) });
    expect(engine.bufferedMessageCount).toBe(1);
    expect(engine.getMessage(encodeKey(2, 1))).toBeUndefined();
  });

  it("expires in deadline order regardless of publication order", () => {
    const engine = new PartitionEngine({ partitionId: 1 });
    applyAll(engine, [
      publish({ publishedAtMs: 0, timeToLiveMs: 300 }),
      publish({ publishedAtMs: 100, timeToLiveMs: 50 }),
      publish({ publishedAtMs: 50, timeToLiveMs: 150 }),
    ]);
    expect(applyAll(engine, [expire(200)])).toEqual([{ kind: "expired", count: 2 }]);
    expect(engine.getMessage(encodeKey(1, 1))).toBeDefined();
    expect(engine.nextDeadlineMs).toBe(300);
  });

  it("rejects a duplicate message id only while the first message is buffered", () => {
    const engine = new PartitionEngine({ partitionId: 2 });
    const [first, duplicate, otherTenant, otherId] = applyAll(engine, [
      publish({ messageId: "pay-1", publishedAtMs: 0, timeToLiveMs: 10 }),
      publish({ messageId: "pay-1", publishedAtMs: 5, timeToLiveMs: 10 }),
      publish({ messageId: "pay-1", tenantId: "tenant-b", publishedAtMs: 5, timeToLiveMs: 10 }),
      publish({ messageId: "pay-2", publishedAtMs: 5, timeToLiveMs: 10 }),
    ]);
    expect(first).toEqual({ kind: "published", key: encodeKey(2, 1) });
    expect(duplicate).toMatchObject({ kind: "rejected", reason: "duplicate-message-id", existingKey: encodeKey(2, 1) });
    expect(otherTenant).toEqual({ kind: "published", key: encodeKey(2, 2) });
    expect(otherId).toEqual({ kind: "published", key: encodeKey(2, 3) });
    // A rejection consumes no key; expiry of the first frees its id.
    expect(applyAll(engine, [expire(10), publish({ messageId: "pay-1", publishedAtMs: 11 })])).toEqual([
      { kind: "expired", count: 1 },
      { kind: "published", key: encodeKey(2, 4) },
    ]);
  });

  it("rejects invalid records deterministically and still advances the applied index", () => {
    const engine = new PartitionEngine({ partitionId: 1 });
    const result = engine.apply(1, new Uint8Array([0xc1]));
    expect(result).toMatchObject({ kind: "rejected", reason: "invalid-record" });
    expect(engine.lastAppliedIndex).toBe(1);
    expect(engine.bufferedMessageCount).toBe(0);
  });

  it("refuses indexes that do not increase", () => {
    const engine = new PartitionEngine({ partitionId: 1 });
    engine.apply(4, publish());
    expect(() => engine.apply(4, publish())).toThrow(/applied indexes must increase/);
    expect(() => engine.markApplied(3)).toThrow(/applied indexes must increase/);
    engine.markApplied(9);
    expect(engine.lastAppliedIndex).toBe(9);
    expect(engine.bufferedMessageCount).toBe(1);
  });

  it("refuses partition ids out of bounds", () => {
    expect(() => new PartitionEngine({ partitionId: 0 })).toThrow(/partition id/);
    expect(() => new PartitionEngine({ partitionId: 8192 })).toThrow(/partition id/);
  });

  it("restores its whole state, including the key counter and applied index, from a snapshot", () => {
    const engine = new PartitionEngine({ partitionId: 7 });
    applyAll(engine, [publish({ messageId: "a", timeToLiveMs: 1_000 }), publish(), expire(1_100)]);
    engine.markApplied(20);
    const restored = PartitionEngine.restore(engine.snapshot());
    expect(restored.partitionId).toBe(7);
    expect(restored.lastAppliedIndex).toBe(20);
    expect(restored.bufferedMessageCount).toBe(1);
    expect(restored.bufferedBytes).toBe(engine.bufferedBytes);
    expect(restored.getMessage(encodeKey(7, 1))).toEqual(engine.getMessage(encodeKey(7, 1)));
    expect(restored.apply(21, publish({ messageId: "a" }))).toMatchObject({ reason: "duplicate-message-id" });
    expect(restored.apply(22, publish())).toEqual({ kind: "published", key: encodeKey(7, 3) });
  });

  it("refuses corrupt snapshots", () => {
    expect(() => PartitionEngine.restore(new Uint8Array([0x90]))).toThrow(/corrupt engine snapshot/);
    const engine = new PartitionEngine({ partitionId: 1 });
    applyAll(engine, [publish()]);
    const bytes = engine.snapshot();
    // The partition id is the second element of the top-level array: 0x95 0x01 <partition id>.
    const wrongPartition = Uint8Array.from(bytes);
    wrongPartition[2] = 0;
    expect(() => PartitionEngine.restore(wrongPartition)).toThrow(/partition id/);
  });
});

/** One step of a generated history: a publish, an expiry or a damaged record. */
type Step =
  | {
      kind: "publish";
      messageId: string | undefined;
      tenantId: string;
      correlationKey: string;
      publishedAtMs: number;
      timeToLiveMs: number;
      amount: number;
    }
  | { kind: "expire"; nowMs: number }
  | { kind: "garbage"; bytes: Uint8Array };

const stepArbitrary: fc.Arbitrary<Step> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.record({
      kind: fc.constant("publish" as const),
      messageId: fc.option(fc.constantFrom("a", "b", "c", "d"), { nil: undefined }),
      tenantId: fc.constantFrom(DEFAULT_TENANT_ID, "tenant-b"),
      correlationKey: fc.constantFrom("", "order-1", "order-2"),
      publishedAtMs: fc.integer({ min: 0, max: 1_000 }),
      timeToLiveMs: fc.integer({ min: 0, max: 300 }),
      amount: fc.integer(),
    }),
  },
  {
    weight: 3,
    arbitrary: fc.record({ kind: fc.constant("expire" as const), nowMs: fc.integer({ min: 0, max: 1_400 }) }),
  },
  {
    weight: 1,
    arbitrary: fc.record({ kind: fc.constant("garbage" as const), bytes: fc.uint8Array({ maxLength: 12 }) }),
  },
);

function encodeStep(step: Step): Uint8Array {
  switch (step.kind) {
    case "publish":
      return publish({
        messageId: step.messageId,
        tenantId: step.tenantId,
        correlationKey: step.correlationKey,
        publishedAtMs: step.publishedAtMs,
        timeToLiveMs: step.timeToLiveMs,
        variables: { amount: step.amount },
      });
    case "expire":
      return expire(step.nowMs);
    case "garbage":
      return step.bytes;
  }
}

/** A deliberately naive reference model of the engine's observable behaviour. */
function modelResults(steps: readonly Step[], partitionId: number): ApplyResult[] {
  let buffered: { counter: number; step: Extract<Step, { kind: "publish" }> }[] = [];
  let nextCounter = 1;
  return steps.map((step): ApplyResult => {
    if (step.kind === "expire") {
      const before = buffered.length;
      buffered = buffered.filter((entry) => entry.step.publishedAtMs + entry.step.timeToLiveMs > step.nowMs);
      return { kind: "expired", count: before - buffered.length };
    }
    if (step.kind === "garbage") return { kind: "rejected", reason: "invalid-record", detail: "" };
    // A publication first removes what expired by its own time.
    buffered = buffered.filter((entry) => entry.step.publishedAtMs + entry.step.timeToLiveMs > step.publishedAtMs);
    const duplicate = buffered.find(
      (entry) =>
        step.messageId !== undefined &&
        entry.step.messageId === step.messageId &&
        entry.step.tenantId === step.tenantId,
    );
    if (duplicate !== undefined) {
      return {
        kind: "rejected",
        reason: "duplicate-message-id",
        detail: "",
        existingKey: encodeKey(partitionId, duplicate.counter),
      };
    }
    buffered.push({ counter: nextCounter, step });
    nextCounter += 1;
    return { kind: "published", key: encodeKey(partitionId, nextCounter - 1) };
  });
}

/** Results with the human-readable detail dropped, for comparison with the model. */
function withoutDetail(result: ApplyResult): unknown {
  if (result.kind !== "rejected") return result;
  const { detail: _detail, ...rest } = result;
  return rest;
}

describe("PartitionEngine properties", () => {
  const history = fc.array(stepArbitrary, { maxLength: 60 });

  it("behaves like the reference model", () => {
    fc.assert(
      fc.property(history, (steps) => {
        // Random bytes can happen to form a valid record; the model only knows the steps it generated.
        const records = steps.map(encodeStep);
        const engine = new PartitionEngine({ partitionId: 4 });
        const results = applyAll(engine, records);
        const garbageThatParsed = steps.some(
          (step, index) => step.kind === "garbage" && results[index]?.kind !== "rejected",
        );
        fc.pre(!garbageThatParsed);
        expect(results.map(withoutDetail)).toEqual(modelResults(steps, 4).map(withoutDetail));
      }),
    );
  });

  it("is deterministic: two engines applying the same records give the same results and snapshot bytes", () => {
    fc.assert(
      fc.property(history, (steps) => {
        const records = steps.map(encodeStep);
        const first = new PartitionEngine({ partitionId: 9 });
        const second = new PartitionEngine({ partitionId: 9 });
        expect(applyAll(first, records)).toEqual(applyAll(second, records));
        expect(first.snapshot()).toEqual(second.snapshot());
        expect(first.bufferedBytes).toBe(second.bufferedBytes);
      }),
    );
  });

  it("continues identically from a snapshot taken at any point", () => {
    fc.assert(
      fc.property(history, fc.nat(), (steps, splitSeed) => {
        const records = steps.map(encodeStep);
        const split = records.length === 0 ? 0 : splitSeed % (records.length + 1);
        const original = new PartitionEngine({ partitionId: 2 });
        applyAll(original, records.slice(0, split));
        const restored = PartitionEngine.restore(original.snapshot());
        expect(restored.snapshot()).toEqual(original.snapshot());
        expect(restored.nextDeadlineMs).toBe(original.nextDeadlineMs);
        expect(applyAll(restored, records.slice(split))).toEqual(applyAll(original, records.slice(split)));
        expect(restored.snapshot()).toEqual(original.snapshot());
        expect(restored.bufferedMessageCount).toBe(original.bufferedMessageCount);
        expect(restored.bufferedBytes).toBe(original.bufferedBytes);
      }),
    );
  });
});

describe("EngineSnapshotEncoder", () => {
  /** An engine buffering `count` messages (every other one with a message id), applied from index 1 on. */
  function engineWith(count: number): PartitionEngine {
    const engine = new PartitionEngine({ partitionId: 5 });
    for (let position = 0; position < count; position += 1) {
      const messageId = position % 2 === 0 ? { messageId: `id-${position}` } : {};
      engine.apply(position + 1, publish({ ...messageId, timeToLiveMs: 10_000_000, publishedAtMs: 1_000 + position }));
    }
    return engine;
  }

  /** The snapshot `encoder` reads out in reads of `readBytes`, joined, and how many reads gave bytes. */
  function readInSteps(encoder: ReturnType<PartitionEngine["snapshotEncoder"]>, readBytes: number) {
    const bytes = new Uint8Array(encoder.sizeBytes);
    let reads = 0;
    for (let offset = 0; offset < bytes.byteLength; reads += 1) {
      const read = encoder.read(bytes.subarray(offset, Math.min(bytes.byteLength, offset + readBytes)));
      expect(read).toBeGreaterThan(0);
      offset += read;
    }
    expect(encoder.read(new Uint8Array(8))).toBe(0);
    expect(encoder.remainingBytes).toBe(0);
    return { bytes, reads };
  }

  it("gives the bytes of packing the whole state at once, whatever the reads' sizes (array headers of every size)", () => {
    for (const count of [0, 1, 15, 16, 17, 300]) {
      const engine = engineWith(count);
      const whole = engine.snapshot();
      // Decoding and packing again in one call is the canonical encoding of the same value.
      expect(Buffer.from(engineCodec.pack(engineCodec.unpack(whole)))).toEqual(Buffer.from(whole));
      for (const readBytes of [1, 7, 16, 1_000, whole.byteLength]) {
        const encoder = engine.snapshotEncoder();
        expect(encoder.sizeBytes).toBe(whole.byteLength);
        expect(encoder.messageCount).toBe(count);
        const { bytes, reads } = readInSteps(encoder, readBytes);
        // Every read fills what it is given: the reader decides the pieces, not the messages.
        expect(reads).toBe(Math.ceil(whole.byteLength / readBytes));
        expect(Buffer.from(bytes)).toEqual(Buffer.from(whole));
      }
    }
  });

  it("uses the 32-bit array header beyond 65,535 messages", () => {
    const engine = engineWith(65_537);
    const bytes = engine.snapshotEncoder().readAll();
    // Compared with Buffer.equals: a deep comparison of megabytes is slow.
    expect(Buffer.from(engineCodec.pack(engineCodec.unpack(bytes))).equals(bytes)).toBe(true);
    expect(PartitionEngine.restore(bytes).bufferedMessageCount).toBe(65_537);
  });

  it("keeps the state of the moment it was made while the engine goes on applying records", () => {
    const engine = engineWith(50);
    const before = engine.snapshot();
    const encoder = engine.snapshotEncoder();
    const start = new Uint8Array(100);
    expect(encoder.read(start)).toBe(100);
    // A publication that expires every earlier message, then one more publication.
    engine.apply(51, publish({ publishedAtMs: 20_000_000 }));
    engine.apply(52, publish({ publishedAtMs: 20_000_001 }));
    expect(engine.bufferedMessageCount).toBe(2);
    const rest = encoder.readAll();
    expect(encoder.appliedIndex).toBe(50);
    expect(encoder.messageCount).toBe(50);
    expect(Buffer.concat([start, rest])).toEqual(Buffer.from(before));
    expect(PartitionEngine.restore(before).lastAppliedIndex).toBe(50);
  });

  it("gives the snapshot a restored engine was restored from, byte for byte, and keeps messages apart from the pieces", () => {
    const engine = new PartitionEngine({ partitionId: 5 });
    for (let position = 0; position < 40; position += 1) {
      engine.apply(
        position + 1,
        publish({ variables: { blob: `b${position}`.repeat(500) }, timeToLiveMs: 10_000_000 }),
      );
    }
    const whole = engine.snapshot();
    const piece = new Uint8Array(3_000);
    const restorer = PartitionEngine.restorer();
    for (let offset = 0; offset < whole.byteLength; offset += piece.byteLength) {
      const length = Math.min(piece.byteLength, whole.byteLength - offset);
      piece.set(whole.subarray(offset, offset + length));
      restorer.push(piece.subarray(0, length));
      // The pieces are reused: the restored messages must hold copies.
      piece.fill(0);
    }
    const restored = restorer.finish();
    expect(Buffer.from(restored.snapshot()).equals(Buffer.from(whole))).toBe(true);
    const key = encodeKey(5, 40);
    expect(restored.getMessage(key)?.variables).toEqual({ blob: "b39".repeat(500) });
  });

  /**
   * An engine of partition 5 holding `count` messages published at 1,000 whose variables are `{ blob }` of about
   * `blobBytes`; every `longLivedEvery`-th lives for hours, the others expire at 2,000.
   */
  function engineOfMixedLifetimes(count: number, longLivedEvery: number, blobBytes: number): PartitionEngine {
    const engine = new PartitionEngine({ partitionId: 5 });
    for (let position = 0; position < count; position += 1) {
      const timeToLiveMs = position % longLivedEvery === 0 ? 10_000_000 : 1_000;
      const blob = `m${position}`.repeat(Math.ceil(blobBytes / `m${position}`.length));
      engine.apply(position + 1, publish({ variables: { blob }, timeToLiveMs }));
    }
    return engine;
  }

  it("serves and snapshots a restored engine's messages alike as they expire, its shared entry memory freed with them", () => {
    const original = engineOfMixedLifetimes(100, 3, 200);
    const restored = PartitionEngine.restore(original.snapshot());
    const atRestore = restored.restoredEntryMemory();
    // One slab, cut to the entries it holds.
    expect(atRestore.slabCount).toBe(1);
    expect(atRestore.slabBytes).toBe(atRestore.liveBytes);
    expect(original.restoredEntryMemory().slabCount).toBe(0);
    for (const engine of [original, restored]) {
      expect(applyAll(engine, [expire(2_000)])).toEqual([{ kind: "expired", count: 66 }]);
    }
    // Two thirds of the slab expired: once less than half was held, the messages still there (the long-lived ones
    // and the short-lived ones the same expiry had not reached yet) moved to a slab of their size.
    const afterExpiry = restored.restoredEntryMemory();
    expect(afterExpiry.slabCount).toBe(1);
    expect(afterExpiry.slabBytes).toBe(afterExpiry.handedOutBytes);
    expect(afterExpiry.slabBytes).toBeLessThan(atRestore.slabBytes / 2);
    expect(2 * afterExpiry.liveBytes).toBeGreaterThanOrEqual(afterExpiry.handedOutBytes);
    expect(Buffer.from(restored.snapshot()).equals(Buffer.from(original.snapshot()))).toBe(true);
    for (const position of [0, 33, 99]) {
      expect(restored.getMessage(encodeKey(5, position + 1))?.variables).toEqual(
        original.getMessage(encodeKey(5, position + 1))?.variables,
      );
    }
    expect(restored.getMessage(encodeKey(5, 100))?.variables).toEqual({ blob: "m99".repeat(67) });
    expect(applyAll(restored, [expire(20_000_000)])).toEqual([{ kind: "expired", count: 34 }]);
    expect(restored.bufferedMessageCount).toBe(0);
    expect(restored.restoredEntryMemory()).toEqual(NO_RESTORED_ENTRY_MEMORY);
  });

  it("keeps restored entries in the pieces it is given, with the state and snapshot of a restore that copies them", () => {
    const original = engineOfMixedLifetimes(300, 3, 4_000);
    const whole = original.snapshot();
    const pieceBytes = 64 * 1024;
    const pieces: Uint8Array[] = [];
    for (let offset = 0; offset < whole.byteLength; offset += pieceBytes) {
      pieces.push(whole.slice(offset, offset + pieceBytes));
    }
    const restorer = PartitionEngine.restorer();
    for (const piece of pieces) restorer.pushGiven(piece);
    const restored = restorer.finish();
    const memory = restored.restoredEntryMemory();
    // Every piece is nearly all whole entries (the first also holds the header); the entries that span two pieces
    // were copied.
    expect(memory.keptPieceCount).toBe(pieces.length);
    expect(memory.slabCount).toBeGreaterThan(memory.keptPieceCount);
    expect(memory.handedOutBytes).toBe(memory.liveBytes);
    expect(8 * memory.handedOutBytes).toBeGreaterThanOrEqual(7 * memory.slabBytes);
    const fourth = restored.getMessage(encodeKey(5, 4));
    expect(fourth?.variables).toEqual(original.getMessage(encodeKey(5, 4))?.variables);
    expect(Buffer.from(restored.snapshot()).equals(Buffer.from(whole))).toBe(true);
    // Expiring two thirds empties the kept pieces below half: their survivors move to slabs of their own.
    for (const engine of [original, restored]) {
      expect(applyAll(engine, [expire(2_000)])).toEqual([{ kind: "expired", count: 200 }]);
    }
    expect(restored.restoredEntryMemory().keptPieceCount).toBe(0);
    expect(Buffer.from(restored.snapshot()).equals(Buffer.from(original.snapshot()))).toBe(true);
    expect(restored.getMessage(encodeKey(5, 298))?.variables).toEqual(
      original.getMessage(encodeKey(5, 298))?.variables,
    );
  });

  it("gives a snapshot being read the same bytes when the entries it reads move to other memory meanwhile", () => {
    const restored = PartitionEngine.restore(engineOfMixedLifetimes(60, 4, 240).snapshot());
    const expected = restored.snapshot();
    const encoder = restored.snapshotEncoder();
    const start = new Uint8Array(1_000);
    encoder.read(start);
    // Three quarters expire: the survivors' entries move while the encoder is in the middle of one of them.
    expect(applyAll(restored, [expire(2_000)])).toEqual([{ kind: "expired", count: 45 }]);
    expect(restored.restoredEntryMemory().slabCount).toBe(1);
    const rest = new Uint8Array(expected.byteLength - start.byteLength);
    encoder.read(rest);
    expect(Buffer.concat([start, rest]).equals(Buffer.from(expected))).toBe(true);
  });

  it("restores from pieces of any size the same state as from the whole snapshot, holding one message at most between pieces", () => {
    const engine = new PartitionEngine({ partitionId: 5 });
    const variables = { blob: "v".repeat(4_000) };
    for (let position = 0; position < 300; position += 1) {
      const messageId = position % 2 === 0 ? { messageId: `id-${position}` } : {};
      engine.apply(position + 1, publish({ ...messageId, variables, timeToLiveMs: 10_000_000 }));
    }
    const whole = engine.snapshot();
    const largestMessageBytes = 4_200;
    for (const pieceBytes of [1, 1_000, 4_096, 65_536]) {
      const restorer = PartitionEngine.restorer();
      for (let offset = 0; offset < whole.byteLength; offset += pieceBytes) {
        restorer.push(whole.subarray(offset, offset + pieceBytes));
      }
      const restored = restorer.finish();
      expect(Buffer.from(restored.snapshot()).equals(Buffer.from(whole))).toBe(true);
      expect(restored.apply(301, publish({ messageId: "id-0" }))).toMatchObject({ reason: "duplicate-message-id" });
      expect(restorer.decodedBytes).toBe(whole.byteLength);
      // The snapshot is more than a megabyte; between two pieces only the start of one message waits.
      expect(restorer.peakBufferedBytes).toBeLessThan(largestMessageBytes);
    }
  });

  it("refuses a snapshot in pieces that ends early or has bytes after its end, and cannot be continued after", () => {
    const whole = engineWith(20).snapshot();
    for (const length of [1, 10, Math.floor(whole.byteLength / 2), whole.byteLength - 1]) {
      const restorer = PartitionEngine.restorer();
      restorer.push(whole.subarray(0, length));
      expect(() => restorer.finish()).toThrow(/corrupt engine snapshot: the document ends early/);
    }
    const followed = PartitionEngine.restorer();
    followed.push(whole);
    expect(() => followed.push(Uint8Array.of(0xc0))).toThrow(/corrupt engine snapshot: bytes follow/);
    expect(() => followed.finish()).toThrow(/failed snapshot restore/);
    const damaged = Uint8Array.from(whole);
    damaged[2] = 0;
    const restorer = PartitionEngine.restorer();
    expect(() => restorer.push(damaged.subarray(0, 3))).toThrow(/partition id/);
  });

  it("gives the pinned bytes for a fixed state: the encoding every replica and version must agree on", () => {
    // Entries are copied from replica to replica, never encoded again, so equal states give equal snapshots only while
    // every codec encodes a message the same way: integers above 2^32, binary variables of 8-, 16- and 32-bit
    // lengths, strings, nulls, a checkpoint. A change of encoding (a codec upgrade, say) must fail here.
    const engine = new PartitionEngine({ partitionId: 7 });
    let index = 1;
    const blobSizes = [0, 200, 70_000, 200_000];
    for (let position = 0; position < 40; position += 1) {
      engine.apply(
        index++,
        publish({
          name: `name-${position % 3}`,
          correlationKey: position % 4 === 0 ? "" : `key-${position}`,
          timeToLiveMs: position % 5 === 0 ? 0 : 3_600_000 * (position + 1),
          ...(position % 2 === 0 ? { messageId: `id-${position}` } : {}),
          variables: { blob: "v".repeat(blobSizes[position % 4] as number), n: position, big: 2 ** 40 + position },
          publishedAtMs: 1_700_000_000_000 + position,
        }),
      );
    }
    engine.apply(index++, encodeRecord({ kind: "checkpoint", checkpointId: 7n }));
    const snapshot = engine.snapshot();
    expect(engine.bufferedMessageCount).toBe(32);
    expect(createHash("sha256").update(snapshot).digest("hex")).toBe(PINNED_SNAPSHOT_SHA256);
    expect(Buffer.from(PartitionEngine.restore(snapshot).snapshot()).equals(Buffer.from(snapshot))).toBe(true);
  });

  it("copies a large state's entries as they are, encoding no message again", () => {
    const engine = new PartitionEngine({ partitionId: 5 });
    const variables = { blob: "v".repeat(200_000) };
    for (let position = 0; position < 12; position += 1) {
      engine.apply(position + 1, publish({ variables, timeToLiveMs: 10_000_000 }));
    }
    const whole = engine.snapshot();
    const packs: unknown[] = [];
    const pack = engineCodec.pack;
    engineCodec.pack = (value: unknown, ...rest: unknown[]) => {
      packs.push(value);
      return (pack as (...args: unknown[]) => Buffer).call(engineCodec, value, ...rest);
    };
    try {
      const encoder = engine.snapshotEncoder();
      const { bytes, reads } = readInSteps(encoder, 64 * 1024);
      expect(reads).toBe(Math.ceil(whole.byteLength / (64 * 1024)));
      expect(Buffer.from(bytes).equals(Buffer.from(whole))).toBe(true);
    } finally {
      engineCodec.pack = pack;
    }
    // One pack: the header fields, when the encoder was made. The messages were encoded once, when applied.
    expect(packs).toHaveLength(1);
  });
});
