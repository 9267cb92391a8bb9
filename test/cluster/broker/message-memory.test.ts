/**
 * A broker's bound on buffered messages, with real in-process brokers: once its partitions hold the configured bytes
 * of messages, their leaders refuse new publications with the reason (the gateway's 503), the metrics show how much
 * is buffered, and publications are taken again once messages expired.
 */
import { afterEach, describe, expect, it } from "vitest";
import { bufferedMessagesRefusal } from "../../../src/cluster/broker/message-memory.js";
import type { BrokerRequest, PublishMessageResponse } from "../../../src/cluster/broker/protocol.js";
import { TransportClient } from "../../../src/cluster/transport/index.js";
import { defaultMaxBufferedMessageBytes } from "../../../src/config/memory.js";
import { testClusterCredentials } from "../../support/cluster-secret.js";
import {
  leaderOf,
  partitionSettledOnPriorityLeader,
  removeDirectory,
  startBrokers,
  temporaryDirectory,
  waitFor,
} from "./support.js";

describe("bufferedMessagesRefusal", () => {
  it("refuses at the byte bound, and when the messages' objects would fill half of the heap", () => {
    expect(bufferedMessagesRefusal(2, { messages: 10, bytes: 1024 }, 4096, 1024 ** 3)).toBeNull();
    expect(bufferedMessagesRefusal(2, { messages: 10, bytes: 4096 }, 4096, 1024 ** 3)).toMatch(
      /^broker 2 holds 0\.0 MiB of buffered messages, its limit \(service\.broker\.memory\.maxBufferedMessageBytes\)/,
    );
    // 1 million messages of 512 heap bytes each fill half of a heap of 1 GiB.
    expect(bufferedMessagesRefusal(2, { messages: 1_048_576, bytes: 1 }, 1024 ** 4, 1024 ** 3)).toMatch(
      /^broker 2 holds 1048576 buffered messages, as many as half of its heap/,
    );
    expect(defaultMaxBufferedMessageBytes(16 * 1024 ** 3, 2)).toBe(2 * 1024 ** 3);
  });
});

describe("brokers bounding their buffered messages", () => {
  const client = new TransportClient<BrokerRequest, unknown>({ credentials: testClusterCredentials() });
  const cleanups: (() => Promise<void> | void)[] = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });

  it("refuse publications with the reason once they hold their bound, and take them again after expiry", async () => {
    const root = await temporaryDirectory("buffered-bound");
    cleanups.push(() => removeDirectory(root));
    const brokers = await startBrokers(root, 3, () => ({ maxBufferedMessageBytes: 256 * 1024 }));
    cleanups.push(async () => {
      await Promise.all(brokers.map((broker) => broker.close()));
    });
    // Settled on the replica of the highest priority, so that no hand-over of the leadership comes during the test.
    for (const partitionId of [1, 2, 3]) {
      await waitFor(
        () => partitionSettledOnPriorityLeader(brokers, partitionId),
        `partition ${partitionId} settled`,
        5_000,
      );
    }
    const publish = async (sequence: number, timeToLiveMs: number): Promise<PublishMessageResponse> => {
      const leader = leaderOf(brokers, 1);
      if (leader === undefined) throw new Error("partition 1 has no leader");
      const message = {
        name: "large",
        correlationKey: `key-${sequence}`,
        timeToLiveMs,
        variables: { padding: "x".repeat(16 * 1024) },
        tenantId: "<default>",
      };
      return (await client.request(
        leader.clusterAddress,
        { type: "publish-message", partitionId: 1, message },
        { timeoutMs: 5_000 },
      )) as PublishMessageResponse;
    };
    let refused: PublishMessageResponse | undefined;
    let published = 0;
    // 16 messages of 16 KiB reach 256 KiB: bounded well above that.
    for (let sequence = 0; sequence < 40 && refused === undefined; sequence += 1) {
      const answer = await publish(sequence, 1_500);
      if (answer.outcome === "published") published += 1;
      else refused = answer;
    }
    // The refusal first, so that a refusal of another kind shows in the failure.
    expect(refused).toMatchObject({ outcome: "unavailable" });
    expect((refused as { detail: string }).detail).toMatch(
      /^broker \d holds 0\.[23] MiB of buffered messages, its limit .* is 0\.3 MiB; publications resume as/,
    );
    expect(published).toBeGreaterThanOrEqual(15);
    expect(published).toBeLessThanOrEqual(17);
    const metrics = await (await fetch(`${leaderOf(brokers, 1)?.managementUrl}/actuator/prometheus`)).text();
    expect(metrics).toMatch(/flowplane_partition_buffered_messages\{partition="1",broker="\d"\} 1[5-7]\b/);
    expect(metrics).toMatch(/flowplane_broker_buffered_message_bytes_limit\{broker="\d"\} 262144\b/);
    // Once the messages expired, publications are taken again.
    await waitFor(
      async () => (await publish(1_000, 60_000)).outcome === "published",
      "a publication after expiry",
      400,
    );
  });
});
