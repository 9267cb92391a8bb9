/**
 * The timeline of one cluster change, read from the brokers' log files (info level) after it completed: for each
 * operation, when its broker started applying it, the steps of a join as the partition's leader and the joiner logged
 * them, when its broker recorded it complete, and how long the next operation's broker took to start.
 */
import { readFile } from "node:fs/promises";

/** One log line of a broker that the timeline uses. */
interface LogLine {
  readonly timeMs: number;
  readonly broker: number;
  readonly message: string;
  readonly fields: Record<string, unknown>;
}

/** The log messages the timeline is made of (src/cluster/broker/change-executor.ts and partition-replica.ts). */
const MESSAGES = new Set([
  "applying an operation of a cluster change",
  "operation of a cluster change completed",
  "membership change proposed",
  "the partition's group committed a new membership",
  "a learner caught up",
  "installed a snapshot received from the partition's leader",
]);

/** Reads the lines of `MESSAGES` logged at or after `fromEpochMs` from the given log files. */
async function readLogLines(logFiles: readonly string[], fromEpochMs: number): Promise<LogLine[]> {
  const lines: LogLine[] = [];
  for (const file of logFiles) {
    const text = await readFile(file, "utf8").catch(() => "");
    for (const raw of text.split("\n")) {
      if (!raw.startsWith("{")) continue;
      let parsed: Record<string, unknown>;
      try {
        parsed = JSON.parse(raw) as Record<string, unknown>;
      } catch {
        continue;
      }
      const message = parsed.msg;
      const timeMs = parsed.time;
      if (typeof message !== "string" || !MESSAGES.has(message) || typeof timeMs !== "number") continue;
      if (timeMs < fromEpochMs) continue;
      lines.push({ timeMs, broker: Number(parsed.broker), message, fields: parsed });
    }
  }
  return lines.sort((left, right) => left.timeMs - right.timeMs);
}

/** Operation description as the executor logs it → broker id and partition id. */
function parseDescription(description: string): { brokerId: number; partitionId: number | null } {
  const broker = /by broker (\d+)/.exec(description);
  const partition = /partition (\d+)/.exec(description);
  return { brokerId: Number(broker?.[1] ?? -1), partitionId: partition === null ? null : Number(partition[1]) };
}

/**
 * Rows of the timeline of change `changeId` (times in seconds since `startedAtEpochMs`): operation, applying,
 * learner added (committed), snapshot installed, caught up, promotion proposed, voter (committed), completed, and
 * the hand-over to the next operation's broker in ms.
 */
export async function changeTimeline(
  logFiles: readonly string[],
  changeId: number,
  startedAtEpochMs: number,
): Promise<string[][]> {
  const lines = await readLogLines(logFiles, startedAtEpochMs);
  const seconds = (timeMs: number | undefined): string =>
    timeMs === undefined ? "-" : ((timeMs - startedAtEpochMs) / 1000).toFixed(2);
  const operations: { description: string; startMs: number; endMs: number | undefined }[] = [];
  for (const line of lines) {
    if (line.fields.changeId !== changeId) continue;
    const description = String(line.fields.operation);
    if (line.message === "applying an operation of a cluster change") {
      if (!operations.some((operation) => operation.description === description)) {
        operations.push({ description, startMs: line.timeMs, endMs: undefined });
      }
    } else {
      const operation = operations.find((candidate) => candidate.description === description);
      if (operation !== undefined) operation.endMs = line.timeMs;
    }
  }
  const rows: string[][] = [];
  for (const [position, operation] of operations.entries()) {
    const { brokerId, partitionId } = parseDescription(operation.description);
    const endMs = operation.endMs ?? Number.POSITIVE_INFINITY;
    const within = (line: LogLine): boolean =>
      line.timeMs >= operation.startMs && line.timeMs <= endMs && line.fields.partitionId === partitionId;
    const first = (predicate: (line: LogLine) => boolean): number | undefined =>
      lines.find((line) => within(line) && predicate(line))?.timeMs;
    const joining = operation.description.startsWith("PARTITION_JOIN");
    const memberIs = (role: string) => (line: LogLine) =>
      line.message === "the partition's group committed a new membership" &&
      String(line.fields.members).split(", ").includes(`${brokerId} ${role}`);
    const next = operations[position + 1];
    rows.push([
      operation.description.replace(" by broker", " @"),
      seconds(operation.startMs),
      joining ? seconds(first(memberIs("learner"))) : "",
      joining
        ? seconds(
            first(
              (line) =>
                line.message === "installed a snapshot received from the partition's leader" &&
                line.broker === brokerId,
            ),
          )
        : "",
      joining
        ? seconds(first((line) => line.message === "a learner caught up" && line.fields.member === brokerId))
        : "",
      joining
        ? seconds(
            first(
              (line) =>
                line.message === "membership change proposed" &&
                line.fields.change === "promote" &&
                line.fields.member === brokerId,
            ),
          )
        : "",
      joining ? seconds(first(memberIs("voter"))) : "",
      seconds(operation.endMs),
      next === undefined || operation.endMs === undefined ? "-" : String(Math.round(next.startMs - operation.endMs)),
    ]);
  }
  return rows;
}

/** Column names of `changeTimeline`'s rows. */
export const TIMELINE_COLUMNS = [
  "operation @ broker",
  "applying s",
  "learner s",
  "snapshot installed s",
  "caught up s",
  "promotion proposed s",
  "voter s",
  "completed s",
  "next starts after ms",
];
