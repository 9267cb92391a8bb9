/**
 * JSON whose integers stay exact beyond 2^53 − 1, for the 64-bit integers some APIs and files carry (backup ids:
 * 0..2^63 − 1, as the reference product's Java longs). `JSON.parse` rounds such a number to the nearest double and
 * `JSON.stringify` refuses a bigint, and Node 20 has neither a reviver with the source text nor `JSON.rawJSON`, so
 * both go through lossless-json here: an integer beyond the safe range becomes a bigint when parsed, and a bigint
 * is written as its digits. Everything else parses and prints exactly as `JSON.parse` and `JSON.stringify` do it.
 */
import { parse, stringify } from "lossless-json";

/** An integer written in digits only (JSON numbers with a fraction or an exponent stay doubles, as they parse). */
const INTEGER_TEXT = /^-?[0-9]+$/;

function exactNumber(text: string): number | bigint {
  const value = Number(text);
  return Number.isSafeInteger(value) || !INTEGER_TEXT.test(text) ? value : BigInt(text);
}

/** `JSON.parse`, except that an integer beyond ±(2^53 − 1) written in digits is returned as the exact bigint. */
export function parseJsonExactly(text: string): unknown {
  return parse(text, undefined, exactNumber);
}

/** `JSON.stringify`, except that a bigint is written as its exact digits. */
export function stringifyJsonExactly(value: unknown, indentation?: number): string {
  const text = stringify(value, undefined, indentation);
  if (text === undefined) throw new TypeError("the value has no JSON form");
  return text;
}

/**
 * A JSON number of a 64-bit field as its exact bigint: a safe integer, or an integer beyond the safe range that
 * `parseJsonExactly` kept exact; null for anything else (a fraction, or a double JSON.parse rounded).
 */
export function exactInteger(value: unknown): bigint | null {
  if (typeof value === "bigint") return value;
  return Number.isSafeInteger(value) ? BigInt(value as number) : null;
}
