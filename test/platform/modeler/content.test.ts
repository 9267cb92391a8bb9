/**
 * What the modeler checks of a file's content before storing it, as `validateFileContent` does in the worker pool.
 */
import { describe, expect, it } from "vitest";
import { ServiceError } from "../../../src/http/errors.js";
import { validateFileContent } from "../../../src/platform/modeler/content.js";
import { bpmnDocument } from "./support.js";

describe("validateFileContent", () => {
  it("names at most 20 of a model's warnings in a 400 and counts the rest, however many the parser found", async () => {
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
    expect(extensions?.unlistedErrorCount).toBe(80);
    expect(detail).toMatch(/^content is not a valid BPMN document: .*\(and 95 more\)\.$/);
  });

  it("lists every warning when there are few", async () => {
    const content = bpmnDocument().replace("<bpmn:startEvent", "<bpmn:startEvnt");
    const refusal = (await validateFileContent("bpmn", content).catch((error: unknown) => error)) as ServiceError;
    expect(refusal.extensions?.errors).toEqual([
      { location: "body/content", message: expect.stringContaining("unknown type <bpmn:StartEvnt>") },
    ]);
    expect(refusal.extensions?.unlistedErrorCount).toBeUndefined();
  });
});
