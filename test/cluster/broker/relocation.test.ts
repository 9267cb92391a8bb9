/**
 * The steps of relocating misplaced messages against a scripted source partition: what is handed to which owner in
 * which batches, which records are proposed in which order, and where a failed step stops the run. Relocation between
 * real partitions runs in `test/cluster/gateway/partition-scaling.test.ts` and the e2e scaling tests.
 */
import { describe, expect, it } from "vitest";
import type { ProposalEnd } from "../../../src/cluster/broker/partition-replica.js";
import {
  type HandOverAnswer,
  type RelocationLimits,
  relocateMisplacedMessages,
} from "../../../src/cluster/broker/relocation.js";
import type {
  EngineRecord,
  OutboundMessage,
  PartitionEngine,
  RelocatedMessage,
} from "../../../src/cluster/engine/index.js";

function outbound(counter: number, ownerPartitionId: number, variablesBytes = 16): OutboundMessage {
  return {
    sourceKey: String(1000 + counter),
    counter,
    name: "paid",
    correlationKey: `order-${counter}`,
    timeToLiveMs: 60_000,
    variablesBytes: new Uint8Array(variablesBytes),
    tenantId: "<default>",
    publishedAtMs: 0,
    ownerPartitionId,
    sizeBytes: 100,
  };
}

/**
 * A source partition whose engine holds `taken` messages taken out already and `misplaced` counters still to take
 * out; applied records move them along as the real engine would, and every proposal is recorded.
 */
function scriptedSource(options: { taken: OutboundMessage[]; misplaced: OutboundMessage[]; end?: ProposalEnd }) {
  let taken = [...options.taken];
  let misplaced = [...options.misplaced];
  const proposed: EngineRecord[] = [];
  const engine = {
    outboundMessages: () => taken,
    misplacedMessages: (limit: number) => misplaced.slice(0, limit).map((message) => message.counter),
    relocationBacklog: () => ({
      messages: taken.length + misplaced.length,
      bytes: 100 * (taken.length + misplaced.length),
    }),
  } as unknown as PartitionEngine;
  const applied: ProposalEnd = { kind: "applied", index: 1, result: null } as unknown as ProposalEnd;
  const source = {
    engine: () => engine,
    latestCheckpointId: () => 7n,
    proposeRecord: async (record: EngineRecord): Promise<ProposalEnd> => {
      proposed.push(record);
      if (options.end !== undefined) return options.end;
      if (record.kind === "relocateOut") {
        const counters = new Set(record.counters);
        taken = [...taken, ...misplaced.filter((message) => counters.has(message.counter))];
        misplaced = misplaced.filter((message) => !counters.has(message.counter));
      } else if (record.kind === "relocatedOut") {
        const counters = new Set(record.relocations.map((relocation) => relocation.counter));
        taken = taken.filter((message) => !counters.has(message.counter));
      }
      return applied;
    },
  };
  return { source, proposed };
}

/** An owner that buffers every message under a new key and records each hand-over it got. */
function owners() {
  const handOvers: { ownerPartitionId: number; messages: readonly RelocatedMessage[]; checkpointId: bigint | null }[] =
    [];
  const send = async (
    ownerPartitionId: number,
    messages: readonly RelocatedMessage[],
    checkpointId: bigint | null,
  ): Promise<HandOverAnswer> => {
    handOvers.push({ ownerPartitionId, messages, checkpointId });
    return { keys: messages.map((message) => `new-${message.sourceKey}`), checkpointId: 9n };
  };
  return { handOvers, send };
}

/** Limits of `maxBatches` batches and no bound in time. */
function batches(maxBatches: number): RelocationLimits {
  return { maxBatches, untilMs: Number.POSITIVE_INFINITY, nowMs: () => 0 };
}

