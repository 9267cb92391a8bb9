/**
 * Incremental decoding of one msgpack array whose bytes arrive in pieces, for snapshots too large to hold whole.
 *
 * The document is an array of fields; the visitor says which fields are lists, and their items are decoded and handed
 * over one at a time, every other field whole. Only the bytes of the value being completed are kept between two
 * pieces, so memory is bounded by the largest single field or list item plus one piece, not by the document. msgpack
 * makes this cheap: the length of every value can be read from its headers without decoding it (`valueEnd`).
 * msgpackr's own stream decoder hands over whole top-level values, and a snapshot is a single top-level array, so it
 * would hold the whole document; this module only finds the boundaries inside it and leaves the decoding of each
 * value to msgpackr.
 */
import { engineCodec } from "./records.js";

/**
 * Receives the parts of the document in order; anything it throws aborts the decoding. Byte strings in the values it
 * receives, and the bytes of encoded items, may be views of the stream's buffer or of the piece being decoded, which
 * are reused: a visitor copies what it keeps, unless the piece's caller gave it away and the bytes lie in it (an
 * engine restore's `pushGiven`, which the stream does not know of).
 */
export interface MsgpackArrayVisitor {
  /** The document's array header was read: its field count, or null when the document is not an array. */
  begin(fieldCount: number | null): void;
  /** Whether field `index` (all fields before it were handed over) is a list whose items come one at a time. */
  isList(index: number): boolean;
  /** Whether the items of list field `index` are handed over encoded (`encodedItem`) rather than decoded (`item`). */
  itemsEncoded(index: number): boolean;
  /** A field decoded whole: any field that is not a list, or a list field whose value is not an array. */
  field(index: number, value: unknown): void;
  /** The header of list field `index` was read: it holds `length` items. */
  listStart(index: number, length: number): void;
  /** Item `position` of list field `index`. */
  item(index: number, position: number, value: unknown): void;
  /** Item `position` of list field `index`, whose items come encoded: exactly the bytes of its msgpack value. */
  encodedItem(index: number, position: number, bytes: Uint8Array): void;
}

/**
 * The longest single value (a field, or one item of a list) a stream keeps by default. A snapshot's list item is one
 * message's state, which arrived in one record, and no record is longer than a cluster frame (16 MiB).
 */
export const DEFAULT_MAX_VALUE_BYTES = 16 * 1024 * 1024;

/** Smallest capacity of the buffer of an incomplete value. */
const MINIMUM_CAPACITY_BYTES = 4096;
/**
 * Largest capacity of that buffer kept once its value was decoded: values up to this size (a snapshot's message is
 * usually far smaller) reuse it from piece to piece instead of allocating a buffer each time one spans two pieces.
 */
const KEPT_CAPACITY_BYTES = 1024 * 1024;
/** Fewest bytes of a piece appended to an incomplete value at a time, however few its headers ask for. */
const MINIMUM_APPEND_BYTES = 16;

/** Thrown for bytes that are not msgpack or do not end where the document does. */
export class MsgpackStreamError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "MsgpackStreamError";
  }
}

/**
 * End offset (exclusive) of the msgpack value starting at `start` in `bytes` when `bytes` holds all of it; otherwise
 * a lower bound on that end, greater than `bytes.byteLength` (what the value's headers read so far say it needs).
 * Nested values are walked with a count of values still to skip, not recursively, so nesting depth costs nothing.
 */
export function valueEnd(bytes: Uint8Array, start: number): number {
  return valuesEnd(bytes, start, 1);
}

