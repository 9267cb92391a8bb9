import { afterEach, describe, expect, it, vi } from "vitest";
import type { CliIo } from "../../src/cli/io.js";
import { PLAIN_PROGRESS_INTERVAL_MS, ProgressLines } from "../../src/cli/progress-lines.js";

function capturingIo(): { io: CliIo; written: string[] } {
  const written: string[] = [];
  const io: CliIo = {
    stdout: (text) => written.push(text),
    stderr: () => {},
    environment: {},
    homeDirectory: "/nonexistent",
    shutdownSignal: new AbortController().signal,
  };
  return { io, written };
}

describe("ProgressLines", () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it("rewrites one line in place on a terminal and ends it when the operation ends or is left", () => {
    const { io, written } = capturingIo();
    const progress = new ProgressLines(io, true);
    progress.show("1 of 3", false);
    progress.show("1 of 3", false);
    progress.show("3 of 3", true);
    expect(written).toEqual(["\r\u001b[2K1 of 3", "\r\u001b[2K1 of 3", "\r\u001b[2K3 of 3\n"]);
    progress.interrupt();
    expect(written.at(-1)).toBe("\n");
  });

  it("elsewhere prints a line when the progress changes, and an unchanged one again only after the interval", () => {
    vi.useFakeTimers();
    const { io, written } = capturingIo();
    const progress = new ProgressLines(io, false);
    progress.show("1 of 3", false);
    // Polled many times without a change within the interval: nothing more is printed.
    for (let poll = 0; poll < 9; poll += 1) {
      vi.advanceTimersByTime(PLAIN_PROGRESS_INTERVAL_MS / 10);
      progress.show("1 of 3", false);
    }
    expect(written).toEqual(["1 of 3\n"]);
    vi.advanceTimersByTime(PLAIN_PROGRESS_INTERVAL_MS / 10);
    progress.show("1 of 3", false);
    progress.show("2 of 3", false);
    expect(written).toEqual(["1 of 3\n", "1 of 3\n", "2 of 3\n"]);
    progress.interrupt();
    expect(written).toHaveLength(3);
  });
});
