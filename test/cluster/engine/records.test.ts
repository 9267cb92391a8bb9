import fc from "fast-check";
import { Packr } from "msgpackr";
import { describe, expect, it } from "vitest";
import {
  DEFAULT_TENANT_ID,
  decodeAppliedRecord,
  decodeRecord,
  encodeRecord,
  MESSAGE_LIMITS,
  type PublishMessageRecord,
  RecordValidationError,
} from "../../../src/cluster/engine/records.js";

const packr = new Packr({ useRecords: false });

const valid: PublishMessageRecord = {
  kind: "publishMessage",
  name: "order-paid",
  correlationKey: "order-4711",
  timeToLiveMs: 60_000,
  messageId: "payment-1",
  variables: { amount: 12.5, lines: [1, 2], nested: { ok: true } },
  tenantId: DEFAULT_TENANT_ID,
  publishedAtMs: 1_795_000_000_000,
};

function problemsOf(record: PublishMessageRecord): readonly string[] {
  try {
    encodeRecord(record);
  } catch (error) {
    if (error instanceof RecordValidationError) return error.problems;
    throw error;
  }
  return [];
}

describe("records", () => {
  it("round-trips a publish record and an expiry record", () => {
    expect(decodeRecord(encodeRecord(valid))).toEqual(valid);
    const withoutId = { ...valid, messageId: undefined, correlationKey: "" };
    const { messageId: _ignored, ...expected } = withoutId;
    expect(decodeRecord(encodeRecord(withoutId))).toEqual(expected);
    expect(decodeRecord(encodeRecord({ kind: "expireMessages", nowMs: 2 ** 50 }))).toEqual({
      kind: "expireMessages",
      nowMs: 2 ** 50,
    });
  });

  it("round-trips any valid publish record", () => {
    const json = fc.jsonValue({ maxDepth: 2 });
    fc.assert(
      fc.property(
        fc.record({
          name: fc.string({ minLength: 1, maxLength: 40 }),
          correlationKey: fc.string({ maxLength: 40 }),
          timeToLiveMs: fc.integer({ min: 0, max: MESSAGE_LIMITS.maxTimeToLiveMs }),
          messageId: fc.option(fc.string({ minLength: 1, maxLength: 20 }), { nil: undefined }),
          variables: fc.dictionary(fc.string({ maxLength: 8 }), json, { maxKeys: 5 }),
          tenantId: fc.constantFrom(DEFAULT_TENANT_ID, "tenant-a"),
          publishedAtMs: fc.integer({ min: 0, max: 2 ** 52 }),
        }),
        (fields) => {
          const { messageId, ...rest } = fields;
          const record: PublishMessageRecord = {
            kind: "publishMessage",
            ...rest,
            ...(messageId === undefined ? {} : { messageId }),
          };
          // Variables reach clients as JSON, so JSON equality is the contract (msgpack writes -0 as 0).
          const asJson = (value: unknown) => JSON.parse(JSON.stringify(value));
          fc.pre(!JSON.stringify(record.variables).includes('"__proto__"'));
          expect(asJson(decodeRecord(encodeRecord(record)))).toEqual(asJson(record));
        },
      ),
      { numRuns: 1000 },
    );
  });

  it("names every broken limit", () => {
    expect(problemsOf({ ...valid, name: "" })[0]).toMatch(/^name/);
    expect(problemsOf({ ...valid, name: "é".repeat(MESSAGE_LIMITS.maxNameBytes / 2 + 1) })[0]).toMatch(/^name/);
    expect(problemsOf({ ...valid, name: "n".repeat(MESSAGE_LIMITS.maxNameBytes) })).toEqual([]);
    expect(problemsOf({ ...valid, correlationKey: "k".repeat(MESSAGE_LIMITS.maxCorrelationKeyBytes + 1) })[0]).toMatch(
      /^correlationKey/,
    );
    expect(problemsOf({ ...valid, messageId: "" })[0]).toMatch(/^messageId/);
    expect(problemsOf({ ...valid, timeToLiveMs: -1 })[0]).toMatch(/^timeToLiveMs/);
    expect(problemsOf({ ...valid, timeToLiveMs: MESSAGE_LIMITS.maxTimeToLiveMs + 1 })[0]).toMatch(/^timeToLiveMs/);
    expect(problemsOf({ ...valid, tenantId: "has space" })[0]).toMatch(/^tenantId/);
    expect(problemsOf({ ...valid, tenantId: "tenant-a.1_x" })).toEqual([]);
    expect(problemsOf({ ...valid, publishedAtMs: 1.5 })[0]).toMatch(/^publishedAtMs/);
    expect(problemsOf({ ...valid, variables: [1, 2] as unknown as Record<string, unknown> })[0]).toMatch(/^variables/);
    const big = { blob: "x".repeat(MESSAGE_LIMITS.maxVariablesBytes) };
    expect(problemsOf({ ...valid, variables: big })[0]).toMatch(/^variables take/);
    expect(problemsOf({ ...valid, variables: JSON.parse('{"a":[{"__proto__":1}]}') })).toEqual([
      "variables must not contain the key __proto__",
    ]);
    expect(problemsOf({ ...valid, name: "", tenantId: "" })).toHaveLength(2);
    expect(() => encodeRecord({ kind: "expireMessages", nowMs: -1 })).toThrow(RecordValidationError);
  });

  it("refuses text and numbers that would not read back as sent: lone surrogates, numbers beyond a double", () => {
    // Each lone surrogate read back as U+FFFD, so two message ids differing only there collided (a false 409).
    for (const lone of ["\ud800", "\udbff", "a\udc00", "\udfffz", "\ud800\ud800\udc00"]) {
      expect(problemsOf({ ...valid, messageId: lone }), JSON.stringify(lone)).toEqual([
        "messageId must be well-formed Unicode: it holds a lone surrogate",
      ]);
      expect(problemsOf({ ...valid, correlationKey: lone })).toEqual([
        "correlationKey must be well-formed Unicode: it holds a lone surrogate",
      ]);
      expect(problemsOf({ ...valid, name: lone })).toEqual([
        "name must be well-formed Unicode: it holds a lone surrogate",
      ]);
      expect(problemsOf({ ...valid, variables: { nested: [{ text: lone }] } })).toEqual([
        "variables must be well-formed Unicode: a string holds a lone surrogate",
      ]);
      expect(problemsOf({ ...valid, variables: { nested: { [lone]: 1 } } })).toEqual([
        "variables must be well-formed Unicode: a key holds a lone surrogate",
      ]);
    }
    // A pair is one character, however far into the plane.
    for (const paired of ["\ud800\udc00", "\udbff\udfff", "😀", "a😀b"]) {
      expect(
        problemsOf({ ...valid, messageId: paired, correlationKey: paired, variables: { [paired]: paired } }),
      ).toEqual([]);
    }
    for (const huge of [JSON.parse("1e400"), JSON.parse("-1e400")]) {
      expect(problemsOf({ ...valid, variables: { a: { b: [huge] } } })).toEqual([
        "variables must not hold a number beyond the range of a double (±1.8e308)",
      ]);
    }
    expect(problemsOf({ ...valid, variables: { largest: Number.MAX_VALUE, smallest: -Number.MAX_VALUE } })).toEqual([]);
  });

  it("turns malformed committed bytes into an invalid record instead of throwing", () => {
    const cases: Uint8Array[] = [
      new Uint8Array([0xc1]),
      packr.pack({ kind: "publishMessage" }),
      packr.pack([9, 1]),
      packr.pack([2]),
      packr.pack([1, "n", "k", 10, null, packr.pack([1]), DEFAULT_TENANT_ID, 0]),
      packr.pack([1, "", "k", 10, null, packr.pack({}), DEFAULT_TENANT_ID, 0]),
      new Uint8Array(MESSAGE_LIMITS.maxRecordBytes + 1),
    ];
    for (const bytes of cases) expect(decodeAppliedRecord(bytes).kind).toBe("invalid");
    expect(() => decodeRecord(packr.pack([9]))).toThrow(RecordValidationError);
    // The decoder's error text differs between calls for these bytes; the outcome must not.
    const truncated = Uint8Array.from([142, 169, 0, 0, 0, 0, 0, 0, 0, 128]);
    expect(decodeAppliedRecord(truncated)).toEqual(decodeAppliedRecord(truncated));
  });
});
