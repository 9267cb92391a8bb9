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
    const log = new RefusalLog(logger, 60_000, () => 0);
    for (let host = 0; host < 5_000; host += 1) log.report(`10.0.${host >> 8}.${host & 255}`, "malformed", {}, "x");
    // The first hosts were forgotten, so they are logged again; memory stays bounded instead.
    log.report("10.0.0.0", "malformed", {}, "x");
    expect(lines).toHaveLength(5_001);
  });
});
