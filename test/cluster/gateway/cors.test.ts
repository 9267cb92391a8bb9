import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseAllowedOrigins } from "../../../src/cluster/gateway/cors.js";
import { type RunningGateway, startGateway } from "../../../src/cluster/gateway/index.js";
import { ConfigurationError } from "../../../src/config/errors.js";
import { loadConfiguration } from "../../../src/config/load.js";
import { TEST_CLUSTER_SECRET } from "../../support/cluster-secret.js";
import { startTestPlatform, type TestPlatform } from "../../support/platform.js";
import { requestToken } from "../../support/tokens.js";
import { startFakeCluster } from "./fake-broker.js";

const consoleOrigin = "http://127.0.0.1:8088";

describe("allowed origins setting", () => {
  it("reads comma-separated origins and refuses paths, other schemes and non-URLs, naming the entry", () => {
    expect([...parseAllowedOrigins("")]).toEqual([]);
    expect([...parseAllowedOrigins(` ${consoleOrigin} , https://console.example.com/`)]).toEqual([
      consoleOrigin,
      "https://console.example.com",
    ]);
    for (const bad of ["console.example.com", "ftp://example.com", "https://example.com/console", "http://"]) {
      expect(() => parseAllowedOrigins(bad), bad).toThrow(ConfigurationError);
    }
    expect(() => parseAllowedOrigins("https://example.com/console")).toThrow(/did you mean https:\/\/example\.com/);
  });
});

describe("cross-origin calls to the gateway", () => {
  let platform: TestPlatform;
  let cluster: Awaited<ReturnType<typeof startFakeCluster>>;
  let token: string;
  const gateways: RunningGateway[] = [];

  async function gatewayWith(allowedOrigins: string): Promise<RunningGateway> {
    const configuration = loadConfiguration({
      environment: {},
      flags: {
        "service.gateway.port": 0,
        "service.management.port": 0,
        "service.cluster.secret": TEST_CLUSTER_SECRET,
        "service.gateway.issuerUrl": platform.issuerUrl,
        "service.gateway.contactPoints": cluster.brokers.map((broker) => `127.0.0.1:${broker.address?.port}`).join(","),
        "service.gateway.allowedOrigins": allowedOrigins,
      },
    });
    const gateway = await startGateway(configuration, { logger: pino({ level: "silent" }) });
    gateways.push(gateway);
    return gateway;
  }

  beforeAll(async () => {
    platform = await startTestPlatform();
    cluster = await startFakeCluster();
    token = await requestToken(platform, platform.adminClient, "gateway-api");
  });
  afterAll(async () => {
    await Promise.all(gateways.map((gateway) => gateway.close()));
    await cluster?.close();
    await platform?.close();
  });

  function preflight(url: string, origin: string, method = "GET"): Promise<Response> {
    return fetch(url, {
      method: "OPTIONS",
      headers: { origin, "access-control-request-method": method, "access-control-request-headers": "authorization" },
    });
  }

  it("answers preflights of a listed origin on the REST API and the management port", async () => {
    const gateway = await gatewayWith(consoleOrigin);
    for (const [url, method] of [
      [`${gateway.url}/v2/topology`, "GET"],
      [`${gateway.managementUrl}/actuator/cluster/brokers`, "POST"],
      [`${gateway.managementUrl}/actuator/prometheus`, "GET"],
    ] as const) {
      const response = await preflight(url, consoleOrigin, method);
      expect(response.status, url).toBe(204);
      expect(response.headers.get("access-control-allow-origin"), url).toBe(consoleOrigin);
      expect(response.headers.get("access-control-allow-methods"), url).toContain(method);
      expect(response.headers.get("access-control-allow-headers"), url).toContain("authorization");
      expect(response.headers.get("access-control-allow-credentials"), url).toBeNull();
    }
  });

  it("lets a listed origin read answers, success and error alike, and no other origin", async () => {
    const gateway = await gatewayWith(`${consoleOrigin},https://console.example.com`);
    const topology = await fetch(`${gateway.url}/v2/topology`, {
      headers: { origin: consoleOrigin, authorization: `Bearer ${token}` },
    });
    expect(topology.status).toBe(200);
    expect(topology.headers.get("access-control-allow-origin")).toBe(consoleOrigin);
    expect(topology.headers.get("vary")).toContain("origin");
    // A page must be able to read why it was refused, or it could not send its user back to sign in.
    const refused = await fetch(`${gateway.url}/v2/topology`, { headers: { origin: "https://console.example.com" } });
    expect(refused.status).toBe(401);
    expect(refused.headers.get("access-control-allow-origin")).toBe("https://console.example.com");

    const other = await fetch(`${gateway.url}/v2/topology`, {
      headers: { origin: "https://evil.example", authorization: `Bearer ${token}` },
    });
    expect(other.headers.get("access-control-allow-origin")).toBeNull();
    const otherPreflight = await preflight(`${gateway.url}/v2/topology`, "https://evil.example");
    expect(otherPreflight.headers.get("access-control-allow-origin")).toBeNull();
    expect(otherPreflight.status).not.toBe(204);
  });

  it("sends no CORS headers when no origin is listed", async () => {
    const gateway = await gatewayWith("");
    const response = await preflight(`${gateway.url}/v2/topology`, consoleOrigin);
    expect(response.headers.get("access-control-allow-origin")).toBeNull();
    expect(response.status).not.toBe(204);
  });
});