/** Like `valueEnd`, for `count` values one after another from `start` (the end of the last one). */
export function valuesEnd(bytes: Uint8Array, start: number, count: number): number {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const end = bytes.byteLength;
  let position = start;
  let remaining = count;
  while (remaining > 0) {
    // Every value still to come takes at least its type byte.
    if (position >= end) return position + remaining;
    const type = bytes[position] as number;
    remaining -= 1;
    // Header bytes after the type byte, payload bytes, and nested values, for this type.
    let headerBytes = 0;
    let payloadBytes = 0;
    let children = 0;
    if (type <= 0x7f || type >= 0xe0 || type === 0xc0 || type === 0xc2 || type === 0xc3) {
      // positive and negative fixint, nil, false, true
    } else if (type <= 0x8f) {
      children = 2 * (type & 0x0f);
    } else if (type <= 0x9f) {
      children = type & 0x0f;
    } else if (type <= 0xbf) {
      payloadBytes = type & 0x1f;
    } else {
      const lengthBytes = LENGTH_FIELD_BYTES[type - 0xc4];
      if (lengthBytes !== undefined) {
        // bin, ext, str, array and map with an explicit length (ext also has a type byte after its length).
        if (position + 1 + lengthBytes > end) return position + 1 + lengthBytes + remaining;
        const length =
          lengthBytes === 1
            ? view.getUint8(position + 1)
            : lengthBytes === 2
              ? view.getUint16(position + 1)
              : view.getUint32(position + 1);
        headerBytes = lengthBytes;
        if (type >= 0xc7 && type <= 0xc9) {
          headerBytes += 1;
          payloadBytes = length;
        } else if (type === 0xdc || type === 0xdd) {
          children = length;
        } else if (type === 0xde || type === 0xdf) {
          children = 2 * length;
        } else {
          payloadBytes = length;
        }
      } else {
        const fixedBytes = FIXED_PAYLOAD_BYTES[type - 0xc4];
        if (fixedBytes === undefined) {
          throw new MsgpackStreamError(`byte 0x${type.toString(16)} at offset ${position} starts no msgpack value`);
        }
        payloadBytes = fixedBytes;
      }
    }
    position += 1 + headerBytes + payloadBytes;
    remaining += children;
  }
  return position;
}

/** Bytes of the length field of types 0xc4 onwards that carry one (undefined: the type has none). */
const LENGTH_FIELD_BYTES: readonly (number | undefined)[] = (() => {
  const table: (number | undefined)[] = new Array(0x100 - 0xc4).fill(undefined);
  const lengths: readonly [number, number][] = [
    [0xc4, 1], // bin 8
    [0xc5, 2], // bin 16
    [0xc6, 4], // bin 32
    [0xc7, 1], // ext 8
    [0xc8, 2], // ext 16
    [0xc9, 4], // ext 32
    [0xd9, 1], // str 8
    [0xda, 2], // str 16
    [0xdb, 4], // str 32
    [0xdc, 2], // array 16
    [0xdd, 4], // array 32
    [0xde, 2], // map 16
    [0xdf, 4], // map 32
  ];
  for (const [type, bytes] of lengths) table[type - 0xc4] = bytes;
  return table;
})();

/** Payload bytes after the type byte of types 0xc4 onwards with a fixed size (undefined: not such a type). */
const FIXED_PAYLOAD_BYTES: readonly (number | undefined)[] = (() => {
  const table: (number | undefined)[] = new Array(0x100 - 0xc4).fill(undefined);
  const sizes: readonly [number, number][] = [
    [0xca, 4], // float 32
    [0xcb, 8], // float 64
    [0xcc, 1], // uint 8
    [0xcd, 2], // uint 16
    [0xce, 4], // uint 32
    [0xcf, 8], // uint 64
    [0xd0, 1], // int 8
    [0xd1, 2], // int 16
    [0xd2, 4], // int 32
    [0xd3, 8], // int 64
    [0xd4, 2], // fixext 1 (type byte and data)
    [0xd5, 3], // fixext 2
    [0xd6, 5], // fixext 4
    [0xd7, 9], // fixext 8
    [0xd8, 17], // fixext 16
  ];
  for (const [type, bytes] of sizes) table[type - 0xc4] = bytes;
  return table;
})();

/**
 * The length of the array whose header starts at `start` and the header's size, null when `bytes` ends inside the
 * header, or `notArray` when the value there is not an array.
 */
function arrayHeaderAt(
  bytes: Uint8Array,
  start: number,
): { readonly length: number; readonly headerBytes: number } | null | "notArray" {
  if (start >= bytes.byteLength) return null;
  const type = bytes[start] as number;
  if (type >= 0x90 && type <= 0x9f) return { length: type & 0x0f, headerBytes: 1 };
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (type === 0xdc) {
    return start + 3 > bytes.byteLength ? null : { length: view.getUint16(start + 1), headerBytes: 3 };
  }
  if (type === 0xdd) {
    return start + 5 > bytes.byteLength ? null : { length: view.getUint32(start + 1), headerBytes: 5 };
  }
  return "notArray";
}

/** Decodes one msgpack array as its bytes arrive; see the module comment. */
export class MsgpackArrayStream {
  /** Bytes of the value being completed, at the start of `carry` (its capacity grows as a value needs it). */
  private carry = new Uint8Array(0);
  private carriedBytes = 0;
  private peakCarriedBytes = 0;
  private stage: "document" | "field" | "items" | "done" = "document";
  private fieldCount = 0;
  private fieldIndex = 0;
  private itemCount = 0;
  private itemPosition = 0;
  private consumedBytes = 0;
  private copiedBytes = 0;
  private completionPassCount = 0;

