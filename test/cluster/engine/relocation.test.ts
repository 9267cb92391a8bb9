/**
 * The engine's part of adding partitions: routing records, taking messages out for relocation, buffering them at
 * their new owner with their original deadline, forwarding old keys, expiry exactly once, and snapshots of it all.
 */
import { describe, expect, it } from "vitest";
import { partitionForCorrelationKey } from "../../../src/cluster/engine/correlation.js";
import { encodeKey } from "../../../src/cluster/engine/keys.js";
import { type ApplyResult, PartitionEngine } from "../../../src/cluster/engine/partition-engine.js";
import {
  DEFAULT_TENANT_ID,
  encodeRecord,
  engineCodec,
  type PublishMessageRecord,
} from "../../../src/cluster/engine/records.js";
import { NO_RESTORED_ENTRY_MEMORY } from "./support.js";

function publish(overrides: Partial<PublishMessageRecord> = {}): Uint8Array {
  return encodeRecord({
    kind: "publishMessage",
    name: "order-paid",
    correlationKey: "order-1",
    timeToLiveMs: 10_000,
    variables: { amount: 3 },
    tenantId: DEFAULT_TENANT_ID,
    publishedAtMs: 1_000,
    ...overrides,
  });
}

function route(correlationCount: number, basePartitionCount: number, relocating: boolean): Uint8Array {
  return encodeRecord({ kind: "routeMessages", correlationCount, basePartitionCount, relocating });
}

function apply(engine: PartitionEngine, record: Uint8Array): ApplyResult {
  return engine.apply(engine.lastAppliedIndex + 1, record);
}

/** A correlation key owned by `owner` over `count` partitions and by `formerOwner` over `base`. */
function keyOwnedBy(owner: number, count: number, formerOwner: number, base: number): string {
  for (let index = 0; index < 100_000; index += 1) {
    const key = `key-${index}`;
    if (partitionForCorrelationKey(key, count) === owner && partitionForCorrelationKey(key, base) === formerOwner) {
      return key;
    }
  }
  throw new Error("no such key");
}

