/**
 * The shape of a JSON body, measured on its bytes before it is parsed: how deep it nests arrays and objects, and how
 * many values they hold. Parsing and validating cost time and memory in proportion to the number of values, not to
 * the bytes: a body of 20 MB made of two million tiny object members took about 2 s to parse and another second to
 * validate, and the validator's list of its unknown fields held 230 MB, all on the event loop of the process that
 * serves everyone. Counting first refuses such a body for the price of one pass over its bytes.
 */

/** What `measureJsonShape` found beyond its limits, or null when the body stays within them. */
export type JsonShapeExcess = "too-deep" | "too-many-values" | null;

/** What `measureJsonShape` found. */
export interface JsonShape {
  /** The first limit the text passed, or null when it stays within them. */
  readonly excess: JsonShapeExcess;
  /**
   * The array items and object members the walk counted, at every level (up to the limit it passed): for valid JSON,
   * as many as the parsed value holds, unless an object repeats a key, which parsing keeps only once.
   */
  readonly values: number;
}

/** The limits `measureJsonShape` checks. */
export interface JsonShapeLimits {
  /** Deepest nesting of arrays and objects, the top level counting as one. */
  readonly maxLevels: number;
  /** Most array items and object members in all, at every level together. */
  readonly maxValues: number;
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COMMA = 0x2c;
const OPEN_BRACKET = 0x5b;
const CLOSE_BRACKET = 0x5d;
const OPEN_BRACE = 0x7b;
const CLOSE_BRACE = 0x7d;
const SPACE = 0x20;
const TAB = 0x09;
const LINE_FEED = 0x0a;
const CARRIAGE_RETURN = 0x0d;

/**
 * Walks the bytes of a JSON text once and stops at the first limit it passes. The text need not be valid JSON (the
 * parser that follows refuses what is not); the walk only has to agree with it on valid JSON. That holds for UTF-8:
 * the bytes of a multi-byte character are all above 0x7f, so none of them is taken for a quote or a bracket.
 */
export function measureJsonShape(bytes: Uint8Array, limits: JsonShapeLimits): JsonShape {
  const length = bytes.length;
  let levels = 0;
  let values = 0;
  // Set by an opening bracket until the next token: whether that token is a first item (or the container is empty).
  let containerJustOpened = false;
  let position = 0;
  while (position < length) {
    const byte = bytes[position] as number;
    if (byte === SPACE || byte === LINE_FEED || byte === CARRIAGE_RETURN || byte === TAB) {
      position += 1;
      continue;
    }
    if (byte === CLOSE_BRACKET || byte === CLOSE_BRACE) {
      containerJustOpened = false;
      levels -= 1;
      position += 1;
      continue;
    }
    if (containerJustOpened || byte === COMMA) {
      values += 1;
      if (values > limits.maxValues) return { excess: "too-many-values", values };
      containerJustOpened = false;
    }
    if (byte === OPEN_BRACKET || byte === OPEN_BRACE) {
      levels += 1;
      if (levels > limits.maxLevels) return { excess: "too-deep", values };
      containerJustOpened = true;
      position += 1;
    } else if (byte === QUOTE) {
      position = afterString(bytes, position + 1);
    } else {
      position += 1;
    }
  }
  return { excess: null, values };
}

/** The position after the quote that closes the string whose text starts at `start` (the end when none does). */
function afterString(bytes: Uint8Array, start: number): number {
  const length = bytes.length;
  let position = start;
  while (position < length) {
    const byte = bytes[position];
    // A backslash escapes the byte after it, a quote among them.
    if (byte === BACKSLASH) position += 2;
    else if (byte === QUOTE) return position + 1;
    else position += 1;
  }
  return length;
}