  /**
   * `maxValueBytes` bounds one value kept between pieces: past it the document is refused. Without the bound, one
   * damaged length header (a snapshot's checksum is only known at its end) would keep every later byte as "the rest
   * of that value", holding the whole snapshot and walking it again at every piece.
   */
  constructor(
    private readonly visitor: MsgpackArrayVisitor,
    private readonly maxValueBytes = DEFAULT_MAX_VALUE_BYTES,
  ) {}

  /** Bytes held between two pieces: the start of a value that has not arrived completely. */
  get bufferedBytes(): number {
    return this.carriedBytes;
  }

  /** The most bytes ever held between two pieces (the memory this decoding needed beyond the pieces themselves). */
  get peakBufferedBytes(): number {
    return this.peakCarriedBytes;
  }

  /**
   * Bytes of the pieces copied so far to complete values that spanned two pieces, or to keep the start of one: about
   * one value per piece, never the pieces themselves.
   */
  get copiedPieceBytes(): number {
    return this.copiedBytes;
  }

  /**
   * Passes made so far to complete values that spanned pieces, each walking the value's bytes carried so far: a few
   * per piece, however the value's headers understate its size.
   */
  get completionPasses(): number {
    return this.completionPassCount;
  }

  /** Bytes of the document decoded so far. */
  get decodedBytes(): number {
    return this.consumedBytes;
  }

  /**
   * Decodes what `piece` completes; the stream keeps no view of it (it copies the start of a value the piece does not
   * complete), so only what the visitor keeps decides whether the caller may reuse it.
   */
  push(piece: Uint8Array): void {
    if (piece.byteLength === 0) return;
    const completed = this.completeCarried(piece);
    if (this.carriedBytes > 0) return;
    // Decoded where it lies: only the start of a value the piece does not complete is copied.
    const rest = piece.subarray(completed);
    const decoded = this.decode(rest);
    this.consumedBytes += decoded;
    const leftover = rest.byteLength - decoded;
    this.checkValueBytes(leftover);
    // A value larger than the kept capacity grew the buffer; once the next one to wait is small, the memory goes back
    // (before the new value's start is copied in, which the smaller buffer then holds).
    if (leftover < MINIMUM_CAPACITY_BYTES && this.carry.byteLength > KEPT_CAPACITY_BYTES) {
      this.carry = new Uint8Array(MINIMUM_CAPACITY_BYTES);
    }
    this.ensureCapacity(leftover);
    this.carry.set(rest.subarray(decoded), 0);
    this.copiedBytes += leftover;
    this.carriedBytes = leftover;
    this.peakCarriedBytes = Math.max(this.peakCarriedBytes, leftover);
  }

  /** Checks that the whole document, and nothing after it, was decoded. */
  end(): void {
    if (this.stage !== "done") {
      throw new MsgpackStreamError(`the document ends early, after ${this.consumedBytes} bytes`);
    }
    if (this.carriedBytes > 0) throw new MsgpackStreamError("bytes follow the end of the document");
  }

  /**
   * Completes the value carried over from earlier pieces with the start of `piece`, appending only about as many
   * bytes as its headers say it still needs (copying a whole piece behind every value that spans two pieces copied
   * nearly every byte of a snapshot twice). Returns the bytes of `piece` used; the carried value is still incomplete
   * when they are all of it.
   */
  private completeCarried(piece: Uint8Array): number {
    let offset = 0;
    // Bounded: every pass appends at least one byte of the piece, or ends the carried value.
    while (this.carriedBytes > 0 && offset < piece.byteLength) {
      this.completionPassCount += 1;
      const available = piece.byteLength - offset;
      // A short rest of a piece is taken whole: reading the value's headers first would cost more than the copy.
      // Otherwise what the headers ask for, and at least as much as is carried already: each pass walks the carried
      // bytes again, and headers can ask for far less than a value holds (nested containers ask one byte per value
      // still to come), so appending only what they ask made a damaged value of a few hundred KiB cost seconds. At
      // least doubling makes the walks add up to about twice the value, and copies at most about twice the value.
      const take =
        available <= MINIMUM_APPEND_BYTES
          ? available
          : Math.min(
              available,
              Math.max(
                this.wantedBytes(this.carry.subarray(0, this.carriedBytes)) - this.carriedBytes,
                this.carriedBytes,
                MINIMUM_APPEND_BYTES,
              ),
            );
      this.ensureCapacity(this.carriedBytes + take);
      this.carry.set(piece.subarray(offset, offset + take), this.carriedBytes);
      this.copiedBytes += take;
      this.carriedBytes += take;
      offset += take;
      const decoded = this.decode(this.carry.subarray(0, this.carriedBytes));
      this.consumedBytes += decoded;
      const leftover = this.carriedBytes - decoded;
      if (leftover <= take) {
        // Every byte carried before was decoded: what is left came from the piece, which still holds it.
        offset -= leftover;
        this.carriedBytes = 0;
      } else {
        this.carry.copyWithin(0, decoded, this.carriedBytes);
        this.carriedBytes = leftover;
        this.checkValueBytes(leftover);
        this.peakCarriedBytes = Math.max(this.peakCarriedBytes, leftover);
      }
    }
    return offset;
  }