describe("routing records", () => {
  it("a partition refuses keys another partition owns, and keeps taking its own keys and keyless messages", () => {
    const engine = new PartitionEngine({ partitionId: 1 });
    expect(apply(engine, route(4, 2, false))).toEqual({ kind: "routed" });
    const foreign = keyOwnedBy(3, 4, 1, 2);
    expect(apply(engine, publish({ correlationKey: foreign }))).toMatchObject({
      kind: "rejected",
      reason: "not-owner",
      ownerPartitionId: 3,
    });
    expect(apply(engine, publish({ correlationKey: keyOwnedBy(1, 4, 1, 2) }))).toMatchObject({ kind: "published" });
    expect(apply(engine, publish({ correlationKey: "" }))).toMatchObject({ kind: "published" });
  });

  it("routes a message without a correlation key by its message id, and one with neither stays anywhere", () => {
    const engine = new PartitionEngine({ partitionId: 1 });
    const foreignId = keyOwnedBy(3, 4, 1, 2);
    const ownId = keyOwnedBy(1, 4, 1, 2);
    // Published before the routing existed (round robin then), one message with each id sits here.
    apply(engine, publish({ correlationKey: "", messageId: foreignId }));
    apply(engine, publish({ correlationKey: "", messageId: ownId }));
    apply(engine, publish({ correlationKey: "" }));
    apply(engine, route(4, 2, true));
    // Only the message whose id another partition owns now is misplaced.
    expect(engine.misplacedMessages(10)).toEqual([1]);
    // While relocating, the id is refused here: its message may still be buffered here (it is).
    expect(apply(engine, publish({ correlationKey: "", messageId: `${foreignId}` }))).toMatchObject({
      kind: "rejected",
      reason: "relocating",
    });
    expect(apply(engine, publish({ correlationKey: "" }))).toMatchObject({ kind: "published" });
    apply(engine, route(4, 4, false));
    expect(apply(engine, publish({ correlationKey: "", messageId: `${foreignId}` }))).toMatchObject({
      kind: "rejected",
      reason: "not-owner",
      ownerPartitionId: 3,
    });
  });

  it("while partitions are routed one after the other, the former owner refuses a moved key's message id rather than send it to a new partition not routed yet", () => {
    const former = new PartitionEngine({ partitionId: 1 });
    const added = new PartitionEngine({ partitionId: 4 });
    const moved = keyOwnedBy(4, 6, 1, 3);
    expect(apply(former, publish({ correlationKey: moved, messageId: "X" }))).toMatchObject({ kind: "published" });
    // AWAIT_REDISTRIBUTION routes partition 1 first; partition 4, bootstrapped without routing, owns every key yet.
    apply(former, route(6, 3, true));
    // A client's retry of the same publication reaches partition 1 (the gateways still hash over 3): refused, to be
    // retried, instead of redirected to partition 4, which would take id X a second time.
    expect(apply(former, publish({ correlationKey: moved, messageId: "X", publishedAtMs: 1_100 }))).toMatchObject({
      kind: "rejected",
      reason: "relocating",
    });
    // Without a message id there is no uniqueness to protect: redirected.
    expect(apply(former, publish({ correlationKey: moved, publishedAtMs: 1_100 }))).toMatchObject({
      reason: "not-owner",
      ownerPartitionId: 4,
    });
    // Routed, partition 4 refuses the id itself until relocation ends.
    apply(added, route(6, 3, true));
    expect(apply(added, publish({ correlationKey: moved, messageId: "X", publishedAtMs: 1_100 }))).toMatchObject({
      kind: "rejected",
      reason: "relocating",
    });
  });

  it("ignores a routing record behind the routing it holds, such as a paused coordinator's late one", () => {
    const engine = new PartitionEngine({ partitionId: 4 });
    const moved = keyOwnedBy(4, 6, 1, 3);
    apply(engine, route(6, 3, true));
    apply(engine, route(6, 6, false));
    // The start of relocation once more, after its end: applied as nothing.
    expect(apply(engine, route(6, 3, true))).toEqual({ kind: "routed" });
    expect(apply(engine, route(4, 4, false))).toEqual({ kind: "routed" });
    expect(apply(engine, publish({ correlationKey: moved, messageId: "m" }))).toMatchObject({ kind: "published" });
    // The next scale-up's routing is ahead, and taken.
    apply(engine, route(9, 6, true));
    expect(apply(engine, publish({ correlationKey: "", messageId: keyOwnedBy(4, 9, 1, 6) }))).toMatchObject({
      kind: "rejected",
      reason: "relocating",
    });
  });

  it("while relocating, refuses a message id whose key moved here from another partition, until relocation ends", () => {
    const engine = new PartitionEngine({ partitionId: 3 });
    apply(engine, route(4, 2, true));
    const moved = keyOwnedBy(3, 4, 1, 2);
    expect(apply(engine, publish({ correlationKey: moved, messageId: "m" }))).toMatchObject({
      kind: "rejected",
      reason: "relocating",
    });
    // Without a message id there is no uniqueness to protect.
    expect(apply(engine, publish({ correlationKey: moved }))).toMatchObject({ kind: "published" });
    apply(engine, route(4, 4, false));
    expect(apply(engine, publish({ correlationKey: moved, messageId: "m" }))).toMatchObject({ kind: "published" });
  });
});

