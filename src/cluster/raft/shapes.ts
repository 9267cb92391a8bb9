/**
 * Shape checks of the Raft layer's values as they arrive from outside this process (a peer's message) or from disk (a
 * stored record): whether a value has the fields and types the code relies on, before anything trusts it.
 */
import type { Configuration, Member, SnapshotMetadata } from "./types.js";

/** Whether `value` is a safe integer of 0 or more, as every index, term and size in a record is. */
export function isNonNegativeInteger(value: unknown): value is number {
  return typeof value === "number" && Number.isSafeInteger(value) && value >= 0;
}

/** Whether `value` can be a CRC-32C: an integer from 0 to 2^32 - 1. */
export function isCrc32c(value: unknown): value is number {
  return isNonNegativeInteger(value) && value <= 0xffff_ffff;
}

/** Whether `value` is an object a record's fields can be read from. */
export function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null;
}

/** Whether `value` is a list of members, each with an id, a role and a priority. */
export function isMemberList(value: unknown): value is Member[] {
  return (
    Array.isArray(value) &&
    value.every(
      (member) =>
        isRecord(member) &&
        isNonNegativeInteger(member.id) &&
        (member.role === "voter" || member.role === "learner") &&
        isNonNegativeInteger(member.priority),
    )
  );
}

/** Whether `value` has the shape of a configuration: members, and outgoing members during a change. */
export function isConfiguration(value: unknown): value is Configuration {
  return (
    isRecord(value) && isMemberList(value.members) && (value.outgoing === undefined || isMemberList(value.outgoing))
  );
}

/** Whether `value` has the shape of a snapshot's metadata. */
export function isSnapshotMetadata(value: unknown): value is SnapshotMetadata {
  return (
    isRecord(value) &&
    isNonNegativeInteger(value.index) &&
    isNonNegativeInteger(value.term) &&
    isConfiguration(value.configuration) &&
    isNonNegativeInteger(value.sizeBytes) &&
    isNonNegativeInteger(value.checksum)
  );
}
