/**
 * CSV as RFC 4180 defines it: a header row, then one record per row, every line ending in CRLF; a field holding a
 * comma, a double quote, a CR or an LF is enclosed in double quotes, with its own double quotes doubled.
 */

/** Characters that make a spreadsheet read a cell as a formula; such cells are written with a leading `'`. */
const formulaStart = /^[=+\-@\t\r]/;

/** One field, quoted when RFC 4180 requires it. */
export function csvField(value: string): string {
  // A spreadsheet opening the export would run a cell such as `=HYPERLINK(...)`, and ids like member emails may
  // start with `=`, `+`, `-` or `@`: the apostrophe makes it text there, and readers of the JSON answer get it as sent.
  const text = formulaStart.test(value) ? `'${value}` : value;
  return /[",\r\n]/.test(text) ? `"${text.replaceAll('"', '""')}"` : text;
}

/** A whole CSV document: `header`, then `rows`, each line ending in CRLF. */
export function csvDocument(header: readonly string[], rows: readonly (readonly string[])[]): string {
  return [header, ...rows].map((row) => `${row.map(csvField).join(",")}\r\n`).join("");
}
