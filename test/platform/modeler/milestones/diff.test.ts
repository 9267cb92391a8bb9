import { createTwoFilesPatch } from "diff";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { changedLinesLowerBound, computeMilestoneDiff } from "../../../../src/platform/modeler/milestones/diff.js";

/** Texts of a few distinct lines, with and without a final newline and with CRLF, so lines repeat and move. */
const text = fc
  .array(fc.constantFrom("a", "b", "c", "<task/>", "", "d\r"), { maxLength: 30 })
  .chain((lines) => fc.constantFrom(lines.join("\n"), `${lines.join("\n")}\n`));

function input(fromContent: string, toContent: string, maxChangedLines: number) {
  return {
    fromLabel: "old",
    toLabel: "new",
    fromContent,
    toContent,
    fromHeader: "h1",
    toHeader: "h2",
    maxChangedLines,
  };
}

describe("milestone diffs", () => {
  it("answers exactly the diff library's patch, or its refusal, for every limit", () => {
    fc.assert(
      fc.property(text, text, fc.integer({ min: 1, max: 40 }), (from, to, maxChangedLines) => {
        const expected = createTwoFilesPatch("old", "new", from, to, "h1", "h2", { maxEditLength: maxChangedLines });
        const outcome = computeMilestoneDiff(input(from, to, maxChangedLines));
        if (expected === undefined) {
          expect(outcome.kind).toBe("tooDifferent");
        } else {
          expect(outcome).toEqual({ kind: "patch", bytes: new TextEncoder().encode(expected) });
        }
      }),
      { numRuns: 500 },
    );
  });

  it("counts the lines one side has more often than the other as a lower bound of the changed lines", () => {
    expect(changedLinesLowerBound("a\nb\nc\n", "c\nb\na\n")).toBe(0);
    expect(changedLinesLowerBound("a\nb\n", "a\nB\nx\n")).toBe(3);
    // The last line without a newline is another line than the same text with one.
    expect(changedLinesLowerBound("a\nb", "a\nb\n")).toBe(2);
  });

  it("refuses two contents whose lines mostly differ without running the diff, naming the count", () => {
    const lines = (prefix: string) => Array.from({ length: 60_000 }, (_, index) => `${prefix} ${index}`).join("\n");
    expect(computeMilestoneDiff(input(lines("old"), lines("new"), 1_000))).toEqual({
      kind: "tooDifferent",
      changedLinesAtLeast: 120_000,
    });
  });
});
