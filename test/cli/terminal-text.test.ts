import { describe, expect, it } from "vitest";
import { printable, printableJson, printableLines } from "../../src/cli/terminal-text.js";

describe("text printed on the user's terminal", () => {
  it("shows C0 and C1 controls, DEL, line separators and bidirectional controls as escapes", () => {
    expect(printable("a\nb\u009bc")).toBe("a\\u000ab\\u009bc");
    expect(printable("order\u001b]0;pwned\u0007.bpmn")).toBe("order\\u001b]0;pwned\\u0007.bpmn");
    expect(printable("x\u007fy\r\t")).toBe("x\\u007fy\\u000d\\u0009");
    expect(printable("invoice\u202egpj.exe")).toBe("invoice\\u202egpj.exe");
    expect(printable("a\u2066b\u2069c\u200fd\u2028e")).toBe("a\\u2066b\\u2069c\\u200fd\\u2028e");
  });

  it("shows every invisible format character (category Cf) as an escape, beyond U+FFFF as its UTF-16 pair", () => {
    expect(printable("admin\u200b@x\u2060\ufeff\u00ad")).toBe("admin\\u200b@x\\u2060\\ufeff\\u00ad");
    expect(printable("a\u200cb\u200dc\u2064d\u061ce")).toBe("a\\u200cb\\u200dc\\u2064d\\u061ce");
    expect(printable("tag\u{e0001}\u{e007f}")).toBe("tag\\udb40\\udc01\\udb40\\udc7f");
    expect(printableLines("x\u2062\ny")).toBe("x\\u2062\ny");
    const value = { name: "a\u200bb\u{e0041}" };
    const json = printableJson(value, 0);
    expect(json).toBe('{"name":"a\\u200bb\\udb40\\udc41"}');
    expect(JSON.parse(json)).toEqual(value);
  });

  it("leaves ordinary text alone, letters of every script and emoji included", () => {
    const ordinary = "Bestellung — 注文 · café ✓ 𝄞 🙂 ﷽ [1] {x} \\ 'q'";
    expect(printable(ordinary)).toBe(ordinary);
  });

  it("keeps the line breaks of multi-line text and escapes the rest", () => {
    expect(printableLines("Invalid configuration:\n  - a is \u001b[31mred\u001b[0m")).toBe(
      "Invalid configuration:\n  - a is \\u001b[31mred\\u001b[0m",
    );
  });

  it("prints JSON that reads back as the same value, with no control character left raw", () => {
    const value = { name: "a\u009b2Jb\u202ec\u001bd", lines: ["x\ny"] };
    const text = printableJson(value);
    const raw = [...text].filter((character) => printable(character) !== character && character !== "\n");
    expect(raw).toEqual([]);
    expect(JSON.parse(text)).toEqual(value);
    expect(printableJson({ a: "\u0085" }, 0)).toBe('{"a":"\\u0085"}');
  });
});
