/**
 * A minimal parser of 5-field cron expressions in UTC (`minute hour day-of-month month day-of-week`), as backup
 * schedules use them: each field is `*`, a number, a range `a-b`, any of those with a step `/n`, or a comma-separated
 * list of them. Day of week 0 and 7 are Sunday. As in the classic cron, when both day fields are restricted a day
 * matches either. Names (`MON`, `JAN`) and the non-standard extensions (`L`, `W`, `#`, `?`, seconds) are refused.
 */

/** Thrown for an expression that is not a valid 5-field cron expression; the message names the field. */
export class CronSyntaxError extends Error {
  constructor(detail: string) {
    super(detail);
    this.name = "CronSyntaxError";
  }
}

/** A parsed cron expression. */
export interface CronSchedule {
  /** The expression as given, trimmed. */
  readonly expression: string;
  /** Minutes of the day (0-1439) it fires at on a matching day, ascending. */
  readonly minutesOfDay: readonly number[];
  readonly daysOfMonth: ReadonlySet<number>;
  readonly months: ReadonlySet<number>;
  readonly daysOfWeek: ReadonlySet<number>;
  /** Whether the day-of-month and day-of-week fields were both restricted (a day then matches either). */
  readonly eitherDay: boolean;
  readonly dayOfMonthRestricted: boolean;
  readonly dayOfWeekRestricted: boolean;
}

/** Longest expression accepted, in characters. */
export const MAX_CRON_EXPRESSION_LENGTH = 200;

/** One field's name and bounds. */
interface CronField {
  readonly name: string;
  readonly minimum: number;
  readonly maximum: number;
}

const fields: readonly [CronField, CronField, CronField, CronField, CronField] = [
  { name: "minute", minimum: 0, maximum: 59 },
  { name: "hour", minimum: 0, maximum: 23 },
  { name: "day of month", minimum: 1, maximum: 31 },
  { name: "month", minimum: 1, maximum: 12 },
  { name: "day of week", minimum: 0, maximum: 7 },
];

function parseNumber(text: string, field: CronField): number {
  if (!/^\d{1,2}$/.test(text)) throw new CronSyntaxError(`the ${field.name} field holds '${text}', not a number`);
  const value = Number(text);
  if (value < field.minimum || value > field.maximum) {
    throw new CronSyntaxError(`the ${field.name} field's ${value} is outside ${field.minimum}-${field.maximum}`);
  }
  return value;
}

/** The values one field stands for. */
function parseField(text: string, field: CronField): Set<number> {
  const values = new Set<number>();
  for (const part of text.split(",")) {
    const [range, stepText, extra] = part.split("/");
    if (range === undefined || range === "" || extra !== undefined) {
      throw new CronSyntaxError(`the ${field.name} field holds '${part}', not a value, range or step`);
    }
    const step = stepText === undefined ? 1 : parseNumber(stepText, { ...field, minimum: 1, maximum: 59 });
    let first: number;
    let last: number;
    if (range === "*") {
      first = field.minimum;
      last = field.maximum;
    } else if (range.includes("-")) {
      const [low, high, rest] = range.split("-");
      if (low === undefined || high === undefined || rest !== undefined) {
        throw new CronSyntaxError(`the ${field.name} field holds '${range}', not a range`);
      }
      first = parseNumber(low, field);
      last = parseNumber(high, field);
      if (first > last) throw new CronSyntaxError(`the ${field.name} field's range ${range} runs backwards`);
    } else {
      first = parseNumber(range, field);
      last = stepText === undefined ? first : field.maximum;
    }
    for (let value = first; value <= last; value += step) values.add(value);
  }
  return values;
}

/** Parses a cron expression; throws `CronSyntaxError` naming what is wrong. */
export function parseCron(expression: string): CronSchedule {
  const trimmed = expression.trim();
  if (trimmed.length > MAX_CRON_EXPRESSION_LENGTH) {
    throw new CronSyntaxError(`the expression is longer than ${MAX_CRON_EXPRESSION_LENGTH} characters`);
  }
  const parts = trimmed.split(/\s+/);
  if (parts.length !== 5) {
    throw new CronSyntaxError(
      `the expression has ${parts.length} ${parts.length === 1 ? "field" : "fields"}; it needs 5: minute hour day-of-month month day-of-week`,
    );
  }
  const [minuteText, hourText, dayOfMonthText, monthText, dayOfWeekText] = parts as [
    string,
    string,
    string,
    string,
    string,
  ];
  const minutes = parseField(minuteText, fields[0]);
  const hours = parseField(hourText, fields[1]);
  const daysOfWeek = parseField(dayOfWeekText, fields[4]);
  if (daysOfWeek.has(7)) daysOfWeek.add(0);
  const dayOfMonthRestricted = dayOfMonthText !== "*";
  const dayOfWeekRestricted = dayOfWeekText !== "*";
  const minutesOfDay = [...hours].flatMap((hour) => [...minutes].map((minute) => hour * 60 + minute));
  return {
    expression: trimmed,
    minutesOfDay: minutesOfDay.sort((left, right) => left - right),
    daysOfMonth: parseField(dayOfMonthText, fields[2]),
    months: parseField(monthText, fields[3]),
    daysOfWeek,
    eitherDay: dayOfMonthRestricted && dayOfWeekRestricted,
    dayOfMonthRestricted,
    dayOfWeekRestricted,
  };
}

/** Whether the schedule fires on the UTC day of `day`. */
function matchesDay(schedule: CronSchedule, day: Date): boolean {
  if (!schedule.months.has(day.getUTCMonth() + 1)) return false;
  const dayOfMonth = schedule.daysOfMonth.has(day.getUTCDate());
  const dayOfWeek = schedule.daysOfWeek.has(day.getUTCDay());
  if (schedule.eitherDay) return dayOfMonth || dayOfWeek;
  return (!schedule.dayOfMonthRestricted || dayOfMonth) && (!schedule.dayOfWeekRestricted || dayOfWeek);
}

/** How far ahead the next run is looked for: beyond every leap-day cycle. */
const SEARCH_DAYS = 8 * 366;

const DAY_MS = 24 * 60 * 60 * 1000;

/** The first time strictly after `after` the schedule fires (whole minutes, UTC), or undefined when it never does. */
export function nextRun(schedule: CronSchedule, after: Date): Date | undefined {
  const startMinuteMs = Math.floor(after.getTime() / 60_000) * 60_000 + 60_000;
  const startDayMs = Math.floor(startMinuteMs / DAY_MS) * DAY_MS;
  for (let offset = 0; offset <= SEARCH_DAYS; offset += 1) {
    const dayMs = startDayMs + offset * DAY_MS;
    if (!matchesDay(schedule, new Date(dayMs))) continue;
    const earliestMinute = offset === 0 ? (startMinuteMs - startDayMs) / 60_000 : 0;
    const minute = schedule.minutesOfDay.find((candidate) => candidate >= earliestMinute);
    if (minute !== undefined) return new Date(dayMs + minute * 60_000);
  }
  return undefined;
}

/**
 * The shortest time between two runs, in minutes: between two runs of one day, or from a day's last run to the next
 * day's first (days that do not match only make gaps longer).
 */
export function shortestIntervalMinutes(schedule: CronSchedule): number {
  const times = schedule.minutesOfDay;
  const first = times[0];
  const last = times.at(-1);
  if (first === undefined || last === undefined) return Number.POSITIVE_INFINITY;
  let shortest = first + 24 * 60 - last;
  for (let index = 1; index < times.length; index += 1) {
    shortest = Math.min(shortest, (times[index] as number) - (times[index - 1] as number));
  }
  return shortest;
}
