import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { Journal } from "../../../../src/cluster/raft/storage/journal.js";
import { StorageCorruptionError } from "../../../../src/cluster/raft/types.js";
import { withTemporaryDirectory } from "./temp-directory.js";

const encoder = new TextEncoder();
const decoder = new TextDecoder();

function bytes(text: string): Uint8Array {
  return encoder.encode(text);
}

function text(value: Uint8Array | undefined): string | undefined {
  return value === undefined ? undefined : decoder.decode(value);
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
      await journal.close();
    });
  });

  it("reports a damaged record in a segment that is not the last as corruption", async () => {
    await withTemporaryDirectory(async (directory) => {
      const journal = Journal.open({ directory, segmentBytes: 256 });
      for (let index = 1; index <= 8; index += 1) {
        transact(journal, (writing) => writing.entries.put(1, index, bytes(`entry ${index} `.repeat(8))));
      }
      await journal.close();
      const segments = segmentFiles(directory);
      expect(segments.length).toBeGreaterThan(2);
      const path = join(directory, segments[0] as string);
      const contents = readFileSync(path);
      contents[40] = (contents[40] ?? 0) ^ 0xff;
      writeFileSync(path, contents);
      expect(() => Journal.open({ directory, segmentBytes: 256 })).toThrow(StorageCorruptionError);
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
      // Compaction: the first 35 entries go, so every segment holding only those can go too.
      transact(journal, (writing) => {
        for (let index = 1; index <= 35; index += 1) writing.entries.remove(1, index);
        writing.records.put(1, "logStart", bytes("35"));
      });
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
      // Every older entry dies, so every older segment goes: the record must survive in the newest checkpoint.
      transact(recovered, (writing) => {
        for (let index = 1; index <= 6; index += 1) writing.entries.remove(1, index);
      });
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

describe("Journal after a crash", () => {
  /** The files of a journal directory and their bytes. */
  function filesOf(directory: string): Map<string, Buffer> {
    return new Map(segmentFiles(directory).map((name) => [name, readFileSync(join(directory, name))]));
  }

  it("recovers the transactions durable before the crash, and none torn by it (property)", async () => {
    await withTemporaryDirectory(async (root) => {
      let run = 0;
      const transactionShape = fc.array(
        fc.record({ index: fc.integer({ min: 1, max: 12 }), size: fc.nat(150), remove: fc.boolean() }),
        { minLength: 1, maxLength: 6 },
      );
      await fc.assert(
        fc.asyncProperty(
          fc.array(transactionShape, { minLength: 1, maxLength: 12 }),
          fc.nat(),
          fc.infiniteStream(fc.boolean()),
          async (transactions, crashSeed, keepSector) => {
            run += 1;
            const directory = join(root, String(run));
            const segmentBytes = 1024;
            // Run every transaction, keeping the files and the expected contents after each.
            const journal = Journal.open({ directory, segmentBytes });
            const states: Map<string, Buffer>[] = [filesOf(directory)];
            const models: Map<number, string>[] = [new Map()];
            for (const [number, operations] of transactions.entries()) {
              const model = new Map(models[models.length - 1]);
              transact(journal, (writing) => {
                for (const operation of operations) {
                  if (operation.remove) {
                    writing.entries.remove(1, operation.index);
                    model.delete(operation.index);
                  } else {
                    const value = `${number}/${operation.index}/${"z".repeat(operation.size)}`;
                    writing.entries.put(1, operation.index, bytes(value));
                    model.set(operation.index, value);
                  }
                }
              });
              states.push(filesOf(directory));
              models.push(model);
            }
            await journal.close();

            // The crash interrupts transaction `crashed`: of the 512-byte sectors its write changed, some reached the
            // disk and some did not. Deletions of older segments come only after the write is durable.
            const crashed = 1 + (crashSeed % transactions.length);
            const before = states[crashed - 1] as Map<string, Buffer>;
            const after = states[crashed] as Map<string, Buffer>;
            let everySectorKept = true;
            const sectors = keepSector[Symbol.iterator]();
            const crashState = new Map(before);
            for (const [name, written] of after) {
              // A new segment was durable, header and zeros, before anything was written into it.
              const previous =
                before.get(name) ?? Buffer.concat([written.subarray(0, 16), Buffer.alloc(written.byteLength - 16)]);
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
            const { mkdirSync } = await import("node:fs");
            mkdirSync(crashDirectory);
            for (const [name, contents] of crashState) writeFileSync(join(crashDirectory, name), contents);

            const recovered = Journal.open({ directory: crashDirectory, segmentBytes });
            const expected = (everySectorKept ? models[crashed] : models[crashed - 1]) as Map<number, string>;
            for (let index = 1; index <= 12; index += 1) {
              expect(text(recovered.entries.get(1, index))).toBe(expected.get(index));
            }
            await recovered.close();
          },
        ),
        { numRuns: 150 },
      );
    });
  });
});
