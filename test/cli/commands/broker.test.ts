import { type ChildProcess, spawn } from "node:child_process";
import { access, mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Command } from "commander";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { brokerConfigurationFlags, registerBrokerCommand } from "../../../src/cli/commands/broker.js";
import { UsageError } from "../../../src/cli/io.js";
import { ConfigurationError } from "../../../src/config/load.js";
import { childCommand } from "../../support/child-command.js";
import { TEST_CLUSTER_SECRET } from "../../support/cluster-secret.js";
import { captureIo } from "../support.js";

let temporaryDirectory: string;

beforeAll(async () => {
  temporaryDirectory = await mkdtemp(join(tmpdir(), "flowplane-cli-broker-"));
});

afterAll(async () => {
  if (temporaryDirectory !== undefined) await rm(temporaryDirectory, { recursive: true, force: true });
});

/** A program with only the broker command, as main.ts registers it. */
function program(io: Parameters<typeof registerBrokerCommand>[1]): Command {
  const command = new Command("flowplane").exitOverride();
  registerBrokerCommand(command, io);
  return command;
}

const singleBroker = [
  "--set",
  "service.broker.cluster.clusterSize=1",
  "--set",
  "service.broker.cluster.partitionsCount=2",
  "--set",
  "service.broker.cluster.replicationFactor=1",
  "--set",
  "service.broker.cluster.clusterPort=0",
  "--set",
  "service.broker.managementPort=0",
  "--set",
  "service.broker.raft.heartbeatIntervalMs=20",
  "--set",
  "service.broker.raft.electionTimeoutMs=100",
];

describe("flowplane broker", () => {
  it("maps --data-directory and --set to configuration keys", () => {
    expect(brokerConfigurationFlags({ dataDirectory: "/data", set: ["service.broker.cluster.nodeId=2"] })).toEqual({
      "service.dataDirectory": "/data",
      "service.broker.cluster.nodeId": "2",
    });
    expect(() => brokerConfigurationFlags({ set: ["service.broker.cluster.nodeId"] })).toThrow(UsageError);
  });

  it("starts a broker, says where it listens, and stops cleanly on the shutdown signal", async () => {
    const dataDirectory = join(temporaryDirectory, "data");
    const shutdown = new AbortController();
    const { io, output } = captureIo(
      { SERVICE_BROKER_CLUSTER_NODEID: "0", SERVICE_CLUSTER_SECRET: TEST_CLUSTER_SECRET },
      temporaryDirectory,
      shutdown.signal,
    );
    const run = program(io).parseAsync(["broker", "--data-directory", dataDirectory, ...singleBroker], {
      from: "user",
    });
    await expect.poll(() => output.stdout, { timeout: 20_000 }).toContain("listening");
    const brokerDirectory = join(dataDirectory, "brokers", "0");
    expect(output.stdout).toMatch(
      /flowplane broker 0 listening: cluster 127\.0\.0\.1:\d+, management http:\/\/127\.0\.0\.1:\d+, data /,
    );
    expect(output.stdout).toContain(brokerDirectory);
    expect(await readFile(join(brokerDirectory, "broker.pid"), "utf8")).toBe(`${process.pid}\n`);
    const managementUrl = /management (\S+),/.exec(output.stdout)?.[1];
    await expect
      .poll(async () => (await fetch(`${managementUrl}/actuator/health/readiness`)).status, { timeout: 10_000 })
      .toBe(200);

    shutdown.abort();
    await run;
    expect(output.stdout).toContain("flowplane broker 0 stopped");
    await expect(access(join(brokerDirectory, "broker.pid"))).rejects.toThrow(/ENOENT/);
    await access(join(brokerDirectory, "cluster-configuration.json"));
  });

  it("refuses to start without a cluster secret, saying how to set one", async () => {
    const { io } = captureIo({}, temporaryDirectory);
    const run = program(io).parseAsync(
      ["broker", "--data-directory", join(temporaryDirectory, "secretless"), ...singleBroker],
      {
        from: "user",
      },
    );
    await expect(run).rejects.toBeInstanceOf(ConfigurationError);
    await expect(run).rejects.toThrow(/service\.cluster\.secret is not set.*openssl rand -base64 32/);
  });

  it("fails with a configuration error for an invalid FIXED scheme", async () => {
    const { io } = captureIo({ SERVICE_CLUSTER_SECRET: TEST_CLUSTER_SECRET }, temporaryDirectory);
    const run = program(io).parseAsync(
      [
        "broker",
        "--data-directory",
        join(temporaryDirectory, "fixed"),
        ...singleBroker,
        "--set",
        "service.broker.experimental.partitioning.scheme=FIXED",
      ],
      { from: "user" },
    );
    await expect(run).rejects.toBeInstanceOf(ConfigurationError);
    await expect(run).rejects.toThrow(/list every partition/);
  });
});

