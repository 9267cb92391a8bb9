import fs, { fstatSync, readlinkSync } from "node:fs";
import { chmod, mkdir, readdir, readFile, writeFile } from "node:fs/promises";
import { syncBuiltinESMExports } from "node:module";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import {
  CONFIGURATION_FILE_NAME,
  claimDataDirectory,
  DataDirectoryInUseError,
  openStorageEnvironment,
  PID_FILE_NAME,
  persistConfiguration,
  readPersistedConfiguration,
  STORAGE_DIRECTORY_NAME,
  UnsupportedDataLayoutError,
} from "../../../src/cluster/broker/files.js";
import {
  encodeConfiguration,
  initialConfiguration,
  roundRobinDistribution,
} from "../../../src/cluster/topology/index.js";
import { entriesOpenToOthers, modeOf } from "../../support/file-modes.js";
import { removeDirectory, temporaryDirectory } from "./support.js";

/** Runs `body` and answers the directories whose descriptors were fsynced meanwhile, by path. */
async function directoriesSyncedDuring(body: () => Promise<unknown>): Promise<string[]> {
  const original = fs.fsyncSync;
  const synced: string[] = [];
  fs.fsyncSync = (descriptor: number): void => {
    if (fstatSync(descriptor).isDirectory()) synced.push(readlinkSync(`/proc/self/fd/${descriptor}`));
    original(descriptor);
  };
  syncBuiltinESMExports();
  try {
    await body();
  } finally {
    fs.fsyncSync = original;
    syncBuiltinESMExports();
  }
  return synced;
}

describe("broker files", () => {
  let directory: string;

  beforeEach(async () => {
    directory = await temporaryDirectory("files");
  });

  afterEach(async () => {
    await removeDirectory(directory);
  });

  it("keeps every replica's storage in one environment under raft/, and refuses the earlier per-partition layout", async () => {
    const environment = await openStorageEnvironment(directory, true);
    expect(environment.commitsSynchronously).toBe(true);
    await environment.close();
    expect(await readdir(directory)).toEqual([STORAGE_DIRECTORY_NAME]);

    await mkdir(join(directory, "partitions", "1"), { recursive: true });
    const refusal = openStorageEnvironment(directory, true);
    await expect(refusal).rejects.toBeInstanceOf(UnsupportedDataLayoutError);
    await expect(refusal).rejects.toThrow(/empty data directory/);
  });

  it("creates the data directory and raft/ durably on a first start: their names are synced into their parents", async () => {
    const dataDirectory = join(directory, "first-start");
    let environment: Awaited<ReturnType<typeof openStorageEnvironment>> | undefined;
    const synced = await directoriesSyncedDuring(async () => {
      environment = await openStorageEnvironment(dataDirectory, true);
    });
    await environment?.close();
    // The parent holding first-start/, and first-start/ holding raft/.
    expect(synced).toEqual(expect.arrayContaining([directory, dataDirectory]));
  });

  it("writes broker.pid with this process's id, refuses a second claim, and removes the file on release", async () => {
    const brokerDirectory = join(directory, "brokers", "1");
    const release = await claimDataDirectory(brokerDirectory);
    expect(await readFile(join(brokerDirectory, PID_FILE_NAME), "utf8")).toBe(`${process.pid}\n`);
    await expect(claimDataDirectory(brokerDirectory)).rejects.toBeInstanceOf(DataDirectoryInUseError);
    await release();
    await expect(readFile(join(brokerDirectory, PID_FILE_NAME), "utf8")).rejects.toThrow(/ENOENT/);
    const again = await claimDataDirectory(brokerDirectory);
    await again();
  });

  it("refuses a directory whose broker.pid names another live process, and replaces a stale one", async () => {
    // The parent process (the test runner) is alive and is not this process.
    await writeFile(join(directory, PID_FILE_NAME), `${process.ppid}\n`);
    const refusal = claimDataDirectory(directory);
    await expect(refusal).rejects.toBeInstanceOf(DataDirectoryInUseError);
    await expect(refusal).rejects.toThrow(String(process.ppid));

    // Process ids are below 2^22 on Linux, so this one cannot be running.
    await writeFile(join(directory, PID_FILE_NAME), "99999999\n");
    const release = await claimDataDirectory(directory);
    expect(await readFile(join(directory, PID_FILE_NAME), "utf8")).toBe(`${process.pid}\n`);
    await release();
  });

  it("creates the broker's directories 0700 and its files 0600, and closes off a raft/ made wider before", async () => {
    const brokerDirectory = join(directory, "brokers", "1");
    const release = await claimDataDirectory(brokerDirectory);
    await persistConfiguration(
      brokerDirectory,
      initialConfiguration({
        clusterSize: 1,
        partitionCount: 1,
        replicationFactor: 1,
        distribution: roundRobinDistribution([0], 1, 1),
        nowIso: "2026-11-21T10:15:00.123Z",
      }),
    );
    const environment = await openStorageEnvironment(brokerDirectory, true);
    await environment.close();
    expect(entriesOpenToOthers(join(directory, "brokers"))).toEqual({});
    await release();

    // An earlier version created raft/ with the default mode; the next open narrows it.
    await chmod(join(brokerDirectory, STORAGE_DIRECTORY_NAME), 0o755);
    const reopened = await openStorageEnvironment(brokerDirectory, true);
    await reopened.close();
    expect(modeOf(join(brokerDirectory, STORAGE_DIRECTORY_NAME))).toBe(0o700);
  });

  it("persists the cluster configuration atomically and reads it back", async () => {
    expect(await readPersistedConfiguration(directory)).toBeNull();
    const configuration = initialConfiguration({
      clusterSize: 2,
      partitionCount: 2,
      replicationFactor: 2,
      distribution: roundRobinDistribution([0, 1], 2, 2),
      nowIso: "2026-11-21T10:15:00.123Z",
    });
    await persistConfiguration(directory, configuration);
    await persistConfiguration(directory, { ...configuration, version: 2 });
    const read = await readPersistedConfiguration(directory);
    expect(read?.version).toBe(2);
    expect(encodeConfiguration(read!)).toBe(encodeConfiguration({ ...configuration, version: 2 }));
    expect(await readFile(join(directory, CONFIGURATION_FILE_NAME), "utf8")).toBe(
      encodeConfiguration({ ...configuration, version: 2 }),
    );
  });
});
