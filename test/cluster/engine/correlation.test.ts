import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { correlationKeyHash, partitionForCorrelationKey } from "../../../src/cluster/engine/correlation.js";

describe("correlation key hash", () => {
  it("is 32-bit FNV-1a over UTF-8 (published test vectors)", () => {
    expect(correlationKeyHash("")).toBe(0x811c9dc5);
    expect(correlationKeyHash("a")).toBe(0xe40c292c);
    expect(correlationKeyHash("foobar")).toBe(0xbf9cf968);
  });

  it("never changes the partition of a correlation key (pinned values)", () => {
    // Buffered messages live where this function put them; a change here strands them.
    expect(correlationKeyHash("order-4711")).toBe(0x9b6b901d);
    expect(correlationKeyHash("ü€𝄞")).toBe(0xa9c7faef);
    expect(partitionForCorrelationKey("order-4711", 3)).toBe(1);
    expect(partitionForCorrelationKey("customer-42", 3)).toBe(2);
    expect(partitionForCorrelationKey("ü€𝄞", 3)).toBe(3);
    expect(partitionForCorrelationKey("customer-42", 8)).toBe(7);
    expect(partitionForCorrelationKey("foobar", 8)).toBe(1);
  });

  it("returns a partition in 1..partitionCount", () => {
    fc.assert(
      fc.property(fc.string({ unit: "grapheme" }), fc.integer({ min: 1, max: 8191 }), (key, partitionCount) => {
        const partition = partitionForCorrelationKey(key, partitionCount);
        expect(Number.isInteger(partition)).toBe(true);
        expect(partition).toBeGreaterThanOrEqual(1);
        expect(partition).toBeLessThanOrEqual(partitionCount);
      }),
    );
  });

  it("spreads sequential keys evenly over the partitions", () => {
    const partitionCount = 8;
    const sampleCount = 80_000;
    const counts = new Array<number>(partitionCount).fill(0);
    for (let index = 0; index < sampleCount; index += 1) {
      const partition = partitionForCorrelationKey(`order-${index}`, partitionCount);
      counts[partition - 1] = (counts[partition - 1] ?? 0) + 1;
    }
    const expected = sampleCount / partitionCount;
    for (const count of counts) {
      expect(Math.abs(count - expected) / expected).toBeLessThan(0.05);
    }
  });

  it("refuses a partition count below 1", () => {
    expect(() => partitionForCorrelationKey("a", 0)).toThrow(/partition count/);
  });
});
