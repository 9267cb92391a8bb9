/**
 * Reads RFC 4180 CSV back into rows, strictly: every record ends in CRLF, quoted fields may hold commas, CR, LF and
 * doubled quotes, and anything else (a bare LF, a quote inside an unquoted field) is an error.
 */
export function readCsv(text: string): string[][] {
  const rows: string[][] = [];
  let row: string[] = [];
  let index = 0;
  while (index < text.length) {
    let field = "";
    if (text[index] === '"') {
      index++;
      for (;;) {
        if (index >= text.length) throw new Error("unterminated quoted field");
        if (text[index] === '"') {
          if (text[index + 1] === '"') {
            field += '"';
            index += 2;
            continue;
          }
          index++;
          break;
        }
        field += text[index];
        index++;
      }
    } else {
      while (index < text.length && text[index] !== "," && text[index] !== "\r") {
        if (text[index] === '"' || text[index] === "\n") throw new Error(`unexpected character at ${index}`);
        field += text[index];
        index++;
      }
    }
    row.push(field);
    if (text[index] === ",") {
      index++;
    } else if (text.startsWith("\r\n", index)) {
      rows.push(row);
      row = [];
      index += 2;
    } else {
      throw new Error(`a record does not end in CRLF at ${index}`);
    }
  }
  if (row.length > 0) throw new Error("the last record does not end in CRLF");
  return rows;
}
