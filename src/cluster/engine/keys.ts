/**
 * Record keys. A key encodes the partition that owns it in its high bits, so any key can be routed back to its
 * partition without a lookup: `key = partitionId × 2^51 + counter`, where `counter` is the partition's local key
 * counter. This is the same 64-bit layout the workflow engine's clients know (13 bits of partition id, 51 bits of
 * local counter).
 *
 * Bounds: partition ids are 1..8191 (13 bits) and counters 1..2^51 − 1. Counters are safe JavaScript integers, but a
 * whole key is not: every key of partition 4 and above is ≥ 2^53. Keys therefore never exist as JavaScript numbers;
 * they are handled as decimal strings (exactly what clients see) and converted with BigInt only here. Inside a
 * partition the engine indexes messages by their counter, which is a safe integer.
 */

/** Bits of the local counter below the partition id. */
const COUNTER_BITS = 51n;

/** Smallest partition id a key can carry. */
export const MIN_PARTITION_ID = 1;

/** Largest partition id a key can carry (13 bits). */
export const MAX_PARTITION_ID = 8191;

/** Smallest local counter; a partition's first key uses it. */
export const MIN_KEY_COUNTER = 1;

/** Largest local counter (2^51 − 1); still a safe JavaScript integer. */
export const MAX_KEY_COUNTER = 2 ** 51 - 1;

const COUNTER_MASK = (1n << COUNTER_BITS) - 1n;

/** Longest decimal representation of a valid key: (8191 × 2^51 + 2^51 − 1) = 2^64 − 1 has 20 digits. */
const MAX_KEY_DIGITS = 20;

/** A key split into its parts. */
export interface DecodedKey {
  readonly partitionId: number;
  readonly counter: number;
}

/** Whether `partitionId` is an integer in 1..8191. */
export function isValidPartitionId(partitionId: number): boolean {
  return Number.isInteger(partitionId) && partitionId >= MIN_PARTITION_ID && partitionId <= MAX_PARTITION_ID;
}

/** Builds the decimal key of `counter` on `partitionId`; throws if either is out of bounds. */
export function encodeKey(partitionId: number, counter: number): string {
  if (!isValidPartitionId(partitionId)) {
    throw new Error(
      `invariant violated: partition id must be an integer in 1..${MAX_PARTITION_ID}, got ${partitionId}`,
    );
  }
  if (!Number.isSafeInteger(counter) || counter < MIN_KEY_COUNTER || counter > MAX_KEY_COUNTER) {
    throw new Error(`invariant violated: key counter must be an integer in 1..2^51-1, got ${counter}`);
  }
  return ((BigInt(partitionId) << COUNTER_BITS) | BigInt(counter)).toString();
}

/**
 * Splits a decimal key into partition id and counter; undefined when `key` is not a canonical decimal key within
 * bounds. Safe on hostile input (path parameters): it never throws.
 */
export function parseKey(key: string): DecodedKey | undefined {
  if (key.length === 0 || key.length > MAX_KEY_DIGITS || !/^[1-9][0-9]*$/.test(key)) return undefined;
  const value = BigInt(key);
  const partitionId = Number(value >> COUNTER_BITS);
  const counter = Number(value & COUNTER_MASK);
  if (!isValidPartitionId(partitionId) || counter < MIN_KEY_COUNTER) return undefined;
  return { partitionId, counter };
}

/** The partition that owns `key`; throws if `key` is not a valid key (use `parseKey` for untrusted input). */
export function partitionOfKey(key: string): number {
  const decoded = parseKey(key);
  if (decoded === undefined) throw new Error(`not a valid record key: ${JSON.stringify(key)}`);
  return decoded.partitionId;
}