describe("relocation", () => {
  it("moves a message to its new owner with its deadline; the old key forwards until then; it expires once", () => {
    const source = new PartitionEngine({ partitionId: 1 });
    const moved = keyOwnedBy(3, 4, 1, 2);
    const stays = keyOwnedBy(1, 4, 1, 2);
    const published = apply(source, publish({ correlationKey: moved, messageId: "m-1", variables: { n: 1 } }));
    apply(source, publish({ correlationKey: stays, timeToLiveMs: 50_000, variables: { n: 2 } }));
    if (published.kind !== "published") throw new Error("not published");
    apply(source, route(4, 2, true));
    expect(source.misplacedMessages(10)).toEqual([1]);
    const backlog = source.relocationBacklog();
    expect(backlog.messages).toBe(1);
    expect(backlog.bytes).toBe(publish({ correlationKey: moved, messageId: "m-1", variables: { n: 1 } }).byteLength);
    expect(apply(source, encodeRecord({ kind: "relocateOut", counters: [1] }))).toEqual({
      kind: "relocatingOut",
      count: 1,
    });
    // Taken out, it still answers reads here, but it is no longer expired here: its new owner will expire it.
    expect(source.getMessage(published.key)?.variables).toEqual({ n: 1 });
    expect(source.misplacedMessages(10)).toEqual([]);
    const [outbound] = source.outboundMessages();
    expect(outbound).toMatchObject({ sourceKey: published.key, ownerPartitionId: 3, messageId: "m-1" });
    if (outbound === undefined) throw new Error("nothing outbound");

    const owner = new PartitionEngine({ partitionId: 3 });
    apply(owner, route(4, 2, true));
    // Taken out, the message is still part of the backlog until its new owner acknowledged it.
    expect(source.relocationBacklog()).toEqual(backlog);
    const { counter: _counter, ownerPartitionId: _owner, sizeBytes: _size, ...message } = outbound;
    const relocateIn = encodeRecord({ kind: "relocateIn", messages: [message], nowMs: 2_000 });
    const received = apply(owner, relocateIn);
    expect(received).toEqual({ kind: "relocatedIn", keys: [encodeKey(3, 1)] });
    // The sender retries until it hears back: a repeated relocation gives the same key and buffers nothing more.
    expect(apply(owner, relocateIn)).toEqual(received);
    expect(owner.bufferedMessageCount).toBe(1);
    expect(owner.getMessage(encodeKey(3, 1))).toMatchObject({
      deadlineMs: 11_000,
      messageId: "m-1",
      variables: { n: 1 },
    });

    apply(source, encodeRecord({ kind: "relocatedOut", relocations: [{ counter: 1, newKey: encodeKey(3, 1) }] }));
    expect(source.getMessage(published.key)).toBeUndefined();
    expect(source.forwardOf(published.key)).toBe(encodeKey(3, 1));
    expect(source.relocationBacklog()).toEqual({ messages: 0, bytes: 0 });
    // At the deadline the owner expires it (once); the source had nothing left to expire and drops the forward.
    expect(apply(owner, encodeRecord({ kind: "expireMessages", nowMs: 11_000 }))).toEqual({
      kind: "expired",
      count: 1,
    });
    expect(apply(source, encodeRecord({ kind: "expireMessages", nowMs: 11_000 }))).toEqual({
      kind: "expired",
      count: 0,
    });
    expect(source.forwardOf(published.key)).toBeUndefined();
    expect(source.bufferedMessageCount).toBe(1);
  });

  it("in one batch, a message whose deadline passed on the way is not buffered and the others are", () => {
    const owner = new PartitionEngine({ partitionId: 2 });
    const relocated = (counter: number, timeToLiveMs: number) => ({
      sourceKey: encodeKey(1, counter),
      name: "batch",
      correlationKey: `x-${counter}`,
      timeToLiveMs,
      variablesBytes: engineCodec.pack({ counter }),
      tenantId: DEFAULT_TENANT_ID,
      publishedAtMs: 1_000,
    });
    const batch = encodeRecord({
      kind: "relocateIn",
      messages: [relocated(7, 5_000), relocated(8, 100), relocated(9, 5_000)],
      nowMs: 1_100,
    });
    expect(apply(owner, batch)).toEqual({ kind: "relocatedIn", keys: [encodeKey(2, 1), null, encodeKey(2, 2)] });
    expect(owner.bufferedMessageCount).toBe(2);
    // A batch repeated after a lost answer buffers nothing more and answers the same keys.
    expect(apply(owner, batch)).toEqual({ kind: "relocatedIn", keys: [encodeKey(2, 1), null, encodeKey(2, 2)] });
    expect(owner.bufferedMessageCount).toBe(2);
  });

  it("refuses empty batches, oversized batches and a batch larger than a record may be", () => {
    const message = {
      sourceKey: encodeKey(1, 1),
      name: "big",
      correlationKey: "x",
      timeToLiveMs: 5_000,
      variablesBytes: engineCodec.pack({ blob: "y".repeat(200 * 1024) }),
      tenantId: DEFAULT_TENANT_ID,
      publishedAtMs: 1_000,
    };
    expect(() => encodeRecord({ kind: "relocateIn", messages: [], nowMs: 1 })).toThrow(/1\.\.1024 messages/);
    expect(() => encodeRecord({ kind: "relocatedOut", relocations: [] })).toThrow(/1\.\.1024 key counters/);
    expect(() => encodeRecord({ kind: "relocateIn", messages: [message], nowMs: 1 })).not.toThrow();
    expect(() => encodeRecord({ kind: "relocateIn", messages: [message, message], nowMs: 1 })).toThrow(
      /more than a record may/,
    );
  });

  it("keeps both of two different messages with one id relocated into one partition; the first holds the id", () => {
    const owner = new PartitionEngine({ partitionId: 2 });
    expect(apply(owner, publish({ correlationKey: "", messageId: "dup", publishedAtMs: 1_000 }))).toMatchObject({
      kind: "published",
    });
    const incoming = apply(
      owner,
      encodeRecord({
        kind: "relocateIn",
        messages: [
          {
            sourceKey: encodeKey(1, 3),
            name: "other",
            correlationKey: "x",
            timeToLiveMs: 5_000,
            messageId: "dup",
            variablesBytes: engineCodec.pack({ other: true }),
            tenantId: DEFAULT_TENANT_ID,
            publishedAtMs: 1_000,
          },
        ],
        nowMs: 1_500,
      }),
    );
    expect(incoming).toEqual({ kind: "relocatedIn", keys: [encodeKey(2, 2)] });
    expect(owner.bufferedMessageCount).toBe(2);
    expect(apply(owner, publish({ correlationKey: "", messageId: "dup", publishedAtMs: 1_600 }))).toMatchObject({
      reason: "duplicate-message-id",
      existingKey: encodeKey(2, 1),
    });
    // Both expire without breaking the id index; the id is free again afterwards.
    expect(apply(owner, encodeRecord({ kind: "expireMessages", nowMs: 20_000 }))).toEqual({
      kind: "expired",
      count: 2,
    });
    expect(apply(owner, publish({ correlationKey: "", messageId: "dup", publishedAtMs: 20_001 }))).toMatchObject({
      kind: "published",
    });
  });

  it("hands the id to the remaining duplicate when the first leaves, as a replica restored from a snapshot holds it", () => {
    const live = new PartitionEngine({ partitionId: 2 });
    apply(live, publish({ correlationKey: "", messageId: "dup", timeToLiveMs: 5_000, publishedAtMs: 1_000 }));
    apply(
      live,
      encodeRecord({
        kind: "relocateIn",
        messages: [
          {
            sourceKey: encodeKey(1, 3),
            name: "other",
            correlationKey: "x",
            timeToLiveMs: 100_000,
            messageId: "dup",
            variablesBytes: engineCodec.pack({ other: true }),
            tenantId: DEFAULT_TENANT_ID,
            publishedAtMs: 1_000,
          },
        ],
        nowMs: 1_500,
      }),
    );
    // The first expires: the relocated duplicate, still buffered, holds the id now.
    expect(apply(live, encodeRecord({ kind: "expireMessages", nowMs: 7_000 }))).toEqual({ kind: "expired", count: 1 });
    const restored = PartitionEngine.restore(live.snapshot());
    for (const engine of [live, restored]) {
      expect(apply(engine, publish({ correlationKey: "", messageId: "dup", publishedAtMs: 7_001 }))).toMatchObject({
        reason: "duplicate-message-id",
        existingKey: encodeKey(2, 2),
      });
    }
    // Once it expires too, the id is free on both, and the same publication gets the same key on both.
    const results = [live, restored].map((engine) => {
      apply(engine, encodeRecord({ kind: "expireMessages", nowMs: 102_000 }));
      return apply(engine, publish({ correlationKey: "", messageId: "dup", publishedAtMs: 102_001 }));
    });
    expect(results[0]).toEqual({ kind: "published", key: encodeKey(2, 3) });
    expect(results[1]).toEqual(results[0]);
    expect(Buffer.from(live.snapshot()).equals(Buffer.from(restored.snapshot()))).toBe(true);
  });
});

