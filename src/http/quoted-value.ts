/**
 * A value of a request, quoted in the message that refuses it. Such a value may be long, hold control characters,
 * or be a secret sent in the wrong field, and a message is answered, shown in terminals and sometimes logged, so what
 * it quotes is bounded and printable.
 */

/** Most characters of a value a message quotes; the rest is cut and marked. */
export const MAX_QUOTED_CHARACTERS = 64;

/**
 * `text` in single quotes, at most `MAX_QUOTED_CHARACTERS` of it, each character outside printable ASCII, and each
 * double quote or backslash, shown as `?`: what is left fits every message, RFC 6749's error descriptions included
 * (which allow printable ASCII but for those two).
 */
export function quotedValue(text: string): string {
  const characters = Array.from(text);
  const shown = characters
    .slice(0, MAX_QUOTED_CHARACTERS)
    .join("")
    .replace(/[^\x20-\x21\x23-\x5b\x5d-\x7e]/gu, "?");
  return characters.length > MAX_QUOTED_CHARACTERS ? `'${shown}...' (${characters.length} characters)` : `'${shown}'`;
}
