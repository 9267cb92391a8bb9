/**
 * A buffered message as the engine keeps it: its fields, and its snapshot entry, the message encoded exactly as a
 * snapshot lists it (msgpack `[counter, name, correlationKey, timeToLiveMs, messageId | null, variables (bytes),
 * tenantId, publishedAtMs, sizeBytes]`).
 *
 * The entry is encoded once, when the message is buffered (or copied once from the snapshot it is restored from),
 * and the message's variables are a view of it. A snapshot is then the engine's header followed by the entries of its
 * messages, copied as they are: with a partition holding hundreds of megabytes of messages, encoding every message
 * again for every snapshot (and copying the encoded pieces twice more before they reached the storage) cost each
 * broker seconds of its only thread and as much memory again as the state, every snapshot interval.
 */
import { engineCodec } from "./records.js";

/** A buffered message (or one taken out for relocation), immutable once made. */
export interface StoredMessage {
  readonly counter: number;
  readonly name: string;
  readonly correlationKey: string;
  readonly timeToLiveMs: number;
  readonly messageId: string | null;
  /** The msgpack-encoded variables: a view of `entry`, never copied apart from it. */
  readonly variablesBytes: Uint8Array;
  readonly tenantId: string;
  readonly publishedAtMs: number;
  readonly deadlineMs: number;
  /** Size of the record that buffered the message; the basis of the buffered-bytes metric. */
  readonly sizeBytes: number;
  /** The message as a snapshot lists it (see the module comment); owned by this message alone. */
  readonly entry: Uint8Array;
}

/** A message's fields before its entry is made. */
export interface MessageFields {
  readonly counter: number;
  readonly name: string;
  readonly correlationKey: string;
  readonly timeToLiveMs: number;
  readonly messageId: string | null;
  /** The encoded variables; only read here (the entry holds a copy). */
  readonly variablesBytes: Uint8Array;
  readonly tenantId: string;
  readonly publishedAtMs: number;
  readonly sizeBytes: number;
}

/** Fields of a snapshot entry. */
const ENTRY_FIELDS = 9;
/** Position of the variables among them. */
const VARIABLES_FIELD = 5;

/**
 * Makes the stored message for `fields`, encoding its entry; `fields.variablesBytes` may be a view of a buffer that
 * is reused afterwards (a log entry's), since the entry holds its own copy.
 */
export function storedMessage(fields: MessageFields): StoredMessage {
  // The codec packs into a buffer it reuses for the next pack: the entry is a copy of its own.
  const entry = Uint8Array.prototype.slice.call(
    engineCodec.pack([
      fields.counter,
      fields.name,
      fields.correlationKey,
      fields.timeToLiveMs,
      fields.messageId,
      fields.variablesBytes,
      fields.tenantId,
      fields.publishedAtMs,
      fields.sizeBytes,
    ]),
  );
  const restored = storedMessageFromEntry(entry);
  if (restored === undefined) {
    throw new Error(`invariant violated: the snapshot entry of message ${fields.counter} does not decode`);
  }
  return restored;
}

/**
 * The stored message whose snapshot entry is `entry` (which the message keeps, so the caller hands over a copy it
 * owns), or undefined when `entry` is not a well-formed entry.
 */
export function storedMessageFromEntry(entry: Uint8Array): StoredMessage | undefined {
  let value: unknown;
  try {
    // Decoded through a view of its own: the codec caches a DataView on whatever it decodes, and the entry is kept for
    // as long as its message is buffered (at a GiB of state, a DataView per message made restores 15 % slower).
    value = engineCodec.unpack(entry.subarray(0));
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
  // The codec hands binary values out as views of the bytes it decodes, so the variables are a view of the entry.
  if (variables.buffer !== entry.buffer) {
    throw new Error(`invariant violated: field ${VARIABLES_FIELD} of a snapshot entry was decoded as a copy`);
  }
  return {
    counter,
    name,
    correlationKey,
    timeToLiveMs,
    messageId,
    variablesBytes: variables,
    tenantId,
    publishedAtMs,
    deadlineMs: publishedAtMs + timeToLiveMs,
    sizeBytes,
    entry,
  };
}

function isNonNegativeInteger(value: unknown): value is number {
  return Number.isSafeInteger(value) && (value as number) >= 0;
}
