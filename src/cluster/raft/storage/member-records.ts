/**
 * The records one member keeps beside its log (hard state, log start, snapshot and incoming snapshot): their names,
 * their shapes, and the checks that tell a record read back from its journal is whole before the storage trusts it.
 */
import { combineCrc32c } from "../crc32c-combine.js";
import { isConfiguration, isNonNegativeInteger, isRecord } from "../shapes.js";
import type { Configuration, HardState, Member, SnapshotMetadata } from "../types.js";

/** Names of the member's records in the journal. */
export const HARD_STATE_KEY = "hardState";
export const LOG_START_KEY = "logStart";
export const SNAPSHOT_KEY = "snapshot";
export const INCOMING_SNAPSHOT_KEY = "incomingSnapshot";

/** Index and term of the entry just before the first stored entry: the snapshot or compaction point (0/0 at first). */
export interface LogStart {
  readonly index: number;
  readonly term: number;
}

/** A snapshot whose chunks are stored under `slot` in the LMDB `snapshotChunks` database. */
export interface StoredSnapshot {
  readonly metadata: SnapshotMetadata;
  readonly slot: number;
  /**
   * Set for a snapshot received from a leader, whose data is in the slot's snapshot file (`snapshot-files.ts`); the
   * data of the others is in LMDB chunks. A snapshot being received is always in a file.
   */
  readonly inFile?: true;
}

/** A snapshot being received, with how far its bytes have come. */
export interface StoredIncomingSnapshot extends StoredSnapshot {
  readonly receivedBytes: number;
  /** CRC-32C of the received bytes (0 for none), continued with every chunk written. */
  readonly receivedChecksum: number;
}

/** The hard state of a member that has stored none. */
export const INITIAL_HARD_STATE: HardState = { term: 0, votedFor: null, commitIndex: 0 };

/** Copies metadata into a plain object so nothing the caller still holds is persisted or aliased. */
export function copyMetadata(metadata: SnapshotMetadata): SnapshotMetadata {
  const copyMembers = (members: readonly Member[]): Member[] =>
    members.map((member) => ({ id: member.id, role: member.role, priority: member.priority }));
  const configuration: Configuration =
    metadata.configuration.outgoing === undefined
      ? { members: copyMembers(metadata.configuration.members) }
      : {
          members: copyMembers(metadata.configuration.members),
          outgoing: copyMembers(metadata.configuration.outgoing),
        };
  return {
    index: metadata.index,
    term: metadata.term,
    configuration,
    sizeBytes: metadata.sizeBytes,
    checksum: metadata.checksum,
  };
}

/** Whether `value` has the shape of a hard state, including its optional forced membership and fenced members. */
export function isHardState(value: unknown): value is HardState {
  if (
    !isRecord(value) ||
    !isNonNegativeInteger(value.term) ||
    !(value.votedFor === null || isNonNegativeInteger(value.votedFor)) ||
    !isNonNegativeInteger(value.commitIndex)
  ) {
    return false;
  }
  const forced = value.forced;
  if (
    forced !== undefined &&
    !(isRecord(forced) && isConfiguration(forced.configuration) && isNonNegativeInteger(forced.sinceTerm))
  ) {
    return false;
  }
  const fenced = value.fencedMembers;
  return fenced === undefined || (Array.isArray(fenced) && fenced.every(isNonNegativeInteger));
}

/**
 * `incoming` after `chunks`, which continue its received bytes in order, were stored, each with its own checksum (the
 * CRC-32C of its data, which the core computed as it accepted the chunk): the running checksum is derived from those,
 * without reading the bytes again.
 */
export function progressedIncoming(
  incoming: StoredIncomingSnapshot,
  chunks: readonly { readonly offset: number; readonly data: Uint8Array; readonly checksum: number }[],
): StoredIncomingSnapshot {
  let { receivedBytes, receivedChecksum } = incoming;
  for (const chunk of chunks) {
    if (chunk.offset !== receivedBytes) {
      throw new Error(`invariant violated: received chunk at ${chunk.offset} does not continue at ${receivedBytes}`);
    }
    receivedBytes += chunk.data.byteLength;
    receivedChecksum = combineCrc32c(receivedChecksum, chunk.checksum, chunk.data.byteLength);
  }
  return { ...incoming, receivedBytes, receivedChecksum };
}
