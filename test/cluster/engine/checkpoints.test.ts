/**
 * Checkpoints (the consistent cut of a backup): checkpoint records, the checkpoint id carried on relocation
 * hand-overs with the checkpoint taken first when it is higher, their byte layout, and snapshots keeping them. Ids
 * are 0..2^63 − 1: up to 2^53 − 1 encoded as the numbers earlier versions write, above as msgpack int64.
 */
import { describe, expect, it } from "vitest";
import { partitionForCorrelationKey } from "../../../src/cluster/engine/correlation.js";
import { type ApplyResult, PartitionEngine } from "../../../src/cluster/engine/partition-engine.js";
import {
  DEFAULT_TENANT_ID,
  decodeAppliedRecord,
  encodeRecord,
  engineCodec,
  type RelocatedMessage,
} from "../../../src/cluster/engine/records.js";

function apply(engine: PartitionEngine, record: Uint8Array): ApplyResult {
  return engine.apply(engine.lastAppliedIndex + 1, record);
}

function checkpoint(checkpointId: bigint): Uint8Array {
  return encodeRecord({ kind: "checkpoint", checkpointId });
}

function publish(correlationKey: string, messageId?: string): Uint8Array {
  return encodeRecord({
    kind: "publishMessage",
    name: "order-paid",
    correlationKey,
    timeToLiveMs: 60_000,
    ...(messageId === undefined ? {} : { messageId }),
    variables: {},
    tenantId: DEFAULT_TENANT_ID,
    publishedAtMs: 1_000,
  });
}

function relocated(sourceKey: string): RelocatedMessage {
  return {
    sourceKey,
    name: "order-paid",
    correlationKey: "order-1",
    timeToLiveMs: 60_000,
    variablesBytes: engineCodec.pack({}),
    tenantId: DEFAULT_TENANT_ID,
    publishedAtMs: 1_000,
  };
}

/** A correlation key that partition `owner` owns over `count` partitions. */
function keyOwnedBy(owner: number, count: number): string {
  for (let index = 0; index < 100_000; index += 1) {
    if (partitionForCorrelationKey(`key-${index}`, count) === owner) return `key-${index}`;
  }
  throw new Error("no such key");
}

describe("checkpoint records", () => {
  it("take the checkpoint at the record's position and ignore ids at or below the latest", () => {
    const engine = new PartitionEngine({ partitionId: 1 });
    expect(engine.latestCheckpoint).toBeNull();
    apply(engine, publish("order-1"));
    expect(apply(engine, checkpoint(5n))).toEqual({ kind: "checkpointed", checkpoint: { id: 5n, position: 2 } });
    expect(apply(engine, checkpoint(5n))).toEqual({ kind: "checkpoint-ignored", latest: { id: 5n, position: 2 } });
    expect(apply(engine, checkpoint(3n))).toEqual({ kind: "checkpoint-ignored", latest: { id: 5n, position: 2 } });
    expect(apply(engine, checkpoint(0n))).toMatchObject({ kind: "checkpoint-ignored" });
    expect(apply(engine, checkpoint(9n))).toEqual({ kind: "checkpointed", checkpoint: { id: 9n, position: 6 } });
    expect(engine.latestCheckpoint).toEqual({ id: 9n, position: 6 });
  });

  it("the first checkpoint may have id 0", () => {
    const engine = new PartitionEngine({ partitionId: 1 });
    expect(apply(engine, checkpoint(0n))).toEqual({ kind: "checkpointed", checkpoint: { id: 0n, position: 1 } });
  });

  it("refuses malformed checkpoint ids when encoding and when applying", () => {
    expect(() => checkpoint(-1n)).toThrow(/checkpointId/);
    expect(() => checkpoint(2n ** 63n)).toThrow(/checkpointId/);
    expect(decodeAppliedRecord(engineCodec.pack([7, -1]))).toMatchObject({ kind: "invalid" });
    expect(decodeAppliedRecord(engineCodec.pack([7, "4"]))).toMatchObject({ kind: "invalid" });
    expect(decodeAppliedRecord(engineCodec.pack([7, 4, 5]))).toMatchObject({ kind: "invalid" });
    const engine = new PartitionEngine({ partitionId: 1 });
    expect(apply(engine, engineCodec.pack([7, -1]))).toMatchObject({ kind: "rejected", reason: "invalid-record" });
    expect(engine.latestCheckpoint).toBeNull();
  });
});

