import {
  closeSync,
  ftruncateSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it, vi } from "vitest";
import { loadConsoleFiles } from "../../../src/platform/console/files.js";

// Passes every call through; the paths read are how a test sees that a file over the cap was refused unread.
const readPaths = vi.hoisted(() => ({ paths: [] as string[] }));
vi.mock("node:fs", async (importOriginal) => {
  const fs = await importOriginal<typeof import("node:fs")>();
  return {
    ...fs,
    readFileSync: ((path: unknown, ...rest: unknown[]) => {
      readPaths.paths.push(String(path));
      return (fs.readFileSync as (...args: unknown[]) => unknown)(path, ...rest);
    }) as typeof fs.readFileSync,
  };
});

/** More than the 32 MiB the platform loads at most. */
const overTheCapBytes = 33 * 1024 * 1024;

/** A sparse file of `bytes`: its size is what lstat tells, without writing the bytes. */
function sparseFile(path: string, bytes: number): void {
  const descriptor = openSync(path, "w");
  try {
    ftruncateSync(descriptor, bytes);
  } finally {
    closeSync(descriptor);
  }
}

describe("loading the console's files from disk", () => {
  const directories: string[] = [];
  const build = (): string => {
    const directory = mkdtempSync(join(tmpdir(), "flowplane-console-"));
    directories.push(directory);
    mkdirSync(join(directory, "assets"));
    return directory;
  };
  afterEach(() => {
    for (const directory of directories.splice(0)) rmSync(directory, { recursive: true, force: true });
    readPaths.paths.length = 0;
  });

  it("refuses an asset over the cap from its size, without reading it", () => {
    const directory = build();
    writeFileSync(join(directory, "index.html"), "<!doctype html>");
    const huge = join(directory, "assets", "huge-abc.js");
    sparseFile(huge, overTheCapBytes);
    expect(() => loadConsoleFiles(directory)).toThrow(/holds more than 33554432 bytes/);
    expect(readPaths.paths).not.toContain(huge);
  });

  it("counts index.html in the cap and refuses one over it without reading it", () => {
    const directory = build();
    const index = join(directory, "index.html");
    sparseFile(index, overTheCapBytes);
    expect(() => loadConsoleFiles(directory)).toThrow(/holds more than 33554432 bytes/);
    expect(readPaths.paths).not.toContain(index);
  });

  it("counts index.html and the assets together", () => {
    const directory = build();
    sparseFile(join(directory, "index.html"), 20 * 1024 * 1024);
    sparseFile(join(directory, "assets", "index-abc.js"), 20 * 1024 * 1024);
    expect(() => loadConsoleFiles(directory)).toThrow(/holds more than 33554432 bytes/);
    expect(readPaths.paths).not.toContain(join(directory, "assets", "index-abc.js"));
  });

  it("refuses an index.html that is a symlink or a directory, and reads nothing through it", () => {
    const elsewhere = build();
    writeFileSync(join(elsewhere, "page.html"), "<!doctype html><p>not the console</p>");
    const linked = build();
    symlinkSync(join(elsewhere, "page.html"), join(linked, "index.html"));
    expect(() => loadConsoleFiles(linked)).toThrow(/index\.html is a symlink or not a plain file/);
    expect(readPaths.paths).toEqual([]);
    const directory = build();
    mkdirSync(join(directory, "index.html"));
    expect(() => loadConsoleFiles(directory)).toThrow(/index\.html is a symlink or not a plain file/);
  });

  it("answers null without index.html, and refuses a dangling symlink of that name", () => {
    const directory = build();
    expect(loadConsoleFiles(directory)).toBeNull();
    symlinkSync(join(directory, "missing.html"), join(directory, "index.html"));
    expect(() => loadConsoleFiles(directory)).toThrow(/index\.html is a symlink or not a plain file/);
  });

  it("loads a build within the cap, index.html and its assets", () => {
    const directory = build();
    writeFileSync(join(directory, "index.html"), "<!doctype html>");
    writeFileSync(join(directory, "assets", "index-abc.js"), "export {};");
    symlinkSync(join(directory, "assets", "index-abc.js"), join(directory, "assets", "linked-abc.js"));
    const files = loadConsoleFiles(directory)!;
    expect(files.index.body.toString()).toBe("<!doctype html>");
    expect([...files.assets.keys()]).toEqual(["index-abc.js"]);
  });
});
