import { describe, expect, it } from "vitest";
import { ServiceError } from "../../src/http/errors.js";
import { parseJsonBody } from "../../src/http/json-body.js";

/** The detail of the problem `parseJsonBody` throws for `text`. */
function refusal(text: string | Buffer): string {
  try {
    parseJsonBody(typeof text === "string" ? Buffer.from(text) : text, { exactIntegers: false });
  } catch (error) {
    expect(error).toBeInstanceOf(ServiceError);
    return (error as ServiceError).message;
  }
  throw new Error(`parsed: ${String(text)}`);
}

describe("parseJsonBody", () => {
  it("names a key that would reach a prototype as the reason, not the JSON's validity", () => {
    const detail =
      "The body holds the key __proto__, or a key constructor whose object has a key prototype: no API accepts them.";
    expect(refusal('{"name": "x", "variables": {"__proto__": {"admin": true}}}')).toBe(detail);
    expect(refusal('[{"constructor": {"prototype": {"admin": true}}}]')).toBe(detail);
    // A constructor that is not an object holding a prototype is an ordinary key.
    expect(parseJsonBody(Buffer.from('{"constructor": "a", "prototype": 1}'), { exactIntegers: false })).toEqual({
      constructor: "a",
      prototype: 1,
    });
  });

  it("says where JSON that does not parse goes wrong", () => {
    expect(refusal('{"name": "x",}')).toMatch(/^The body is not valid JSON: .*position 13/);
    expect(refusal("")).toBe("The body is empty but the content type says JSON.");
    expect(refusal(Buffer.from([0x7b, 0xff, 0x7d]))).toBe("The body is not valid UTF-8.");
  });

  it("accepts a byte order mark, and keeps 64-bit integers exact only where asked", () => {
    const text = '\uFEFF{"backupId": 9223372036854775807}';
    expect(parseJsonBody(Buffer.from(text), { exactIntegers: true })).toEqual({ backupId: 9223372036854775807n });
    expect(parseJsonBody(Buffer.from(text), { exactIntegers: false })).toEqual({ backupId: 2 ** 63 });
  });
});
