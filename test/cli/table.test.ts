import { describe, expect, it } from "vitest";
import { alignedLines, alignedTable } from "../../src/cli/table.js";

describe("alignedTable", () => {
  it("pads each column to its widest cell, two spaces apart, with no blanks at the end of a line", () => {
    expect(
      alignedLines([
        ["ID", "NAME", "SCOPES"],
        ["1", "a much longer name", ""],
        ["22", "b", "members"],
      ]),
    ).toEqual(["ID  NAME                SCOPES", "1   a much longer name", "22  b                   members"]);
  });

  it("takes rows of different lengths and an empty table", () => {
    expect(alignedTable([["A", "B"], ["long"]])).toBe("A     B\nlong");
    expect(alignedTable([])).toBe("");
  });
});
