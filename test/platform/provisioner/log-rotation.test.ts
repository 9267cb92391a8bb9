import {
  closeSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  rmSync,
  statSync,
  writeSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pino from "pino";
import { afterEach, describe, expect, it } from "vitest";
import { LogRotation, rotateLogFile } from "../../../src/platform/provisioner/log-rotation.js";

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

  it("leaves a file within the limit alone, and copies a larger one aside and empties it", async () => {
    const file = logFile();
    const descriptor = openSync(file, "a", 0o600);
    try {
      writeSync(descriptor, "a".repeat(100));
      expect(await rotateLogFile(file, { maxBytes: 100, keptFiles: 2 })).toBe(false);
      expect(existsSync(`${file}.1`)).toBe(false);

      writeSync(descriptor, "b");
      expect(await rotateLogFile(file, { maxBytes: 100, keptFiles: 2 })).toBe(true);
      expect(readFileSync(`${file}.1`, "utf8")).toBe(`${"a".repeat(100)}b`);
      expect(statSync(`${file}.1`).mode & 0o777).toBe(0o600);
      expect(statSync(file).size).toBe(0);

      // The writer keeps its descriptor, as a child does: appending, its next line starts the emptied file.
      writeSync(descriptor, "next line\n");
      expect(readFileSync(file, "utf8")).toBe("next line\n");
    } finally {
      closeSync(descriptor);
    }
  });

  it("keeps the newest copies up to the count and deletes the oldest", async () => {
    const file = logFile();
    for (const round of ["first", "second", "third"]) {
      const descriptor = openSync(file, "a", 0o600);
      writeSync(descriptor, `${round} `.repeat(20));
      closeSync(descriptor);
      expect(await rotateLogFile(file, { maxBytes: 10, keptFiles: 2 })).toBe(true);
    }
    expect(readFileSync(`${file}.1`, "utf8")).toBe("third ".repeat(20));
    expect(readFileSync(`${file}.2`, "utf8")).toBe("second ".repeat(20));
    expect(existsSync(`${file}.3`)).toBe(false);
  });

  it("copies a file larger than its copy buffer whole", async () => {
    const file = logFile();
    const content = Buffer.alloc(3 * 1024 * 1024 + 17, "x");
    const descriptor = openSync(file, "a", 0o600);
    writeSync(descriptor, content);
    closeSync(descriptor);
    expect(await rotateLogFile(file, { maxBytes: 1024 * 1024, keptFiles: 1 })).toBe(true);
    expect(statSync(`${file}.1`).size).toBe(content.length);
  });

  it("answers false for a file that does not exist, and refuses limits that are not positive whole numbers", async () => {
    const file = logFile();
    expect(await rotateLogFile(file, { maxBytes: 10, keptFiles: 1 })).toBe(false);
    await expect(rotateLogFile(file, { maxBytes: 0, keptFiles: 1 })).rejects.toThrow(/size limit/);
    expect(() => new LogRotation(() => [], { maxBytes: 10, keptFiles: 0 }, pino({ level: "silent" }))).toThrow(
      /copies kept/,
    );
  });

  it("rotates every file it is given, and a file it cannot rotate does not stop the others", async () => {
    const [first, second] = [logFile(), logFile()] as [string, string];
    for (const file of [first, second]) {
      const descriptor = openSync(file, "a", 0o600);
      writeSync(descriptor, "z".repeat(50));
      closeSync(descriptor);
    }
    // A directory where the copy of the first file must go: its rotation fails.
    mkdirSync(`${first}.1`);
    const warnings: unknown[] = [];
    const logger = pino({ level: "warn" }, { write: (line: string) => warnings.push(JSON.parse(line)) });
    const rotation = new LogRotation(() => [first, second], { maxBytes: 10, keptFiles: 1 }, logger);
    await rotation.rotateAll();
    expect(warnings).toHaveLength(1);
    expect(statSync(first).size).toBe(50);
    expect(readFileSync(`${second}.1`, "utf8")).toBe("z".repeat(50));
    expect(statSync(second).size).toBe(0);
    await rotation.close();
  });
});
