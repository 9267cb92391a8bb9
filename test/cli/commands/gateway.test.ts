import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Command } from "commander";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { gatewayConfigurationFlags, registerGatewayCommand } from "../../../src/cli/commands/gateway.js";
import { UsageError } from "../../../src/cli/io.js";
import { ConfigurationError } from "../../../src/config/load.js";
import { startFakeCluster } from "../../cluster/gateway/fake-broker.js";
import { TEST_CLUSTER_SECRET } from "../../support/cluster-secret.js";
import { captureIo } from "../support.js";

let cluster: Awaited<ReturnType<typeof startFakeCluster>>;
let homeDirectory: string;

beforeAll(async () => {
  cluster = await startFakeCluster();
  homeDirectory = await mkdtemp(join(tmpdir(), "flowplane-gateway-cli-"));
});

afterAll(async () => {
  await cluster?.close();
  await rm(homeDirectory, { recursive: true, force: true });
});

describe("flowplane gateway", () => {
  it("maps its flags onto configuration keys, the dedicated flags winning over --set", () => {
    expect(
      gatewayConfigurationFlags({
        port: "8081",
        managementPort: "9601",
        contactPoints: "127.0.0.1:1",
        set: ["service.gateway.port=1", "service.gateway.requestTimeoutMs=500"],
      }),
    ).toEqual({
      "service.gateway.port": "8081",
      "service.management.port": "9601",
      "service.gateway.contactPoints": "127.0.0.1:1",
      "service.gateway.requestTimeoutMs": "500",
    });
    expect(() => gatewayConfigurationFlags({ set: ["no-equals-sign"] })).toThrow(UsageError);
  });

  it("refuses to start without a cluster secret, saying how to set one", async () => {
    const { io } = captureIo({}, homeDirectory);
    const program = new Command("flowplane").exitOverride();
    registerGatewayCommand(program, io);
    const running = program.parseAsync(["gateway", "--port", "0", "--management-port", "0"], { from: "user" });
    await expect(running).rejects.toBeInstanceOf(ConfigurationError);
    await expect(running).rejects.toThrow(/service\.cluster\.secret is not set.*openssl rand -base64 32/);
  });

  it("serves until the shutdown signal and says where it listens", async () => {
    const shutdown = new AbortController();
    const { io, output } = captureIo({ SERVICE_CLUSTER_SECRET: TEST_CLUSTER_SECRET }, homeDirectory, shutdown.signal);
    const program = new Command("flowplane").exitOverride();
    registerGatewayCommand(program, io);
    const contactPoints = cluster.brokers.map((broker) => `127.0.0.1:${broker.address?.port}`).join(",");
    const running = program.parseAsync(
      ["gateway", "--port", "0", "--management-port", "0", "--contact-points", contactPoints],
      { from: "user" },
    );
    let match: RegExpExecArray | null = null;
    for (let attempt = 0; attempt < 200 && match === null; attempt += 1) {
      match = /management API at (http:\/\/\S+)\)/.exec(output.stdout);
      if (match === null) await new Promise((resolve) => setTimeout(resolve, 50));
    }
    expect(output.stdout).toMatch(/flowplane gateway listening at http:\/\/127\.0\.0\.1:\d+/);
    const readiness = await fetch(`${match?.[1]}/actuator/health/readiness`);
    expect(readiness.status).toBe(200);
    shutdown.abort();
    await running;
    expect(output.stdout).toContain("flowplane gateway stopped");
  });
});
