/**
 * Journal recovery benchmark: how long `Journal.open` takes on one 16 MiB segment when replay has to look for an
 * intact record after a failed one (the scan that tells damage from a torn tail), on segments of real records, of
 * random bytes, and of bytes built to make every offset a plausible record (a bound on the scan, not a likely case).
 * Each case runs on fresh copies of the files in a temporary directory, a few times; the table shows the fastest and
 * the slowest run. Stops by itself within a minute.
 */
import { randomBytes } from "node:crypto";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DEFAULT_SEGMENT_BYTES, Journal } from "../../src/cluster/raft/storage/journal.js";
import { StorageCorruptionError } from "../../src/cluster/raft/types.js";
import { formatNumber, printTable } from "../support/report.js";

const SEGMENT_BYTES = DEFAULT_SEGMENT_BYTES;
const HEADER_BYTES = 16;
const RUNS = 3;

/** One case: the segment files, oldest first, and what opening them is expected to do. */
interface ReplayCase {
  readonly name: string;
  readonly segments: readonly Buffer[];
  readonly expected: "opens" | "refuses";
}

/** A segment of real records: one transaction of one 1 KiB entry after another, until the segment is full. */
async function segmentOfRecords(directory: string): Promise<Buffer> {
  const journal = Journal.open({ directory, segmentBytes: SEGMENT_BYTES });
  const entry = new Uint8Array(1024).map((_, position) => (position * 131) & 0xff);
  for (let index = 1; journal.segmentCount < 2; index += 1) {
    journal.begin();
    journal.entries.put(1, index, entry);
    journal.seal();
    journal.commitSync();
  }
  await journal.close();
  return readFileSync(join(directory, `${"1".padStart(20, "0")}.journal`));
}

/** Where each record of a segment starts, by the documented layout. */
function recordStarts(segment: Buffer): number[] {
  const starts: number[] = [];
  for (let start = HEADER_BYTES; start + 8 <= segment.byteLength; ) {
    const payloadBytes = segment.readUInt32LE(start);
    if (payloadBytes === 0) break;
    starts.push(start);
    start += 8 + payloadBytes;
  }
  return starts;
}

/** A segment with a valid header and random bytes after it. */
function segmentOfRandomBytes(header: Buffer): Buffer {
  return Buffer.concat([header.subarray(0, HEADER_BYTES), randomBytes(SEGMENT_BYTES - HEADER_BYTES)]);
}

/**
 * A segment built so that every other offset holds a plausible record: bytes at even offsets are operation codes and
 * those at odd offsets zeros, so each even offset claims a payload of 64–320 KiB that starts with an operation code,
 * with a checksum that does not match. Each one must be checksummed: hashed directly, terabytes in all.
 */
function segmentOfPlausibleHeaders(header: Buffer): Buffer {
  const segment = Buffer.alloc(SEGMENT_BYTES);
  header.copy(segment, 0, 0, HEADER_BYTES);
  for (let offset = HEADER_BYTES; offset < SEGMENT_BYTES; offset += 2) segment[offset] = 1 + ((offset >> 1) % 5);
  return segment;
}

/** Milliseconds `Journal.open` takes on fresh copies of `segments`, and whether it opened. */
async function timeOpen(root: string, run: string, segments: readonly Buffer[]): Promise<[number, boolean]> {
  const directory = join(root, run);
  mkdirSync(directory);
  for (const [position, segment] of segments.entries()) {
    writeFileSync(join(directory, `${String(position + 1).padStart(20, "0")}.journal`), segment);
  }
  const started = performance.now();
  try {
    const journal = Journal.open({ directory, segmentBytes: SEGMENT_BYTES });
    const elapsedMs = performance.now() - started;
    await journal.close();
    return [elapsedMs, true];
  } catch (error) {
    const elapsedMs = performance.now() - started;
    if (!(error instanceof StorageCorruptionError)) throw error;
    return [elapsedMs, false];
  } finally {
    await rm(directory, { recursive: true, force: true });
  }
}

/** Runs every case and prints the table. */
export async function run(): Promise<void> {
  const root = await mkdtemp(join(tmpdir(), "flowplane-bench-journal-"));
  try {
    const records = await segmentOfRecords(join(root, "records"));
    const starts = recordStarts(records);
    const noneIntact = Buffer.from(records);
    for (const start of starts) noneIntact[start + 4] = (noneIntact[start + 4] ?? 0) ^ 0xff;
    const firstDamaged = Buffer.from(records);
    const secondRecord = starts[1] ?? HEADER_BYTES;
    firstDamaged[secondRecord + 12] = (firstDamaged[secondRecord + 12] ?? 0) ^ 0x01;
    const random = segmentOfRandomBytes(records);
    const plausible = segmentOfPlausibleHeaders(records);
    const cases: ReplayCase[] = [
      { name: `${starts.length} intact records`, segments: [records], expected: "opens" },
      { name: "records, the second one damaged", segments: [firstDamaged, records], expected: "refuses" },
      { name: "records, none intact (older segment)", segments: [noneIntact, records], expected: "refuses" },
      { name: "random bytes (older segment)", segments: [random, records], expected: "refuses" },
      { name: "random bytes (last segment: zeroed)", segments: [random], expected: "opens" },
      { name: "a plausible record every other byte", segments: [plausible, records], expected: "refuses" },
    ];
    const rows: string[][] = [];
    for (const replayCase of cases) {
      const timesMs: number[] = [];
      for (let attempt = 0; attempt < RUNS; attempt += 1) {
        const [elapsedMs, opened] = await timeOpen(root, `run-${attempt}`, replayCase.segments);
        if (opened !== (replayCase.expected === "opens")) {
          throw new Error(
            `${replayCase.name}: expected the journal to ${replayCase.expected === "opens" ? "open" : "refuse"}`,
          );
        }
        timesMs.push(elapsedMs);
      }
      rows.push([
        replayCase.name,
        replayCase.expected,
        formatNumber(Math.min(...timesMs), 1),
        formatNumber(Math.max(...timesMs), 1),
      ]);
    }
    console.log(`Journal.open on ${SEGMENT_BYTES / 1024 / 1024} MiB segments, ${RUNS} runs each:`);
    printTable(["segment", "result", "fastest ms", "slowest ms"], rows);
  } finally {
    await rm(root, { recursive: true, force: true });
  }
}
