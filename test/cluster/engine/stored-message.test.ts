import { describe, expect, it } from "vitest";
import { engineCodec } from "../../../src/cluster/engine/records.js";
import {
  type MessageFields,
  storedMessage,
  storedMessageFromEntry,
} from "../../../src/cluster/engine/stored-message.js";

function fields(overrides: Partial<MessageFields> = {}): MessageFields {
  return {
    counter: 7,
    name: "order-paid",
    correlationKey: "order-1",
    timeToLiveMs: 60_000,
    messageId: "id-7",
    variablesBytes: Uint8Array.from(engineCodec.pack({ amount: 3, note: "n".repeat(300) })),
    tenantId: "<default>",
    publishedAtMs: 1_700_000_000_000,
    sizeBytes: 420,
    ...overrides,
  };
}

/** The fields as a snapshot lists them: what the entry must encode. */
function listed(message: MessageFields): unknown[] {
  return [
    message.counter,
    message.name,
    message.correlationKey,
    message.timeToLiveMs,
    message.messageId,
    message.variablesBytes,
    message.tenantId,
    message.publishedAtMs,
    message.sizeBytes,
  ];
}

describe("storedMessage", () => {
  it("encodes the entry a snapshot lists, and keeps the variables as a view of it, apart from the given buffer", () => {
    const given = fields();
    const message = storedMessage(given);
    expect(Buffer.from(message.entry).equals(Buffer.from(engineCodec.pack(listed(given))))).toBe(true);
    expect(message.variablesBytes.buffer).toBe(message.entry.buffer);
    expect(Buffer.from(message.variablesBytes).equals(Buffer.from(given.variablesBytes))).toBe(true);
    expect(message.deadlineMs).toBe(given.publishedAtMs + given.timeToLiveMs);
    // The caller's buffer (a log entry's, say) may be reused afterwards.
    given.variablesBytes.fill(0);
    expect(engineCodec.unpack(message.variablesBytes)).toEqual({ amount: 3, note: "n".repeat(300) });
  });

  it("gives the same message back from its entry, for any message id and integer width", () => {
    for (const overrides of [
      { messageId: null },
      { counter: 2 ** 40, timeToLiveMs: 0, sizeBytes: 0 },
      { correlationKey: "", name: "", variablesBytes: Uint8Array.from(engineCodec.pack({})) },
    ]) {
      const message = storedMessage(fields(overrides));
      const again = storedMessageFromEntry(Uint8Array.from(message.entry));
      // Compared as plain bytes: the entry made here is a Buffer, the copy a Uint8Array.
      const plain = (stored: typeof message | undefined) =>
        stored && { ...stored, entry: [...stored.entry], variablesBytes: [...stored.variablesBytes] };
      expect(plain(again)).toEqual(plain(message));
    }
  });

  it("refuses entries that are not a message's", () => {
    const entry = (values: unknown[]): Uint8Array => Uint8Array.from(engineCodec.pack(values));
    const valid = listed(fields());
    expect(storedMessageFromEntry(entry(valid))).toBeDefined();
    expect(storedMessageFromEntry(Uint8Array.of(0xc1))).toBeUndefined();
    expect(storedMessageFromEntry(entry(valid.slice(0, 8)))).toBeUndefined();
    expect(storedMessageFromEntry(entry([...valid, 1]))).toBeUndefined();
    for (const [position, value] of [
      [0, -1],
      [1, 5],
      [3, 1.5],
      [4, 9],
      [5, "not bytes"],
      [7, Number.MAX_SAFE_INTEGER],
      [8, -3],
    ] as const) {
      const broken = [...valid];
      broken[position] = value;
      expect(storedMessageFromEntry(entry(broken))).toBeUndefined();
    }
  });
});
