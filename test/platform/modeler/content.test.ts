/**
 * What the modeler checks of a file's content before storing it, as `validateFileContent` does in the worker pool.
 */
import { describe, expect, it } from "vitest";
import { ServiceError } from "../../../src/http/errors.js";
import { assertName, describeParserMessage, validateFileContent } from "../../../src/platform/modeler/content.js";
import { bpmnDocument, dmnDocument } from "./support.js";

describe("validateFileContent", () => {
  it("names at most 20 of a model's warnings in a 400 and says reading stopped at the 21st", async () => {
    const attributes = Array.from({ length: 100 }, (_, index) => ` unknown${index}="1"`).join("");
    const content = bpmnDocument().replace("<bpmn:process ", `<bpmn:process${attributes} `);
    const refusal = await validateFileContent("bpmn", content).then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(refusal).toBeInstanceOf(ServiceError);
    const { status, detail, extensions } = refusal as ServiceError;
    expect(status).toBe(400);
    // A document of 700,000 unknown attributes was answered with 47 MB listing each of them.
    expect(extensions?.errors).toHaveLength(20);
    expect(extensions?.uncountedErrors).toBe(true);
    expect(extensions?.unlistedErrorCount).toBeUndefined();
    expect(detail).toMatch(
      /^content is not a valid BPMN document: .*\(and more: reading stopped after 21 problems\)\.$/,
    );
  });

  it.each([
    ["repeated ids", (count: number) => '<bpmn:process id="Process_1" />\n'.repeat(count)],
    [
      "unknown elements",
      (count: number) => `<bpmn:process id="Process_1">${"<bpmn:unknown />\n".repeat(count)}</bpmn:process>`,
    ],
    [
      "stray text",
      (count: number) => `<bpmn:process id="Process_1">${"text<bpmn:startEvent />\n".repeat(count)}</bpmn:process>`,
    ],
  ])("stops reading a BPMN document of many %s at its 21st problem", async (_, problems) => {
    // Each problem the reader finds costs it a count of the lines before it, so 50,000 repeated ids in 1.1 MB held a
    // worker for 30 s when read in full.
    const content = bpmnDocument().replace(/<bpmn:process.*<\/bpmn:process>/s, problems(50_000));
    const refusal = (await validateFileContent("bpmn", content).catch((error: unknown) => error)) as ServiceError;
    expect(refusal.status).toBe(400);
    expect(refusal.extensions?.uncountedErrors).toBe(true);
    expect(refusal.extensions?.errors).toHaveLength(20);
  });

  it("stops reading a DMN document of many repeated ids at its 21st problem", async () => {
    const content = dmnDocument().replace(
      '<decision id="Decision_1" name="Dish" />',
      '<decision id="Decision_1" name="Dish" />\n'.repeat(50_000),
    );
    const refusal = (await validateFileContent("dmn", content).catch((error: unknown) => error)) as ServiceError;
    expect(refusal.extensions?.uncountedErrors).toBe(true);
    expect(refusal.detail).toContain("duplicate ID <Decision_1>");
  });

  it("counts every warning up to 20 beyond those listed", async () => {
    const attributes = Array.from({ length: 20 }, (_, index) => ` unknown${index}="1"`).join("");
    const content = bpmnDocument().replace("<bpmn:process ", `<bpmn:process${attributes} `);
    const refusal = (await validateFileContent("bpmn", content).catch((error: unknown) => error)) as ServiceError;
    expect(refusal.extensions?.errors).toHaveLength(20);
    expect(refusal.extensions?.uncountedErrors).toBeUndefined();
    expect(refusal.detail).toMatch(/\(and 15 more\)\.$/);
  });

  it("lists every warning when there are few", async () => {
    const content = bpmnDocument().replace("<bpmn:startEvent", "<bpmn:startEvnt");
    const refusal = (await validateFileContent("bpmn", content).catch((error: unknown) => error)) as ServiceError;
    expect(refusal.extensions?.errors).toEqual([
      { location: "body/content", message: expect.stringContaining("unknown type <bpmn:StartEvnt>") },
    ]);
    expect(refusal.extensions?.unlistedErrorCount).toBeUndefined();
  });

  it("names the line and column an editor shows (counted from 1) for a warning, and the element it is at", async () => {
    // The start event is on the document's fourth line, its "<" in the fifth column.
    const content = bpmnDocument().replace("<bpmn:startEvent", "<bpmn:startEvnt");
    const refusal = (await validateFileContent("bpmn", content).catch((error: unknown) => error)) as ServiceError;
    expect(refusal.detail).toBe(
      "content is not a valid BPMN document: line 4, column 5: unknown type <bpmn:StartEvnt> (at <bpmn:startEvnt>).",
    );
  });

  it("names the line and column an editor shows for a document the reader cannot read at all", async () => {
    const content = bpmnDocument().replace("  </bpmn:process>\n", "");
    const refusal = (await validateFileContent("bpmn", content).catch((error: unknown) => error)) as ServiceError;
    expect(refusal.detail).toBe(
      "content is not a valid BPMN document (root element bpmn:Definitions expected): " +
        "line 5, column 1: closing tag mismatch (at </bpmn:definitions>).",
    );
  });
});

describe("assertName", () => {
  it("refuses control characters, naming the first, and takes any other text", () => {
    for (const [name, codePoint] of [
      ["tab\there", "0009"],
      ["line\nbreak", "000A"],
      ["\u0001".repeat(255), "0001"],
      ["delete\u007f", "007F"],
      ["next line\u0085", "0085"],
    ] as const) {
      expect(() => assertName("name", name)).toThrow(
        `name must not contain control characters; it holds U+${codePoint}.`,
      );
    }
    expect(() => assertName("name", "nul\u0000")).toThrow("name must not contain the character U+0000.");
    for (const name of ["Order process", "Bestellung für Kunden", "注文 ✓ 🚚", 'quotes " and \\ backslashes']) {
      expect(() => assertName("name", name)).not.toThrow();
    }
  });
});

describe("describeParserMessage", () => {
  it("quotes at most 80 characters of the content and leaves out a quote the reader did not give", () => {
    const longText = "x".repeat(500);
    expect(
      describeParserMessage(`unparsable content ${longText} detected\n\tline: 0\n\tcolumn: 9\n\tnested error: why`),
    ).toBe(`line 1, column 10: why (at ${"x".repeat(80)}…)`);
    expect(describeParserMessage("unparsable content detected\n\tline: 2\n\tcolumn: 0\n\tnested error: why")).toBe(
      "line 3, column 1: why",
    );
  });

  it("only joins the lines of a message of another shape", () => {
    expect(describeParserMessage("something else\n\tfailed")).toBe("something else; failed");
  });
});