describe("relocateMisplacedMessages", () => {
  it("hands over what was taken out first, then takes out, hands over and records batch after batch", async () => {
    const { source, proposed } = scriptedSource({
      taken: [outbound(1, 4)],
      misplaced: Array.from({ length: 300 }, (_, index) => outbound(10 + index, index % 2 === 0 ? 4 : 5)),
    });
    const { handOvers, send } = owners();
    const progress = await relocateMisplacedMessages(source, send, batches(10));
    expect(progress).toEqual({ outcome: "progress", moved: 301, movedBytes: 30_100, remaining: 0, remainingBytes: 0 });
    // The message a previous run took out went first, alone, carrying the source's latest checkpoint id.
    expect(handOvers[0]).toMatchObject({ ownerPartitionId: 4, checkpointId: 7n });
    expect(handOvers[0]?.messages.map((message) => message.sourceKey)).toEqual(["1001"]);
    expect(proposed.map((record) => record.kind)).toEqual([
      "relocatedOut",
      "relocateOut",
      "relocatedOut",
      "relocatedOut",
      "relocateOut",
      "relocatedOut",
      "relocatedOut",
    ]);
    // A batch goes to one owner and holds at most 256 messages; the relocations name the keys the owner gave.
    expect(handOvers.every((handOver) => handOver.messages.length <= 256)).toBe(true);
    expect(new Set(handOvers.slice(1, 3).map((handOver) => handOver.ownerPartitionId))).toEqual(new Set([4, 5]));
    const recorded = proposed[2];
    expect(recorded?.kind === "relocatedOut" && recorded.relocations[0]).toMatchObject({
      newKey: expect.stringMatching(/^new-/),
    });
    expect(recorded).toMatchObject({ checkpointId: 9n });
  });

  it("cuts batches by their estimated bytes so that each fits in one record", async () => {
    // A batch may take 256 KiB of a record's 264 KiB: four messages of 60 KB fit, a fifth does not. One message
    // larger than that still goes, alone.
    const { source } = scriptedSource({
      taken: [...Array.from({ length: 10 }, (_, index) => outbound(index, 2, 60_000)), outbound(99, 2, 300_000)],
      misplaced: [],
    });
    const { handOvers, send } = owners();
    await relocateMisplacedMessages(source, send, batches(1));
    expect(handOvers.map((handOver) => handOver.messages.length)).toEqual([4, 4, 2, 1]);
    const lastBatch = owners();
    const alone = scriptedSource({ taken: [outbound(99, 2, 300_000), outbound(1, 2)], misplaced: [] });
    await relocateMisplacedMessages(alone.source, lastBatch.send, batches(1));
    expect(lastBatch.handOvers.map((handOver) => handOver.messages.length)).toEqual([1, 1]);
  });

  it("starts no step once its time is up, and reports what it moved by then", async () => {
    const { source, proposed } = scriptedSource({
      taken: [],
      misplaced: Array.from({ length: 1_000 }, (_, index) => outbound(index, 3)),
    });
    let nowMs = 0;
    const { handOvers, send } = owners();
    // Each hand-over takes 400 ms: by 1,000 ms three have gone, and the fourth batch is not taken out.
    const slow = async (owner: number, messages: readonly RelocatedMessage[], checkpointId: bigint | null) => {
      nowMs += 400;
      return send(owner, messages, checkpointId);
    };
    const progress = await relocateMisplacedMessages(source, slow, {
      maxBatches: 10,
      untilMs: 1_000,
      nowMs: () => nowMs,
    });
    expect(progress).toMatchObject({ outcome: "progress", moved: 768, remaining: 232 });
    expect(handOvers).toHaveLength(3);
    expect(proposed.map((record) => record.kind)).toEqual([
      "relocateOut",
      "relocatedOut",
      "relocateOut",
      "relocatedOut",
      "relocateOut",
      "relocatedOut",
    ]);
  });

  it("stops after the batches it was given, and reports what remains", async () => {
    const { source } = scriptedSource({
      taken: [],
      misplaced: Array.from({ length: 600 }, (_, index) => outbound(index, 3)),
    });
    const { send } = owners();
    const progress = await relocateMisplacedMessages(source, send, batches(1));
    // One batch: 256 taken out in this run, handed over by the next.
    expect(progress).toMatchObject({ outcome: "progress", moved: 0, remaining: 600 });
    expect(await relocateMisplacedMessages(source, send, batches(1))).toMatchObject({ moved: 256, remaining: 344 });
  });

  it("stops at an owner that answers a key count unlike the batch, and at a refused or lost proposal", async () => {
    const lying = async (): Promise<HandOverAnswer> => ({ keys: [], checkpointId: null });
    const { source } = scriptedSource({ taken: [outbound(1, 2)], misplaced: [] });
    expect(await relocateMisplacedMessages(source, lying, batches(5))).toEqual({
      outcome: "unavailable",
      detail: "partition 2 answered a key count unlike the batch",
    });
    const redirect = { outcome: "not-leader", leaderId: 3 } as const;
    const refused = scriptedSource({
      taken: [outbound(1, 2)],
      misplaced: [],
      end: { kind: "refused", redirect } as unknown as ProposalEnd,
    });
    expect(await relocateMisplacedMessages(refused.source, owners().send, batches(5))).toEqual(redirect);
    const unknown = scriptedSource({
      taken: [],
      misplaced: [outbound(1, 2)],
      end: { kind: "unknown", detail: "the leader stopped" } as unknown as ProposalEnd,
    });
    expect(await relocateMisplacedMessages(unknown.source, owners().send, batches(5))).toEqual({
      outcome: "unavailable",
      detail: "the leader stopped",
    });
  });
});
