import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { deriveClusterStatus, probeClusterHealth } from "../../../src/platform/provisioner/health-monitor.js";

const servers: Server[] = [];

afterEach(async () => {
  for (const server of servers.splice(0)) await new Promise((resolveClose) => server.close(resolveClose));
});

/** A management port whose health document has `status` and a scaling change with `pending` operations left. */
async function managementPort(status: number, pending: number, body?: string): Promise<string> {
  const server = createServer((request, response) => {
    if (request.url !== "/actuator/health") {
      // Everything else is protected or absent: the probe must not need it.
      response.writeHead(401).end();
      return;
    }
    response.writeHead(status, { "content-type": "application/json" });
    const clusterChange = {
      status: "UP",
      details: pending > 0 ? { changeRunning: true, pendingOperations: pending } : { changeRunning: false },
    };
    response.end(body ?? JSON.stringify({ status: status === 200 ? "UP" : "DOWN", components: { clusterChange } }));
  });
  servers.push(server);
  await new Promise<void>((resolveListen) => server.listen(0, "127.0.0.1", resolveListen));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

describe("probeClusterHealth", () => {
  it("reads readiness and whether a scaling change runs from the health document alone", async () => {
    const ready = await managementPort(200, 0);
    expect(await probeClusterHealth({ gatewayUrl: "", managementUrl: ready })).toEqual({
      gatewayAnswering: true,
      ready: true,
      changeRunning: false,
      unreachableBrokers: [],
      deadReplicas: [],
    });
    const scaling = await managementPort(200, 3);
    expect((await probeClusterHealth({ gatewayUrl: "", managementUrl: scaling })).changeRunning).toBe(true);
    const down = await managementPort(503, 0);
    expect(await probeClusterHealth({ gatewayUrl: "", managementUrl: down })).toEqual({
      gatewayAnswering: true,
      ready: false,
      changeRunning: false,
      unreachableBrokers: [],
      deadReplicas: [],
    });
    // A body that is not a health document still counts as an answer; it says nothing of a change.
    const garbage = await managementPort(200, 0, "<html>");
    expect(await probeClusterHealth({ gatewayUrl: "", managementUrl: garbage })).toEqual({
      gatewayAnswering: true,
      ready: true,
      changeRunning: false,
      unreachableBrokers: [],
      deadReplicas: [],
    });
  });

  it("reads the member brokers the gateway cannot reach, ignoring what is not a broker id", async () => {
    const body = JSON.stringify({
      status: "UP",
      components: { brokers: { status: "UP", details: { reachable: [0, 1], unreachable: [4, 2, "x", -1, 1.5] } } },
    });
    const url = await managementPort(200, 0, body);
    expect((await probeClusterHealth({ gatewayUrl: "", managementUrl: url })).unreachableBrokers).toEqual([2, 4]);
  });

  it("reads the replicas that failed, ignoring entries that are not one", async () => {
    const deadReplicas = [{ brokerId: 0, partitionId: 2 }, { brokerId: "x" }, 7];
    const body = JSON.stringify({
      status: "UP",
      components: { brokers: { status: "UP", details: { reachable: [0, 1, 2], unreachable: [], deadReplicas } } },
    });
    const url = await managementPort(200, 0, body);
    expect((await probeClusterHealth({ gatewayUrl: "", managementUrl: url })).deadReplicas).toEqual([
      { brokerId: 0, partitionId: 2 },
    ]);
  });

  it("reports a gateway that does not answer", async () => {
    const server = await managementPort(200, 0);
    await new Promise((resolveClose) => servers.pop()?.close(resolveClose));
    expect(await probeClusterHealth({ gatewayUrl: "", managementUrl: server })).toEqual({
      gatewayAnswering: false,
      ready: false,
      changeRunning: false,
      unreachableBrokers: [],
      deadReplicas: [],
    });
  });
});

describe("deriveClusterStatus", () => {
  const ready = { gatewayAnswering: true, ready: true, changeRunning: false, unreachableBrokers: [], deadReplicas: [] };
  it("stays Creating while the first start runs, then follows the probe", () => {
    expect(deriveClusterStatus("Creating", "starting", undefined).status).toBe("Creating");
    expect(deriveClusterStatus("Creating", "running", ready)).toEqual({ status: "Healthy", gatewayStatus: "Healthy" });
    expect(deriveClusterStatus("Healthy", "running", { ...ready, changeRunning: true }).status).toBe("Updating");
    expect(deriveClusterStatus("Healthy", "running", { ...ready, ready: false })).toEqual({
      status: "Unhealthy",
      gatewayStatus: "Healthy",
      reason: "a partition has no leader",
    });
    expect(deriveClusterStatus("Healthy", "running", { ...ready, gatewayAnswering: false, ready: false })).toEqual({
      status: "Unhealthy",
      gatewayStatus: "Unhealthy",
      reason: "the gateway's management port does not answer",
    });
  });

  it("is Unhealthy when a member broker cannot be reached, though every partition has a leader", () => {
    expect(deriveClusterStatus("Healthy", "running", { ...ready, unreachableBrokers: [2] })).toEqual({
      status: "Unhealthy",
      gatewayStatus: "Healthy",
      reason: "broker 2 cannot be reached (every partition still has a leader)",
    });
    expect(deriveClusterStatus("Healthy", "running", { ...ready, unreachableBrokers: [1, 2] }).reason).toBe(
      "brokers 1, 2 cannot be reached (every partition still has a leader)",
    );
    // A running change says Updating: brokers it adds or removes come and go meanwhile.
    expect(
      deriveClusterStatus("Healthy", "running", { ...ready, changeRunning: true, unreachableBrokers: [3] }).status,
    ).toBe("Updating");
  });

  it("is Unhealthy when replicas failed, though every partition has a leader", () => {
    const deadReplicas = [
      { brokerId: 0, partitionId: 1 },
      { brokerId: 0, partitionId: 3 },
    ];
    expect(deriveClusterStatus("Healthy", "running", { ...ready, deadReplicas })).toEqual({
      status: "Unhealthy",
      gatewayStatus: "Healthy",
      reason: "replicas failed: partition 1 on broker 0, partition 3 on broker 0 (every partition still has a leader)",
    });
  });

  it("is Unhealthy when the processes do not run or failed to start", () => {
    expect(deriveClusterStatus("Creating", "failed", undefined).status).toBe("Unhealthy");
    expect(deriveClusterStatus("Healthy", "stopped", ready).status).toBe("Unhealthy");
  });

  it("is Unhealthy while a crashed process is being restarted, saying which and when, even if the rest serves", () => {
    const crash = {
      clusterId: "c",
      process: "broker 2",
      exitCode: null,
      signal: "SIGKILL",
      restartInMs: 500,
      restarts: 1,
    };
    expect(deriveClusterStatus("Healthy", "degraded", ready, crash)).toEqual({
      status: "Unhealthy",
      gatewayStatus: "Healthy",
      reason: "broker 2 exited unexpectedly (SIGKILL); restart 1 in 0.5 s",
    });
    expect(deriveClusterStatus("Healthy", "degraded", ready, { ...crash, signal: null, exitCode: 3 }).reason).toBe(
      "broker 2 exited unexpectedly (exit code 3); restart 1 in 0.5 s",
    );
  });
});
