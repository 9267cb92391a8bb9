import { describe, expect, it } from "vitest";
import {
  CronSyntaxError,
  nextRun,
  parseCron,
  shortestIntervalMinutes,
} from "../../../../src/platform/admin/backups/cron.js";

const at = (iso: string): Date => new Date(iso);

describe("5-field cron expressions in UTC", () => {
  it("finds the next run strictly after a time, across days, months and leap years", () => {
    expect(nextRun(parseCron("0 3 * * *"), at("2026-01-01T02:59:00Z"))?.toISOString()).toBe("2026-01-01T03:00:00.000Z");
    expect(nextRun(parseCron("0 3 * * *"), at("2026-01-01T03:00:00Z"))?.toISOString()).toBe("2026-01-02T03:00:00.000Z");
    expect(nextRun(parseCron("*/15 * * * *"), at("2026-01-01T10:07:30Z"))?.toISOString()).toBe(
      "2026-01-01T10:15:00.000Z",
    );
    expect(nextRun(parseCron("30 1 1 */3 *"), at("2026-02-10T00:00:00Z"))?.toISOString()).toBe(
      "2026-04-01T01:30:00.000Z",
    );
    expect(nextRun(parseCron("0 0 29 2 *"), at("2026-03-01T00:00:00Z"))?.toISOString()).toBe(
      "2028-02-29T00:00:00.000Z",
    );
  });

  it("takes Sunday as 0 or 7, and a day matching either restricted day field", () => {
    // 2026-01-04 is a Sunday.
    expect(nextRun(parseCron("0 12 * * 7"), at("2026-01-01T00:00:00Z"))?.toISOString()).toBe(
      "2026-01-04T12:00:00.000Z",
    );
    expect(nextRun(parseCron("0 12 * * 0"), at("2026-01-01T00:00:00Z"))?.toISOString()).toBe(
      "2026-01-04T12:00:00.000Z",
    );
    // The 15th or a Monday (2026-01-05), whichever comes first.
    expect(nextRun(parseCron("0 0 15 * 1"), at("2026-01-01T00:00:00Z"))?.toISOString()).toBe(
      "2026-01-05T00:00:00.000Z",
    );
    expect(nextRun(parseCron("0 0 1-5 * 1-5"), at("2026-01-03T12:00:00Z"))?.toISOString()).toBe(
      "2026-01-04T00:00:00.000Z",
    );
  });

  it("says when a schedule never runs", () => {
    expect(nextRun(parseCron("0 0 31 2 *"), at("2026-01-01T00:00:00Z"))).toBeUndefined();
  });

  it("measures the shortest time between two runs, the wrap past midnight included", () => {
    expect(shortestIntervalMinutes(parseCron("*/15 * * * *"))).toBe(15);
    expect(shortestIntervalMinutes(parseCron("*/10 * * * *"))).toBe(10);
    expect(shortestIntervalMinutes(parseCron("0,50 * * * *"))).toBe(10);
    expect(shortestIntervalMinutes(parseCron("0 3 * * *"))).toBe(24 * 60);
    expect(shortestIntervalMinutes(parseCron("0 0,23 * * *"))).toBe(60);
    expect(shortestIntervalMinutes(parseCron("55 0,23 * * *"))).toBe(60);
  });

  it("refuses what is not a 5-field expression, naming the field", () => {
    const refusals: [string, RegExp][] = [
      ["* * * *", /4 fields/],
      ["0 0 * * * *", /6 fields/],
      ["60 * * * *", /minute field's 60 is outside 0-59/],
      ["0 24 * * *", /hour field's 24/],
      ["0 0 0 * *", /day of month field's 0/],
      ["0 0 * 13 *", /month field's 13/],
      ["0 0 * * 8", /day of week field's 8/],
      ["0 0 * JAN *", /month field holds 'JAN'/],
      ["0 0 L * *", /day of month field holds 'L'/],
      ["5-1 * * * *", /runs backwards/],
      ["*/0 * * * *", /outside 1-59/],
      ["1/2/3 * * * *", /not a value, range or step/],
      [`${"1,".repeat(150)}1 * * * *`, /longer than 200/],
    ];
    for (const [expression, message] of refusals) {
      expect(() => parseCron(expression), expression).toThrow(CronSyntaxError);
      expect(() => parseCron(expression), expression).toThrow(message);
    }
  });
});
