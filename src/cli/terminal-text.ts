/**
 * Text the command line prints but did not write itself: names and messages from the APIs (project, file, member and
 * milestone names, problem details, a cluster's states), and what the user typed. A terminal obeys control characters
 * in its output: an escape sequence inside a file name could retitle the window, move the cursor, rewrite lines already
 * shown or, on some terminals, answer with keystrokes; bidirectional controls reorder what is shown. So every such
 * piece of text goes through these helpers, which show those characters as `\uXXXX` escapes instead.
 */
import { stringifyJsonExactly } from "../json/exact-json.js";

/**
 * Whether a code point makes a terminal do something rather than show something: the C0 and C1 controls and DEL,
 * the line and paragraph separators, and the bidirectional marks, embeddings, overrides and isolates.
 */
function isTerminalControl(codePoint: number): boolean {
  return (
    codePoint < 0x20 ||
    (codePoint >= 0x7f && codePoint <= 0x9f) ||
    codePoint === 0x061c ||
    codePoint === 0x200e ||
    codePoint === 0x200f ||
    codePoint === 0x2028 ||
    codePoint === 0x2029 ||
    (codePoint >= 0x202a && codePoint <= 0x202e) ||
    (codePoint >= 0x2066 && codePoint <= 0x2069)
  );
}

function escapeControls(text: string, keep: (codePoint: number) => boolean): string {
  let result = "";
  for (const character of text) {
    const codePoint = character.codePointAt(0) ?? 0;
    result +=
      isTerminalControl(codePoint) && !keep(codePoint) ? `\\u${codePoint.toString(16).padStart(4, "0")}` : character;
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
