/**
 * Shared vocabulary of the Raft layer: what the pure core hands to its driver and what the storage adapter
 * persists. The core (`core/`) and the storage adapter (`storage/`) both depend on this file and on nothing of
 * each other, so either can be tested alone.
 */

/** Identifier of a group member; in the cluster this is the broker id. */
export type MemberId = number;

/** Whether a member counts towards quorums (voter) or only receives the log (learner). */
export type MemberRole = "voter" | "learner";

/** One member of a Raft group with its election priority (integer ≥ 1; higher is preferred as leader). */
export interface Member {
  readonly id: MemberId;
  readonly role: MemberRole;
  readonly priority: number;
}

/**
 * The membership of a group. `outgoing` is present only while a joint-consensus change is in progress: decisions
 * then need a majority of `members` voters and a majority of `outgoing` voters.
 */
export interface Configuration {
  readonly members: readonly Member[];
  readonly outgoing?: readonly Member[];
}

/** What an entry carries: application data, a membership change, or the no-op a new leader appends. */
export type EntryKind = "normal" | "configuration" | "noop";

/** One log entry. `data` is opaque to Raft for normal entries; for configuration entries the core encodes it. */
export interface Entry {
  readonly index: number;
  readonly term: number;
  readonly kind: EntryKind;
  readonly data: Uint8Array;
}

/**
 * A membership forced on this member without the agreement of the old quorum (`RaftNode.forceReconfigure`). It is
 * in force until a configuration entry holding the same membership is committed.
 */
export interface ForcedMembership {
  readonly configuration: Configuration;
  /** The member's term when it was forced. */
  readonly sinceTerm: number;
}

/** State that must be durable before any message that depends on it is sent. */
export interface HardState {
  readonly term: number;
  readonly votedFor: MemberId | null;
  readonly commitIndex: number;
  /**
   * The forced membership in force, absent when none. It is durable so that a restarted member resumes it instead of
   * reverting to the membership of the quorum it was forced away from.
   */
  readonly forced?: ForcedMembership;
  /**
   * Members a forced reconfiguration left out, ascending; absent when none. Messages from them are ignored while the
   * configuration in force does not list them, so that the members left out can neither win this member's vote nor
   * make it follow them, even when they form a majority of the old membership.
   */
  readonly fencedMembers?: readonly MemberId[];
}

/** Describes the state-machine snapshot that replaces the log up to and including `index`. */
export interface SnapshotMetadata {
  readonly index: number;
  readonly term: number;
  readonly configuration: Configuration;
  /** Total size of the snapshot data in bytes. */
  readonly sizeBytes: number;
  /** CRC-32C of the whole snapshot data, checked after the last chunk is received. */
  readonly checksum: number;
}

/**
 * Bytes of a snapshot read to be sent, with their CRC-32C: the receiver checks each chunk against it on arrival, so
 * that a chunk damaged on the way is asked for again rather than found only by the whole snapshot's checksum, after
 * every byte arrived (which starts the transfer over).
 */
export interface SnapshotChunkRead {
  readonly data: Uint8Array;
  /** CRC-32C of `data`. */
  readonly checksum: number;
}

/**
 * The size and CRC-32C of snapshot data, from whoever already read every byte of it (the storage computes them while
 * it cuts the data into stored chunks), so that `RaftNode.compact` need not read the whole snapshot again.
 */
export interface SnapshotDigest {
  readonly sizeBytes: number;
  readonly checksum: number;
}

/** A complete snapshot: its metadata and the state-machine bytes. */
export interface Snapshot {
  readonly metadata: SnapshotMetadata;
  readonly data: Uint8Array;
}

/**
 * Snapshot bytes read in order by the storage that writes them (`MemberStorage.prepareSnapshotFrom`), so that a state
 * machine's snapshot need never be held whole: the storage copies them straight into the chunks it stores.
 */
export interface SnapshotByteSource {
  /** Total bytes of the snapshot. */
  readonly sizeBytes: number;
  /** Copies the next bytes into `target`, as many as it holds or remain; returns how many it copied (0 at the end). */
  read(target: Uint8Array): number;
}

/**
 * Snapshot data a storage wrote ahead of the compaction that records it (`MemberStorage.prepareSnapshotFrom` of a byte
 * source): its size and CRC-32C. The bytes are only in the storage; this very object names them there.
 */
export interface PreparedSnapshotData {
  readonly sizeBytes: number;
  readonly checksum: number;
}

/** A snapshot to store in place of the log it covers (`Ready.compaction`): its bytes, or data the storage prepared. */
export interface Compaction {
  readonly metadata: SnapshotMetadata;
  readonly data: Uint8Array | PreparedSnapshotData;
}

/**
 * The snapshot of a compaction whose data was handed over as bytes, for storages that never prepare any (only the
 * storage that prepared data can install it); throws for prepared data.
 */
export function compactionSnapshot(compaction: Compaction): Snapshot {
  const data = compaction.data;
  if (!(data instanceof Uint8Array)) {
    throw new Error("invariant violated: a compaction of prepared data reached a storage that prepared none");
  }
  return { metadata: compaction.metadata, data };
}

/** One chunk of a snapshot: `data` holds the snapshot's bytes from byte `offset` on. */
export interface SnapshotChunk {
  readonly offset: number;
  readonly data: Uint8Array;
  /**
   * CRC-32C of `data`, computed once by the receiving core; the storage seals the stored chunk with it, so `data`
   * must not change once checksummed (received chunks are views of frames nobody reuses).
   */
  readonly checksum: number;
}

