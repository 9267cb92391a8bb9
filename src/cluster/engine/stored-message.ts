/**
 * A buffered message as the engine keeps it: its fields, and its snapshot entry, the message encoded exactly as a
 * snapshot lists it (msgpack `[counter, name, correlationKey, timeToLiveMs, messageId | null, variables (bytes),
 * tenantId, publishedAtMs, sizeBytes]`, `entryFields`).
 *
 * The entry is encoded once, when the message is buffered (or copied once from the snapshot it is restored from),
 * and the message's variables are a view of it. A snapshot is then the engine's header followed by the entries of its
 * messages, copied as they are: with a partition holding hundreds of megabytes of messages, encoding every message
 * again for every snapshot (and copying the encoded pieces twice more before they reached the storage) cost each
 * broker seconds of its only thread and as much memory again as the state, every snapshot interval. The price is the
 * message's small fields (name, keys, ids, tenant) held twice, decoded and in the entry.
 *
 * Entries are copied, never re-encoded, from replica to replica and snapshot to snapshot, so equal states give equal
 * snapshot bytes only while every replica's codec encodes a message the same way; a test pins those bytes.
 */
import { valuesEnd } from "./msgpack-stream.js";
import { DEFAULT_TENANT_ID, type DecodedPublishMessage, engineCodec } from "./records.js";

/**
 * A message's fields before its entry is made: a publication's (its encoded variables, of a stored message a view of
 * its `entry`, never copied apart from it), its key counter, and the size of the record that buffered it (the basis of
 * the buffered-bytes metric).
 */
export interface MessageFields extends Omit<DecodedPublishMessage, "kind"> {
  readonly counter: number;
  readonly sizeBytes: number;
}

/**
 * A buffered message (or one taken out for relocation), immutable once made, but for where its entry's bytes lie: a
 * restored message's entry may share a slab with others and be moved to other memory later (`moveEntry`), with the
 * same bytes, so what a reader sees does not change.
 */
export interface StoredMessage extends MessageFields {
  readonly deadlineMs: number;
  /**
   * The message as a snapshot lists it (see the module comment). Its bytes are never written; `moveEntry` may replace
   * the view with one of equal bytes.
   */
  readonly entry: Uint8Array;
}

/**
 * The one shape of every stored message. An engine may hold millions of them, and every full collection of the heap
 * visits each one, so a message holds as few objects as it can: its entry, its variables and its deadline are made
 * when read (views of the entry's memory, a sum) rather than kept as two views and a boxed number of their own, and a
 * tenant id equal to the default one is that one string (DEVELOPERS.md, "Snapshots", has what this saved). Readers
 * get a new view at each read, of the same bytes.
 */
class EntryMessage implements StoredMessage {
  constructor(
    readonly counter: number,
    readonly name: string,
    readonly correlationKey: string,
    readonly timeToLiveMs: number,
    readonly messageId: string | null,
    readonly tenantId: string,
    readonly publishedAtMs: number,
    readonly sizeBytes: number,
    entry: Uint8Array,
    /** Where the variables' bytes start in the entry. */
    private readonly variablesOffset: number,
    private readonly variablesByteLength: number,
  ) {
    this.entryMemory = entry.buffer;
    this.entryOffset = entry.byteOffset;
    this.entryByteLength = entry.byteLength;
  }

  /** The memory the entry lies in, and where: a view of it would be one more object on the heap per message. */
  private entryMemory: ArrayBufferLike;
  private entryOffset: number;
  private readonly entryByteLength: number;

  /** The entry: a view of its memory, made at each read. */
  get entry(): Uint8Array {
    return new Uint8Array(this.entryMemory, this.entryOffset, this.entryByteLength);
  }

  /** Moves the entry to a view of other memory holding the same bytes (`moveEntry`). */
  set entry(entry: Uint8Array) {
    this.entryMemory = entry.buffer;
    this.entryOffset = entry.byteOffset;
  }

  /** The encoded variables: a view of the entry, made at each read. */
  get variablesBytes(): Uint8Array {
    return new Uint8Array(this.entryMemory, this.entryOffset + this.variablesOffset, this.variablesByteLength);
  }

  /** When the message expires. */
  get deadlineMs(): number {
    return this.publishedAtMs + this.timeToLiveMs;
  }
}

/** Fields of a snapshot entry. */
const ENTRY_FIELDS = 9;
/** Fields of an entry before its variables. */
const FIELDS_BEFORE_VARIABLES = 5;

/** A message's fields in the order its snapshot entry lists them: the one definition of that layout. */
export function entryFields(message: MessageFields): unknown[] {
  return [
    message.counter,
    message.name,
    message.correlationKey,
    message.timeToLiveMs,
    message.messageId,
    message.variablesBytes,
    message.tenantId,
    message.publishedAtMs,
    message.sizeBytes,
  ];
}

/**
 * Makes the stored message for `fields`, encoding its entry; `fields.variablesBytes` may be a view of a buffer that
 * is reused afterwards (a log entry's), since the entry holds its own copy.
 */
