/** JSON with exact 64-bit integers: parsed and written like JSON.parse and JSON.stringify, except beyond 2^53 − 1. */
import { describe, expect, it } from "vitest";
import { exactInteger, parseJsonExactly, stringifyJsonExactly } from "../../src/json/exact-json.js";
import { MAX_INT64 } from "../../src/json/int64.js";

describe("exact JSON", () => {
  it("parses integers beyond 2^53 − 1 as their exact bigints, and everything else as JSON.parse does", () => {
    const text =
      '{"largest": 9223372036854775807, "beyond": 9007199254740993, "safe": 9007199254740991, "x": [1.5, -0, 1e3, "9"]}';
    expect(parseJsonExactly(text)).toEqual({
      largest: MAX_INT64,
      beyond: 9_007_199_254_740_993n,
      safe: Number.MAX_SAFE_INTEGER,
      x: [1.5, -0, 1000, "9"],
    });
    // A number written with an exponent or a fraction stays a double, as JSON.parse reads it.
    expect(parseJsonExactly("9.2e18")).toBe(9.2e18);
    expect(() => parseJsonExactly("{")).toThrow();
  });

  it("writes bigints as their digits, and everything else as JSON.stringify does", () => {
    const value = { id: MAX_INT64, nested: [1, null, "é\u2028", { at: new Date(0) }], skipped: undefined };
    expect(stringifyJsonExactly(value)).toBe(
      '{"id":9223372036854775807,"nested":[1,null,"é\u2028",{"at":"1970-01-01T00:00:00.000Z"}]}',
    );
    const plain = { formatVersion: 1, backupId: 5, files: [], reason: null };
    expect(stringifyJsonExactly(plain, 2)).toBe(JSON.stringify(plain, null, 2));
  });

  it("takes a parsed JSON integer exactly: a safe integer or a bigint, never a rounded double", () => {
    expect(exactInteger(5)).toBe(5n);
    expect(exactInteger(MAX_INT64)).toBe(MAX_INT64);
    for (const value of [2 ** 60, 1.5, "5", null]) expect(exactInteger(value), String(value)).toBeNull();
  });
});
