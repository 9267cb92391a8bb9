import pino from "pino";
import { describe, expect, it } from "vitest";
import { RefusalLog } from "../../../src/cluster/transport/refusal-log.js";

describe("RefusalLog", () => {
  it("logs one line per remote host and reason per interval, then says how many it left out", () => {
    const lines: Record<string, unknown>[] = [];
    const logger = pino({ level: "info" }, { write: (line: string) => lines.push(JSON.parse(line)) });
    const clock = { nowMs: 0 };
    const log = new RefusalLog(logger, 60_000, () => clock.nowMs);
    for (let attempt = 0; attempt < 100; attempt += 1) {
      log.report("10.0.0.5", "authentication-failed", { remoteAddress: `10.0.0.5:${attempt}` }, "refused");
    }
    log.report("10.0.0.5", "other-cluster", {}, "refused: another cluster");
    log.report("10.0.0.6", "authentication-failed", {}, "refused");
    expect(lines.map((line) => [line.reason, line.remoteAddress ?? null])).toEqual([
      ["authentication-failed", "10.0.0.5:0"],
      ["other-cluster", null],
      ["authentication-failed", null],
    ]);
    clock.nowMs = 60_000;
    log.report("10.0.0.5", "authentication-failed", {}, "refused");
    expect(lines[3]).toMatchObject({ level: 40, refusalsNotLogged: 99 });
    expect(lines[3]?.msg).toBe("refused (and 99 more like it since the last such line)");
  });

  it("remembers a bounded number of sources", () => {
    const lines: unknown[] = [];
    const logger = pino({ level: "info" }, { write: (line: string) => lines.push(line) });
    const log = new RefusalLog(logger, 60_000, () => 0, Number.POSITIVE_INFINITY);
    for (let host = 0; host < 5_000; host += 1) log.report(`10.0.${host >> 8}.${host & 255}`, "malformed", {}, "x");
    // The first hosts were forgotten, so they are logged again; memory stays bounded instead.
    log.report("10.0.0.0", "malformed", {}, "x");
    expect(lines).toHaveLength(5_001);
  });

  it("logs at most 100 lines an interval across sources, and says how many it left out in the next", () => {
    const lines: Record<string, unknown>[] = [];
    const logger = pino({ level: "info" }, { write: (line: string) => lines.push(JSON.parse(line)) });
    const clock = { nowMs: 0 };
    const log = new RefusalLog(logger, 60_000, () => clock.nowMs);
    // One refusal from each of 3,000 addresses, as a hostile test sent them.
    for (let host = 0; host < 3_000; host += 1) log.report(`10.1.${host >> 8}.${host & 255}`, "malformed", {}, "x");
    expect(lines).toHaveLength(100);
    clock.nowMs = 60_000;
    log.report("10.2.0.1", "malformed", {}, "x");
    expect(lines).toHaveLength(102);
    expect(lines[100]).toMatchObject({ level: 40, refusalsNotLogged: 2_900 });
    expect(lines[100]?.msg).toBe(
      "2900 refusals were left out of the log, beyond 100 lines in 60000 ms from many sources",
    );
    expect(lines[101]).toMatchObject({ msg: "x", reason: "malformed" });
  });
});