/** Runs `flowplane broker` as a child process with an IPC channel, as the local cluster's supervisor does. */
function spawnBroker(
  dataDirectory: string,
  environment: Record<string, string>,
): { child: ChildProcess; output: { stdout: string; stderr: string }; exited: Promise<number | null> } {
  const command = childCommand();
  const child = spawn(
    process.execPath,
    [...command.nodeArguments, command.entry, "broker", "--data-directory", dataDirectory, ...singleBroker],
    {
      env: { PATH: process.env.PATH, SERVICE_CLUSTER_SECRET: TEST_CLUSTER_SECRET, ...environment },
      stdio: ["ignore", "pipe", "pipe", "ipc"],
    },
  );
  const output = { stdout: "", stderr: "" };
  child.stdout?.on("data", (chunk: Buffer) => {
    output.stdout += chunk.toString("utf8");
  });
  child.stderr?.on("data", (chunk: Buffer) => {
    output.stderr += chunk.toString("utf8");
  });
  const exited = new Promise<number | null>((resolveExit) => child.once("exit", (code) => resolveExit(code)));
  return { child, output, exited };
}

/** The broker's management URL, once it says it listens. */
async function listening(output: { stdout: string }): Promise<string> {
  await expect.poll(() => output.stdout, { timeout: 60_000 }).toContain("listening");
  return /management (\S+),/.exec(output.stdout)?.[1] as string;
}

describe("flowplane broker under a supervisor", () => {
  it("stops cleanly when the channel to its supervisor closes", async () => {
    const dataDirectory = join(temporaryDirectory, "supervised");
    const { child, output, exited } = spawnBroker(dataDirectory, { FLOWPLANE_SUPERVISOR: "ipc" });
    try {
      await listening(output);
      child.disconnect();
      expect(await exited).toBe(0);
      expect(output.stderr).toContain("the process that started this broker is gone");
      expect(output.stdout).toContain("flowplane broker 0 stopped");
      await expect(access(join(dataDirectory, "brokers", "0", "broker.pid"))).rejects.toThrow(/ENOENT/);
    } finally {
      child.kill("SIGKILL");
    }
  }, 90_000);

  it("keeps running when its channel closes but it was not told it is supervised", async () => {
    const { child, output, exited } = spawnBroker(join(temporaryDirectory, "by-hand"), {});
    try {
      const managementUrl = await listening(output);
      child.disconnect();
      // Two answers after the channel closed: the broker has seen the close by then, and goes on serving.
      for (let round = 0; round < 2; round += 1) {
        expect((await fetch(`${managementUrl}/actuator/health/liveness`)).status).toBe(200);
      }
      expect(output.stdout).not.toContain("shutting down");
      child.kill("SIGTERM");
      expect(await exited).toBe(0);
      expect(output.stderr).not.toContain("the process that started this broker is gone");
    } finally {
      child.kill("SIGKILL");
    }
  }, 90_000);
});
