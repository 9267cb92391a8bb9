import { describe, expect, it } from "vitest";
import { MAX_QUOTED_CHARACTERS, quotedValue } from "../../src/http/quoted-value.js";

describe("quotedValue", () => {
  it("quotes a short printable value as it is", () => {
    expect(quotedValue("admin-api")).toBe("'admin-api'");
    expect(quotedValue("")).toBe("''");
  });

  it("shows control characters, non-ASCII, double quotes and backslashes as question marks", () => {
    expect(quotedValue('a\u001b]0;x\u0007"\\é😀')).toBe("'a?]0;x?????'");
  });

  it("cuts a long value, counting characters rather than UTF-16 units, and says how long it was", () => {
    const long = "😀".repeat(MAX_QUOTED_CHARACTERS + 1);
    expect(quotedValue(long)).toBe(
      `'${"?".repeat(MAX_QUOTED_CHARACTERS)}...' (${MAX_QUOTED_CHARACTERS + 1} characters)`,
    );
    expect(quotedValue("x".repeat(MAX_QUOTED_CHARACTERS))).toBe(`'${"x".repeat(MAX_QUOTED_CHARACTERS)}'`);
  });
});
