/**
 * A check of a frame body's msgpack structure before it is decoded, so that decoding costs no more than the body's
 * size. The decoder reserves an array's declared length before it reads any element: a 5-byte header announcing
 * 2^25 elements made a broker allocate 268 MB and spend 1.5 s, and 25 such headers nested in a 129-byte frame, sent
 * before the handshake by a peer that had proved nothing, ran it out of memory. The check walks the body's headers
 * once, without decoding, and refuses a body in which:
 * - a container declares more elements than the bytes after its header could hold (every element takes at least one
 *   byte, a map's entry two), so that what the decoder reserves is bounded by the body's size;
 * - a string, binary or extension declares more bytes than remain;
 * - containers nest deeper than `MAX_MSGPACK_DEPTH`, beyond what any request of the protocol can carry;
 * - an extension type is one the decoder would answer by reading further values or building other objects (sets,
 *   errors, regular expressions, records, structured clones). Only those the encoder can produce are accepted:
 *   `undefined` (0x00), typed arrays (0x74), big integers (0x42) and timestamps (-1).
 * It is a bound, not a validation: a body it accepts may still fail to decode, or decode into a malformed message.
 */
import { MalformedFrameError } from "./errors.js";

/**
 * Deepest nesting of arrays and maps a frame body may have: twice the 64 levels the HTTP APIs accept in a JSON body,
 * whose variables reach a broker a few levels down inside a publication request.
 */
export const MAX_MSGPACK_DEPTH = 128;

/** Extension types the encoder produces, each of which the decoder reads from its own bytes only. */
const ACCEPTED_EXTENSION_TYPES: ReadonlySet<number> = new Set([0x00, 0x42, 0x74, 0xff]);

/** Bytes of the length that follows the token of a str, bin or ext of 8, 16 and 32 bit lengths. */
const LENGTH_BYTES = [1, 2, 4] as const;

/** Reads a big-endian unsigned integer of `byteCount` (1, 2 or 4) bytes at `position`. */
function readLength(body: Uint8Array, position: number, byteCount: 1 | 2 | 4): number {
  if (position + byteCount > body.length) throw truncated(position);
  if (byteCount === 1) return body[position] as number;
  if (byteCount === 2) return ((body[position] as number) << 8) | (body[position + 1] as number);
  return (
    (body[position] as number) * 0x1000000 +
    (((body[position + 1] as number) << 16) | ((body[position + 2] as number) << 8) | (body[position + 3] as number))
  );
}

function truncated(position: number): MalformedFrameError {
  return new MalformedFrameError(`malformed frame body: a value at byte ${position} runs past the end of the body`);
}

/**
 * Throws a `MalformedFrameError` when `body` holds msgpack whose decoding could reserve more than its size allows,
 * nests too deep, or uses an extension the protocol does not (see the module comment). Reads each header once.
 */
export function assertBoundedMsgpack(body: Uint8Array): void {
  // Values still to be read, per open container (the outermost "container" holds the one top-level value).
  const owed: number[] = [1];
  // Values still to be read in every open container together: each needs at least one byte of what remains.
  let owedTotal = 1;
  let position = 0;
  while (owedTotal > 0) {
    let depth = owed.length - 1;
    while ((owed[depth] as number) === 0) {
      owed.pop();
      depth -= 1;
    }
    owed[depth] = (owed[depth] as number) - 1;
    owedTotal -= 1;
    if (position >= body.length) throw truncated(position);
    const tokenPosition = position;
    const token = body[position] as number;
    position += 1;
    let payloadBytes = 0;
    let elements = 0;
    if (token <= 0x7f || token >= 0xe0 || token === 0xc0 || token === 0xc2 || token === 0xc3) {
      // A fixint, nil or a boolean: the token is the whole value.
    } else if (token <= 0x8f) {
      elements = 2 * (token - 0x80);
    } else if (token <= 0x9f) {
      elements = token - 0x90;
    } else if (token <= 0xbf) {
      payloadBytes = token - 0xa0;
    } else {
      switch (token) {
        case 0xc4:
        case 0xc5:
        case 0xc6:
        case 0xd9:
        case 0xda:
        case 0xdb: {
          // bin and str of 8, 16 and 32 bit lengths.
          const lengthBytes = LENGTH_BYTES[(token - (token >= 0xd9 ? 0xd9 : 0xc4)) as 0 | 1 | 2];
          payloadBytes = readLength(body, position, lengthBytes);
          position += lengthBytes;
          break;
        }
        case 0xc7:
        case 0xc8:
        case 0xc9: {
          // ext of 8, 16 and 32 bit lengths: the length, the type byte, then the data.
          const lengthBytes = LENGTH_BYTES[(token - 0xc7) as 0 | 1 | 2];
          payloadBytes = readLength(body, position, lengthBytes) + 1;
          position += lengthBytes;
          assertAcceptedExtension(body, position);
          break;
        }
        case 0xca:
        case 0xce:
        case 0xd2:
          payloadBytes = 4;
          break;
        case 0xcb:
        case 0xcf:
        case 0xd3:
          payloadBytes = 8;
          break;
        case 0xcc:
        case 0xd0:
          payloadBytes = 1;
          break;
        case 0xcd:
        case 0xd1:
          payloadBytes = 2;
          break;
        case 0xd4:
        case 0xd5:
        case 0xd6:
        case 0xd7:
        case 0xd8:
          assertAcceptedExtension(body, position);
          // The type byte, then 1, 2, 4, 8 or 16 bytes of data.
          payloadBytes = 1 + 2 ** (token - 0xd4);
          break;
        case 0xdc:
        case 0xde:
          elements = readLength(body, position, 2) * (token === 0xde ? 2 : 1);
          position += 2;
          break;
        case 0xdd:
        case 0xdf:
          elements = readLength(body, position, 4) * (token === 0xdf ? 2 : 1);
          position += 4;
          break;
        default:
          throw new MalformedFrameError(
            `malformed frame body: byte ${tokenPosition} is 0x${token.toString(16)}, which starts no msgpack value`,
          );
      }
    }
    if (payloadBytes > body.length - position) throw truncated(position);
    position += payloadBytes;
    if (elements > 0) {
      owedTotal += elements;
      if (owedTotal > body.length - position) {
        throw new MalformedFrameError(
          `malformed frame body: the container at byte ${tokenPosition} declares more elements than the body could hold`,
        );
      }
      if (owed.length > MAX_MSGPACK_DEPTH) {
        throw new MalformedFrameError(`malformed frame body: containers nest deeper than ${MAX_MSGPACK_DEPTH}`);
      }
      owed.push(elements);
    }
  }
}

/** Throws unless the extension whose type byte is at `position` is one the protocol uses. */
function assertAcceptedExtension(body: Uint8Array, position: number): void {
  if (position >= body.length) throw truncated(position);
  const type = body[position] as number;
  if (!ACCEPTED_EXTENSION_TYPES.has(type)) {
    throw new MalformedFrameError(
      `malformed frame body: extension type 0x${type.toString(16)} is not used by the protocol`,
    );
  }
}
