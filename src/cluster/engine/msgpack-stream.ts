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
 * receives may be views of the stream's buffer, which is reused: a visitor copies what it keeps.
 */
export interface MsgpackArrayVisitor {
  /** The document's array header was read: its field count, or null when the document is not an array. */
  begin(fieldCount: number | null): void;
  /** Whether field `index` (all fields before it were handed over) is a list whose items come one at a time. */
  isList(index: number): boolean;
  /** A field decoded whole: any field that is not a list, or a list field whose value is not an array. */
  field(index: number, value: unknown): void;
  /** The header of list field `index` was read: it holds `length` items. */
  listStart(index: number, length: number): void;
  /** Item `position` of list field `index`. */
  item(index: number, position: number, value: unknown): void;
}

/**
 * The longest single value (a field, or one item of a list) a stream keeps by default. A snapshot's list item is one
 * message's state, which arrived in one record, and no record is longer than a cluster frame (16 MiB).
 */
export const DEFAULT_MAX_VALUE_BYTES = 16 * 1024 * 1024;

/** Value returned by `valueEnd` when the bytes end before the value does. */
const INCOMPLETE = -1;
/** Smallest capacity of the buffer of an incomplete value. */
const MINIMUM_CAPACITY_BYTES = 4096;

/** Thrown for bytes that are not msgpack or do not end where the document does. */
export class MsgpackStreamError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "MsgpackStreamError";
  }
}

/**
 * End offset of the msgpack value starting at `start` in `bytes` (exclusive), or `INCOMPLETE` when `bytes` ends
 * before it does. Nested values are walked with a count of values still to skip, not recursively, so nesting depth
 * costs nothing.
 */
export function valueEnd(bytes: Uint8Array, start: number): number {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const end = bytes.byteLength;
  let position = start;
  let remaining = 1;
  while (remaining > 0) {
    if (position >= end) return INCOMPLETE;
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
        if (position + 1 + lengthBytes > end) return INCOMPLETE;
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
  return position > end ? INCOMPLETE : position;
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

  /** Bytes of the document decoded so far. */
  get decodedBytes(): number {
    return this.consumedBytes;
  }

  /** Decodes what `piece` completes; the caller may reuse `piece` afterwards (nothing keeps a view of it). */
  push(piece: Uint8Array): void {
    if (piece.byteLength === 0) return;
    const carried = this.carriedBytes > 0;
    let bytes = piece;
    if (carried) {
      this.ensureCapacity(this.carriedBytes + piece.byteLength);
      this.carry.set(piece, this.carriedBytes);
      bytes = this.carry.subarray(0, this.carriedBytes + piece.byteLength);
    }
    const decoded = this.decode(bytes);
    this.consumedBytes += decoded;
    const leftover = bytes.byteLength - decoded;
    if (carried) {
      this.carry.copyWithin(0, decoded, bytes.byteLength);
    } else {
      this.ensureCapacity(leftover);
      this.carry.set(piece.subarray(decoded), 0);
    }
    this.carriedBytes = leftover;
    this.peakCarriedBytes = Math.max(this.peakCarriedBytes, leftover);
    if (leftover > this.maxValueBytes) {
      throw new MsgpackStreamError(
        `a value at byte ${this.consumedBytes} is longer than ${this.maxValueBytes} bytes, the most one value may take`,
      );
    }
    // A value spanning many pieces grew the buffer; once it is decoded the memory goes back.
    if (leftover < MINIMUM_CAPACITY_BYTES && this.carry.byteLength > MINIMUM_CAPACITY_BYTES) {
      const smaller = new Uint8Array(MINIMUM_CAPACITY_BYTES);
      smaller.set(this.carry.subarray(0, leftover));
      this.carry = smaller;
    }
  }

  /** Checks that the whole document, and nothing after it, was decoded. */
  end(): void {
    if (this.stage !== "done") {
      throw new MsgpackStreamError(`the document ends early, after ${this.consumedBytes} bytes`);
    }
    if (this.carriedBytes > 0) throw new MsgpackStreamError("bytes follow the end of the document");
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
          if (end === INCOMPLETE) return position;
          this.visitor.field(this.fieldIndex, engineCodec.unpack(bytes.subarray(position, end)));
          position = end;
          this.fieldIndex += 1;
          this.nextField();
          break;
        }
        case "items": {
          const end = valueEnd(bytes, position);
          if (end === INCOMPLETE) return position;
          this.visitor.item(this.fieldIndex, this.itemPosition, engineCodec.unpack(bytes.subarray(position, end)));
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
