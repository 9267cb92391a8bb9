/** Exit codes the review found wrong: ids that cannot name a resource, and following interrupted by the user. */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { exitCodes } from "../../src/cli/io.js";
import { type FakePlatform, startFakePlatform } from "./fake-platform.js";

let fake: FakePlatform;
let directory: string;

beforeAll(async () => {
  fake = await startFakePlatform();
  directory = await mkdtemp(join(tmpdir(), "flowplane-exit-codes-"));
});

afterAll(async () => {
  await fake?.close();
  await rm(directory, { recursive: true, force: true });
});

describe("a resource id of '.' or '..'", () => {
  it("is a usage error (exit 2), not a failure of the API", async () => {
    for (const argv of [
      ["clusters", "get", ".."],
      ["clusters", "delete", "."],
      ["clients", "get", "..", "--cluster", "c1"],
    ]) {
      const result = await fake.cli(argv, directory);
      expect(result.exitCode).toBe(exitCodes.usage);
      expect(result.stderr).toContain("cannot name a resource in a URL path");
    }
  });
});

describe("following interrupted by the user", () => {
  /** Serves a backup that never ends and aborts the shutdown signal, with `reason`, once it has been asked for. */
  async function followAndInterrupt(reason: string) {
    const shutdown = new AbortController();
    fake.routes.set("GET /actuator/backups/9", (_request, response) => {
      response.writeHead(200, { "content-type": "application/json" });
      response.end(
        JSON.stringify({
          backupId: 9,
          state: "IN_PROGRESS",
          failureReason: null,
          partitionCount: 1,
          details: [
            {
              partitionId: 1,
              state: "IN_PROGRESS",
              brokerId: 0,
              failureReason: null,
              checkpointPosition: null,
              createdAt: null,
              lastUpdated: null,
              brokerVersion: null,
              sizeBytes: 0,
            },
          ],
        }),
      );
      shutdown.abort(reason);
    });
    return await fake.cli(["backups", "status", "9", "--wait"], directory, { signal: shutdown.signal });
  }

  it("exits 130 after Ctrl-C, saying that the backup goes on", async () => {
    const result = await followAndInterrupt("SIGINT");
    expect(result.exitCode).toBe(exitCodes.interrupted);
    expect(result.stderr).toContain("stopped following; backup 9 goes on");
  });

  it("exits 143 after SIGTERM", async () => {
    expect((await followAndInterrupt("SIGTERM")).exitCode).toBe(exitCodes.terminated);
  });
});
