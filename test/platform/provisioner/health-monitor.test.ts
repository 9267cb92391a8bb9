import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { deriveClusterStatus, probeClusterHealth } from "../../../src/platform/provisioner/health-monitor.js";

const servers: Server[] = [];

afterEach(async () => {
  for (const server of servers.splice(0)) await new Promise((resolveClose) => server.close(resolveClose));
});

/** A management port answering readiness with `readinessStatus` and metrics with `pending` operations left. */
async function managementPort(readinessStatus: number, metricsStatus: number, pending: number): Promise<string> {
  const server = createServer((request, response) => {
    if (request.url === "/actuator/health/readiness") {
      response.writeHead(readinessStatus, { "content-type": "application/json" });
      response.end(JSON.stringify({ status: readinessStatus === 200 ? "UP" : "DOWN" }));
      return;
    }
    response.writeHead(metricsStatus, { "content-type": "text/plain" });
    response.end(
      `# HELP flowplane_cluster_change_operations_pending Operations left.\nflowplane_cluster_change_operations_pending ${pending}\n`,
    );
  });
  servers.push(server);
  await new Promise<void>((resolveListen) => server.listen(0, "127.0.0.1", resolveListen));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

describe("probeClusterHealth", () => {
  it("reads readiness and whether a scaling change has operations left", async () => {
    const ready = await managementPort(200, 200, 0);
    expect(await probeClusterHealth({ gatewayUrl: "", managementUrl: ready })).toEqual({
      gatewayAnswering: true,
      ready: true,
      changeRunning: false,
    });
    const scaling = await managementPort(200, 200, 3);
    expect((await probeClusterHealth({ gatewayUrl: "", managementUrl: scaling })).changeRunning).toBe(true);
    const down = await managementPort(503, 200, 0);
    expect((await probeClusterHealth({ gatewayUrl: "", managementUrl: down })).ready).toBe(false);
    // Protected metrics say nothing of a change; readiness still counts.
    const protectedMetrics = await managementPort(200, 401, 5);
    expect(await probeClusterHealth({ gatewayUrl: "", managementUrl: protectedMetrics })).toMatchObject({
      ready: true,
      changeRunning: false,
    });
  });

  it("reports a gateway that does not answer", async () => {
    const server = await managementPort(200, 200, 0);
    await new Promise((resolveClose) => servers.pop()?.close(resolveClose));
    expect(await probeClusterHealth({ gatewayUrl: "", managementUrl: server })).toEqual({
      gatewayAnswering: false,
      ready: false,
      changeRunning: false,
    });
  });
});

describe("deriveClusterStatus", () => {
  const ready = { gatewayAnswering: true, ready: true, changeRunning: false };
  it("stays Creating while the first start runs, then follows the probe", () => {
    expect(deriveClusterStatus("Creating", "starting", undefined).status).toBe("Creating");
    expect(deriveClusterStatus("Creating", "running", ready)).toEqual({ status: "Healthy", gatewayStatus: "Healthy" });
    expect(deriveClusterStatus("Healthy", "running", { ...ready, changeRunning: true }).status).toBe("Updating");
    expect(deriveClusterStatus("Healthy", "running", { ...ready, ready: false })).toEqual({
      status: "Unhealthy",
      gatewayStatus: "Healthy",
    });
    expect(deriveClusterStatus("Healthy", "running", { ...ready, gatewayAnswering: false, ready: false })).toEqual({
      status: "Unhealthy",
      gatewayStatus: "Unhealthy",
    });
  });

  it("is Unhealthy when the processes do not run or failed to start", () => {
    expect(deriveClusterStatus("Creating", "failed", undefined).status).toBe("Unhealthy");
    expect(deriveClusterStatus("Healthy", "stopped", ready).status).toBe("Unhealthy");
  });
});
