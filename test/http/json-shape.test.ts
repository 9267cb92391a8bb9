import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { measureJsonShape } from "../../src/http/json-shape.js";

const encoder = new TextEncoder();

/** Measures a JSON text with the given limits (none when left out). */
function measure(text: string, limits: { maxLevels?: number; maxValues?: number } = {}) {
  return measureJsonShape(encoder.encode(text), {
    maxLevels: limits.maxLevels ?? Number.POSITIVE_INFINITY,
    maxValues: limits.maxValues ?? Number.POSITIVE_INFINITY,
  }).excess;
}

/** The shape of a parsed value, counted the plain recursive way: the reference the byte walk must agree with. */
function shapeOf(value: unknown): { levels: number; values: number } {
  if (value === null || typeof value !== "object") return { levels: 0, values: 0 };
  const children = Array.isArray(value) ? value : Object.values(value);
  let levels = 0;
  let values = children.length;
  for (const child of children) {
    const shape = shapeOf(child);
    levels = Math.max(levels, shape.levels);
    values += shape.values;
  }
  return { levels: levels + 1, values };
}

describe("measureJsonShape", () => {
  it("counts array items and object members at every level, and levels of nesting, scalars being none", () => {
    expect(measure('"text"', { maxLevels: 0, maxValues: 0 })).toBeNull();
    expect(measure("{}", { maxLevels: 0 })).toBe("too-deep");
    expect(measure("{ }", { maxLevels: 1, maxValues: 0 })).toBeNull();
    expect(measure("[ 1 , 2 ]", { maxValues: 2 })).toBeNull();
    expect(measure("[ 1 , 2 ]", { maxValues: 1 })).toBe("too-many-values");
    expect(measure('{"a": [1, {"b": []}], "c": {}}', { maxLevels: 4, maxValues: 5 })).toBeNull();
    expect(measure('{"a": [1, {"b": []}], "c": {}}', { maxValues: 4 })).toBe("too-many-values");
    expect(measure('{"a": [1, {"b": []}], "c": {}}', { maxLevels: 3 })).toBe("too-deep");
  });

  it("takes nothing inside a string for structure: brackets, commas and escaped quotes", () => {
    expect(measure('["[[{,,,}]]", "a\\"[,", "\\\\", "\\\\\\"{"]', { maxLevels: 1, maxValues: 4 })).toBeNull();
    expect(measure('{"\\\\": ",", "k": "\\\\\\\\"}', { maxLevels: 1, maxValues: 2 })).toBeNull();
    // A string never closed hides the rest of the text, which the parser then refuses.
    expect(measure('["open, [[[', { maxLevels: 1, maxValues: 1 })).toBeNull();
  });

  it("agrees with the recursive count on any JSON value, however it is spaced", () => {
    fc.assert(
      fc.property(fc.jsonValue(), fc.constantFrom(undefined, 1, "\t", " \r\n "), (value, space) => {
        const text = JSON.stringify(value, null, space);
        const { levels, values } = shapeOf(JSON.parse(text));
        expect(measure(text, { maxLevels: levels, maxValues: values })).toBeNull();
        // The count is exact, which is how a repeated key is told apart (json-body.ts).
        expect(measureJsonShape(encoder.encode(text), { maxLevels: levels, maxValues: values }).values).toBe(values);
        if (levels > 0) expect(measure(text, { maxLevels: levels - 1 })).toBe("too-deep");
        if (values > 0) expect(measure(text, { maxValues: values - 1 })).toBe("too-many-values");
      }),
      { numRuns: 500 },
    );
  });

  it("stops at the first level beyond the limit, however deep the text goes", () => {
    const deep = "[".repeat(10_000_000);
    expect(measure(deep, { maxLevels: 64 })).toBe("too-deep");
  });
});
