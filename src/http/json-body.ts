/**
 * How every flowplane HTTP server reads a JSON body: valid UTF-8, within the shape bounds of `limits.ts`, free of
 * keys that would reach an object's prototype, and with exact 64-bit integers where the route's schema asks for
 * them. Each refusal is a problem document naming what is wrong with the body.
 */

import { isUtf8 } from "node:buffer";
import { parse as parseLosslessly } from "lossless-json";
import secureJson from "secure-json-parse";
import { parseJsonExactly } from "../json/exact-json.js";
import { ServiceError } from "./errors.js";
import { measureJsonShape } from "./json-shape.js";
import { maxJsonNestingLevels, maxJsonValues } from "./limits.js";
import { quotedValue } from "./quoted-value.js";

/** U+FEFF, which some clients put before a JSON body. */
const BYTE_ORDER_MARK = "\uFEFF";

/** What secure-json-parse throws for `__proto__`, and for a `constructor` holding a `prototype`. */
const FORBIDDEN_PROTOTYPE_MESSAGE = "Object contains forbidden prototype property";

/** How a route wants its body: with 64-bit integers kept exact (as bigints) or as plain JSON numbers. */
export interface JsonBodyOptions {
  /** Whether the route's schema has a 64-bit integer field, whose digits beyond 2^53 must not be rounded. */
  readonly exactIntegers: boolean;
}

/** Parses a JSON request body, or throws the 400 that says what is wrong with it. */
export function parseJsonBody(bytes: Buffer, options: JsonBodyOptions): unknown {
  if (bytes.length === 0) throw new ServiceError("malformedBody", "The body is empty but the content type says JSON.");
  // Decoding would silently replace bytes that are not UTF-8 with U+FFFD, and store text the client never sent.
  if (!isUtf8(bytes)) throw new ServiceError("malformedBody", "The body is not valid UTF-8.");
  // Measured before parsing, since parsing is what costs: see `maxJsonValues`.
  const shape = measureJsonShape(bytes, { maxLevels: maxJsonNestingLevels, maxValues: maxJsonValues });
  const excess = shape.excess;
  if (excess === "too-deep") {
    throw new ServiceError(
      "invalidRequest",
      `The body nests arrays and objects more than ${maxJsonNestingLevels} levels deep.`,
    );
  }
  if (excess === "too-many-values") {
    throw new ServiceError(
      "invalidRequest",
      `The body holds more than ${maxJsonValues} values (array items and object members, counted at every level).`,
    );
  }
  const text = bytes.toString("utf8");
  let value: unknown;
  try {
    value = secureJson.parse(text, undefined, { protoAction: "error", constructorAction: "error" });
  } catch (error) {
    const message = (error as Error).message;
    if (message === FORBIDDEN_PROTOTYPE_MESSAGE) {
      throw new ServiceError(
        "malformedBody",
        "The body holds the key __proto__, or a key constructor whose object has a key prototype: no API accepts them.",
      );
    }
    throw new ServiceError("malformedBody", syntaxProblem(text));
  }
  // JSON.parse keeps the last of a repeated key and drops the others, so a request could say two things at once and
  // be read as the last one here and as the first one by whatever else reads it (a proxy, a log, an audit).
  if (valuesHeld(value) !== shape.values) {
    const key = repeatedKey(withoutByteOrderMark(text));
    const named = key === undefined ? "a key" : `the key ${quotedValue(key)}`;
    throw new ServiceError("invalidRequest", `The body repeats ${named} within one object; each key may appear once.`);
  }
  if (!options.exactIntegers) return value;
  // Parsed again, now that it is known to be safe JSON, so that its 64-bit integers stay exact. secure-json-parse
  // skips a leading byte order mark, which every route accepts, and lossless-json would refuse.
  try {
    return parseJsonExactly(withoutByteOrderMark(text));
  } catch {
    throw new ServiceError("malformedBody", syntaxProblem(text));
  }
}

/**
 * The first key `text` repeats within one object with a different value, which lossless-json reports; undefined when
 * every repeat holds the same value as the first (the message then names no key).
 */
function repeatedKey(text: string): string | undefined {
  let found: string | undefined;
  try {
    parseLosslessly(text, undefined, {
      onDuplicateKey: ({ key }) => {
        found = key;
        throw new Error("stop at the first repeated key");
      },
    });
  } catch {
    // Thrown above once the key is known, or never: the text parsed before.
  }
  return found;
}

/** The array items and object members `value` holds at every level, as `measureJsonShape` counts them in its text. */
function valuesHeld(value: unknown): number {
  let count = 0;
  const pending: unknown[] = [value];
  for (let next = pending.pop(); next !== undefined; next = pending.pop()) {
    if (next === null || typeof next !== "object") continue;
    const children = Array.isArray(next) ? next : Object.values(next);
    count += children.length;
    for (const child of children) if (child !== null && typeof child === "object") pending.push(child);
  }
  return count;
}

function withoutByteOrderMark(text: string): string {
  return text.startsWith(BYTE_ORDER_MARK) ? text.slice(1) : text;
}

/**
 * What is wrong with `text`, which is not JSON, and where, without quoting any of it: the body may hold a secret (a
 * token request's `client_secret` written without its quotes), and an answer, or a log of it, must not carry it back.
 * JSON.parse's message quotes the text around the error; lossless-json's names a position and at most the one
 * character found there, which is left out too.
 */
function syntaxProblem(text: string): string {
  try {
    parseJsonExactly(withoutByteOrderMark(text));
  } catch (error) {
    const where = (error as Error).message.replace(/ but (got|found) '.*?'/u, "");
    return `The body is not valid JSON: ${where}.`;
  }
  return "The body is not valid JSON.";
}
