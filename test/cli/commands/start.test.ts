import { existsSync, readdirSync, readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { type AddressInfo, createServer, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { configurationFlags } from "../../../src/cli/commands/start.js";
import { exitCodes } from "../../../src/cli/io.js";
import { runCli } from "../../../src/cli/main.js";
import { type CliResult, captureIo } from "../support.js";

let temporaryDirectory: string;

beforeAll(async () => {
  temporaryDirectory = await mkdtemp(join(tmpdir(), "flowplane-cli-start-"));
});

afterAll(async () => {
  if (temporaryDirectory !== undefined) await rm(temporaryDirectory, { recursive: true, force: true });
});

/** The last lines of every log file of the local clusters under `dataDirectory`, for a start that failed. */
function clusterLogTails(dataDirectory: string): string {
  const logFiles = readdirSync(dataDirectory, { recursive: true, encoding: "utf8" }).filter((path) =>
    /[/\\]logs[/\\][^/\\]+\.log$/.test(path),
  );
  return logFiles
    .map((path) => {
      const lines = readFileSync(join(dataDirectory, path), "utf8").trimEnd().split("\n");
      return `--- ${path} (last 40 of ${lines.length} lines)\n${lines.slice(-40).join("\n")}`;
    })
    .join("\n");
}

async function cli(argv: readonly string[], environment: Record<string, string> = {}): Promise<CliResult> {
  const { io, output } = captureIo(environment, temporaryDirectory);
  const exitCode = await runCli(argv, io);
  return { exitCode, ...output };
}

/** `flowplane start` with its local cluster, the platform and the gateway on free ports, the management port given. */
function startWithCluster(dataDirectory: string, managementPort: number): string[] {
  return [
    "start",
    "--port",
    "0",
    "--data-directory",
    dataDirectory,
    "--set",
    "service.gateway.port=0",
    "--set",
    `service.management.port=${managementPort}`,
    "--set",
    "service.log.level=warn",
  ];
}

describe("configurationFlags", () => {
  it("maps the dedicated flags and --set assignments to configuration keys, dedicated flags winning", () => {
    expect(
      configurationFlags({
        port: "9000",
        dataDirectory: "/data",
        databaseUrl: "postgres://db/flowplane",
        set: ["service.platform.port=1", "service.rateLimit.burst=10", "service.bootstrap.clientSecret=a=b"],
      }),
    ).toEqual({
      "service.platform.port": "9000",
      "service.dataDirectory": "/data",
      "service.database.url": "postgres://db/flowplane",
      "service.rateLimit.burst": "10",
      "service.bootstrap.clientSecret": "a=b",
    });
  });
});

describe("flowplane start", () => {
  it("exits 2 listing each configuration problem", async () => {
    const result = await cli(["start", "--port", "70000", "--set", "service.token.signingAlgorithm=HS256"], {
      SERVICE_DATA_DIRECTORY: join(temporaryDirectory, "never"),
    });
    expect(result.exitCode).toBe(exitCodes.usage);
    expect(result.stderr).toContain("service.platform.port");
    expect(result.stderr).toContain("service.token.signingAlgorithm");
  });

  it("exits 2 for an unknown setting, a malformed --set or an unreadable configuration file", async () => {
    expect((await cli(["start", "--set", "service.no.such=1"])).exitCode).toBe(exitCodes.usage);
    const malformed = await cli(["platform", "--set", "service.platform.port"]);
    expect(malformed.exitCode).toBe(exitCodes.usage);
    expect(malformed.stderr).toContain("key=value");
    const missingFile = await cli(["start", "--config", join(temporaryDirectory, "missing.yaml")]);
    expect(missingFile.exitCode).toBe(exitCodes.usage);
    expect(missingFile.stderr).toContain("missing.yaml");
  });

  it("prints the bootstrap credentials once, serves them, and stops cleanly on shutdown", async () => {
    const dataDirectory = join(temporaryDirectory, "started");
    const argv = ["platform", "--port", "0", "--data-directory", dataDirectory];

    const firstShutdown = new AbortController();
    const first = captureIo({}, temporaryDirectory, firstShutdown.signal);
    const firstRun = runCli(argv, first.io);
    await expect.poll(() => first.output.stdout, { timeout: 20_000 }).toContain("it is not shown again");
    const exports = Object.fromEntries(
      [...first.output.stdout.matchAll(/export (SERVICE_[A-Z_]+)=(\S+)/g)].map((match) => [match[1], match[2]]),
    ) as Record<string, string>;
    // The built console is served, and the start says where; the sign-in form takes the printed client.
    const consoleUrl = /web console at (\S+)/.exec(first.output.stdout)?.[1] ?? "";
    expect(consoleUrl).toMatch(/^http:\/\/.+\/console\/$/);
    expect(await (await fetch(consoleUrl)).text()).toContain('<div id="app">');
    expect(Object.keys(exports).sort()).toEqual([
      "SERVICE_CONSOLE_CLIENT_ID",
      "SERVICE_CONSOLE_CLIENT_SECRET",
      "SERVICE_OAUTH_URL",
    ]);
    const token = await cli(["token"], { ...exports, SERVICE_CONSOLE_TOKEN_CACHE_FILE: "none" });
    expect(token.exitCode).toBe(exitCodes.ok);
    firstShutdown.abort();
    expect(await firstRun).toBe(exitCodes.ok);
    expect(first.output.stdout).toContain("flowplane stopped");

    const secondShutdown = new AbortController();
    const second = captureIo({}, temporaryDirectory, secondShutdown.signal);
    const secondRun = runCli(["platform", ...argv.slice(1)], second.io);
    await expect.poll(() => second.output.stdout, { timeout: 20_000 }).toContain("listening at");
    secondShutdown.abort();
    expect(await secondRun).toBe(exitCodes.ok);
    expect(second.output.stdout).not.toContain("SERVICE_CONSOLE_CLIENT_SECRET");
  });

  it("start fails naming the configured port another process holds", async () => {
    // Another process listening on the port, answering nobody; the readiness polls it accepts are closed with it.
    const accepted = new Set<Socket>();
    const holder = createServer((socket) => accepted.add(socket));
    await new Promise<void>((resolveListen) => holder.listen({ host: "127.0.0.1", port: 0 }, resolveListen));
    try {
      const heldPort = (holder.address() as AddressInfo).port;
      const dataDirectory = join(temporaryDirectory, "port-held");
      const result = await cli(startWithCluster(dataDirectory, heldPort));
      expect(result.exitCode).toBe(exitCodes.failure);
      expect(result.stderr).toContain(
        `the local cluster could not be started (gateway of the local cluster could not listen on its management port 127.0.0.1:${heldPort}: another process uses that port; see `,
      );
      // The failure names the gateway's log; the logs directory is not named as well.
      expect(result.stderr).not.toContain("; see the logs in");
    } finally {
      for (const socket of accepted) socket.destroy();
      await new Promise((resolveClose) => holder.close(resolveClose));
    }
  }, 60_000);

  it("start runs the local cluster beside the platform, says where each part listens, and stops it all", async () => {
    const dataDirectory = join(temporaryDirectory, "with-cluster");
    const shutdown = new AbortController();
    const run = captureIo({}, temporaryDirectory, shutdown.signal);
    let ended = false;
    // A broker-only setting is said to be ignored, not silently dropped.
    const startArguments = [
      ...startWithCluster(dataDirectory, 0),
      "--set",
      "service.broker.cluster.partitionsCount=32",
    ];
    const exitCode = runCli(startArguments, run.io).finally(() => {
      ended = true;
    });
    try {
      // A start that failed ends at once: its error is what the test reports, not a wait for output that never comes.
      await expect
        .poll(() => ended || run.output.stdout.includes("cluster gateway at"), { timeout: 120_000, interval: 250 })
        .toBe(true);
      expect(run.output.stdout).toContain("cluster gateway at");
    } catch (error) {
      // Should the start fail or not get ready, its error and what the cluster's parts logged say why.
      console.error(`flowplane start wrote to stderr:\n${run.output.stderr}\n${clusterLogTails(dataDirectory)}`);
      throw error;
    }
    expect(run.output.stderr).toContain(
      "flowplane start: service.broker.cluster.partitionsCount=32 applies to `flowplane broker` only",
    );
    expect(run.output.stdout).toMatch(/broker 0: cluster 127\.0\.0\.1:\d+/);
    expect(run.output.stdout).toMatch(/broker 2: .*data .*brokers[/\\]2/);
    const managementUrl = /cluster management API at (\S+)/.exec(run.output.stdout)?.[1];
    const health = await fetch(`${managementUrl}/actuator/health`);
    expect(health.status).toBe(200);
    expect(((await health.json()) as { status: string }).status).toBe("UP");
    // The cluster `start` runs is the organization's first cluster in the Administration API.
    const exports = Object.fromEntries(
      [...run.output.stdout.matchAll(/export (SERVICE_[A-Z_]+)=(\S+)/g)].map((match) => [match[1], match[2]]),
    ) as Record<string, string>;
    const listed = await cli(["clusters", "list", "--json"], { ...exports, SERVICE_CONSOLE_TOKEN_CACHE_FILE: "none" });
    expect(listed.exitCode).toBe(exitCodes.ok);
    const clusters = JSON.parse(listed.stdout) as { uuid: string; name: string; links: { management: string } }[];
    expect(clusters).toHaveLength(1);
    expect(clusters[0]?.links.management).toBe(managementUrl);
    expect(run.output.stdout).toContain(`cluster ${clusters[0]?.uuid} (the first cluster`);
    shutdown.abort();
    expect(await exitCode).toBe(exitCodes.ok);
    expect(run.output.stdout).toContain("flowplane stopped");
    for (const nodeId of [0, 1, 2]) {
      expect(existsSync(join(dataDirectory, "cluster", "brokers", String(nodeId), "broker.pid"))).toBe(false);
    }
  }, 180_000);
});
