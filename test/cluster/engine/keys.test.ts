import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  encodeKey,
  MAX_KEY_COUNTER,
  MAX_PARTITION_ID,
  parseKey,
  partitionOfKey,
} from "../../../src/cluster/engine/keys.js";

describe("record keys", () => {
  it("puts the partition id above 51 bits of counter, as a decimal string", () => {
    expect(encodeKey(1, 1)).toBe(String(2 ** 51 + 1));
    expect(encodeKey(2, 5)).toBe(String(2 * 2 ** 51 + 5));
    expect(encodeKey(MAX_PARTITION_ID, MAX_KEY_COUNTER)).toBe("18446744073709551615");
  });

  it("round-trips every partition id and counter within bounds", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: MAX_PARTITION_ID }),
        fc.integer({ min: 1, max: MAX_KEY_COUNTER }),
        (partitionId, counter) => {
          const key = encodeKey(partitionId, counter);
          expect(parseKey(key)).toEqual({ partitionId, counter });
          expect(partitionOfKey(key)).toBe(partitionId);
        },
      ),
    );
  });

  it("refuses partition ids and counters out of bounds", () => {
    for (const partitionId of [0, -1, MAX_PARTITION_ID + 1, 1.5, Number.NaN]) {
      expect(() => encodeKey(partitionId, 1)).toThrow(/partition id/);
    }
    for (const counter of [0, -1, MAX_KEY_COUNTER + 1, 2.5]) {
      expect(() => encodeKey(1, counter)).toThrow(/key counter/);
    }
  });

  it("parses hostile text to undefined instead of throwing", () => {
    const invalid = [
      "",
      "0",
      "007",
      "-5",
      "1e5",
      " 2251799813685249",
      "abc",
      "18446744073709551616", // 2^64: partition 8192
      "123", // partition 0
      String(2 ** 51), // counter 0
      "9".repeat(400),
    ];
    for (const text of invalid) expect(parseKey(text)).toBeUndefined();
    expect(() => partitionOfKey("abc")).toThrow(/not a valid record key/);
  });
});
