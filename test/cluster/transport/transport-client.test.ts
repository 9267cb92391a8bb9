import { afterEach, describe, expect, it } from "vitest";
import type { RequestSender } from "../../../src/cluster/transport/cluster-transport.js";
import { ClusterTransport } from "../../../src/cluster/transport/cluster-transport.js";
import {
  BackpressureError,
  PeerUnreachableError,
  RemoteError,
  TransportClosedError,
  TransportTimeoutError,
} from "../../../src/cluster/transport/errors.js";
import { TransportClient } from "../../../src/cluster/transport/transport-client.js";
import { testClusterCredentials } from "../../support/cluster-secret.js";
import { outcome, serverAndTimerCount, trackSockets, waitFor } from "./support.js";

const closables: { close(): Promise<void> }[] = [];

async function startNode(nodeId: number, port = 0) {
  const transport = new ClusterTransport({ nodeId, host: "127.0.0.1", port, credentials: testClusterCredentials() });
  closables.push(transport);
  const address = await transport.listen();
  return { transport, address };
}

function startClient(maxInFlightRequests = 16) {
  const client = new TransportClient({
    maxInFlightRequests,
    initialBackoffMs: 10,
    maxBackoffMs: 40,
    credentials: testClusterCredentials(),
  });
  closables.push(client);
  return client;
}

afterEach(async () => {
  await Promise.all(closables.splice(0).map((closable) => closable.close()));
});

describe("TransportClient", () => {
  it("sends requests to a node by address and identifies itself as a client", async () => {
    const { transport, address } = await startNode(4);
    const senders: RequestSender[] = [];
    transport.onRequest(async (from, request) => {
      senders.push(from);
      return { answer: request };
    });
    const client = startClient();
    expect(await client.request(address, "first", { timeoutMs: 5_000 })).toEqual({ answer: "first" });
    expect(await client.request(address, "second", { timeoutMs: 5_000 })).toEqual({ answer: "second" });
    expect(senders.map((sender) => sender.role)).toEqual(["client", "client"]);
    expect(transport.statistics().clients.framesReceived).toBe(2);
    expect(client.statistics().get(`127.0.0.1:${address.port}`)?.framesSent).toBe(2);
  });

  it("rejects at once with BackpressureError when a connection has too many requests in flight", async () => {
    const { transport, address } = await startNode(1);
    const releases: (() => void)[] = [];
    transport.onRequest((_, request) => new Promise((resolve) => releases.push(() => resolve(request))));
    const client = startClient(2);
    const firstRequest = client.request(address, 1, { timeoutMs: 10_000 });
    const secondRequest = client.request(address, 2, { timeoutMs: 10_000 });
    const third = await outcome(client.request(address, 3, { timeoutMs: 10_000 }));
    expect(third.error).toBeInstanceOf(BackpressureError);
    await waitFor(() => releases.length === 2, "both requests reach the handler");
    for (const release of releases) {
      release();
    }
    expect(await Promise.all([firstRequest, secondRequest])).toEqual([1, 2]);
    const fourthRequest = client.request(address, 4, { timeoutMs: 10_000 });
    await waitFor(() => releases.length === 3, "a request after the answers is accepted again");
    releases[2]?.();
    expect(await fourthRequest).toBe(4);
  });

  it("rejects the requests to a forgotten address, saying which had been sent", async () => {
    const { transport, address } = await startNode(1);
    let received = false;
    transport.onRequest(() => {
      received = true;
      return new Promise(() => undefined);
    });
    const client = startClient();
    const pending = client.request(address, "x", { timeoutMs: 10_000 });
    await waitFor(() => received, "the request reaches the node");
    client.forget(address);
    const forgotten = await outcome(pending);
    expect(forgotten.error).toBeInstanceOf(PeerUnreachableError);
    expect((forgotten.error as PeerUnreachableError).requestSent).toBe(true);
  });

  it("reports a node that is down as unreachable and reconnects when it is back", async () => {
    const { transport, address } = await startNode(1);
    await transport.close();
    const client = startClient();
    const whileDown = await outcome(client.request(address, "x", { timeoutMs: 5_000 }));
    expect(whileDown.error).toBeInstanceOf(PeerUnreachableError);
    const { transport: restarted } = await startNode(1, address.port);
    restarted.onRequest(async () => "back");
    await waitFor(
      async () => (await outcome(client.request(address, "x", { timeoutMs: 5_000 }))).value === "back",
      "the restarted node answers",
    );
  });

  it("surfaces handler errors and timeouts with their types", async () => {
    const { transport, address } = await startNode(1);
    transport.onRequest(async (_, request) => {
      if (request === "fail") {
        throw new Error("no leader for partition 2");
      }
      return new Promise(() => undefined);
    });
    const client = startClient();
    const failed = await outcome(client.request(address, "fail", { timeoutMs: 5_000 }));
    expect(failed.error).toBeInstanceOf(RemoteError);
    expect((failed.error as RemoteError).remoteMessage).toBe("no leader for partition 2");
    const slow = await outcome(client.request(address, "slow", { timeoutMs: 50 }));
    expect(slow.error).toBeInstanceOf(TransportTimeoutError);
  });

  it("rejects outstanding requests on close and releases its sockets and timers", async () => {
    const tracked = trackSockets();
    try {
      const baseline = serverAndTimerCount();
      const { transport, address } = await startNode(1);
      transport.onRequest(() => new Promise(() => undefined));
      const client = startClient();
      const pending = client.request(address, "x", { timeoutMs: 60_000 });
      // Both ends of the connection, so the check below is not vacuous.
      await waitFor(() => tracked.sockets.length >= 2, "the request's connection open");
      await client.close();
      expect((await outcome(pending)).error).toBeInstanceOf(TransportClosedError);
      expect((await outcome(client.request(address, "y", { timeoutMs: 1_000 }))).error).toBeInstanceOf(
        TransportClosedError,
      );
      await transport.close();
      await waitFor(() => tracked.allClosed() && serverAndTimerCount() <= baseline, "all handles released");
    } finally {
      tracked.stop();
    }
  });
});
