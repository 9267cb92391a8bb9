import { describe, expect, it } from "vitest";
import { csvDocument, csvField } from "../../../../src/platform/admin/activity/csv.js";
import { readCsv } from "./csv-reader.js";

describe("CSV writer (RFC 4180)", () => {
  it("writes a header row and CRLF line ends, quoting only the fields that need it", () => {
    expect(csvDocument(["a", "b"], [["1", "two"]])).toBe("a,b\r\n1,two\r\n");
    expect(csvField('say "hi", then\r\nleave')).toBe('"say ""hi"", then\r\nleave"');
    expect(csvField("line\nbreak")).toBe('"line\nbreak"');
  });

  it("reads back every value as written, commas, quotes and line breaks included", () => {
    const rows = [
      ["plain", "with, comma", 'with "quotes"'],
      ["line\nfeed", "carriage\rreturn", 'both\r\nand ,"'],
      ["", "ünïcødé ✓", '""'],
    ];
    const header = ["first", "second", "third"];
    expect(readCsv(csvDocument(header, rows))).toEqual([header, ...rows]);
  });

  it("writes a value that a spreadsheet would run as a formula with a leading apostrophe", () => {
    for (const value of ["=1+1@example.com", "+cmd", "-2", "@SUM(A1)", "\tx"]) {
      expect(readCsv(csvDocument(["v"], [[value]]))[1]).toEqual([`'${value}`]);
    }
    expect(csvField("a=b")).toBe("a=b");
  });
});
