/** Prints rows as an aligned plain-text table, numbers right-aligned under their headers. */
export function printTable(headers: readonly string[], rows: readonly (readonly string[])[]): void {
  const widths = headers.map((header, column) =>
    Math.max(header.length, ...rows.map((row) => (row[column] ?? "").length)),
  );
  const format = (cells: readonly string[]): string =>
    cells.map((cell, column) => cell.padStart(widths[column] ?? 0)).join("  ");
  console.log(format(headers));
  console.log(widths.map((width) => "-".repeat(width)).join("  "));
  for (const row of rows) {
    console.log(format(row));
  }
}

/** Formats a number with a fixed count of decimals ("n/a" when there is none). */
export function formatNumber(value: number, decimals = 0): string {
  return Number.isFinite(value) ? value.toFixed(decimals) : "n/a";
}