describe("checkpoint ids carried on relocation hand-overs", () => {
  it("a relocateIn carrying a higher checkpoint id takes it first, just before the record", () => {
    const owner = new PartitionEngine({ partitionId: 2 });
    apply(owner, publish("order-1"));
    apply(owner, checkpoint(1n));
    const result = apply(
      owner,
      encodeRecord({ kind: "relocateIn", messages: [relocated("2251799813685249")], nowMs: 2_000, checkpointId: 4n }),
    );
    expect(result).toMatchObject({ kind: "relocatedIn" });
    // The checkpoint's position is the one before the relocateIn (index 3): the relocated message is after it.
    expect(owner.latestCheckpoint).toEqual({ id: 4n, position: 2 });
  });

  it("a relocateIn carrying a checkpoint id at or below the latest, or none, leaves the checkpoint alone", () => {
    const owner = new PartitionEngine({ partitionId: 2 });
    apply(owner, checkpoint(4n));
    apply(
      owner,
      encodeRecord({ kind: "relocateIn", messages: [relocated("2251799813685249")], nowMs: 2_000, checkpointId: 4n }),
    );
    apply(
      owner,
      encodeRecord({ kind: "relocateIn", messages: [relocated("2251799813685250")], nowMs: 2_000, checkpointId: 2n }),
    );
    apply(owner, encodeRecord({ kind: "relocateIn", messages: [relocated("2251799813685251")], nowMs: 2_000 }));
    expect(owner.latestCheckpoint).toEqual({ id: 4n, position: 1 });
  });

  it("a relocatedOut carrying the new owner's higher checkpoint id takes it before forwarding", () => {
    const source = new PartitionEngine({ partitionId: 1 });
    const key = keyOwnedBy(2, 2);
    apply(source, publish(key));
    apply(
      source,
      encodeRecord({ kind: "routeMessages", correlationCount: 2, basePartitionCount: 1, relocating: true }),
    );
    const [counter] = source.misplacedMessages(10);
    apply(source, encodeRecord({ kind: "relocateOut", counters: [counter as number] }));
    apply(
      source,
      encodeRecord({
        kind: "relocatedOut",
        relocations: [{ counter: counter as number, newKey: "4503599627370497" }],
        checkpointId: 7n,
      }),
    );
    expect(source.latestCheckpoint).toEqual({ id: 7n, position: 3 });
  });

  it("records without a checkpoint keep the layout of earlier versions, and both layouts decode", () => {
    const withoutCheckpoint = encodeRecord({ kind: "relocatedOut", relocations: [{ counter: 1, newKey: null }] });
    expect(engineCodec.unpack(withoutCheckpoint)).toEqual([5, [[1, null]]]);
    expect(decodeAppliedRecord(withoutCheckpoint)).toMatchObject({ kind: "relocatedOut", checkpointId: null });
    const withCheckpoint = encodeRecord({
      kind: "relocatedOut",
      relocations: [{ counter: 1, newKey: null }],
      checkpointId: 3n,
    });
    expect(engineCodec.unpack(withCheckpoint)).toEqual([5, [[1, null]], 3]);
    expect(decodeAppliedRecord(withCheckpoint)).toMatchObject({ kind: "relocatedOut", checkpointId: 3n });
    const relocateIn = encodeRecord({ kind: "relocateIn", messages: [relocated("2251799813685249")], nowMs: 2_000 });
    expect((engineCodec.unpack(relocateIn) as unknown[]).length).toBe(3);
    expect(decodeAppliedRecord(engineCodec.pack([5, [[1, null]], -2]))).toMatchObject({ kind: "invalid" });
    // An explicit null is no checkpoint, as an absent field is, on both kinds of hand-over.
    expect(decodeAppliedRecord(engineCodec.pack([5, [[1, null]], null]))).toMatchObject({ checkpointId: null });
    const relocateInFields = engineCodec.unpack(relocateIn) as unknown[];
    expect(decodeAppliedRecord(relocateIn)).toMatchObject({ kind: "relocateIn", checkpointId: null });
    expect(decodeAppliedRecord(engineCodec.pack([...relocateInFields, null]))).toMatchObject({
      kind: "relocateIn",
      checkpointId: null,
    });
    expect(decodeAppliedRecord(engineCodec.pack([...relocateInFields, 9]))).toMatchObject({ checkpointId: 9n });
    expect(decodeAppliedRecord(engineCodec.pack([...relocateInFields, "9"]))).toMatchObject({ kind: "invalid" });
    expect(() =>
      encodeRecord({ kind: "relocateIn", messages: [relocated("2251799813685249")], nowMs: 2_000, checkpointId: -1n }),
    ).toThrow(/checkpointId/);
  });

  it("the consistent cut: a partition that hears of a later checkpoint before its own record takes it first", () => {
    // Partition 1 took checkpoint 8 and then relocated a message to partition 2, whose checkpoint record for 8 is
    // still on its way. Partition 2's backup must not hold the message (partition 1's does, as outbound).
    const owner = new PartitionEngine({ partitionId: 2 });
    apply(owner, publish("order-1"));
    apply(
      owner,
      encodeRecord({ kind: "relocateIn", messages: [relocated("2251799813685249")], nowMs: 2_000, checkpointId: 8n }),
    );
    expect(apply(owner, checkpoint(8n))).toEqual({ kind: "checkpoint-ignored", latest: { id: 8n, position: 1 } });
    expect(owner.bufferedMessageCount).toBe(2);
  });
});

