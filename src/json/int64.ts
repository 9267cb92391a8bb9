/**
 * Signed 64-bit integers held as bigints (backup ids: 0..2^63 − 1): their bound, their order and their decimal text.
 * Free of dependencies, so that the pure partition engine uses it without pulling in a JSON parser.
 */

/** The largest signed 64-bit integer, 2^63 − 1. */
export const MAX_INT64 = 2n ** 63n - 1n;

/** Decimal digits of a non-negative 64-bit integer (leading zeros allowed, as in the numbers they replace). */
const NON_NEGATIVE_INT64_TEXT = /^[0-9]{1,19}$/;

/** Orders bigints ascending, for `Array.prototype.sort` (which would otherwise compare their text). */
export function compareAscending(left: bigint, right: bigint): number {
  return left < right ? -1 : left > right ? 1 : 0;
}

/** The non-negative 64-bit integer `text` writes in decimal digits, or null when it writes anything else. */
export function parseNonNegativeInt64(text: string): bigint | null {
  if (!NON_NEGATIVE_INT64_TEXT.test(text)) return null;
  const value = BigInt(text);
  return value <= MAX_INT64 ? value : null;
}
