/** 64-bit integers as bigints: their bound, their order and their decimal text. */
import { describe, expect, it } from "vitest";
import { compareAscending, MAX_INT64, parseNonNegativeInt64 } from "../../src/json/int64.js";

describe("64-bit integers", () => {
  it("reads a non-negative 64-bit integer from decimal digits, and nothing else", () => {
    expect(parseNonNegativeInt64("0")).toBe(0n);
    expect(parseNonNegativeInt64("007")).toBe(7n);
    expect(parseNonNegativeInt64("9223372036854775807")).toBe(MAX_INT64);
    for (const text of ["9223372036854775808", "-1", "1e3", "1.0", "", " 1", "0x10", "99999999999999999999"]) {
      expect(parseNonNegativeInt64(text), text).toBeNull();
    }
  });

  it("orders bigints by value, not by their text, and tells apart two that round to the same double", () => {
    expect([10n, MAX_INT64, 9n, MAX_INT64 - 1n, 0n].sort(compareAscending)).toEqual([
      0n,
      9n,
      10n,
      MAX_INT64 - 1n,
      MAX_INT64,
    ]);
    expect(compareAscending(MAX_INT64 - 1n, MAX_INT64)).toBe(-1);
    expect(compareAscending(5n, 5n)).toBe(0);
  });
});
