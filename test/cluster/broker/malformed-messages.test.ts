/**
 * A peer of the cluster (it holds the cluster secret) that sends malformed messages in a loop must not fill the
 * broker's log: the broker logs at most one line a minute per sender, quoting only the start of what it sent.
 */
import { Writable } from "node:stream";
import { pino } from "pino";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { Broker } from "../../../src/cluster/broker/broker.js";
import { encodeFrame } from "../../../src/cluster/transport/framing.js";
import { testClusterCredentials } from "../../support/cluster-secret.js";
import { RawConnection } from "../transport/support.js";
import { removeDirectory, temporaryDirectory, testBrokerOptions, waitFor } from "./support.js";

describe("malformed messages from a peer", () => {
  let directory: string;
  let broker: Broker | undefined;

  beforeEach(async () => {
    directory = await temporaryDirectory("malformed");
  });
  afterEach(async () => {
    await broker?.close();
    await removeDirectory(directory);
  });

  it("are logged once a minute per sender, each line quoting at most the start of the message", async () => {
    const lines: string[] = [];
    const logger = pino(
      { level: "warn" },
      new Writable({
        write(chunk: Buffer, _encoding, done) {
          lines.push(chunk.toString("utf8"));
          done();
        },
      }),
    );
    broker = await Broker.start(
      testBrokerOptions(directory, 0, { clusterSize: 1, partitionsCount: 1, replicationFactor: 1, logger }),
    );
    const peer = await RawConnection.open(broker.clusterAddress);
    expect(await peer.authenticate(testClusterCredentials(), { role: "node", nodeId: 77 })).toMatchObject({
      kind: "accepted",
    });
    const type = `MARKER${"z".repeat(2 * 1024 * 1024)}`;
    for (let message = 0; message < 20; message += 1) {
      peer.socket.write(encodeFrame({ kind: "message", body: { type } }, 4 * 1024 * 1024));
    }
    const marked = () => lines.filter((line) => line.includes("MARKER"));
    await waitFor(() => marked().length > 0, "the first malformed message was logged");
    // The other 19 arrive right after it and are left out of the log.
    await new Promise((resolve) => setTimeout(resolve, 500));
    peer.socket.destroy();
    expect(marked()).toHaveLength(1);
    expect(marked()[0]?.length).toBeLessThan(1_000);
    expect(marked()[0]).toContain("dropped a malformed message from a broker");
  });
});
