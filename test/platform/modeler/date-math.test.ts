import { describe, expect, it } from "vitest";
import {
  DateFilterError,
  nextUnitStart,
  parseDateFilter,
  parseIsoInstant,
  roundDown,
} from "../../../src/platform/modeler/date-math.js";

const ms = (iso: string) => new Date(iso).getTime();

describe("parseIsoInstant", () => {
  it("reads dates, date-times, fractions and offsets", () => {
    expect(parseIsoInstant("2024-03-01")).toBe(ms("2024-03-01T00:00:00.000Z"));
    expect(parseIsoInstant("2024-03-01T10:15")).toBe(ms("2024-03-01T10:15:00.000Z"));
    expect(parseIsoInstant("2024-03-01T10:15:30.5Z")).toBe(ms("2024-03-01T10:15:30.500Z"));
    expect(parseIsoInstant("2024-03-01T10:15:30+02:00")).toBe(ms("2024-03-01T08:15:30.000Z"));
    expect(parseIsoInstant("2024-03-01T10:15:30-0130")).toBe(ms("2024-03-01T11:45:30.000Z"));
  });

  it("takes years below 100 literally", () => {
    expect(new Date(parseIsoInstant("0099-01-01")).getUTCFullYear()).toBe(99);
  });

  it("refuses impossible calendar values and other text", () => {
    for (const text of [
      "2024-02-30",
      "2023-02-29",
      "2024-13-01",
      "2024-01-01T24:00",
      "2024-01-01T10:60",
      "yesterday",
      "2024-1-1",
      "2024-01-01T10:00:00.1234Z",
    ]) {
      expect(() => parseIsoInstant(text), text).toThrow(DateFilterError);
    }
    expect(parseIsoInstant("2024-02-29")).toBe(ms("2024-02-29T00:00:00.000Z"));
  });
});

describe("rounding", () => {
  const instant = ms("2024-03-14T15:09:26.535Z"); // a Thursday
  it.each([
    ["y", "2024-01-01T00:00:00.000Z", "2025-01-01T00:00:00.000Z"],
    ["M", "2024-03-01T00:00:00.000Z", "2024-04-01T00:00:00.000Z"],
    ["w", "2024-03-11T00:00:00.000Z", "2024-03-18T00:00:00.000Z"],
    ["d", "2024-03-14T00:00:00.000Z", "2024-03-15T00:00:00.000Z"],
    ["h", "2024-03-14T15:00:00.000Z", "2024-03-14T16:00:00.000Z"],
    ["m", "2024-03-14T15:09:00.000Z", "2024-03-14T15:10:00.000Z"],
    ["s", "2024-03-14T15:09:26.000Z", "2024-03-14T15:09:27.000Z"],
  ] as const)("rounds to the %s containing the instant", (unit, start, next) => {
    expect(new Date(roundDown(instant, unit)).toISOString()).toBe(start);
    expect(new Date(nextUnitStart(instant, unit)).toISOString()).toBe(next);
  });

  it("starts ISO weeks on Monday, also from a Sunday and across a month", () => {
    expect(new Date(roundDown(ms("2024-03-03T12:00:00Z"), "w")).toISOString()).toBe("2024-02-26T00:00:00.000Z");
    expect(new Date(roundDown(ms("2024-03-04T00:00:00Z"), "w")).toISOString()).toBe("2024-03-04T00:00:00.000Z");
  });

  it("handles December to January", () => {
    expect(new Date(nextUnitStart(ms("2024-12-31T23:59:59.999Z"), "M")).toISOString()).toBe("2025-01-01T00:00:00.000Z");
  });
});

describe("parseDateFilter", () => {
  it("without prefix or rounding matches exactly that millisecond", () => {
    expect(parseDateFilter("2024-03-14T15:09:26.535Z")).toEqual({
      fromInclusiveMs: ms("2024-03-14T15:09:26.535Z"),
      toExclusiveMs: ms("2024-03-14T15:09:26.536Z"),
    });
  });

  it("without prefix but with rounding matches the whole unit", () => {
    expect(parseDateFilter("2024-03-14T15:09:26Z||/d")).toEqual({
      fromInclusiveMs: ms("2024-03-14T00:00:00Z"),
      toExclusiveMs: ms("2024-03-15T00:00:00Z"),
    });
  });

  it("rounds >= and < down, > and <= up (to the end of the unit)", () => {
    expect(parseDateFilter(">=2024-03-14T15:00:00Z||/M")).toEqual({ fromInclusiveMs: ms("2024-03-01T00:00:00Z") });
    expect(parseDateFilter("<2024-03-14T15:00:00Z||/M")).toEqual({ toExclusiveMs: ms("2024-03-01T00:00:00Z") });
    expect(parseDateFilter(">2024-03-14T15:00:00Z||/M")).toEqual({ fromInclusiveMs: ms("2024-04-01T00:00:00Z") });
    expect(parseDateFilter("<=2024-03-14T15:00:00Z||/M")).toEqual({ toExclusiveMs: ms("2024-04-01T00:00:00Z") });
  });

  it("compares plain instants strictly or inclusively", () => {
    const instant = ms("2024-03-14T15:00:00Z");
    expect(parseDateFilter(">2024-03-14T15:00:00Z")).toEqual({ fromInclusiveMs: instant + 1 });
    expect(parseDateFilter(">=2024-03-14T15:00:00Z")).toEqual({ fromInclusiveMs: instant });
    expect(parseDateFilter("<2024-03-14T15:00:00Z")).toEqual({ toExclusiveMs: instant });
    expect(parseDateFilter("<=2024-03-14T15:00:00Z")).toEqual({ toExclusiveMs: instant + 1 });
  });

  it("accepts a date without time and surrounding spaces", () => {
    expect(parseDateFilter(" >=2024-03-14 ")).toEqual({ fromInclusiveMs: ms("2024-03-14T00:00:00Z") });
  });

  it("explains what is wrong", () => {
    for (const text of [
      "",
      "=2024-03-14",
      ">>2024-03-14",
      "2024-03-14||/q",
      "2024-03-14||d",
      "2024-03-14||/d||/d",
      "now",
    ]) {
      expect(() => parseDateFilter(text), text).toThrow(DateFilterError);
    }
    expect(() => parseDateFilter("2024-02-30")).toThrow(/does not exist/);
    expect(() => parseDateFilter("tomorrow")).toThrow(/ISO-8601/);
  });
});
