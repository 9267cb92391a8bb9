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

  it("quotes nothing of the body in its answer, not even the character where it goes wrong", () => {
    // A token request whose secret lost its quotes: JSON.parse's own message would quote it.
    const secret = "Zq8sW3cretXk2pL0";
    const unquoted = refusal(`{"client_id": "worker", "client_secret": ${secret}}`);
    expect(unquoted).toBe("The body is not valid JSON: Object value expected after ':' at position 41.");
    const misplaced = refusal(`{"client_secret" ${secret}}`);
    expect(misplaced).toBe("The body is not valid JSON: Colon ':' expected after property name at position 17.");
    for (const detail of [unquoted, misplaced]) expect(detail).not.toMatch(/Zq8|'Z'/);
  });

  it("accepts a byte order mark, and keeps 64-bit integers exact only where asked", () => {
    const text = '\uFEFF{"backupId": 9223372036854775807}';
    expect(parseJsonBody(Buffer.from(text), { exactIntegers: true })).toEqual({ backupId: 9223372036854775807n });
    expect(parseJsonBody(Buffer.from(text), { exactIntegers: false })).toEqual({ backupId: 2 ** 63 });
  });
});
