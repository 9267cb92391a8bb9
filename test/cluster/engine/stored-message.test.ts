import { describe, expect, it } from "vitest";
import { engineCodec } from "../../../src/cluster/engine/records.js";
import {
  entryFields,
  type MessageFields,
  moveEntry,
  restoredMessage,
  type StoredMessage,
  storedMessage,
} from "../../../src/cluster/engine/stored-message.js";

/** Copies an entry into memory of its own, as a restore without slabs would. */
const ownCopy = (bytes: Uint8Array): Uint8Array => new Uint8Array(bytes);

/** What a reader of a stored message sees, wherever its entry lies. */
function readable(message: StoredMessage | undefined): Record<string, unknown> | undefined {
  if (message === undefined) return undefined;
  const { counter, name, correlationKey, timeToLiveMs, messageId, tenantId, publishedAtMs, deadlineMs, sizeBytes } =
    message;
  return {
    ...{ counter, name, correlationKey, timeToLiveMs, messageId, tenantId, publishedAtMs, deadlineMs, sizeBytes },
    entry: Buffer.from(message.entry),
    variablesBytes: Buffer.from(message.variablesBytes),
  };
}

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

describe("storedMessage", () => {
  it("encodes the entry a snapshot lists, and keeps the variables as a view of it, apart from the given buffer", () => {
    const given = fields();
    const message = storedMessage(given);
    expect(Buffer.from(message.entry).equals(Buffer.from(engineCodec.pack(entryFields(given))))).toBe(true);
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
      // A view of its own, as a restore hands over: the codec marks what it decodes.
      const again = restoredMessage(message.entry.subarray(0), ownCopy);
      expect(readable(again)).toEqual(readable(message));
    }
  });

  it("keeps a copy of the entry it restores from, its variables a view of that copy", () => {
    const message = storedMessage(fields());
    // The entry as a restore's stream hands it over: a view into a larger buffer that is reused afterwards.
    const piece = new Uint8Array(message.entry.byteLength + 20);
    piece.set(message.entry, 10);
    const restored = restoredMessage(piece.subarray(10, 10 + message.entry.byteLength), ownCopy);
    piece.fill(0);
    expect(restored?.entry.buffer).not.toBe(piece.buffer);
    expect(restored?.variablesBytes.buffer).toBe(restored?.entry.buffer);
    expect(Buffer.from(restored?.entry ?? []).equals(Buffer.from(message.entry))).toBe(true);
    expect(engineCodec.unpack(restored?.variablesBytes ?? new Uint8Array())).toEqual({
      amount: 3,
      note: "n".repeat(300),
    });
  });

  it("copies the entry where the caller says, with the message's counter, and refuses a copy of another length", () => {
    const message = storedMessage(fields({ counter: 42 }));
    const slab = new Uint8Array(4096);
    const counters: number[] = [];
    const restored = restoredMessage(message.entry.subarray(0), (bytes, counter) => {
      counters.push(counter);
      const view = slab.subarray(100, 100 + bytes.byteLength);
      view.set(bytes);
      return view;
    });
    expect(counters).toEqual([42]);
    expect(restored?.entry.buffer).toBe(slab.buffer);
    expect(restored?.variablesBytes.buffer).toBe(slab.buffer);
    expect(readable(restored)).toEqual(readable(message));
    expect(() => restoredMessage(message.entry.subarray(0), (bytes) => bytes.subarray(1))).toThrow(/another length/);
  });

  it("moves an entry to other memory with the same bytes, its variables a view of the new entry", () => {
    const message = storedMessage(fields());
    const shared = new Uint8Array(message.entry.byteLength + 64);
    const restored = restoredMessage(message.entry.subarray(0), (bytes) => {
      const view = shared.subarray(32, 32 + bytes.byteLength);
      view.set(bytes);
      return view;
    });
    if (restored === undefined) throw new Error("the entry did not restore");
    const oldEntry = restored.entry;
    expect(() => moveEntry(restored, new Uint8Array(oldEntry.byteLength + 1))).toThrow(/another length/);
    moveEntry(restored, new Uint8Array(oldEntry));
    expect(restored.entry.buffer).not.toBe(shared.buffer);
    expect(restored.entry.byteOffset).toBe(0);
    expect(restored.variablesBytes.buffer).toBe(restored.entry.buffer);
    expect(readable(restored)).toEqual(readable(message));
    // Whoever still holds the old entry reads the same bytes; the new one no longer depends on that memory.
    expect(Buffer.from(oldEntry).equals(Buffer.from(restored.entry))).toBe(true);
    shared.fill(0);
    expect(engineCodec.unpack(restored.variablesBytes)).toEqual({ amount: 3, note: "n".repeat(300) });
  });

  it("keeps no view of its entry or variables and no deadline of its own: each is made when read", () => {
    const message = storedMessage(fields());
    const restored = restoredMessage(message.entry.subarray(0), ownCopy);
    for (const held of [message, restored]) {
      if (held === undefined) throw new Error("the entry did not restore");
      for (const derived of ["entry", "variablesBytes", "deadlineMs"]) expect(Object.keys(held)).not.toContain(derived);
      expect(Object.values(held).some((value) => ArrayBuffer.isView(value))).toBe(false);
      expect(held.deadlineMs).toBe(held.publishedAtMs + held.timeToLiveMs);
      // Each read is a view of wherever the entry lies now.
      expect(held.entry).not.toBe(held.entry);
      expect(held.variablesBytes).not.toBe(held.variablesBytes);
      expect(held.variablesBytes.buffer).toBe(held.entry.buffer);
    }
  });

  it("refuses entries that are not a message's", () => {
    const entry = (values: unknown[]): Uint8Array => Uint8Array.from(engineCodec.pack(values));
    const valid = entryFields(fields());
    expect(restoredMessage(entry(valid), ownCopy)).toBeDefined();
    expect(restoredMessage(Uint8Array.of(0xc1), ownCopy)).toBeUndefined();
    expect(restoredMessage(entry(valid.slice(0, 8)), ownCopy)).toBeUndefined();
    expect(restoredMessage(entry([...valid, 1]), ownCopy)).toBeUndefined();
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
      expect(restoredMessage(entry(broken), ownCopy)).toBeUndefined();
    }
  });
});
