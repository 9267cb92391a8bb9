/**
 * Which partition a message belongs to. The partition is chosen by hashing the message's correlation key with
 * 32-bit FNV-1a over its UTF-8 bytes and taking the hash modulo the partition count. The hash must never change:
 * buffered messages live on the partition it chose, so a different hash would strand them. Tests pin its values.
 *
 * A message is routed by its routing key (`routingKeyOf`): its correlation key, or without one its message id, so a
 * retried publication with the same id always meets the first on one partition and is refused as a duplicate.
 * Messages with neither carry the empty string; the gateway spreads them round robin over the partitions instead of
 * hashing (hashing "" would send all of them to one partition), and they never move.
 */

const FNV_OFFSET_BASIS = 0x811c9dc5;
const FNV_PRIME = 0x01000193;

const encoder = new TextEncoder();

/** 32-bit FNV-1a of the UTF-8 bytes of `text`, as an unsigned integer. */
export function correlationKeyHash(text: string): number {
  const bytes = encoder.encode(text);
  let hash = FNV_OFFSET_BASIS;
  for (const byte of bytes) {
    hash = Math.imul(hash ^ byte, FNV_PRIME);
  }
  return hash >>> 0;
}

/** The partition (1..partitionCount) that owns messages with `correlationKey`. */
export function partitionForCorrelationKey(correlationKey: string, partitionCount: number): number {
  if (!Number.isInteger(partitionCount) || partitionCount < 1) {
    throw new Error(`invariant violated: partition count must be a positive integer, got ${partitionCount}`);
  }
  return (correlationKeyHash(correlationKey) % partitionCount) + 1;
}

/**
 * The text a message is routed by: its correlation key, else its message id, else the empty string (no owner: the
 * gateway spreads such messages round robin and they stay where they were published).
 */
export function routingKeyOf(correlationKey: string, messageId: string | null | undefined): string {
  if (correlationKey !== "") return correlationKey;
  return messageId ?? "";
}
