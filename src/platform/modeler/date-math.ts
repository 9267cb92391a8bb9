/**
 * The date filter syntax of Modeler searches: an ISO-8601 instant with an optional comparison prefix (`<`, `<=`, `>`,
 * `>=`) and an optional rounding suffix (`||/y`, `||/M`, `||/w`, `||/d`, `||/h`, `||/m`, `||/s`), as in
 * `>=2024-03-01T00:00:00Z||/M`. Rounding follows the usual date-math rules: `>=` and `<` compare against the start
 * of the rounded unit, `>` and `<=` against its end, and a value without prefix matches the whole unit (or, without
 * rounding, exactly that millisecond). Pure: no clock is read.
 */

/** Rounding units of the `||/unit` suffix: year, month, ISO week (starting Monday), day, hour, minute, second. */
export type RoundingUnit = "y" | "M" | "w" | "d" | "h" | "m" | "s";

/** A parsed date filter as a half-open interval of epoch milliseconds; a missing bound is unbounded. */
export interface DateRange {
  /** Matching instants are at or after this one. */
  fromInclusiveMs?: number;
  /** Matching instants are strictly before this one. */
  toExclusiveMs?: number;
}

/** A date filter that cannot be parsed; the message says what is wrong and what is accepted. */
export class DateFilterError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "DateFilterError";
  }
}

/** The syntax in words, appended to every parse error. */
export const dateFilterSyntax =
  "expected an ISO-8601 date or date-time (e.g. 2024-03-01 or 2024-03-01T10:15:00.000Z, UTC when no offset is given), optionally prefixed by <, <=, > or >= and suffixed by ||/y, ||/M, ||/w, ||/d, ||/h, ||/m or ||/s";

const filterPattern = /^(<=|>=|<|>)?([^|]+)(?:\|\|\/([yMwdhms]))?$/;
const instantPattern =
  /^(\d{4})-(\d{2})-(\d{2})(?:T(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,3}))?)?(Z|[+-]\d{2}:?\d{2})?)?$/;

/** Milliseconds per fixed-length unit. */
const millisecondsPer = { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const;

function daysInMonth(year: number, month: number): number {
  const date = new Date(0);
  date.setUTCFullYear(year, month, 0);
  return date.getUTCDate();
}

/** Epoch milliseconds of a UTC calendar instant; years 0–99 are taken literally (unlike `Date.UTC`). */
function utcMs(year: number, monthIndex: number, day: number, hour = 0, minute = 0, second = 0, ms = 0): number {
  const date = new Date(0);
  date.setUTCFullYear(year, monthIndex, day);
  date.setUTCHours(hour, minute, second, ms);
  return date.getTime();
}

/** Parses an ISO-8601 date or date-time (millisecond precision) into epoch milliseconds. */
export function parseIsoInstant(text: string): number {
  const match = instantPattern.exec(text);
  if (match === null) throw new DateFilterError(`'${text}' is not an ISO-8601 date or date-time`);
  const [, yearText, monthText, dayText, hourText, minuteText, secondText, fractionText, offsetText] = match;
  const year = Number(yearText);
  const month = Number(monthText);
  const day = Number(dayText);
  const hour = Number(hourText ?? 0);
  const minute = Number(minuteText ?? 0);
  const second = Number(secondText ?? 0);
  const milliseconds = Number((fractionText ?? "0").padEnd(3, "0"));
  if (month < 1 || month > 12) throw new DateFilterError(`month ${monthText} of '${text}' is not between 01 and 12`);
  if (day < 1 || day > daysInMonth(year, month)) {
    throw new DateFilterError(`day ${dayText} of '${text}' does not exist in that month`);
  }
  if (hour > 23 || minute > 59 || second > 59) {
    throw new DateFilterError(`the time of '${text}' is out of range (hours 00–23, minutes and seconds 00–59)`);
  }
  let offsetMinutes = 0;
  if (offsetText !== undefined && offsetText !== "Z") {
    const digits = offsetText.slice(1).replace(":", "");
    const offsetHours = Number(digits.slice(0, 2));
    const offsetRest = Number(digits.slice(2));
    if (offsetHours > 23 || offsetRest > 59) throw new DateFilterError(`the offset of '${text}' is out of range`);
    offsetMinutes = (offsetText.startsWith("-") ? -1 : 1) * (offsetHours * 60 + offsetRest);
  }
  return utcMs(year, month - 1, day, hour, minute, second, milliseconds) - offsetMinutes * 60_000;
}

/** The start of the unit containing `instantMs` (in UTC). */
export function roundDown(instantMs: number, unit: RoundingUnit): number {
  const date = new Date(instantMs);
  const year = date.getUTCFullYear();
  switch (unit) {
    case "y":
      return utcMs(year, 0, 1);
    case "M":
      return utcMs(year, date.getUTCMonth(), 1);
    case "w": {
      // ISO weeks start on Monday; getUTCDay() is 0 for Sunday.
      const daysSinceMonday = (date.getUTCDay() + 6) % 7;
      return utcMs(year, date.getUTCMonth(), date.getUTCDate() - daysSinceMonday);
    }
    default:
      return instantMs - (((instantMs % millisecondsPer[unit]) + millisecondsPer[unit]) % millisecondsPer[unit]);
  }
}

/** The start of the unit after the one containing `instantMs` (in UTC). */
export function nextUnitStart(instantMs: number, unit: RoundingUnit): number {
  const start = new Date(roundDown(instantMs, unit));
  switch (unit) {
    case "y":
      return utcMs(start.getUTCFullYear() + 1, 0, 1);
    case "M":
      return utcMs(start.getUTCFullYear(), start.getUTCMonth() + 1, 1);
    case "w":
      return utcMs(start.getUTCFullYear(), start.getUTCMonth(), start.getUTCDate() + 7);
    default:
      return start.getTime() + millisecondsPer[unit];
  }
}

/** Parses a date filter into the interval of instants it matches; throws `DateFilterError` naming the problem. */
export function parseDateFilter(filter: string): DateRange {
  const match = filterPattern.exec(filter.trim());
  if (match === null) throw new DateFilterError(`'${filter}' is not a date filter: ${dateFilterSyntax}`);
  const [, operator, instantText = "", unitText] = match;
  let instantMs: number;
  try {
    instantMs = parseIsoInstant(instantText);
  } catch (error) {
    throw new DateFilterError(`${(error as Error).message}: ${dateFilterSyntax}`);
  }
  const unit = unitText as RoundingUnit | undefined;
  // Without rounding the "unit" is the millisecond, the precision timestamps are stored with.
  const start = unit === undefined ? instantMs : roundDown(instantMs, unit);
  const end = unit === undefined ? instantMs + 1 : nextUnitStart(instantMs, unit);
  switch (operator) {
    case ">":
      return { fromInclusiveMs: end };
    case ">=":
      return { fromInclusiveMs: start };
    case "<":
      return { toExclusiveMs: start };
    case "<=":
      return { toExclusiveMs: end };
    default:
      return { fromInclusiveMs: start, toExclusiveMs: end };
  }
}