  /**
   * How many bytes the incomplete part at the start of `carried` needs at least (more than it holds): the array
   * header of the document or of a list, or a whole value.
   */
  private wantedBytes(carried: Uint8Array): number {
    const expectsArrayHeader =
      this.stage === "document" || (this.stage === "field" && this.visitor.isList(this.fieldIndex));
    if (expectsArrayHeader) {
      const type = carried[0] as number;
      if (type === 0xdc) return 3;
      if (type === 0xdd) return 5;
    }
    return valueEnd(carried, 0);
  }

  private checkValueBytes(carriedBytes: number): void {
    if (carriedBytes > this.maxValueBytes) {
      throw new MsgpackStreamError(
        `a value at byte ${this.consumedBytes} is longer than ${this.maxValueBytes} bytes, the most one value may take`,
      );
    }
  }

  /** Decodes every complete part at the start of `bytes`; returns the bytes decoded. */
  private decode(bytes: Uint8Array): number {
    let position = 0;
    while (true) {
      switch (this.stage) {
        case "done":
          if (position < bytes.byteLength) throw new MsgpackStreamError("bytes follow the end of the document");
          return position;
        case "document": {
          const header = arrayHeaderAt(bytes, position);
          if (header === null) return position;
          if (header === "notArray") {
            this.visitor.begin(null);
            throw new MsgpackStreamError("the document is not an array");
          }
          this.visitor.begin(header.length);
          position += header.headerBytes;
          this.fieldCount = header.length;
          this.fieldIndex = 0;
          this.nextField();
          break;
        }
        case "field": {
          if (this.visitor.isList(this.fieldIndex)) {
            const header = arrayHeaderAt(bytes, position);
            if (header === null) return position;
            if (header !== "notArray") {
              position += header.headerBytes;
              this.visitor.listStart(this.fieldIndex, header.length);
              this.itemCount = header.length;
              this.itemPosition = 0;
              if (this.itemCount === 0) {
                this.fieldIndex += 1;
                this.nextField();
              } else {
                this.stage = "items";
              }
              break;
            }
          }
          const end = valueEnd(bytes, position);
          if (end > bytes.byteLength) return position;
          this.visitor.field(this.fieldIndex, engineCodec.unpack(bytes.subarray(position, end)));
          position = end;
          this.fieldIndex += 1;
          this.nextField();
          break;
        }
        case "items": {
          const end = valueEnd(bytes, position);
          if (end > bytes.byteLength) return position;
          if (this.visitor.itemsEncoded(this.fieldIndex)) {
            this.visitor.encodedItem(this.fieldIndex, this.itemPosition, bytes.subarray(position, end));
          } else {
            this.visitor.item(this.fieldIndex, this.itemPosition, engineCodec.unpack(bytes.subarray(position, end)));
          }
          position = end;
          this.itemPosition += 1;
          if (this.itemPosition === this.itemCount) {
            this.fieldIndex += 1;
            this.nextField();
          }
          break;
        }
      }
    }
  }

  private nextField(): void {
    this.stage = this.fieldIndex < this.fieldCount ? "field" : "done";
  }

  private ensureCapacity(bytes: number): void {
    if (this.carry.byteLength >= bytes) return;
    const grown = new Uint8Array(Math.max(MINIMUM_CAPACITY_BYTES, bytes, 2 * this.carry.byteLength));
    grown.set(this.carry.subarray(0, this.carriedBytes));
    this.carry = grown;
  }
}
