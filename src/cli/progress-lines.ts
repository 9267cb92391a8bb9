/**
 * Progress of a long operation on standard output: on a terminal one line rewritten in place, elsewhere (a log, a
 * pipe) a line whenever the progress changes and at least every few seconds otherwise, so a script's log shows it
 * without being flooded. Shared by every command that follows an operation (`cluster scale --watch`,
 * `backups take --wait`).
 */

import { monotonicNowMs } from "../time/monotonic.js";
import type { CliIo } from "./io.js";

/** How often the progress is printed again when standard output is not a terminal and nothing changed. */
export const PLAIN_PROGRESS_INTERVAL_MS = 5_000;

/** Prints progress lines; see the module comment. */
export class ProgressLines {
  private lastLine = "";
  private lastPrintedMs = 0;

  constructor(
    private readonly io: CliIo,
    /** Whether lines are rewritten in place (standard output is a terminal). */
    readonly terminal: boolean,
  ) {}

  /** Shows `line`; `final` ends the rewritten line on a terminal. */
  show(line: string, final: boolean): void {
    if (this.terminal) {
      this.io.stdout(`\r\u001b[2K${line}${final ? "\n" : ""}`);
    } else if (line !== this.lastLine || monotonicNowMs() - this.lastPrintedMs >= PLAIN_PROGRESS_INTERVAL_MS) {
      this.io.stdout(`${line}\n`);
      this.lastPrintedMs = monotonicNowMs();
    }
    this.lastLine = line;
  }

  /** Ends a line left open on a terminal (the user stopped following). */
  interrupt(): void {
    if (this.terminal) this.io.stdout("\n");
  }
}