describe("relocation's bookkeeping over many messages", () => {
  /** Keys that move from partition 1 to partition 3 when 2 partitions become 4. */
  function movingKeys(count: number): string[] {
    const keys: string[] = [];
    for (let index = 0; keys.length < count; index += 1) {
      const key = `moving-${index}`;
      if (partitionForCorrelationKey(key, 4) === 3 && partitionForCorrelationKey(key, 2) === 1) keys.push(key);
    }
    return keys;
  }

  it("lets go of what moved away, and drops forwards and received keys each at its own deadline", () => {
    const source = new PartitionEngine({ partitionId: 1 });
    const owner = new PartitionEngine({ partitionId: 3 });
    const keys = movingKeys(1_100);
    // Deadlines 11,000 + i: each message's forward and received key is due at its own time.
    for (const [index, correlationKey] of keys.entries()) {
      apply(source, publish({ correlationKey, timeToLiveMs: 10_000 + index }));
    }
    apply(source, publish({ correlationKey: keyOwnedBy(1, 4, 1, 2), timeToLiveMs: 1_000_000 }));
    for (const engine of [source, owner]) apply(engine, route(4, 2, true));
    for (let counters = source.misplacedMessages(256); counters.length > 0; counters = source.misplacedMessages(256)) {
      apply(source, encodeRecord({ kind: "relocateOut", counters }));
    }
    // Once 1,024 had moved, the deadline heap was rebuilt without them; the 76 that moved after stay in it (as
    // entries without their messages) until their deadlines or the next rebuild.
    expect(source.nextDeadlineMs).toBe(11_000 + 1_024);
    const outbound = source.outboundMessages();
    expect(outbound).toHaveLength(1_100);
    const sourceKeys = outbound.map((message) => message.sourceKey);
    const relocations: { counter: number; newKey: string | null }[] = [];
    for (let start = 0; start < outbound.length; start += 256) {
      const batch = outbound.slice(start, start + 256);
      const result = apply(
        owner,
        encodeRecord({
          kind: "relocateIn",
          messages: batch.map(
            ({ counter: _counter, ownerPartitionId: _owner, sizeBytes: _size, ...message }) => message,
          ),
          nowMs: 2_000,
        }),
      );
      if (result.kind !== "relocatedIn") throw new Error(JSON.stringify(result));
      relocations.push(
        ...batch.map((message, index) => ({ counter: message.counter, newKey: result.keys[index] ?? null })),
      );
    }
    for (let start = 0; start < relocations.length; start += 256) {
      apply(source, encodeRecord({ kind: "relocatedOut", relocations: relocations.slice(start, start + 256) }));
    }
    // At 11,500 the first 501 are past their deadlines: their forwards and received keys are gone, the rest stay.
    apply(source, encodeRecord({ kind: "expireMessages", nowMs: 11_500 }));
    expect(apply(owner, encodeRecord({ kind: "expireMessages", nowMs: 11_500 }))).toEqual({
      kind: "expired",
      count: 501,
    });
    expect(source.forwardOf(sourceKeys[500]!)).toBeUndefined();
    expect(source.forwardOf(sourceKeys[501]!)).toBe(relocations[501]!.newKey);
    // A received key still known answers the same key again; a dropped one is past its deadline, so nothing is buffered.
    const again = (index: number) => {
      const { counter: _counter, ownerPartitionId: _owner, sizeBytes: _size, ...message } = outbound[index]!;
      return apply(owner, encodeRecord({ kind: "relocateIn", messages: [message], nowMs: 11_500 }));
    };
    expect(again(501)).toEqual({ kind: "relocatedIn", keys: [relocations[501]!.newKey] });
    expect(again(500)).toEqual({ kind: "relocatedIn", keys: [null] });
    expect(owner.bufferedMessageCount).toBe(599);
  });
});

