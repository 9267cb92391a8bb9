/**
 * `brokerHasStarted` against a broker's real management server whose start is held at a step (liveness 200 all
 * along, health STARTING), and against scripted answers a broken endpoint could give.
 */
import { pino } from "pino";
import { afterAll, describe, expect, it } from "vitest";
import { brokerHasStarted } from "../../src/client/broker-health.js";
import {
  createBrokerMetrics,
  type ManagementSource,
  startManagementServer,
} from "../../src/cluster/broker/management.js";
import { inactiveReplicaReport } from "../../src/cluster/broker/replica-host.js";
import type { HttpServer } from "../../src/http/server.js";
import { defaultHttpServerLimits } from "../support/http.js";
import { scriptedServer, sendJson } from "./support.js";

describe("brokerHasStarted", () => {
  const servers: HttpServer[] = [];
  afterAll(async () => await Promise.all(servers.map((server) => server.close())));

  it("is false while the broker starts, though its liveness answers 200, and true once it runs", async () => {
    let step: string | null = "opening partition replicas";
    let closing = false;
    const source: ManagementSource = {
      nodeId: 3,
      // A replica without a leader yet keeps the health DOWN (503) after the start: that does not matter here.
      replicas: () => [inactiveReplicaReport(1, "unhealthy")],
      deadReason: () => null,
      logSizes: () => new Map(),
      bufferedMessages: () => new Map(),
      maxBufferedMessageBytes: 1024 ** 3,
      peerReachability: () => new Map(),
      closing: () => closing,
      startingStep: () => step,
    };
    const { server, url } = await startManagementServer({
      host: "127.0.0.1",
      port: 0,
      source,
      metrics: createBrokerMetrics(source),
      logger: pino({ level: "silent" }),
      limits: defaultHttpServerLimits,
    });
    servers.push(server);
    expect((await fetch(`${url}/actuator/health/liveness`)).status).toBe(200);
    expect(await brokerHasStarted(url, 5_000)).toBe(false);
    step = null;
    expect(await brokerHasStarted(url, 5_000)).toBe(true);
    closing = true;
    expect(await brokerHasStarted(url, 5_000)).toBe(false);
  });

  it("is false when nothing listens, and for answers that are not a running broker's health document", async () => {
    const server = await scriptedServer([
      (_request, response) => sendJson(response, 200, { status: "UP" }),
      (_request, response) => sendJson(response, 200, null),
      (_request, response) => {
        response.writeHead(200, { "content-type": "application/json" });
        response.end("not json");
      },
      (_request, response) => {
        // Larger than the bound, though it says RUNNING: it is not read to its end.
        const padding = "x".repeat(2 * 1024 * 1024);
        sendJson(response, 200, { components: { broker: { details: { state: "RUNNING" } } }, padding });
      },
      (_request, response) => sendJson(response, 503, { components: { broker: { details: { state: "RUNNING" } } } }),
    ]);
    try {
      expect(await brokerHasStarted(server.url, 5_000)).toBe(false);
      expect(await brokerHasStarted(server.url, 5_000)).toBe(false);
      expect(await brokerHasStarted(server.url, 5_000)).toBe(false);
      expect(await brokerHasStarted(server.url, 5_000)).toBe(false);
      // A started broker whose partitions are not all healthy yet answers 503: started all the same.
      expect(await brokerHasStarted(server.url, 5_000)).toBe(true);
    } finally {
      await server.close();
    }
    expect(await brokerHasStarted(server.url, 5_000)).toBe(false);
  });
});