describe("snapshots", () => {
  it("keep the latest checkpoint, and older snapshots restore without one", () => {
    const engine = new PartitionEngine({ partitionId: 3 });
    apply(engine, publish("order-1", "id-1"));
    apply(engine, checkpoint(12n));
    apply(engine, publish("order-2"));
    const restored = PartitionEngine.restore(engine.snapshot());
    expect(restored.latestCheckpoint).toEqual({ id: 12n, position: 2 });
    expect(restored.snapshot()).toEqual(engine.snapshot());
    const fresh = new PartitionEngine({ partitionId: 3 });
    expect(PartitionEngine.restore(fresh.snapshot()).latestCheckpoint).toBeNull();
    // A version 2 snapshot (before checkpoints) is still read.
    const version2 = engineCodec.pack([2, 3, 0, 1, null, [], [], [], []]);
    expect(PartitionEngine.restore(version2).latestCheckpoint).toBeNull();
  });

  it("refuse a checkpoint beyond the applied index", () => {
    const corrupt = engineCodec.pack([3, 3, 4, 1, null, [], [], [], [1, 5], []]);
    expect(() => PartitionEngine.restore(corrupt)).toThrow(/checkpoint/);
  });
});

describe("checkpoint ids beyond 2^53 − 1", () => {
  const largest = 2n ** 63n - 1n;

  it("encode up to 2^53 − 1 byte for byte as earlier versions did, and above as an exact int64", () => {
    for (const id of [0, 5, 2 ** 32, Number.MAX_SAFE_INTEGER]) {
      expect(checkpoint(BigInt(id))).toEqual(engineCodec.pack([7, id]));
    }
    const relocatedOut = encodeRecord({
      kind: "relocatedOut",
      relocations: [{ counter: 1, newKey: null }],
      checkpointId: 5n,
    });
    expect(relocatedOut).toEqual(engineCodec.pack([5, [[1, null]], 5]));
    // Pinned bytes on either side of the boundary: 2^53 − 1 as the float64 earlier versions write (msgpackr packs an
    // integer beyond 32 bits so), 2^53 as an int64, on a checkpoint record and on a hand-over.
    expect(Buffer.from(checkpoint(2n ** 53n - 1n)).toString("hex")).toBe("9207cb433fffffffffffff");
    expect(Buffer.from(checkpoint(2n ** 53n)).toString("hex")).toBe("9207d30020000000000000");
    const handOver = encodeRecord({
      kind: "relocatedOut",
      relocations: [{ counter: 1, newKey: null }],
      checkpointId: 2n ** 53n,
    });
    expect(Buffer.from(handOver).toString("hex")).toBe("9305919201c0d30020000000000000");
    const bytes = checkpoint(largest);
    // msgpack int64: 0xd3 and the eight bytes of 2^63 − 1. A broker of an earlier version decodes it as a bigint,
    // which is no safe integer to it, and rejects the record as invalid (see DEVELOPERS.md).
    expect(Buffer.from(bytes).toString("hex")).toBe("9207d37fffffffffffffff");
    expect(engineCodec.unpack(bytes)).toEqual([7, largest]);
    expect(decodeAppliedRecord(bytes)).toEqual({ kind: "checkpoint", checkpointId: largest });
  });

  it("are taken and compared exactly, on records and on hand-overs", () => {
    const engine = new PartitionEngine({ partitionId: 1 });
    const beyondSafe = BigInt(Number.MAX_SAFE_INTEGER) + 2n;
    expect(apply(engine, checkpoint(beyondSafe))).toMatchObject({
      kind: "checkpointed",
      checkpoint: { id: beyondSafe },
    });
    // One below rounds to the same double, but is a lower id: ignored.
    expect(apply(engine, checkpoint(beyondSafe - 1n))).toMatchObject({ kind: "checkpoint-ignored" });
    apply(
      engine,
      encodeRecord({
        kind: "relocateIn",
        messages: [relocated("2251799813685249")],
        nowMs: 2_000,
        checkpointId: largest,
      }),
    );
    expect(engine.latestCheckpoint).toEqual({ id: largest, position: 2 });
  });

  it("refuse a bigint an encoder never writes: up to 2^53 − 1, negative, or from 2^63", () => {
    for (const id of [5n, BigInt(Number.MAX_SAFE_INTEGER), -1n, 2n ** 63n]) {
      expect(decodeAppliedRecord(engineCodec.pack([7, id]))).toMatchObject({ kind: "invalid" });
      expect(decodeAppliedRecord(engineCodec.pack([5, [[1, null]], id]))).toMatchObject({ kind: "invalid" });
    }
    // A double beyond 2^53 − 1 holds no exact id either.
    expect(decodeAppliedRecord(engineCodec.pack([7, 2 ** 60]))).toMatchObject({ kind: "invalid" });
    expect(() => checkpoint(2n ** 63n)).toThrow(/checkpointId/);
  });

  it("survive a snapshot exactly, and a small one keeps the snapshot's earlier bytes", () => {
    const engine = new PartitionEngine({ partitionId: 3 });
    apply(engine, publish("order-1"));
    apply(engine, checkpoint(largest));
    expect(PartitionEngine.restore(engine.snapshot()).latestCheckpoint).toEqual({ id: largest, position: 2 });
    const small = new PartitionEngine({ partitionId: 3 });
    apply(small, checkpoint(12n));
    expect(engineCodec.unpack(small.snapshot())).toEqual([3, 3, 1, 1, null, [], [], [], [12, 1], []]);
    const corrupt = engineCodec.pack([3, 3, 4, 1, null, [], [], [], [12n, 1], []]);
    expect(() => PartitionEngine.restore(corrupt)).toThrow(/checkpoint/);
  });
});
