import { chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it, vi } from "vitest";
import {
  createPrivateDirectory,
  createPrivateDirectoryDurably,
  ownPrivateDirectory,
  ownPrivateFile,
  replacePrivateFile,
  restrictFileIfPresent,
  temporaryNameBeside,
  writeSyncedPrivateFile,
} from "../../src/files/private-files.js";
import { modeOf } from "../support/file-modes.js";

// Passes every call through; counting the directory syncs is how a test sees that a new directory's name was synced.
const syncedDescriptors = vi.hoisted(() => ({ count: 0 }));
vi.mock("node:fs", async (importOriginal) => {
  const fs = await importOriginal<typeof import("node:fs")>();
  return {
    ...fs,
    fsyncSync: (descriptor: number) => {
      syncedDescriptors.count += 1;
      fs.fsyncSync(descriptor);
    },
  };
});

describe("private files", () => {
  const roots: string[] = [];
  const root = (): string => {
    const directory = mkdtempSync(join(tmpdir(), "flowplane-private-"));
    roots.push(directory);
    return directory;
  };
  afterEach(() => {
    for (const directory of roots.splice(0)) rmSync(directory, { recursive: true, force: true });
  });

  it("creates missing directories 0700 and leaves the mode of an existing one alone", () => {
    const base = root();
    createPrivateDirectory(join(base, "a", "b"));
    expect(modeOf(join(base, "a"))).toBe(0o700);
    expect(modeOf(join(base, "a", "b"))).toBe(0o700);
    mkdirSync(join(base, "shared"), { mode: 0o755 });
    createPrivateDirectory(join(base, "shared"));
    expect(modeOf(join(base, "shared"))).toBe(0o755);
  });

  it("makes a directory it owns 0700 even when it existed wider", () => {
    const base = root();
    mkdirSync(join(base, "owned"), { mode: 0o755 });
    chmodSync(join(base, "owned"), 0o755);
    ownPrivateDirectory(join(base, "owned"));
    expect(modeOf(join(base, "owned"))).toBe(0o700);
  });

  it("creates a file 0600 without touching its content, and narrows an existing one", () => {
    const base = root();
    ownPrivateFile(join(base, "new"));
    expect(modeOf(join(base, "new"))).toBe(0o600);
    writeFileSync(join(base, "old"), "kept", { mode: 0o644 });
    chmodSync(join(base, "old"), 0o644);
    ownPrivateFile(join(base, "old"));
    expect(modeOf(join(base, "old"))).toBe(0o600);
    expect(readFileSync(join(base, "old"), "utf8")).toBe("kept");
    restrictFileIfPresent(join(base, "absent"));
    writeFileSync(join(base, "wide"), "x", { mode: 0o666 });
    chmodSync(join(base, "wide"), 0o666);
    restrictFileIfPresent(join(base, "wide"));
    expect(modeOf(join(base, "wide"))).toBe(0o600);
  });

  it("replaces a file atomically with an owner-only one, leaving no temporary file beside it", () => {
    const base = root();
    const file = join(base, "ports.json");
    writeFileSync(file, "old", { mode: 0o644 });
    chmodSync(file, 0o644);
    replacePrivateFile(file, "new");
    expect(readFileSync(file, "utf8")).toBe("new");
    expect(modeOf(file)).toBe(0o600);
    expect(readdirSync(base)).toEqual(["ports.json"]);
  });

  it("writes a synced temporary file only under a fresh name, hidden beside its target", () => {
    const base = root();
    const target = join(base, "secret.key");
    const temporary = temporaryNameBeside(target);
    expect(temporary).not.toBe(temporaryNameBeside(target));
    expect(temporary.startsWith(join(base, ".secret.key."))).toBe(true);
    writeSyncedPrivateFile(temporary, "key");
    expect(modeOf(temporary)).toBe(0o600);
    expect(() => writeSyncedPrivateFile(temporary, "other")).toThrow(/EEXIST/);
    expect(readFileSync(temporary, "utf8")).toBe("key");
  });

  it("creates directories durably: each new directory's name is synced into its parent, and nothing for old ones", () => {
    const base = root();
    const nested = join(base, "backups", "1", "2");
    syncedDescriptors.count = 0;
    createPrivateDirectoryDurably(nested);
    expect(modeOf(join(base, "backups"))).toBe(0o700);
    expect(modeOf(nested)).toBe(0o700);
    // The parents of backups, 1 and 2.
    expect(syncedDescriptors.count).toBe(3);
    syncedDescriptors.count = 0;
    createPrivateDirectoryDurably(nested);
    expect(syncedDescriptors.count).toBe(0);
  });
});
