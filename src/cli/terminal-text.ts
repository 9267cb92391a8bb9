/**
 * Text the command line prints but did not write itself: names and messages from the APIs (project, file, member and
 * milestone names, problem details, a cluster's states), and what the user typed. A terminal obeys control characters
 * in its output: an escape sequence inside a file name could retitle the window, move the cursor, rewrite lines already
 * shown or, on some terminals, answer with keystrokes; bidirectional controls reorder what is shown, and invisible
 * format characters make different names look the same. So every such piece of text goes through these helpers,
 * which show those characters as `\uXXXX` escapes instead.
 */
import { stringifyJsonExactly } from "../json/exact-json.js";

/** Invisible format characters (Unicode category Cf). */
const formatCharacter = /^\p{Cf}$/u;

/**
 * Whether a code point makes a terminal do something rather than show something, or shows nothing at all: the C0
 * and C1 controls and DEL, the line and paragraph separators, and every format character (category Cf). Those
 * include the bidirectional marks, embeddings, overrides and isolates, which reorder what is shown, and the
 * invisible ones (soft hyphen, zero-width space and joiners, word joiner, byte order mark, tag characters), which
 * make two different names look alike. Emoji joined by a zero-width joiner are shown as their parts with the joiner
 * escaped: the price of seeing every invisible character.
 */
function isTerminalControl(character: string, codePoint: number): boolean {
  return (
    codePoint < 0x20 ||
    (codePoint >= 0x7f && codePoint <= 0x9f) ||
    codePoint === 0x2028 ||
    codePoint === 0x2029 ||
    formatCharacter.test(character)
  );
}

/** `\uXXXX`, or for a code point beyond U+FFFF its UTF-16 pair (`\udb40\udc01`), which JSON reads back too. */
function escapeOf(character: string): string {
  let escaped = "";
  for (let index = 0; index < character.length; index++) {
    escaped += `\\u${character.charCodeAt(index).toString(16).padStart(4, "0")}`;
  }
  return escaped;
}

function escapeControls(text: string, keep: (codePoint: number) => boolean): string {
  let result = "";
  for (const character of text) {
    const codePoint = character.codePointAt(0) ?? 0;
    result += isTerminalControl(character, codePoint) && !keep(codePoint) ? escapeOf(character) : character;
  }
  return result;
}

/** One line of text from elsewhere with every control character shown as an escape, line breaks included. */
export function printable(text: string): string {
  return escapeControls(text, () => false);
}

/** Text from elsewhere that may span lines: each line printable, the line breaks kept. */
export function printableLines(text: string): string {
  return escapeControls(text, (codePoint) => codePoint === 0x0a);
}

/**
 * A value as JSON (indented by `indentation` spaces; 0: on one line) that is safe on a terminal. JSON.stringify
 * already escapes the C0 controls; the others are escaped the same way, which JSON reads back as the same characters.
 */
export function printableJson(value: unknown, indentation = 2): string {
  // Exact for bigints (64-bit ids), which JSON.stringify refuses.
  return escapeControls(stringifyJsonExactly(value, indentation), (codePoint) => codePoint === 0x0a);
}
