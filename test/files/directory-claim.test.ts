/**
 * Who holds a directory claimed through a pid file, as a claim and the local provisioner see it.
 */
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { claimDirectory, DataDirectoryInUseError, directoryHolder } from "../../src/files/directory-claim.js";

const pidFileName = "test.pid";

describe("directoryHolder", () => {
  const directories: string[] = [];
  afterEach(() => {
    for (const directory of directories.splice(0)) rmSync(directory, { recursive: true, force: true });
  });
  function directory(): string {
    const created = mkdtempSync(join(tmpdir(), "flowplane-claim-"));
    directories.push(created);
    return created;
  }

  it("names a live process of the pid file, and no holder for a missing directory, file or number", async () => {
    const claimed = directory();
    expect(directoryHolder(join(claimed, "missing"), pidFileName)).toBeNull();
    expect(directoryHolder(claimed, pidFileName)).toBeNull();
    writeFileSync(join(claimed, pidFileName), "not a number\n");
    expect(directoryHolder(claimed, pidFileName)).toBeNull();
    // A pid file inside something that is not a directory (ENOTDIR) holds nothing either.
    writeFileSync(join(claimed, "file"), "");
    expect(directoryHolder(join(claimed, "file"), pidFileName)).toBeNull();

    const child = spawn(process.execPath, ["-e", "setTimeout(() => {}, 60_000)"], { stdio: "ignore" });
    try {
      const pid = child.pid as number;
      writeFileSync(join(claimed, pidFileName), `${pid}\n`);
      expect(directoryHolder(claimed, pidFileName)).toBe(pid);
      await expect(claimDirectory(claimed, { pidFileName, holder: "a test" })).rejects.toBeInstanceOf(
        DataDirectoryInUseError,
      );
    } finally {
      const exited = new Promise((resolve) => child.once("exit", resolve));
      child.kill("SIGKILL");
      await exited;
    }
    // The same file once its process is gone: a stale claim, which a claim replaces.
    expect(directoryHolder(claimed, pidFileName)).toBeNull();
    const release = await claimDirectory(claimed, { pidFileName, holder: "a test" });
    await release();
  });

  it("does not count this process as a holder: its own id is left over from a claim it released", () => {
    const claimed = directory();
    writeFileSync(join(claimed, pidFileName), `${process.pid}\n`);
    expect(directoryHolder(claimed, pidFileName)).toBeNull();
  });
});
