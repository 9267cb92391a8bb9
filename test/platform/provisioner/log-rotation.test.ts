import {
  closeSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
  writeSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { basename, dirname, join } from "node:path";
import pino from "pino";
import { afterEach, describe, expect, it } from "vitest";
import { LogRotation, rotateLogFile, UnrotatableLogFileError } from "../../../src/platform/provisioner/log-rotation.js";

describe("log rotation", () => {
  const directories: string[] = [];
  afterEach(() => {
    for (const directory of directories.splice(0)) rmSync(directory, { recursive: true, force: true });
  });
  const logFile = (): string => {
    const directory = mkdtempSync(join(tmpdir(), "log-rotation-"));
    directories.push(directory);
    return join(directory, "broker-0.log");
  };
  const append = (file: string, text: string | Buffer): void => {
    const descriptor = openSync(file, "a", 0o600);
    writeSync(descriptor, typeof text === "string" ? Buffer.from(text) : text);
    closeSync(descriptor);
  };
  const silent = pino({ level: "silent" });

  it("leaves a file within the limit alone, and copies a larger one aside and empties it", async () => {
    const file = logFile();
    const descriptor = openSync(file, "a", 0o600);
    try {
      writeSync(descriptor, "a".repeat(100));
      expect(await rotateLogFile(file, { maxBytes: 100, keptFiles: 2 }, "held")).toBe(false);
      expect(existsSync(`${file}.1`)).toBe(false);

      writeSync(descriptor, "b");
      expect(await rotateLogFile(file, { maxBytes: 100, keptFiles: 2 }, "held")).toBe(true);
      expect(readFileSync(`${file}.1`, "utf8")).toBe(`${"a".repeat(100)}b`);
      expect(statSync(`${file}.1`).mode & 0o777).toBe(0o600);
      expect(statSync(file).size).toBe(0);
      expect(readdirSync(dirname(file)).sort()).toEqual([basename(file), `${basename(file)}.1`]);

      // The writer keeps its descriptor, as a child does: appending, its next line starts the emptied file.
      writeSync(descriptor, "next line\n");
      expect(readFileSync(file, "utf8")).toBe("next line\n");
    } finally {
      closeSync(descriptor);
    }
  });

  it("renames a file no child holds, keeping its inode", async () => {
    const file = logFile();
    append(file, "x".repeat(20));
    const inode = statSync(file).ino;
    expect(await rotateLogFile(file, { maxBytes: 10, keptFiles: 1 }, "free")).toBe(true);
    expect(statSync(`${file}.1`).ino).toBe(inode);
    expect(existsSync(file)).toBe(false);
  });

  it("keeps the newest copies up to the count, and deletes those beyond a count that was lowered", async () => {
    const file = logFile();
    for (const number of [3, 4, 5]) writeFileSync(`${file}.${number}`, `left from a count of 5: ${number}`);
    for (const round of ["first", "second", "third"]) {
      append(file, `${round} `.repeat(20));
      expect(await rotateLogFile(file, { maxBytes: 10, keptFiles: 2 }, round === "second" ? "free" : "held")).toBe(
        true,
      );
    }
    expect(readFileSync(`${file}.1`, "utf8")).toBe("third ".repeat(20));
    expect(readFileSync(`${file}.2`, "utf8")).toBe("second ".repeat(20));
    expect(readdirSync(dirname(file)).sort()).toEqual([basename(file), `${basename(file)}.1`, `${basename(file)}.2`]);
  });

  it("copies a file larger than its copy buffer whole", async () => {
    const file = logFile();
    const content = Buffer.alloc(3 * 1024 * 1024 + 17, "x");
    append(file, content);
    expect(await rotateLogFile(file, { maxBytes: 1024 * 1024, keptFiles: 1 }, "held")).toBe(true);
    expect(statSync(`${file}.1`).size).toBe(content.length);
  });

  it("leaves the file and its copies as they were when the copy is stopped", async () => {
    const file = logFile();
    append(file, Buffer.alloc(2 * 1024 * 1024 + 1, "y"));
    writeFileSync(`${file}.1`, "the earlier copy");
    let pieces = 0;
    expect(await rotateLogFile(file, { maxBytes: 1024, keptFiles: 2 }, "held", () => ++pieces > 1)).toBe(false);
    expect(statSync(file).size).toBe(2 * 1024 * 1024 + 1);
    expect(readFileSync(`${file}.1`, "utf8")).toBe("the earlier copy");
    expect(readdirSync(dirname(file)).sort()).toEqual([basename(file), `${basename(file)}.1`]);
  });

  it("never rotates through a link, and answers false for a file that does not exist", async () => {
    const file = logFile();
    const target = join(dirname(file), "elsewhere");
    append(target, "z".repeat(50));
    symlinkSync(target, file);
    await expect(rotateLogFile(file, { maxBytes: 10, keptFiles: 1 }, "held")).rejects.toBeInstanceOf(
      UnrotatableLogFileError,
    );
    expect(statSync(target).size).toBe(50);
    expect(await rotateLogFile(join(dirname(file), "absent.log"), { maxBytes: 10, keptFiles: 1 }, "held")).toBe(false);
  });

  it("refuses limits that are not positive whole numbers", async () => {
    const file = logFile();
    await expect(rotateLogFile(file, { maxBytes: 0, keptFiles: 1 }, "held")).rejects.toThrow(/size limit/);
    expect(() => new LogRotation(() => [], { maxBytes: 10, keptFiles: 0 }, silent)).toThrow(/copies kept/);
  });

  it("rotates every file it is given, and a file it cannot rotate does not stop the others", async () => {
    const [first, second] = [logFile(), logFile()] as [string, string];
    for (const file of [first, second]) append(file, "z".repeat(50));
    // A directory where the first file's copy must go: renaming the copy onto it fails.
    mkdirSync(`${first}.1`);
    writeFileSync(join(`${first}.1`, "inside"), "");
    const warnings: unknown[] = [];
    const logger = pino({ level: "warn" }, { write: (line: string) => warnings.push(JSON.parse(line)) });
    const rotation = new LogRotation(() => [first, second], { maxBytes: 10, keptFiles: 1 }, logger);
    await rotation.rotateAll("held");
    expect(warnings).toHaveLength(1);
    expect(statSync(first).size).toBe(50);
    expect(readFileSync(`${second}.1`, "utf8")).toBe("z".repeat(50));
    expect(statSync(second).size).toBe(0);
    await rotation.close();
    // Once closed it rotates nothing.
    append(second, "z".repeat(50));
    await rotation.rotateAll("held");
    expect(statSync(second).size).toBe(50);
  });
});
