/**
 * How the gateway finds the coordinator and reports what went wrong: a broker that received a management request and
 * failed it is named with its reason, not reported as one that could not be reached.
 */
import { pino } from "pino";
import { describe, expect, it } from "vitest";
import type { BrokerRequest } from "../../../src/cluster/broker/protocol.js";
import { CoordinatorClient, type CoordinatorRequest } from "../../../src/cluster/gateway/coordinator-client.js";
import type { TopologyCache } from "../../../src/cluster/gateway/topology-cache.js";
import {
  BackpressureError,
  PeerUnreachableError,
  RemoteError,
  type TransportClient,
} from "../../../src/cluster/transport/index.js";
import { ServiceError } from "../../../src/http/errors.js";

/** A gateway's view of three reachable brokers 0, 1 and 2. */
function threeBrokers(): TopologyCache {
  const ids = [0, 1, 2];
  const view = {
    configuration: { members: new Map(ids.map((id) => [id, { state: "ACTIVE" }])) },
    reachable: new Set(ids),
    addresses: new Map(ids.map((id) => [id, { host: "127.0.0.1", port: 26500 + id }])),
  };
  return { current: () => view, refreshedSince: async () => view } as unknown as TopologyCache;
}

/** A transport client whose answer per broker `answer` gives, counting the requests each broker received. */
function brokersAnswering(answer: (brokerId: number) => unknown) {
  const received: number[] = [];
  const client = {
    request: async (address: { port: number }) => {
      const brokerId = address.port - 26500;
      received.push(brokerId);
      const outcome = answer(brokerId);
      if (outcome instanceof Error) throw outcome;
      return outcome;
    },
  } as unknown as TransportClient<BrokerRequest, unknown>;
  return { client, received };
}

const status: CoordinatorRequest = { type: "cluster-status" };

function coordinatorClient(client: TransportClient<BrokerRequest, unknown>): CoordinatorClient {
  return new CoordinatorClient({
    client,
    topology: threeBrokers(),
    requestTimeoutMs: 1_000,
    logger: pino({ level: "silent" }),
  });
}

describe("the gateway's coordinator client", () => {
  it("names the broker that failed the request and why, when no other broker answers as coordinator", async () => {
    const tooLarge = "frame of 25836351 bytes exceeds the maximum of 16777216 bytes";
    const { client, received } = brokersAnswering((brokerId) =>
      brokerId === 0
        ? new RemoteError("broker 0", "handler-failed", tooLarge)
        : { outcome: "not-coordinator", coordinatorId: 0 },
    );
    await expect(coordinatorClient(client).send(status)).rejects.toThrow(
      `Broker 0 received the request and failed it (${tooLarge}), and no other broker answered as coordinator; check GET /actuator/cluster before you retry.`,
    );
    // Each broker asked once: the redirects to broker 0 are not followed again.
    expect(received).toEqual([0, 1, 2]);
  });

  it("still says the coordinator could not be reached when no broker received the request", async () => {
    const { client } = brokersAnswering((brokerId) => new PeerUnreachableError(`broker ${brokerId}`, "refused"));
    await expect(coordinatorClient(client).send(status)).rejects.toThrow(
      "The coordinator could not be reached: none of the brokers 0, 1, 2 answered as coordinator.",
    );
  });

  it("answers 503 with Retry-After when the coordinator refuses the request as overloaded, asking no other broker", async () => {
    const { client, received } = brokersAnswering((brokerId) =>
      brokerId === 0
        ? new RemoteError("broker 0", "overloaded", "too many requests in flight")
        : { outcome: "not-coordinator", coordinatorId: 0 },
    );
    const refusal = await coordinatorClient(client)
      .send(status)
      .catch((error: unknown) => error);
    expect(refusal).toBeInstanceOf(ServiceError);
    expect(refusal).toMatchObject({
      message: "The coordinator (broker 0) is overloaded; retry later.",
      status: 503,
      headers: { "retry-after": "1" },
    });
    // Refused before it was handled: the others would only name broker 0 again, as the old 502 said after asking them.
    expect(received).toEqual([0]);
  });

  it("answers 503 with Retry-After when its own management requests in flight are at their limit", async () => {
    const { client } = brokersAnswering(() => new BackpressureError("broker 0", "8 requests in flight"));
    await expect(coordinatorClient(client).send(status)).rejects.toMatchObject({
      message: "The gateway has as many cluster management requests in flight as it allows; retry later.",
      status: 503,
      headers: { "retry-after": "1" },
    });
  });

  it("takes the answer of another broker that answers as coordinator after one failed", async () => {
    const { client } = brokersAnswering((brokerId) =>
      brokerId === 0 ? new RemoteError("broker 0", "handler-failed", "a fault") : { outcome: "ok", brokerId },
    );
    expect(await coordinatorClient(client).send(status)).toEqual({ outcome: "ok", brokerId: 1 });
  });
});