export function storedMessage(fields: MessageFields): StoredMessage {
  // The codec packs into a buffer it reuses for the next pack: the entry is a plain copy of its own.
  const entry = new Uint8Array(engineCodec.pack(entryFields(fields)));
  const variablesOffset = variablesOffsetIn(entry);
  if (variablesOffset + fields.variablesBytes.byteLength > entry.byteLength) {
    throw new Error(
      `invariant violated: the snapshot entry of message ${fields.counter} is shorter than its variables`,
    );
  }
  return new EntryMessage(
    fields.counter,
    fields.name,
    fields.correlationKey,
    fields.timeToLiveMs,
    fields.messageId,
    sharedTenantId(fields.tenantId),
    fields.publishedAtMs,
    fields.sizeBytes,
    entry,
    variablesOffset,
    fields.variablesBytes.byteLength,
  );
}

/**
 * The message whose snapshot entry is `encoded`, keeping as its entry the memory `placeEntry` gives for those bytes
 * (given the message's counter): a copy, or a view of its own of the same bytes where the caller may keep them
 * (`EntrySlabs.place`). Undefined when `encoded` is not a well-formed entry. `encoded` itself is never kept (a
 * restore's stream hands out one per message): it may be a view of a buffer the caller reuses, and the codec caches a
 * DataView on it.
 */
export function restoredMessage(
  encoded: Uint8Array,
  placeEntry: (bytes: Uint8Array, counter: number) => Uint8Array,
): StoredMessage | undefined {
  let value: unknown;
  try {
    // Decoded where it lies, not from the memory the message keeps: the codec caches a DataView on whatever it
    // decodes, and one kept per message made a restore of a GiB of state 15 % slower.
    value = engineCodec.unpack(encoded);
  } catch {
    return undefined;
  }
  if (!Array.isArray(value) || value.length !== ENTRY_FIELDS) return undefined;
  const [counter, name, correlationKey, timeToLiveMs, messageId, variables, tenantId, publishedAtMs, sizeBytes] =
    value as unknown[];
  if (
    !isNonNegativeInteger(counter) ||
    typeof name !== "string" ||
    typeof correlationKey !== "string" ||
    !isNonNegativeInteger(timeToLiveMs) ||
    !(messageId === null || typeof messageId === "string") ||
    !(variables instanceof Uint8Array) ||
    typeof tenantId !== "string" ||
    !isNonNegativeInteger(publishedAtMs) ||
    !isNonNegativeInteger(sizeBytes) ||
    !Number.isSafeInteger(publishedAtMs + timeToLiveMs)
  ) {
    return undefined;
  }
  // The codec hands binary values out as views of the bytes it decodes: the variables are at the same offset in the
  // entry's memory. The entry is placed whole, not the variables apart from it.
  if (variables.buffer !== encoded.buffer) {
    throw new Error("invariant violated: the variables of a snapshot entry were decoded as a copy");
  }
  const variablesOffset = variables.byteOffset - encoded.byteOffset;
  const entry = placeEntry(encoded, counter);
  if (entry.byteLength !== encoded.byteLength) {
    throw new Error(`invariant violated: the memory placed for message ${counter}'s entry has another length`);
  }
  return new EntryMessage(
    counter,
    name,
    correlationKey,
    timeToLiveMs,
    messageId,
    sharedTenantId(tenantId),
    publishedAtMs,
    sizeBytes,
    entry,
    variablesOffset,
    variables.byteLength,
  );
}

/**
 * Makes `entry`, which must hold the same bytes as `message.entry`, the message's entry (its variables a view of it):
 * the slabs of restored entries move entries out of a slab they free, or into a slab of the right size
 * (`entry-slabs.ts`). Holders of the message, or of its old entry, read the same bytes before and after; the old
 * memory stays valid for as long as any of them holds it.
 */
export function moveEntry(message: StoredMessage, entry: Uint8Array): void {
  if (entry.byteLength !== message.entry.byteLength) {
    throw new Error(`invariant violated: message ${message.counter}'s entry would move to memory of another length`);
  }
  // Every stored message derives its variables from its entry, by an offset the same bytes keep.
  (message as { entry: Uint8Array }).entry = entry;
}

/** `tenantId`, or the default tenant's id itself when equal to it: most messages then share one string. */
function sharedTenantId(tenantId: string): string {
  return tenantId === DEFAULT_TENANT_ID ? DEFAULT_TENANT_ID : tenantId;
}

/** Whether `value` is a non-negative safe integer. */
export function isNonNegativeInteger(value: unknown): value is number {
  return Number.isSafeInteger(value) && (value as number) >= 0;
}

/**
 * Where the variables' bytes start in an entry this module encoded: past the array header, the fields before them
 * and their binary header. Walking the headers costs a few reads, where decoding the entry again built every field.
 */
function variablesOffsetIn(entry: Uint8Array): number {
  if (entry[0] !== (0x90 | ENTRY_FIELDS)) {
    throw new Error(`invariant violated: a snapshot entry starts with 0x${entry[0]?.toString(16)}, not a 9-array`);
  }
  const position = valuesEnd(entry, 1, FIELDS_BEFORE_VARIABLES);
  const type = entry[position];
  const headerBytes = type === 0xc4 ? 2 : type === 0xc5 ? 3 : type === 0xc6 ? 5 : undefined;
  if (headerBytes === undefined) {
    throw new Error(`invariant violated: the variables of a snapshot entry are not binary (0x${type?.toString(16)})`);
  }
  return position + headerBytes;
}
