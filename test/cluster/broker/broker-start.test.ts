import { access } from "node:fs/promises";
import { createServer, type Server } from "node:net";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { Broker } from "../../../src/cluster/broker/broker.js";
import { DataDirectoryInUseError, PID_FILE_NAME } from "../../../src/cluster/broker/files.js";
import { removeDirectory, temporaryDirectory, testBrokerOptions, waitFor } from "./support.js";

const single = { clusterSize: 1, partitionsCount: 2, replicationFactor: 1 };

describe("Broker.start", () => {
  let directory: string;

  beforeEach(async () => {
    directory = await temporaryDirectory("start");
  });

  afterEach(async () => {
    await removeDirectory(directory);
  });

  it("refuses a data directory another running broker holds", async () => {
    const first = await Broker.start(testBrokerOptions(directory, 0, single));
    try {
      await expect(Broker.start(testBrokerOptions(directory, 0, single))).rejects.toBeInstanceOf(
        DataDirectoryInUseError,
      );
      await access(join(first.dataDirectory, PID_FILE_NAME));
    } finally {
      await first.close();
    }
    await expect(access(join(first.dataDirectory, PID_FILE_NAME))).rejects.toThrow(/ENOENT/);
  });

  it("fails cleanly when its management port is taken: nothing left listening, broker.pid removed", async () => {
    const blocker: Server = createServer();
    await new Promise<void>((resolve) => blocker.listen(0, "127.0.0.1", resolve));
    const port = (blocker.address() as { port: number }).port;
    try {
      const options = testBrokerOptions(directory, 0, { ...single, managementPort: port });
      await expect(Broker.start(options)).rejects.toThrow(/EADDRINUSE/);
      await expect(access(join(options.dataDirectory, PID_FILE_NAME))).rejects.toThrow(/ENOENT/);
      // The same directory starts fine afterwards, so the failed start released everything it held.
      const broker = await Broker.start(testBrokerOptions(directory, 0, single));
      await waitFor(() => broker.replicaReports().every((report) => report.role === "leader"), "single broker leads");
      await broker.close();
    } finally {
      await new Promise((resolve) => blocker.close(resolve));
    }
  });
});
