/**
 * Rows of cells as lines of aligned columns, the way the CLI prints lists: each column as wide as its widest cell,
 * two spaces between columns, no blanks at the end of a line. Cells must be printable already (`printable`).
 */
export function alignedLines(rows: readonly (readonly string[])[]): string[] {
  const columns = Math.max(0, ...rows.map((row) => row.length));
  const widths = Array.from({ length: columns }, (_, column) =>
    Math.max(...rows.map((row) => (row[column] ?? "").length)),
  );
  return rows.map((row) =>
    row
      .map((cell, column) => cell.padEnd(widths[column] ?? 0))
      .join("  ")
      .trimEnd(),
  );
}

/** `alignedLines` joined into one text, without a final newline. */
export function alignedTable(rows: readonly (readonly string[])[]): string {
  return alignedLines(rows).join("\n");
}