describe("what relocation moves", () => {
  it("moves on a message that a retried hand-over of an earlier scale-up brings in after the routing changed", () => {
    const engine = new PartitionEngine({ partitionId: 3 });
    apply(engine, route(4, 2, true));
    apply(engine, route(4, 4, false));
    const staysHere = keyOwnedBy(3, 8, 3, 4);
    const movesOn = keyOwnedBy(7, 8, 3, 4);
    apply(engine, publish({ correlationKey: staysHere }));
    apply(engine, route(8, 4, true));
    expect(engine.misplacedMessages(10)).toEqual([]);
    // A batch of the scale-up to 4, handed over again, arrives now: its message belongs to partition 7 already.
    const late = {
      sourceKey: encodeKey(1, 9),
      name: "late",
      correlationKey: movesOn,
      timeToLiveMs: 60_000,
      variablesBytes: engineCodec.pack({}),
      tenantId: DEFAULT_TENANT_ID,
      publishedAtMs: 1_000,
    };
    expect(apply(engine, encodeRecord({ kind: "relocateIn", messages: [late], nowMs: 1_500 }))).toEqual({
      kind: "relocatedIn",
      keys: [encodeKey(3, 2)],
    });
    expect(engine.misplacedMessages(10)).toEqual([2]);
    expect(engine.relocationBacklog().messages).toBe(1);
    // A replica restored from a snapshot finds the same.
    expect(PartitionEngine.restore(engine.snapshot()).misplacedMessages(10)).toEqual([2]);
  });
});

