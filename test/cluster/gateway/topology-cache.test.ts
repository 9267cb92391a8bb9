import { pino } from "pino";
import { describe, expect, it } from "vitest";
import type { BrokerRequest } from "../../../src/cluster/broker/protocol.js";
import { parseContactPoints, TopologyCache } from "../../../src/cluster/gateway/topology-cache.js";
import { encodeConfiguration } from "../../../src/cluster/topology/index.js";
import type { TransportClient } from "../../../src/cluster/transport/index.js";
import { threeBrokerConfiguration } from "./fake-broker.js";

/** A client whose describe answers the test releases by hand, counting the requests. */
function manualClient() {
  const pending: (() => void)[] = [];
  let requests = 0;
  const client = {
    request(address: { host: string; port: number }) {
      requests += 1;
      return new Promise((resolve) => {
        pending.push(() =>
          resolve({
            nodeId: address.port - 1000,
            host: address.host,
            port: address.port,
            version: "1",
            configuration: encodeConfiguration(threeBrokerConfiguration()),
            brokers: [],
            replicas: [],
          }),
        );
      });
    },
  } as unknown as TransportClient<BrokerRequest, unknown>;
  return {
    client,
    requests: () => requests,
    releaseAll() {
      for (const release of pending.splice(0)) release();
    },
  };
}

function cacheWith(client: TransportClient<BrokerRequest, unknown>, clock: { now: number }) {
  return new TopologyCache({
    client,
    contactPoints: [{ host: "127.0.0.1", port: 1000 }],
    gatewayVersion: "1",
    describeTimeoutMs: 1_000,
    refreshIntervalMs: 60_000,
    logger: pino({ level: "silent" }),
    now: () => clock.now,
  });
}

async function settle(): Promise<void> {
  for (let turn = 0; turn < 10; turn += 1) await Promise.resolve();
}

describe("TopologyCache", () => {
  it("runs one round at a time; callers arriving meanwhile share one queued round", async () => {
    const fake = manualClient();
    const clock = { now: 0 };
    const cache = cacheWith(fake.client, clock);
    const first = cache.refresh();
    const queued = [cache.refresh(), cache.refresh(), cache.refresh()];
    expect(fake.requests()).toBe(1);
    fake.releaseAll();
    await first;
    await settle();
    // The queued round started once the first one ended.
    expect(fake.requests()).toBe(2);
    fake.releaseAll();
    const views = await Promise.all(queued);
    expect(new Set(views).size).toBe(1);
    expect(views[0]?.reachable.has(0)).toBe(true);
    expect(fake.requests()).toBe(2);
  });

  it("answers refreshedSince from the last round when it started late enough", async () => {
    const fake = manualClient();
    const clock = { now: 100 };
    const cache = cacheWith(fake.client, clock);
    const round = cache.refresh();
    fake.releaseAll();
    const view = await round;
    clock.now = 150;
    expect(await cache.refreshedSince(100)).toBe(view);
    expect(fake.requests()).toBe(1);
    const newer = cache.refreshedSince(120);
    await settle();
    expect(fake.requests()).toBe(2);
    fake.releaseAll();
    expect(await newer).toBeDefined();
  });
});

describe("TopologyCache's silent brokers", () => {
  it("asks a broker first heard of from another from the next round on, at its latest address", async () => {
    // Broker 0 (the contact point, port 1000) tells of broker 3; where broker 3 listens is up to the test.
    let brokerThreePort = 1003;
    const answering = new Set<number>();
    const asked: number[] = [];
    const client = {
      async request(address: { host: string; port: number }) {
        asked.push(address.port);
        const configuration = encodeConfiguration(threeBrokerConfiguration());
        if (address.port === 1000) {
          const brokers = [
            { nodeId: 0, host: "127.0.0.1", port: 1000 },
            { nodeId: 3, host: "127.0.0.1", port: brokerThreePort },
          ];
          return { nodeId: 0, host: "127.0.0.1", port: 1000, version: "1", configuration, brokers, replicas: [] };
        }
        if (!answering.has(address.port)) throw new Error(`nothing listens on ${address.port}`);
        return {
          nodeId: 3,
          host: "127.0.0.1",
          port: address.port,
          version: "1",
          configuration,
          brokers: [],
          replicas: [],
        };
      },
    } as unknown as TransportClient<BrokerRequest, unknown>;
    const cache = cacheWith(client, { now: 0 });

    // Round 1 learns of broker 3 from broker 0's answer without asking it: not silent yet.
    expect([...((await cache.refresh())?.silent ?? [])]).toEqual([]);
    expect(asked).toEqual([1000]);
    // Round 2 asks it where broker 0 said it listens, and hears nothing.
    asked.length = 0;
    expect([...((await cache.refresh())?.silent ?? [])]).toEqual([3]);
    expect(asked.sort((left, right) => left - right)).toEqual([1000, 1003]);
    // Round 3: it was restarted on another port, which broker 0 tells; asked at the old one, it is not silent.
    brokerThreePort = 1004;
    answering.add(1004);
    expect([...((await cache.refresh())?.silent ?? [])]).toEqual([]);
    // Round 4 asks it at the new port, where it answers.
    asked.length = 0;
    const view = await cache.refresh();
    expect(asked.sort((left, right) => left - right)).toEqual([1000, 1004]);
    expect(view?.reachable.has(3)).toBe(true);
    expect([...(view?.silent ?? [])]).toEqual([]);
  });
});

describe("parseContactPoints", () => {
  it("parses host:port lists and names a bad entry", () => {
    expect(parseContactPoints(" 127.0.0.1:26501, [::1]:26502 ,")).toEqual([
      { host: "127.0.0.1", port: 26501 },
      { host: "::1", port: 26502 },
    ]);
    expect(() => parseContactPoints("127.0.0.1:26501,broker-2")).toThrow(/"broker-2"/);
    expect(() => parseContactPoints("host:70000")).toThrow(/port in 1..65535/);
  });
});
