import fs, { mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { syncBuiltinESMExports } from "node:module";
import { join } from "node:path";
import { crc32c } from "@node-rs/crc32";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { Journal, journalRecordChecksum } from "../../../../src/cluster/raft/storage/journal.js";
import { StorageCorruptionError, UnerasedWriteError } from "../../../../src/cluster/raft/types.js";
import { withTemporaryDirectory } from "./temp-directory.js";

const encoder = new TextEncoder();
const decoder = new TextDecoder();

function bytes(text: string): Uint8Array {
  return encoder.encode(text);
}

function text(value: Uint8Array | undefined): string | undefined {
  return value === undefined ? undefined : decoder.decode(value);
}

/** How each of the next synchronous writes behaves; the writes after the listed ones behave normally. */
type WriteFault = "copy-then-fail" | "fail";

/**
 * Runs `body` with the next synchronous file writes faulty as `faults` lists them ("copy-then-fail" writes the
 * bytes and then reports EIO, as a write whose data stays in the page cache does); answers what `body` threw and how
 * many writes it made.
 */
async function withWritesThat(
  faults: readonly WriteFault[],
  body: () => void,
): Promise<{ error: Error | undefined; writes: number }> {
  const original = fs.writeSync;
  let writes = 0;
  const eio = (): Error => Object.assign(new Error("EIO: i/o error, write"), { code: "EIO" });
  (fs as { writeSync: unknown }).writeSync = (...parameters: unknown[]): number => {
    const fault = faults[writes];
    writes += 1;
    if (fault === "fail") throw eio();
    const written = (original as (...values: unknown[]) => number)(...parameters);
    if (fault === "copy-then-fail") throw eio();
    return written;
  };
  syncBuiltinESMExports();
  try {
    body();
    return { error: undefined, writes };
  } catch (error) {
    return { error: error as Error, writes };
  } finally {
    fs.writeSync = original;
    syncBuiltinESMExports();
  }
}

/** Polls `condition` every 10 ms for up to 5 s. */
async function waitUntil(condition: () => boolean): Promise<void> {
  for (let attempt = 0; attempt < 500 && !condition(); attempt += 1) {
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  expect(condition()).toBe(true);
}

/** Runs `write` as one committed transaction. */
function transact(journal: Journal, write: (journal: Journal) => void): void {
  journal.begin();
  write(journal);
  journal.seal();
  journal.commitSync();
}

function segmentFiles(directory: string): string[] {
  return readdirSync(directory)
    .filter((name) => name.endsWith(".journal"))
    .sort();
}

/** The segment files of a journal directory and their bytes. */
function filesOf(directory: string): Map<string, Buffer> {
  return new Map(segmentFiles(directory).map((name) => [name, readFileSync(join(directory, name))]));
}

/** Writes `files` into a new directory `directory` (a copy of a journal to damage). */
function writeFiles(directory: string, files: ReadonlyMap<string, Buffer>): void {
  mkdirSync(directory);
  for (const [name, contents] of files) writeFileSync(join(directory, name), contents);
}

/** Where each record of a segment's bytes starts and ends, read by the documented layout (16-byte header first). */
function recordsOf(contents: Buffer): { readonly start: number; readonly end: number }[] {
  const records: { start: number; end: number }[] = [];
  for (let start = 16; start + 8 <= contents.byteLength; ) {
    const payloadBytes = contents.readUInt32LE(start);
    if (payloadBytes === 0) break;
    records.push({ start, end: start + 8 + payloadBytes });
    start += 8 + payloadBytes;
  }
  return records;
}

/** A copy of `contents` with bit `bit` of byte `offset` flipped. */
function withBitFlipped(contents: Buffer, offset: number, bit: number): Buffer {
  const flipped = Buffer.from(contents);
  flipped[offset] = (flipped[offset] ?? 0) ^ (1 << bit);
  return flipped;
}

/** Opens the journal expecting `StorageCorruptionError`, and returns it. */
function corruptionOpening(options: { directory: string; segmentBytes: number }): StorageCorruptionError {
  try {
    const journal = Journal.open(options);
    void journal.close();
  } catch (error) {
    expect(error).toBeInstanceOf(StorageCorruptionError);
    return error as StorageCorruptionError;
  }
  throw new Error(`the journal in ${options.directory} opened although it is damaged`);
}

describe("Journal", () => {
  it("keeps entries and records across a reopen, and forgets what was removed", async () => {
    await withTemporaryDirectory(async (directory) => {
      const journal = Journal.open({ directory });
      transact(journal, (writing) => {
        for (let index = 1; index <= 4; index += 1) writing.entries.put(7, index, bytes(`entry ${index}`));
        writing.records.put(7, "hardState", bytes("term 3"));
        writing.records.put(8, "logStart", bytes("0/0"));
      });
      transact(journal, (writing) => {
        writing.entries.remove(7, 1);
        writing.entries.put(7, 4, bytes("entry 4 replaced"));
        writing.records.remove(8, "logStart");
      });
      await journal.close();

      const reopened = Journal.open({ directory });
      expect(reopened.entries.bounds(7)).toEqual({ first: 2, last: 4 });
      expect(text(reopened.entries.get(7, 2))).toBe("entry 2");
      expect(text(reopened.entries.get(7, 4))).toBe("entry 4 replaced");
      expect(reopened.entries.get(7, 1)).toBeUndefined();
      expect(reopened.entries.bounds(8)).toBeNull();
      expect(text(reopened.records.get(7, "hardState"))).toBe("term 3");
      expect(reopened.records.get(8, "logStart")).toBeUndefined();
      await reopened.close();
    });
  });

  it("shows a transaction's writes to reads until it is sealed, and only the committed state afterwards", async () => {
    await withTemporaryDirectory(async (directory) => {
      const journal = Journal.open({ directory });
      transact(journal, (writing) => writing.entries.put(1, 1, bytes("durable")));
      journal.begin();
      journal.entries.put(1, 1, bytes("staged"));
      journal.records.put(1, "hardState", bytes("staged"));
      expect(text(journal.entries.get(1, 1))).toBe("staged");
      expect(text(journal.records.get(1, "hardState"))).toBe("staged");
      journal.seal();
      expect(text(journal.entries.get(1, 1))).toBe("durable");
      expect(journal.records.get(1, "hardState")).toBeUndefined();
      journal.commitSync();
      expect(text(journal.entries.get(1, 1))).toBe("staged");
      journal.begin();
      journal.entries.put(1, 2, bytes("aborted"));
      journal.seal();
      journal.abort();
      expect(journal.entries.get(1, 2)).toBeUndefined();
      await journal.close();
    });
  });

  it("commits on the thread pool as well, with the same result", async () => {
    await withTemporaryDirectory(async (directory) => {
      const journal = Journal.open({ directory });
      journal.begin();
      journal.entries.put(2, 1, bytes("from the pool"));
      journal.seal();
      await journal.commit();
      expect(text(journal.entries.get(2, 1))).toBe("from the pool");
      await journal.close();
      const reopened = Journal.open({ directory });
      expect(text(reopened.entries.get(2, 1))).toBe("from the pool");
      await reopened.close();
    });
  });

  it("takes a torn last write for torn even when its payload holds the bytes of a valid record", async () => {
    await withTemporaryDirectory(async (directory) => {
      // A record as a publisher could put it in a message's variables: a record put, checksummed as the layout says
      // but without knowing where it will lie.
      const name = Buffer.from("hardState");
      const value = Buffer.from("forged");
      const payload = Buffer.alloc(1 + 4 + 2 + name.byteLength + 4 + value.byteLength);
      let at = payload.writeUInt8(3, 0);
      at = payload.writeUInt32LE(1, at);
      at = payload.writeUInt16LE(name.byteLength, at);
      at += name.copy(payload, at);
      at = payload.writeUInt32LE(value.byteLength, at);
      value.copy(payload, at);
      const forged = Buffer.alloc(8 + payload.byteLength);
      forged.writeUInt32LE(payload.byteLength, 0);
      forged.writeUInt32LE(crc32c(payload), 4);
      payload.copy(forged, 8);

      const journal = Journal.open({ directory, segmentBytes: 64 * 1024 });
      transact(journal, (writing) => writing.entries.put(1, 1, bytes("kept")));
      const variables = Buffer.concat([Buffer.alloc(100, 0x61), forged, Buffer.alloc(12 * 1024, 0x62)]);
      transact(journal, (writing) => writing.entries.put(1, 2, variables));
      await journal.close();
      // The crash lost the write's last pages: the forged record before them is whole.
      const [segment] = segmentFiles(directory);
      const path = join(directory, segment as string);
      const contents = readFileSync(path);
      const last = recordsOf(contents).at(-1) as { start: number; end: number };
      contents.fill(0, last.end - 8 * 1024, last.end);
      writeFileSync(path, contents);
      expect(contents.indexOf(forged)).toBeGreaterThan(last.start);

      const recovered = Journal.open({ directory, segmentBytes: 64 * 1024 });
      expect(text(recovered.entries.get(1, 1))).toBe("kept");
      expect(recovered.entries.get(1, 2)).toBeUndefined();
      expect(recovered.records.get(1, "hardState")).toBeUndefined();
      await recovered.close();
    });
  });

  it("reads and appends to a segment of the first format, whose checksums are not bound to a position", async () => {
    await withTemporaryDirectory(async (directory) => {
      const journal = Journal.open({ directory, segmentBytes: 64 * 1024 });
      transact(journal, (writing) => writing.entries.put(1, 1, bytes("first format")));
      transact(journal, (writing) => writing.records.put(1, "hardState", bytes("term 3")));
      await journal.close();
      // What an earlier version wrote: format 1 in the header, each checksum the payload's alone.
      const [segment] = segmentFiles(directory);
      const path = join(directory, segment as string);
      const contents = readFileSync(path);
      contents.writeUInt32LE(1, 8);
      for (const record of recordsOf(contents)) {
        contents.writeUInt32LE(crc32c(contents.subarray(record.start + 8, record.end)), record.start + 4);
      }
      writeFileSync(path, contents);

      const reopened = Journal.open({ directory, segmentBytes: 64 * 1024 });
      expect(text(reopened.entries.get(1, 1))).toBe("first format");
      transact(reopened, (writing) => writing.entries.put(1, 2, bytes("appended in the first format")));
      await reopened.close();
      const after = readFileSync(path);
      const appended = recordsOf(after).at(-1) as { start: number; end: number };
      expect(after.readUInt32LE(appended.start + 4)).toBe(crc32c(after.subarray(appended.start + 8, appended.end)));
      const again = Journal.open({ directory, segmentBytes: 64 * 1024 });
      expect(text(again.entries.get(1, 2))).toBe("appended in the first format");
      expect(text(again.records.get(1, "hardState"))).toBe("term 3");
      await again.close();
    });
  });

  it("drops a transaction torn by a crash as a whole and zeroes it, so later writes survive the next reopen", async () => {
    await withTemporaryDirectory(async (directory) => {
      const journal = Journal.open({ directory, segmentBytes: 64 * 1024 });
      transact(journal, (writing) => writing.entries.put(1, 1, bytes("kept")));
      transact(journal, (writing) => {
        writing.entries.put(1, 2, bytes("torn"));
        writing.records.put(1, "hardState", bytes("torn"));
      });
      await journal.close();
      // Damage the last byte of the second record's payload, as a crash in the middle of its write would.
      const [segment] = segmentFiles(directory);
      const path = join(directory, segment as string);
      const contents = readFileSync(path);
      const lastWritten = contents.findLastIndex((value) => value !== 0);
      contents[lastWritten] = (contents[lastWritten] ?? 0) ^ 0xff;
      writeFileSync(path, contents);

      const recovered = Journal.open({ directory, segmentBytes: 64 * 1024 });
      expect(text(recovered.entries.get(1, 1))).toBe("kept");
      expect(recovered.entries.get(1, 2)).toBeUndefined();
      expect(recovered.records.get(1, "hardState")).toBeUndefined();
      transact(recovered, (writing) => writing.entries.put(1, 2, bytes("x")));
      await recovered.close();
      const again = Journal.open({ directory, segmentBytes: 64 * 1024 });
      expect(again.entries.bounds(1)).toEqual({ first: 1, last: 2 });
      expect(text(again.entries.get(1, 2))).toBe("x");
      await again.close();
    });
  });

  it("zeroes what a crash left of a write whose first page was lost, so later records are never followed by it", async () => {
    await withTemporaryDirectory(async (directory) => {
      const segmentBytes = 16 * 1024;
      const journal = Journal.open({ directory, segmentBytes });
      transact(journal, (writing) => writing.entries.put(1, 1, new Uint8Array(100).fill(1)));
      const tornStart = readFileSync(join(directory, segmentFiles(directory)[0] as string)).findLastIndex(
        (value) => value !== 0,
      );
      // A record over three pages of which only the later two reached the disk before the crash.
      transact(journal, (writing) => writing.entries.put(1, 2, new Uint8Array(9000).fill(0xab)));
      await journal.close();
      const path = join(directory, segmentFiles(directory)[0] as string);
      const contents = readFileSync(path);
      contents.fill(0, tornStart + 1, 4096);
      writeFileSync(path, contents);

      const recovered = Journal.open({ directory, segmentBytes });
      expect(recovered.entries.get(1, 2)).toBeUndefined();
      // A shorter record ends inside the torn one's remains; a large one then starts the next segment.
      transact(recovered, (writing) => writing.entries.put(1, 2, new Uint8Array(4500).fill(2)));
      transact(recovered, (writing) => writing.entries.put(1, 3, new Uint8Array(12000).fill(3)));
      expect(segmentFiles(directory)).toHaveLength(2);
      await recovered.close();
      const reopened = Journal.open({ directory, segmentBytes });
      expect(reopened.entries.get(1, 2)).toEqual(Buffer.alloc(4500, 2));
      expect(reopened.entries.get(1, 3)?.byteLength).toBe(12000);
      await reopened.close();
    });
  });

  it("reads back the right bytes after many rollovers, checkpoints and deletions", async () => {
    await withTemporaryDirectory(async (directory) => {
      const journal = Journal.open({ directory, segmentBytes: 300 });
      const model = new Map<number, string>();
      for (let number = 0; number < 200; number += 1) {
        transact(journal, (writing) => {
          writing.records.put(1, `record ${number % 5}`, bytes("x".repeat(number % 17)));
          for (let step = 0; step < (number % 3) + 1; step += 1) {
            const index = ((number * 7 + step) % 25) + 1;
            if ((number + step) % 4 === 0) {
              writing.entries.remove(1, index);
              model.delete(index);
            } else {
              const value = `${number}:${step}:${"y".repeat(number % 40)}`;
              writing.entries.put(1, index, bytes(value));
              model.set(index, value);
            }
          }
        });
        for (let index = 1; index <= 25; index += 1) expect(text(journal.entries.get(1, index))).toBe(model.get(index));
      }
      // Every segment, and the next one prepared in the background, is readable by the broker's user alone.
      await waitUntil(() => readdirSync(directory).some((name) => name.endsWith(".prepared")));
      const files = readdirSync(directory).filter((name) => name.endsWith(".journal") || name.endsWith(".prepared"));
      expect(files.length).toBeGreaterThan(2);
      for (const name of files) expect(statSync(join(directory, name)).mode & 0o777).toBe(0o600);
      await journal.close();
    });
  });

  it("refuses a damaged record or stray bytes in a segment that is not the last, changing nothing", async () => {
    await withTemporaryDirectory(async (directory) => {
      const journal = Journal.open({ directory, segmentBytes: 256 });
      for (let index = 1; index <= 8; index += 1) {
        transact(journal, (writing) => writing.entries.put(1, index, bytes(`entry ${index} `.repeat(8))));
      }
      await journal.close();
      const files = filesOf(directory);
      expect(files.size).toBeGreaterThan(2);
      const [oldest] = segmentFiles(directory);
      const original = files.get(oldest as string) as Buffer;
      const records = recordsOf(original);
      const lastRecord = records[records.length - 1] as { start: number; end: number };
      const damages = [
        // Its last record, which no intact record follows in that segment: a newer segment was written after it.
        { name: "last record", contents: withBitFlipped(original, lastRecord.end - 1, 0), offset: lastRecord.start },
        { name: "stray byte", contents: withBitFlipped(original, lastRecord.end + 3, 5), offset: lastRecord.end },
      ];
      for (const damage of damages) {
        const damaged = join(directory, damage.name);
        writeFiles(damaged, new Map([...files, [oldest as string, damage.contents]]));
        const error = corruptionOpening({ directory: damaged, segmentBytes: 256 });
        expect(error.location).toBe(`${join(damaged, oldest as string)}, byte ${damage.offset}`);
        expect(error.message).toMatch(/not the newest/);
        expect(filesOf(damaged)).toEqual(new Map([...files, [oldest as string, damage.contents]]));
      }
    });
  });

  it("deletes the oldest segments once none of their entries is live, keeping every record", async () => {
    await withTemporaryDirectory(async (directory) => {
      const journal = Journal.open({ directory, segmentBytes: 512 });
      transact(journal, (writing) => {
        writing.records.put(1, "logStart", bytes("0"));
        writing.records.put(2, "hardState", bytes("never rewritten"));
      });
      for (let index = 1; index <= 40; index += 1) {
        transact(journal, (writing) => writing.entries.put(1, index, bytes(`entry ${index} `.repeat(4))));
      }
      const segmentsWritten = journal.segmentCount;
      expect(segmentsWritten).toBeGreaterThan(4);
      // Compaction: the first 35 entries go, so every segment holding only those can go too. Not yet with the record
      // that removes them: recovery may drop a damaged last record as torn, and the entries it removed must be there.
      transact(journal, (writing) => {
        for (let index = 1; index <= 35; index += 1) writing.entries.remove(1, index);
        writing.records.put(1, "logStart", bytes("35"));
      });
      expect(journal.segmentCount).toBeGreaterThanOrEqual(segmentsWritten);
      // The next records delete them, a few per record.
      for (let record = 0; record < segmentsWritten; record += 1) {
        transact(journal, (writing) => writing.records.put(2, "after compaction", bytes("the next record")));
      }
      expect(journal.segmentCount).toBeLessThan(segmentsWritten);
      expect(segmentFiles(directory)).toHaveLength(journal.segmentCount);
      await journal.close();

      const reopened = Journal.open({ directory, segmentBytes: 512 });
      expect(reopened.entries.bounds(1)).toEqual({ first: 36, last: 40 });
      expect(text(reopened.entries.get(1, 40))).toBe("entry 40 ".repeat(4));
      expect(text(reopened.records.get(1, "logStart"))).toBe("35");
      expect(text(reopened.records.get(2, "hardState"))).toBe("never rewritten");
      await reopened.close();
    });
  });

  it("deletes at most two dead segments per commit, so a large compaction does not hold one commit", async () => {
    await withTemporaryDirectory(async (directory) => {
      const journal = Journal.open({ directory, segmentBytes: 512 });
      for (let index = 1; index <= 40; index += 1) {
        transact(journal, (writing) => writing.entries.put(1, index, bytes(`entry ${index} `.repeat(4))));
      }
      transact(journal, (writing) => {
        for (let index = 1; index <= 38; index += 1) writing.entries.remove(1, index);
      });
      const oldestSegment = (): number => Number.parseInt(segmentFiles(directory)[0] as string, 10);
      const deadFrom = oldestSegment();
      // Every commit after the compaction deletes the two oldest of the segments it emptied, until none is left.
      const deletedPerCommit: number[] = [];
      for (let commit = 1; commit <= 10; commit += 1) {
        const before = oldestSegment();
        transact(journal, (writing) => writing.records.put(2, "after compaction", bytes(`record ${commit}`)));
        deletedPerCommit.push(oldestSegment() - before);
        expect(segmentFiles(directory)).toHaveLength(journal.segmentCount);
      }
      expect(oldestSegment() - deadFrom).toBeGreaterThan(4);
      expect(Math.max(...deletedPerCommit)).toBe(2);
      await journal.close();

      const reopened = Journal.open({ directory, segmentBytes: 512 });
      expect(reopened.entries.bounds(1)).toEqual({ first: 39, last: 40 });
      expect(text(reopened.records.get(2, "after compaction"))).toBe("record 10");
      await reopened.close();
    });
  });

  it("writes the checkpoint again when a crash cut short the first write of a new segment", async () => {
    await withTemporaryDirectory(async (directory) => {
      const journal = Journal.open({ directory, segmentBytes: 256 });
      transact(journal, (writing) => writing.records.put(1, "hardState", bytes("only here")));
      for (let index = 1; index <= 6; index += 1) {
        transact(journal, (writing) => writing.entries.put(1, index, bytes(`entry ${index} `.repeat(6))));
      }
      await journal.close();
      // The crash: the newest segment's first write (its checkpoint and a transaction) never reached the disk.
      const segments = segmentFiles(directory);
      const newest = join(directory, segments[segments.length - 1] as string);
      const contents = readFileSync(newest);
      contents.fill(0, 16);
      writeFileSync(newest, contents);

      const recovered = Journal.open({ directory, segmentBytes: 256 });
      transact(recovered, (writing) => writing.entries.put(1, 7, bytes("after the crash")));
      // Every older entry dies, so every older segment goes (with the next record): the record must survive in the
      // newest checkpoint.
      transact(recovered, (writing) => {
        for (let index = 1; index <= 6; index += 1) writing.entries.remove(1, index);
      });
      transact(recovered, (writing) => writing.entries.put(1, 8, bytes("next")));
      // Two per record: the record after deletes the rest.
      transact(recovered, (writing) => writing.records.put(1, "commitIndex", bytes("8")));
      expect(recovered.segmentCount).toBe(1);
      await recovered.close();
      const reopened = Journal.open({ directory, segmentBytes: 256 });
      expect(text(reopened.records.get(1, "hardState"))).toBe("only here");
      expect(text(reopened.entries.get(1, 7))).toBe("after the crash");
      await reopened.close();
    });
  });

  it("stops preparing the next segment when closed, leaving no prepared file behind", async () => {
    await withTemporaryDirectory(async (directory) => {
      // Eight megabytes to prepare, one flush per megabyte: closing right after the preparation starts lands inside it.
      const segmentBytes = 8 * 1024 * 1024;
      const journal = Journal.open({ directory, segmentBytes });
      const halfSegment = new Uint8Array(segmentBytes / 2 + 1);
      transact(journal, (writing) => writing.entries.put(1, 1, halfSegment));
      transact(journal, (writing) => writing.entries.put(1, 2, bytes("past the half: preparation starts")));
      await journal.close();
      expect(readdirSync(directory).filter((name) => name.endsWith(".prepared"))).toEqual([]);

      const reopened = Journal.open({ directory, segmentBytes });
      expect(text(reopened.entries.get(1, 2))).toBe("past the half: preparation starts");
      await reopened.close();
    });
  });

  it("refuses every transaction after a failed write", async () => {
    await withTemporaryDirectory(async (directory) => {
      const journal = Journal.open({ directory });
      transact(journal, (writing) => writing.entries.put(1, 1, bytes("before")));
      // Closing the segment's descriptor behind the journal's back makes its next write fail.
      const { closeSync } = await import("node:fs");
      const segments = (journal as unknown as { segments: { fd: number }[] }).segments;
      closeSync(segments[0]?.fd as number);
      expect(() => transact(journal, (writing) => writing.entries.put(1, 2, bytes("lost")))).toThrow();
      expect(() => transact(journal, (writing) => writing.entries.put(1, 3, bytes("refused")))).toThrow(
        /failed earlier/,
      );
      expect(journal.entries.get(1, 2)).toBeUndefined();
    });
  });

  it("erases a write that failed with EIO, so a journal opened again in the same process does not replay it", async () => {
    await withTemporaryDirectory(async (directory) => {
      const journal = Journal.open({ directory });
      transact(journal, (writing) => {
        writing.entries.put(1, 1, bytes("acknowledged"));
        writing.records.put(1, "hard", bytes("term 5"));
      });
      // What Linux does when a write's data cannot reach the disk: the bytes are in the page cache, where reads find
      // them, and the write reports EIO.
      const outcome = await withWritesThat(["copy-then-fail"], () =>
        transact(journal, (writing) => {
          writing.entries.put(1, 2, bytes("never acknowledged"));
          writing.records.put(1, "hard", bytes("term 6, voted for 2"));
        }),
      );
      expect(outcome.error?.message).toMatch(/EIO/);
      expect(outcome.writes).toBeGreaterThanOrEqual(2);
      await journal.close();

      const reopened = Journal.open({ directory });
      expect(text(reopened.entries.get(1, 1))).toBe("acknowledged");
      expect(reopened.entries.get(1, 2)).toBeUndefined();
      expect(text(reopened.records.get(1, "hard"))).toBe("term 5");
      transact(reopened, (writing) => writing.entries.put(1, 2, bytes("written again")));
      await reopened.close();
      expect(text(Journal.open({ directory }).entries.get(1, 2))).toBe("written again");
    });
  });

  it("fails with UnerasedWriteError when the failed write cannot be erased either", async () => {
    await withTemporaryDirectory(async (directory) => {
      const journal = Journal.open({ directory });
      transact(journal, (writing) => writing.entries.put(1, 1, bytes("acknowledged")));
      const outcome = await withWritesThat(["copy-then-fail", "fail"], () =>
        transact(journal, (writing) => writing.entries.put(1, 2, bytes("never acknowledged"))),
      );
      expect(outcome.error).toBeInstanceOf(UnerasedWriteError);
      expect(outcome.error?.message).toMatch(/\.journal, byte \d+ failed \(EIO.*could not be erased \(EIO/);
      expect(() => transact(journal, (writing) => writing.entries.put(1, 3, bytes("refused")))).toThrow(
        /failed earlier/,
      );
      await journal.close();
    });
  });

  it("recovers exactly the committed transactions, whatever was written and compacted (property)", async () => {
    await withTemporaryDirectory(async (root) => {
      let run = 0;
      const operation = fc.oneof(
        fc.record({ kind: fc.constant("put" as const), index: fc.integer({ min: 1, max: 30 }), size: fc.nat(90) }),
        fc.record({ kind: fc.constant("remove" as const), index: fc.integer({ min: 1, max: 30 }) }),
        fc.record({ kind: fc.constant("record" as const), value: fc.string({ maxLength: 20 }) }),
      );
      await fc.assert(
        fc.asyncProperty(fc.array(fc.array(operation, { maxLength: 12 }), { maxLength: 25 }), async (transactions) => {
          run += 1;
          const directory = join(root, String(run));
          const model = new Map<number, string>();
          let record: string | undefined;
          const journal = Journal.open({ directory, segmentBytes: 400 });
          for (const [number, operations] of transactions.entries()) {
            transact(journal, (writing) => {
              for (const step of operations) {
                if (step.kind === "put") {
                  const value = `${number}:${step.index}:${"v".repeat(step.size)}`;
                  writing.entries.put(3, step.index, bytes(value));
                  model.set(step.index, value);
                } else if (step.kind === "remove") {
                  writing.entries.remove(3, step.index);
                  model.delete(step.index);
                } else {
                  writing.records.put(3, "record", bytes(step.value));
                  record = step.value;
                }
              }
            });
          }
          await journal.close();
          const reopened = Journal.open({ directory, segmentBytes: 400 });
          for (let index = 1; index <= 30; index += 1) {
            expect(text(reopened.entries.get(3, index))).toBe(model.get(index));
          }
          expect(text(reopened.records.get(3, "record"))).toBe(record);
          await reopened.close();
        }),
        { numRuns: 60 },
      );
    });
  });
});

describe("Journal with damaged bytes", () => {
  it("refuses a damaged record that intact records follow, naming the file and the offset, and changes nothing", async () => {
    await withTemporaryDirectory(async (root) => {
      const written = join(root, "written");
      const journal = Journal.open({ directory: written, segmentBytes: 64 * 1024 });
      transact(journal, (writing) => writing.records.put(1, "hardState", bytes("term 1, voted for 2")));
      for (let index = 1; index <= 3; index += 1) {
        transact(journal, (writing) => writing.entries.put(1, index, bytes(`entry ${index}`)));
      }
      // Larger than two checksum blocks: finding it after the damaged entry 3 checks a checksum taken from the
      // checksums of prefixes.
      transact(journal, (writing) => writing.entries.put(1, 4, new Uint8Array(20_000).fill(4)));
      transact(journal, (writing) => writing.records.put(1, "hardState", bytes("term 2, voted for 3")));
      await journal.close();
      const files = filesOf(written);
      const [name] = segmentFiles(written);
      const original = files.get(name as string) as Buffer;
      // The checkpoint, the hard state, entries 1 to 4, the newer hard state.
      const records = recordsOf(original);
      expect(records).toHaveLength(7);
      const damagedRecord = records[4] as { start: number; end: number };
      const nextRecord = records[5] as { start: number; end: number };
      const positions = {
        length: damagedRecord.start,
        "length, high byte": damagedRecord.start + 3,
        checksum: damagedRecord.start + 5,
        payload: damagedRecord.start + 9,
        "last byte": damagedRecord.end - 1,
      };
      for (const [where, position] of Object.entries(positions)) {
        for (const bit of [0, 7]) {
          const directory = join(root, `${where} ${bit}`);
          const damaged = withBitFlipped(original, position, bit);
          writeFiles(directory, new Map([[name as string, damaged]]));
          const error = corruptionOpening({ directory, segmentBytes: 64 * 1024 });
          expect(error.location).toBe(`${join(directory, name as string)}, byte ${damagedRecord.start}`);
          expect(error.message).toContain(`an intact record follows at byte ${nextRecord.start}`);
          expect(error.message).toContain("damage, not a torn write");
          expect(filesOf(directory)).toEqual(new Map([[name as string, damaged]]));
        }
      }
    });
  });

  it("opens after a torn last write, cut anywhere, keeping every earlier record and zeroing the cut bytes", async () => {
    await withTemporaryDirectory(async (root) => {
      const written = join(root, "written");
      const segmentBytes = 64 * 1024;
      const journal = Journal.open({ directory: written, segmentBytes });
      transact(journal, (writing) => writing.records.put(1, "hardState", bytes("term 1")));
      transact(journal, (writing) => writing.entries.put(1, 1, bytes("kept")));
      // Three pages, so that a crash can lose its first page and keep the later ones.
      transact(journal, (writing) => {
        writing.entries.put(1, 2, new Uint8Array(9000).fill(0xab));
        writing.records.put(1, "hardState", bytes("term 2"));
      });
      await journal.close();
      const [name] = segmentFiles(written);
      const original = filesOf(written).get(name as string) as Buffer;
      const torn = recordsOf(original).at(-1) as { start: number; end: number };
      const firstPageEnd = Math.ceil((torn.start + 1) / 4096) * 4096;
      const tears = new Map<string, Buffer>();
      for (const writtenBytes of [1, 4, 8, 9, 100, torn.end - torn.start - 1]) {
        const contents = Buffer.from(original);
        contents.fill(0, torn.start + writtenBytes, torn.end);
        tears.set(`cut after ${writtenBytes} bytes`, contents);
      }
      const firstPageLost = Buffer.from(original);
      firstPageLost.fill(0, torn.start, firstPageEnd);
      tears.set("first page lost", firstPageLost);
      const middlePageLost = Buffer.from(original);
      middlePageLost.fill(0, firstPageEnd, firstPageEnd + 4096);
      tears.set("middle page lost", middlePageLost);

      for (const [tear, contents] of tears) {
        const directory = join(root, tear);
        writeFiles(directory, new Map([[name as string, contents]]));
        const recovered = Journal.open({ directory, segmentBytes });
        expect(text(recovered.entries.get(1, 1))).toBe("kept");
        expect(recovered.entries.get(1, 2)).toBeUndefined();
        expect(text(recovered.records.get(1, "hardState"))).toBe("term 1");
        // Reported with where it started, its last byte that is not zero, and how many of its bytes are not.
        const lastWritten = contents.findLastIndex((value) => value !== 0);
        const nonZero = contents.subarray(torn.start).filter((value) => value !== 0).length;
        expect(recovered.tornTailCutOnOpen).toEqual([
          expect.stringContaining(
            `byte ${torn.start}: a torn write reaching byte ${lastWritten + 1}, ` +
              `${nonZero} of its ${lastWritten + 1 - torn.start} bytes not zero (`,
          ),
        ]);
        await recovered.close();
        const after = readFileSync(join(directory, name as string));
        expect(after.subarray(0, torn.start).equals(original.subarray(0, torn.start))).toBe(true);
        expect(after.subarray(torn.start).every((value) => value === 0)).toBe(true);
        const reopened = Journal.open({ directory, segmentBytes });
        expect(reopened.tornTailCutOnOpen).toEqual([]);
        await reopened.close();
      }
    });
  });

  it("refuses a last record whose checksum matches but which does not decode, rather than drop it", async () => {
    await withTemporaryDirectory(async (directory) => {
      const journal = Journal.open({ directory, segmentBytes: 4096 });
      transact(journal, (writing) => writing.entries.put(1, 1, bytes("kept")));
      await journal.close();
      const [name] = segmentFiles(directory);
      const path = join(directory, name as string);
      const contents = readFileSync(path);
      const end = (recordsOf(contents).at(-1) as { end: number }).end;
      // A record of operation 9, which no version of the writer has.
      const payload = Buffer.from([9]);
      contents.writeUInt32LE(payload.byteLength, end);
      contents.writeUInt32LE(journalRecordChecksum(crc32c(payload), 1, end), end + 4);
      payload.copy(contents, end + 8);
      writeFileSync(path, contents);
      const error = corruptionOpening({ directory, segmentBytes: 4096 });
      expect(error.location).toBe(`${path}, byte ${end}`);
      expect(error.message).toMatch(/checksum matches but it does not decode: it holds operation 9/);
      expect(readFileSync(path).equals(contents)).toBe(true);
    });
  });

  it("refuses to begin a transaction while a commit is being written", async () => {
    await withTemporaryDirectory(async (directory) => {
      const journal = Journal.open({ directory });
      journal.begin();
      journal.entries.put(1, 1, bytes("on its way"));
      journal.seal();
      const committed = journal.commit();
      expect(() => journal.begin()).toThrow(/a journal commit is still being written/);
      await committed;
      transact(journal, (writing) => writing.entries.put(1, 2, bytes("after it")));
      await journal.close();
    });
  });

  it("refuses a flipped bit anywhere, unless a torn last write could have left it or it is in the zeros after it (property)", async () => {
    await withTemporaryDirectory(async (root) => {
      let run = 0;
      const operation = fc.oneof(
        fc.record({
          kind: fc.constant("put" as const),
          index: fc.integer({ min: 1, max: 10 }),
          // Now and then a record over 1 KiB, which the scan for intact records checksums from its prefix checksums.
          size: fc.oneof(
            { arbitrary: fc.nat(120), weight: 5 },
            { arbitrary: fc.integer({ min: 1000, max: 3000 }), weight: 1 },
          ),
        }),
        fc.record({ kind: fc.constant("remove" as const), index: fc.integer({ min: 1, max: 10 }) }),
        fc.record({
          kind: fc.constant("record" as const),
          name: fc.constantFrom("hardState", "logStart"),
          value: fc.string({ maxLength: 30 }),
        }),
      );
      await fc.assert(
        fc.asyncProperty(
          fc.array(fc.array(operation, { minLength: 1, maxLength: 5 }), { minLength: 1, maxLength: 12 }),
          fc.constantFrom(512, 1024, 64 * 1024),
          fc.record({
            file: fc.nat(),
            position: fc.nat(),
            bit: fc.integer({ min: 0, max: 7 }),
            // Most bytes of a large segment are zeros after the records, and the newest record is a small part of
            // the rest: aim at each of them a third of the time.
            target: fc.constantFrom("anywhere", "records", "newest record"),
          }),
          async (transactions, segmentBytes, flip) => {
            run += 1;
            const written = join(root, `${run}`);
            type State = { readonly entries: Map<number, string>; readonly records: Map<string, string> };
            const states: State[] = [{ entries: new Map(), records: new Map() }];
            const journal = Journal.open({ directory: written, segmentBytes });
            for (const [number, operations] of transactions.entries()) {
              const previous = states[states.length - 1] as State;
              const state: State = { entries: new Map(previous.entries), records: new Map(previous.records) };
              transact(journal, (writing) => {
                for (const step of operations) {
                  if (step.kind === "put") {
                    const value = `${number}:${step.index}:${"v".repeat(step.size)}`;
                    writing.entries.put(1, step.index, bytes(value));
                    state.entries.set(step.index, value);
                  } else if (step.kind === "remove") {
                    writing.entries.remove(1, step.index);
                    state.entries.delete(step.index);
                  } else {
                    writing.records.put(1, step.name, bytes(step.value));
                    state.records.set(step.name, step.value);
                  }
                }
              });
              states.push(state);
            }
            await journal.close();

            const files = filesOf(written);
            const names = [...files.keys()];
            const name = (flip.target === "newest record" ? names.at(-1) : names[flip.file % names.length]) as string;
            const isLastSegment = name === names[names.length - 1];
            const original = files.get(name) as Buffer;
            const records = recordsOf(original);
            const lastRecord = records.at(-1) as { start: number; end: number };
            const position =
              flip.target === "newest record"
                ? lastRecord.start + (flip.position % (lastRecord.end - lastRecord.start))
                : flip.position %
                  (flip.target === "records"
                    ? Math.min(original.byteLength, lastRecord.end + 16)
                    : original.byteLength);
            const damaged = withBitFlipped(original, position, flip.bit);
            const damagedFiles = new Map([...files, [name, damaged]]);
            const directory = `${written}-damaged`;
            writeFiles(directory, damagedFiles);

            if (!isLastSegment || position < lastRecord.start) {
              // In an older segment, the segment header, or a record that an intact one follows.
              corruptionOpening({ directory, segmentBytes });
              expect(filesOf(directory)).toEqual(damagedFiles);
              return;
            }
            // In the last record of the last segment (a torn write of it looks the same: it is dropped, and nothing
            // before it), or in the zeros after it (zeroed again).
            const inLastRecord = position < lastRecord.end;
            const expected = states[inLastRecord ? states.length - 2 : states.length - 1] as State;
            const recovered = Journal.open({ directory, segmentBytes });
            for (let index = 1; index <= 10; index += 1) {
              expect(text(recovered.entries.get(1, index))).toBe(expected.entries.get(index));
            }
            for (const record of ["hardState", "logStart"]) {
              expect(text(recovered.records.get(1, record))).toBe(expected.records.get(record));
            }
            await recovered.close();
            const repaired = readFileSync(join(directory, name));
            if (inLastRecord) {
              expect(repaired.subarray(0, lastRecord.start).equals(original.subarray(0, lastRecord.start))).toBe(true);
              expect(repaired.subarray(lastRecord.start).every((value) => value === 0)).toBe(true);
            } else {
              expect(repaired.equals(original)).toBe(true);
            }
          },
        ),
        { numRuns: 150 },
      );
    });
  });
});

describe("Journal after a crash", () => {
  /** A new segment's file as it was durable before anything was written into it: the header, then zeros. */
  function emptySegmentLike(written: Buffer): Buffer {
    return Buffer.concat([written.subarray(0, 16), Buffer.alloc(written.byteLength - 16)]);
  }

  it("recovers the transactions durable before the crash, and none torn by it (property)", async () => {
    await withTemporaryDirectory(async (root) => {
      let run = 0;
      const transactionShape = fc.record({
        operations: fc.array(
          fc.record({ index: fc.integer({ min: 1, max: 12 }), size: fc.nat(150), remove: fc.boolean() }),
          { minLength: 1, maxLength: 6 },
        ),
        // A record makes the checkpoint that opens each segment long enough to span sectors of its own.
        hardStateBytes: fc.nat(900),
      });
      await fc.assert(
        fc.asyncProperty(
          fc.array(transactionShape, { minLength: 1, maxLength: 12 }),
          fc.nat(),
          fc.boolean(),
          fc.infiniteStream(fc.boolean()),
          async (transactions, crashSeed, crashInCheckpoint, keepSector) => {
            run += 1;
            const directory = join(root, String(run));
            const segmentBytes = 1024;
            // Run every transaction, keeping the files and the expected contents after each.
            const journal = Journal.open({ directory, segmentBytes });
            type Model = { readonly entries: Map<number, string>; readonly hardState: string | undefined };
            const states: Map<string, Buffer>[] = [filesOf(directory)];
            const models: Model[] = [{ entries: new Map(), hardState: undefined }];
            for (const [number, transaction] of transactions.entries()) {
              const entries = new Map((models[models.length - 1] as Model).entries);
              const hardState = `${number}:${"h".repeat(transaction.hardStateBytes)}`;
              transact(journal, (writing) => {
                for (const operation of transaction.operations) {
                  if (operation.remove) {
                    writing.entries.remove(1, operation.index);
                    entries.delete(operation.index);
                  } else {
                    const value = `${number}/${operation.index}/${"z".repeat(operation.size)}`;
                    writing.entries.put(1, operation.index, bytes(value));
                    entries.set(operation.index, value);
                  }
                }
                writing.records.put(1, "hardState", bytes(hardState));
              });
              states.push(filesOf(directory));
              models.push({ entries, hardState });
            }
            await journal.close();

            // The crash interrupts transaction `crashed`. Its writes go one after the other, each durable before the
            // next starts: the checkpoint of the segment it opens (when it opens one), then its record. Of the
            // 512-byte sectors the interrupted write changes, some reach the disk and some do not. Deletions of
            // older segments come only after the record is durable.
            const crashed = 1 + (crashSeed % transactions.length);
            const before = states[crashed - 1] as Map<string, Buffer>;
            const after = states[crashed] as Map<string, Buffer>;
            const checkpointed = new Map(before);
            let opensSegment = false;
            for (const [name, written] of after) {
              const previous = before.get(name) ?? emptySegmentLike(written);
              checkpointed.set(name, previous);
              if (previous.readUInt32LE(16) === 0 && written.readUInt32LE(16) !== 0) {
                opensSegment = true;
                const withCheckpoint = Buffer.from(previous);
                written.copy(withCheckpoint, 16, 16, 16 + 8 + written.readUInt32LE(16));
                checkpointed.set(name, withCheckpoint);
              }
            }
            const tornCheckpoint = opensSegment && crashInCheckpoint;
            const [from, to] = tornCheckpoint ? [before, checkpointed] : [checkpointed, after];
            let everySectorKept = true;
            const sectors = keepSector[Symbol.iterator]();
            const crashState = new Map(before);
            for (const [name, written] of to) {
              const previous = from.get(name) ?? emptySegmentLike(written);
              const torn = Buffer.from(written);
              for (let sector = 0; sector < written.byteLength; sector += 512) {
                const end = Math.min(written.byteLength, sector + 512);
                if (written.subarray(sector, end).equals(previous.subarray(sector, end))) continue;
                if (sectors.next().value === true) continue;
                everySectorKept = false;
                previous.copy(torn, sector, sector, end);
              }
              crashState.set(name, torn);
            }
            const crashDirectory = `${directory}-crashed`;
            writeFiles(crashDirectory, crashState);

            const recovered = Journal.open({ directory: crashDirectory, segmentBytes });
            const durable = !tornCheckpoint && everySectorKept;
            const expected = (durable ? models[crashed] : models[crashed - 1]) as Model;
            for (let index = 1; index <= 12; index += 1) {
              expect(text(recovered.entries.get(1, index))).toBe(expected.entries.get(index));
            }
            expect(text(recovered.records.get(1, "hardState"))).toBe(expected.hardState);
            await recovered.close();
          },
        ),
        { numRuns: 150 },
      );
    });
  });
});
