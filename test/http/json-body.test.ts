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

  it("refuses a key repeated within one object, at any level and however it is escaped, and not across objects", () => {
    const detail = (named: string) => `The body repeats ${named} within one object; each key may appear once.`;
    expect(refusal('{"audience": "modeler-api", "audience": "admin-api"}')).toBe(detail("the key 'audience'"));
    // The same value twice is refused too, since another reader of the body may not take the two for one; that repeat
    // is not named.
    expect(refusal('{"a": 1, "b": 2, "a": 1}')).toBe(detail("a key"));
    expect(refusal('[1, {"x": {"deep": [{"k": 1, "\\u006b": 2}]}}]')).toBe(detail("the key 'k'"));
    expect(refusal('{"backupId": 1, "backupId": 9223372036854775807}')).toBe(detail("the key 'backupId'"));
    // A key is quoted briefly and printably, like any value of a request.
    expect(refusal(`{"${"k".repeat(70)}\\u001b": 1, "${"k".repeat(70)}\\u001b": 2}`)).toBe(
      detail(`the key '${"k".repeat(64)}...' (71 characters)`),
    );
    expect(
      parseJsonBody(Buffer.from('[{"k": 1}, {"k": 2}, {"n": {"k": 3}, "k": 4}]'), { exactIntegers: false }),
    ).toEqual([{ k: 1 }, { k: 2 }, { n: { k: 3 }, k: 4 }]);
    // Keys that only look alike are different keys.
    expect(parseJsonBody(Buffer.from('{"1": 1, "01": 2, "K": 3, "k": 4}'), { exactIntegers: false })).toEqual({
      1: 1,
      "01": 2,
      K: 3,
      k: 4,
    });
  });
});
