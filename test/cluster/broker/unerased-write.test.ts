/**
 * A broker whose journal write failed and could not be erased either (`UnerasedWriteError`): the failed bytes may
 * still be read back as if they were durable, so the broker must not open its storage again in the same process. Its
 * replicas stay dead with that reason through their restart attempts, and a restart of the broker opens them again
 * with every acknowledged message. The journal's own part (zeroing a failed write, and when that fails) is tested in
 * `test/cluster/raft/storage/journal.test.ts`.
 */
import fs from "node:fs";
import { syncBuiltinESMExports } from "node:module";
import { pino } from "pino";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { Broker } from "../../../src/cluster/broker/broker.js";
import type {
  BrokerRequest,
  GetMessageResponse,
  PublishMessageResponse,
} from "../../../src/cluster/broker/protocol.js";
import { DEFAULT_TENANT_ID } from "../../../src/cluster/engine/index.js";
import { TransportClient } from "../../../src/cluster/transport/index.js";
import { testClusterCredentials } from "../../support/cluster-secret.js";
import { removeDirectory, temporaryDirectory, testBrokerOptions, waitFor } from "./support.js";

const single = { clusterSize: 1, partitionsCount: 1, replicationFactor: 1 };

/** Makes every `writeSync` to a file (not standard output or error) fail with EIO until the returned function runs. */
function failFileWrites(): () => void {
  const original = fs.writeSync;
  (fs as { writeSync: unknown }).writeSync = (...parameters: unknown[]): number => {
    const fd = parameters[0];
    if (typeof fd === "number" && fd > 2) {
      throw Object.assign(new Error("EIO: i/o error, write"), { code: "EIO" });
    }
    return (original as (...values: unknown[]) => number)(...parameters);
  };
  syncBuiltinESMExports();
  return () => {
    fs.writeSync = original;
    syncBuiltinESMExports();
  };
}

describe("a broker whose failed journal write could not be erased", () => {
  const client = new TransportClient<BrokerRequest, unknown>({ credentials: testClusterCredentials() });
  let directory: string;
  let restoreWrites: (() => void) | undefined;

  beforeEach(async () => {
    directory = await temporaryDirectory("unerased-write");
  });

  afterEach(async () => {
    restoreWrites?.();
    restoreWrites = undefined;
    await removeDirectory(directory);
  });

  async function publish(broker: Broker, messageId: string): Promise<PublishMessageResponse> {
    const message = { name: "tick", correlationKey: "", timeToLiveMs: 600_000, variables: {}, messageId };
    return (await client.request(
      broker.clusterAddress,
      { type: "publish-message", partitionId: 1, message: { ...message, tenantId: DEFAULT_TENANT_ID } },
      { timeoutMs: 5_000 },
    )) as PublishMessageResponse;
  }

  it("keeps its replica dead with the reason instead of opening its storage again, until it restarts", async () => {
    const logged: { msg: string; partitionId?: number; err?: { message?: string } }[] = [];
    const logger = pino({ level: "warn" }, { write: (line: string) => logged.push(JSON.parse(line)) });
    const broker = await Broker.start(testBrokerOptions(directory, 0, { ...single, logger }));
    let restarted: Broker | undefined;
    try {
      await waitFor(() => broker.replicaReports()[0]?.role === "leader", "the broker leads partition 1");
      const kept = await publish(broker, "acknowledged");
      expect(kept.outcome).toBe("published");

      restoreWrites = failFileWrites();
      const refused = await publish(broker, "never-acknowledged").catch((error: Error) => error);
      expect(refused).not.toMatchObject({ outcome: "published" });
      await waitFor(() => broker.replicaReports()[0]?.health === "dead", "the replica fails");
      restoreWrites();
      restoreWrites = undefined;

      // Two restart attempts (after 1 s and 2 s) pass, with the disk writable again: the storage is not reopened.
      const prepareFailures = () =>
        logged.filter((line) => line.msg === "could not prepare to open the partition replica again; it is retried");
      await waitFor(() => prepareFailures().length >= 2, "two restart attempts are refused", 8_000);
      expect(prepareFailures()[0]?.err?.message).toMatch(/could not be erased/);
      expect(logged.some((line) => line.msg.startsWith("the broker's storage refuses writes since a failure"))).toBe(
        false,
      );
      expect(broker.replicaReports()[0]?.health).toBe("dead");
      const health = (await (await fetch(`${broker.managementUrl}/actuator/health`)).json()) as {
        components: Record<string, { status: string; details: { reason?: string } }>;
      };
      expect(health.components["partition-1"]).toMatchObject({
        status: "DOWN",
        details: { reason: expect.stringMatching(/failed \(EIO: i\/o error, write\) and could not be erased/) },
      });
      await broker.close();

      // A restart opens the storage again: the acknowledged message is there, and the partition takes writes.
      restarted = await Broker.start(testBrokerOptions(directory, 0, single));
      await waitFor(() => restarted?.replicaReports()[0]?.role === "leader", "the restarted broker leads");
      const found = (await client.request(
        restarted.clusterAddress,
        { type: "get-message", partitionId: 1, key: kept.outcome === "published" ? kept.key : "" },
        { timeoutMs: 5_000 },
      )) as GetMessageResponse;
      expect(found).toMatchObject({ outcome: "found" });
      expect(await publish(restarted, "after-restart")).toMatchObject({ outcome: "published" });
    } finally {
      await broker.close();
      await restarted?.close();
    }
  });
});
