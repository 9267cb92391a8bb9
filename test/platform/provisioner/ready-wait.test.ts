/**
 * The local cluster's wait for readiness: it gives up `readyTimeoutMs` after the start, or after a broker last said it
 * was still starting (a broker restoring gigabytes of state takes minutes), never while brokers report progress.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { pino } from "pino";
import { afterEach, describe, expect, it } from "vitest";
import { managedChild } from "../../../src/platform/provisioner/managed-child.js";
import { waitUntilReady } from "../../../src/platform/provisioner/ready-wait.js";

/** A server answering `answer()` as JSON with its status, for as long as the test runs. */
async function serve(answer: () => { status: number; body: unknown }): Promise<{ server: Server; port: number }> {
  const server = createServer((_request, response) => {
    const { status, body } = answer();
    response.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { server, port: (server.address() as AddressInfo).port };
}

describe("waitUntilReady", () => {
  const servers: Server[] = [];
  afterEach(async () => {
    for (const server of servers.splice(0)) await new Promise((resolve) => server.close(resolve));
  });

  /** A gateway ready after `readyAfterMs` and a broker that says it is starting for `startingForMs`. */
  async function cluster(readyAfterMs: number, startingForMs: number) {
    const startedAtMs = performance.now();
    const elapsed = () => performance.now() - startedAtMs;
    const gateway = await serve(() =>
      elapsed() >= readyAfterMs ? { status: 200, body: { status: "UP" } } : { status: 503, body: { status: "DOWN" } },
    );
    let brokerAsked = 0;
    const broker = await serve(() => {
      brokerAsked += 1;
      return {
        status: 503,
        body: {
          status: "DOWN",
          components: { broker: { details: elapsed() < startingForMs ? { state: "STARTING" } : { state: "RUNNING" } } },
        },
      };
    });
    servers.push(gateway.server, broker.server);
    const child = managedChild("broker 0", 0, [{ purpose: "management port", port: broker.port }], {}, "broker-0.log");
    return {
      brokerAsked: () => brokerAsked,
      wait: () =>
        waitUntilReady({
          host: "127.0.0.1",
          managementUrl: `http://127.0.0.1:${gateway.port}`,
          children: [child],
          readyTimeoutMs: 2_500,
          logger: pino({ level: "silent" }),
          signal: undefined,
        }),
    };
  }

  it("waits past its timeout while a broker says it is still starting", async () => {
    const { wait } = await cluster(5_000, 4_500);
    await expect(wait()).resolves.toBeUndefined();
  }, 15_000);

  it("gives up after its timeout when no broker says it is starting", async () => {
    const { wait, brokerAsked } = await cluster(5_000, 0);
    await expect(wait()).rejects.toThrow("the local cluster was not ready within 2500 ms");
    // Every 2 s over the 2.5 s (the gateway is asked every 250 ms, and the brokers were asked as often before).
    expect(brokerAsked()).toBeGreaterThanOrEqual(1);
    expect(brokerAsked()).toBeLessThanOrEqual(3);
  }, 15_000);
});
