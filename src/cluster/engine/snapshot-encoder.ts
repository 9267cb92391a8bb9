/**
 * An engine snapshot read out a piece at a time (see `PartitionEngine.snapshotEncoder`).
 *
 * msgpack is concatenative: an array is its length header followed by its elements, each encoded on its own. So the
 * snapshot is the packed header fields, the message list's array header, then every message's snapshot entry, which
 * each message keeps already encoded (stored-message.ts): reading the snapshot copies bytes, it encodes nothing. The
 * reader copies them straight into the buffers of whoever stores them (the storage's chunks), so the snapshot's bytes
 * are never held whole and every byte is copied once on the caller's thread.
 */
import { engineCodec } from "./records.js";
import type { StoredMessage } from "./stored-message.js";

/**
 * One engine snapshot, fixed when it was made, read out in order: the shape of a storage's snapshot byte source
 * (`SnapshotByteSource` of the Raft layer, which the engine does not depend on).
 */
export class EngineSnapshotEncoder {
  /** The applied index the snapshot describes. */
  readonly appliedIndex: number;
  /** Total bytes of the snapshot. */
  readonly sizeBytes: number;
  /** The header fields and the message list's array header. */
  private readonly prefix: Uint8Array;
  private readonly messages: readonly StoredMessage[];
  /** The segment read next: -1 for the prefix, otherwise a message's position. */
  private segment = -1;
  /** Bytes of that segment read already. */
  private segmentOffset = 0;
  private bytesRead = 0;

  /**
   * Called by `PartitionEngine.snapshotEncoder` with the applied index, every field before the message list, and the
   * messages in counter order (immutable, so the engine may go on applying records meanwhile).
   */
  constructor(appliedIndex: number, header: readonly unknown[], messages: readonly StoredMessage[]) {
    this.appliedIndex = appliedIndex;
    this.messages = messages;
    // The outer array (header fields and the message list) is packed with an empty list, whose one-byte header is
    // replaced by the list's real header.
    const packed = engineCodec.pack([...header, []]);
    const emptyListBytes = 1;
    const listHeader = arrayHeader(messages.length);
    const prefix = new Uint8Array(packed.byteLength - emptyListBytes + listHeader.byteLength);
    prefix.set(packed.subarray(0, packed.byteLength - emptyListBytes), 0);
    prefix.set(listHeader, packed.byteLength - emptyListBytes);
    this.prefix = prefix;
    let sizeBytes = prefix.byteLength;
    for (const message of messages) sizeBytes += message.entry.byteLength;
    this.sizeBytes = sizeBytes;
  }

  /** Messages in the snapshot. */
  get messageCount(): number {
    return this.messages.length;
  }

  /** Bytes not read yet. */
  get remainingBytes(): number {
    return this.sizeBytes - this.bytesRead;
  }

  /**
   * Copies the next bytes into `target`, as many as it holds or remain; returns how many it copied: 0 only at the end
   * (or for an empty `target`).
   */
  read(target: Uint8Array): number {
    let copied = 0;
    // Bounded: every pass copies a whole segment's remainder or fills the target.
    while (copied < target.byteLength && this.segment < this.messages.length) {
      const source = this.segment < 0 ? this.prefix : (this.messages[this.segment] as StoredMessage).entry;
      const length = Math.min(source.byteLength - this.segmentOffset, target.byteLength - copied);
      target.set(source.subarray(this.segmentOffset, this.segmentOffset + length), copied);
      copied += length;
      this.segmentOffset += length;
      if (this.segmentOffset === source.byteLength) {
        this.segment += 1;
        this.segmentOffset = 0;
      }
    }
    this.bytesRead += copied;
    if (this.segment === this.messages.length && this.bytesRead !== this.sizeBytes) {
      throw new Error(`invariant violated: a snapshot of ${this.sizeBytes} bytes read out as ${this.bytesRead}`);
    }
    return copied;
  }

  /** The rest of the snapshot in one array (the whole snapshot when nothing was read yet). */
  readAll(): Uint8Array {
    const bytes = new Uint8Array(this.remainingBytes);
    const copied = this.read(bytes);
    if (copied !== bytes.byteLength) {
      throw new Error(`invariant violated: read ${copied} of the ${bytes.byteLength} bytes left in a snapshot`);
    }
    return bytes;
  }
}

/** The msgpack header of an array of `length` elements (fixarray, array 16 or array 32). */
function arrayHeader(length: number): Uint8Array {
  if (length < 16) return Uint8Array.of(0x90 | length);
  if (length < 0x10000) return Uint8Array.of(0xdc, length >>> 8, length & 0xff);
  return Uint8Array.of(0xdd, length >>> 24, (length >>> 16) & 0xff, (length >>> 8) & 0xff, length & 0xff);
}