/**
 * A snapshot being received from a leader, as far as it is durable. The running checksum lets the receiver verify
 * the whole snapshot when its last chunk arrives without reading back what it already stored.
 */
export interface IncomingSnapshot {
  readonly metadata: SnapshotMetadata;
  /** Bytes received durably, from byte 0 on: the offset the next chunk must start at. */
  readonly receivedBytes: number;
  /** CRC-32C of those bytes (0 when none), continued chunk by chunk. */
  readonly receivedChecksum: number;
}

/**
 * Chunks of a snapshot being received, to be written durably in order (`RaftStorage.receiveSnapshotChunks`). With
 * `restart` the storage first discards whatever it received before, of this snapshot or another, and starts this one
 * at byte 0; otherwise the chunks continue the snapshot the storage is receiving, where its received bytes end.
 */
export interface SnapshotReceipt {
  readonly metadata: SnapshotMetadata;
  readonly restart: boolean;
  readonly chunks: readonly SnapshotChunk[];
}

/** Everything a restarted member needs to rebuild its core. */
export interface PersistedState {
  readonly hardState: HardState;
  /**
   * Metadata of the latest durable snapshot, or null. The core rebuilds the configuration in force from it and from
   * the configuration entries of the log after it.
   */
  readonly snapshot: SnapshotMetadata | null;
  readonly firstIndex: number;
  readonly lastIndex: number;
  /** The snapshot being received from a leader and how much of it is durable, or null; the receipt resumes there. */
  readonly incomingSnapshot: IncomingSnapshot | null;
}

/**
 * Durable storage of one member, implemented by the broker's storage (journal and LMDB) and by the simulated disk of the simulation
 * harness. Writes are acknowledged only once durable; reads verify checksums and throw `StorageCorruptionError`
 * rather than return damaged data.
 */
export interface RaftStorage {
  /** Reads what the member persisted before a restart. */
  load(): Promise<PersistedState>;
  /**
   * Durably writes `entries` (replacing any existing entries from the first one's index on) and `hardState`, in
   * one commit. Resolves only once both are durable.
   */
  append(entries: readonly Entry[], hardState: HardState | null): Promise<void>;
  /**
   * Reads entries in [fromIndex, toIndex). Throws if any is compacted away or missing. With `maxBytes` it may stop
   * after the first entry once the entries' data exceeds it (see `StableLog.entries`).
   */
  entries(fromIndex: number, toIndex: number, maxBytes?: number): Entry[];
  /** Term of the entry at `index` (or of the snapshot at its index); null when unknown. */
  term(index: number): number | null;
  /**
   * Durably stores a complete snapshot and drops every entry it covers. When the log does not hold the snapshot's
   * last entry (same index and term), it drops the whole log: entries after such a snapshot may conflict with it.
   * Drivers use it for local compaction (`Ready.compaction`); snapshots from a leader arrive in chunks instead. Data
   * given as `PreparedSnapshotData` must be what this storage prepared (its chunks are written already).
   */
  installSnapshot(snapshot: Compaction): Promise<void>;
  /** Drops entries up to and including `index`, which a snapshot already covers. */
  compact(index: number): Promise<void>;
  /**
   * The latest snapshot's metadata and whole data, read and verified at once: for a driver restoring its state
   * machine. The core never calls it (it reads snapshots a chunk at a time, see `snapshotChunk`).
   */
  snapshot(): Snapshot | null;
  /** Metadata of the latest durable snapshot, without reading its data; null when there is none. */
  snapshotMetadata(): SnapshotMetadata | null;
  /**
   * Up to `maxBytes` of the latest durable snapshot's data from byte `offset` on (fewer only at its end), verified,
   * with their CRC-32C; null when the latest snapshot is no longer the one `metadata` describes (a newer one replaced
   * it).
   */
  snapshotChunk(metadata: SnapshotMetadata, offset: number, maxBytes: number): SnapshotChunkRead | null;
  /**
   * Writes the chunks of a snapshot being received (see `SnapshotReceipt`) and the progress of the receipt, so that
   * after a restart `load` reports where it resumes. May resolve before the chunks are durable (the progress `load`
   * reports is then what became durable: a crash can lose the latest chunks), but a receipt that starts over resolves
   * only once it is durable, and `finishSnapshotReceive` only once every chunk is.
   */
  receiveSnapshotChunks(receipt: SnapshotReceipt): Promise<void>;
  /**
   * Verifies the snapshot being received, complete now, against its size and checksum, and installs it like
   * `installSnapshot`; resolves with its metadata. On a mismatch it discards what was received and rejects.
   */
  finishSnapshotReceive(): Promise<SnapshotMetadata>;
  /** Releases the storage. */
  close(): Promise<void>;
}

/** Thrown when stored bytes fail their checksum: the member must stop rather than use them. */
export class StorageCorruptionError extends Error {
  constructor(
    readonly location: string,
    detail: string,
  ) {
    super(`storage corruption at ${location}: ${detail}`);
    this.name = "StorageCorruptionError";
  }
}

/**
 * A journal write failed, and so did overwriting its bytes with zeros: the disk or the page cache may still hold the
 * failed write, which a journal opened again without a reboot would replay as durable. The storage must not be opened
 * again by this process; an operator checks the disk and restarts the broker.
 */
export class UnerasedWriteError extends Error {
  constructor(
    readonly location: string,
    cause: Error,
    erasing: Error,
  ) {
    super(
      `a journal write at ${location} failed (${cause.message}) and could not be erased (${erasing.message}); the ` +
        "storage is not opened again until the broker restarts",
      { cause },
    );
    this.name = "UnerasedWriteError";
  }
}