describe("relocation from a restored engine", () => {
  it("keeps a message taken out in its shared entry memory until the new owner has it, then frees that memory", () => {
    const original = new PartitionEngine({ partitionId: 1 });
    const moved = keyOwnedBy(3, 4, 1, 2);
    for (let index = 0; index < 6; index += 1) {
      apply(
        original,
        publish({ correlationKey: moved, messageId: `m-${index}`, variables: { blob: "r".repeat(200) } }),
      );
    }
    apply(original, route(4, 2, true));
    const restored = PartitionEngine.restore(original.snapshot());
    const atRestore = restored.restoredEntryMemory();
    expect(atRestore.slabCount).toBe(1);
    const counters = [1, 2, 3, 4, 5, 6];
    for (const engine of [original, restored]) {
      expect(apply(engine, encodeRecord({ kind: "relocateOut", counters }))).toEqual({
        kind: "relocatingOut",
        count: 6,
      });
    }
    // Taken out, the messages still answer reads and wait for their new owner: their memory is still held.
    expect(restored.restoredEntryMemory()).toEqual(atRestore);
    expect(restored.outboundMessages()).toHaveLength(6);
    for (const engine of [original, restored]) {
      const relocations = counters.slice(0, 4).map((counter) => ({ counter, newKey: encodeKey(3, counter) }));
      apply(engine, encodeRecord({ kind: "relocatedOut", relocations }));
    }
    // Two of six left: they moved to memory of their own size, and the snapshots still agree byte for byte.
    const afterFour = restored.restoredEntryMemory();
    expect(afterFour.slabCount).toBe(1);
    expect(afterFour.slabBytes).toBe(afterFour.liveBytes);
    expect(afterFour.slabBytes).toBeLessThan(atRestore.slabBytes / 2);
    expect(Buffer.from(restored.snapshot()).equals(Buffer.from(original.snapshot()))).toBe(true);
    expect(restored.outboundMessages().map((message) => message.messageId)).toEqual(["m-4", "m-5"]);
    apply(
      restored,
      encodeRecord({ kind: "relocatedOut", relocations: [5, 6].map((counter) => ({ counter, newKey: null })) }),
    );
    expect(restored.restoredEntryMemory()).toEqual(NO_RESTORED_ENTRY_MEMORY);
  });
});

describe("snapshots with routing and relocation state", () => {
  it("round-trips routing, outbound messages, forwards and received source keys, byte for byte", () => {
    const engine = new PartitionEngine({ partitionId: 1 });
    const moved = keyOwnedBy(3, 4, 1, 2);
    for (let index = 0; index < 3; index += 1)
      apply(engine, publish({ correlationKey: moved, messageId: `m-${index}` }));
    apply(engine, route(4, 2, true));
    apply(engine, encodeRecord({ kind: "relocateOut", counters: [1, 2] }));
    apply(engine, encodeRecord({ kind: "relocatedOut", relocations: [{ counter: 1, newKey: encodeKey(3, 9) }] }));
    apply(
      engine,
      encodeRecord({
        kind: "relocateIn",
        messages: [
          {
            sourceKey: encodeKey(2, 5),
            name: "in",
            correlationKey: keyOwnedBy(1, 4, 1, 2),
            timeToLiveMs: 9_000,
            variablesBytes: engineCodec.pack({ in: 1 }),
            tenantId: DEFAULT_TENANT_ID,
            publishedAtMs: 1_000,
          },
        ],
        nowMs: 1_200,
      }),
    );
    const bytes = engine.snapshot();
    const restored = PartitionEngine.restore(bytes);
    expect(Buffer.from(restored.snapshot()).equals(Buffer.from(bytes))).toBe(true);
    expect(restored.messageRouting).toMatchObject({ correlationCount: 4, basePartitionCount: 2, relocating: true });
    expect(restored.outboundMessages().map((message) => message.counter)).toEqual([2]);
    expect(restored.forwardOf(encodeKey(1, 1))).toBe(encodeKey(3, 9));
    expect(restored.misplacedMessages(10)).toEqual([3]);
  });

  it("reads a snapshot of the first layout (before routing existed)", () => {
    const engine = new PartitionEngine({ partitionId: 2 });
    apply(engine, publish({ messageId: "old" }));
    const current = engineCodec.unpack(engine.snapshot()) as unknown[];
    const firstLayout = engineCodec.pack([1, current[1], current[2], current[3], current[current.length - 1]]);
    const restored = PartitionEngine.restore(firstLayout);
    expect(restored.messageRouting).toBeNull();
    expect(restored.getMessage(encodeKey(2, 1))?.messageId).toBe("old");
  });
});
