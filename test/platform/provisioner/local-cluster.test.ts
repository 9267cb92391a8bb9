import {
  appendFileSync,
  chmodSync,
  existsSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { type AddressInfo, createServer, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { pino } from "pino";
import { afterEach, describe, expect, it } from "vitest";
import { clusterSecretProblem } from "../../../src/config/cluster-secret.js";
import {
  addLocalBrokers,
  brokerPorts,
  childNodeArguments,
  defaultCommand,
  ensureLocalClusterSecret,
  type LocalCluster,
  type LocalClusterChildEvent,
  type LocalClusterOptions,
  PortInUseError,
  removeLocalBrokers,
  startLocalCluster,
} from "../../../src/platform/provisioner/index.js";
import { freePorts } from "../../../src/platform/provisioner/local-brokers.js";
import { eventually } from "../../support/cluster.js";
import { TEST_CLUSTER_SECRET } from "../../support/cluster-secret.js";
import { entriesOpenToOthers } from "../../support/file-modes.js";

const fakeCli = fileURLToPath(new URL("./fake-cli.mjs", import.meta.url));
const directories: string[] = [];

function temporaryDirectory(): string {
  const directory = mkdtempSync(join(tmpdir(), "flowplane-provisioner-"));
  directories.push(directory);
  return directory;
}

/**
 * The environment a fake child recorded. The cluster is ready once its gateway answers, so a broker child may not
 * have run yet on a loaded machine: wait (bounded) for its record.
 */
async function recorded(directory: string, name: string): Promise<Record<string, string>> {
  const file = join(directory, `${name}.json`);
  const deadline = Date.now() + 15_000;
  for (;;) {
    try {
      // Parsed, not only present: the child may be between creating the file and writing it.
      return JSON.parse(readFileSync(file, "utf8")) as Record<string, string>;
    } catch (error) {
      if (Date.now() > deadline) throw error;
      await new Promise((resolveWait) => setTimeout(resolveWait, 20));
    }
  }
}

afterEach(() => {
  for (const directory of directories.splice(0)) rmSync(directory, { recursive: true, force: true });
});

describe("brokerPorts", () => {
  it("allocates distinct free ports once and reuses them on the next start", async () => {
    const directory = temporaryDirectory();
    const first = await brokerPorts(directory, "127.0.0.1", 3);
    const all = first.brokers.flatMap((entry) => [entry.clusterPort, entry.managementPort]);
    expect(new Set(all).size).toBe(6);
    expect(first.brokers.map((entry) => entry.nodeId)).toEqual([0, 1, 2]);
    expect(await brokerPorts(directory, "127.0.0.1", 3)).toEqual(first);
  });

  it("keeps brokers added and removed after the first start; the first start's count no longer matters", async () => {
    const directory = temporaryDirectory();
    const first = await brokerPorts(directory, "127.0.0.1", 3);
    const grown = await addLocalBrokers(directory, "127.0.0.1", [4, 3, 1]);
    expect(grown.brokers.map((entry) => entry.nodeId)).toEqual([0, 1, 2, 3, 4]);
    expect(grown.brokers[1]).toEqual(first.brokers[1]);
    const ports = grown.brokers.flatMap((entry) => [entry.clusterPort, entry.managementPort]);
    expect(new Set(ports).size).toBe(10);
    removeLocalBrokers(directory, [0, 4]);
    expect((await brokerPorts(directory, "127.0.0.1", 3)).brokers.map((entry) => entry.nodeId)).toEqual([1, 2, 3]);
  });
});

/** The permission bits of a file or directory. */
function modeOf(path: string): number {
  return statSync(path).mode & 0o777;
}

describe("ensureLocalClusterSecret", () => {
  it("creates a random secret in a file 0600 within a directory 0700, and reuses it afterwards", () => {
    const directory = temporaryDirectory();
    const first = ensureLocalClusterSecret(directory);
    expect(first).toEqual({ file: join(directory, "secret", "cluster.secret"), created: true });
    expect(modeOf(join(directory, "secret"))).toBe(0o700);
    expect(modeOf(first.file)).toBe(0o600);
    const secret = readFileSync(first.file, "utf8");
    expect(clusterSecretProblem(secret)).toBeUndefined();
    expect(ensureLocalClusterSecret(directory)).toEqual({ file: first.file, created: false });
    expect(readFileSync(first.file, "utf8")).toBe(secret);
    expect(ensureLocalClusterSecret(temporaryDirectory()).file).not.toBe(first.file);
  });

  it("makes a secret file and directory opened up by hand owner-only again", () => {
    const directory = temporaryDirectory();
    const { file } = ensureLocalClusterSecret(directory);
    chmodSync(file, 0o644);
    chmodSync(join(directory, "secret"), 0o755);
    ensureLocalClusterSecret(directory);
    expect(modeOf(file)).toBe(0o600);
    expect(modeOf(join(directory, "secret"))).toBe(0o700);
  });

  it("refuses a damaged secret file instead of replacing it, without showing its content", () => {
    const directory = temporaryDirectory();
    const { file } = ensureLocalClusterSecret(directory);
    writeFileSync(file, "not-a-secret-at-all\n");
    expect(() => ensureLocalClusterSecret(directory)).toThrow(/secret file .* is not valid/);
    expect(() => ensureLocalClusterSecret(directory)).not.toThrow(/not-a-secret-at-all/);
    expect(readFileSync(file, "utf8")).toBe("not-a-secret-at-all\n");
  });
});

describe("defaultCommand", () => {
  it("runs this installation's command line, under tsx when running from sources", () => {
    const command = defaultCommand();
    expect(command.entry.endsWith(join("src", "cli", "main.ts"))).toBe(true);
    expect(existsSync(command.entry)).toBe(true);
    expect(command.nodeArguments.join(" ")).toContain("tsx");
  });
});

describe("childNodeArguments", () => {
  it("keeps loaders and limits but drops evaluated code, debugger and test-runner options", () => {
    expect(
      childNodeArguments([
        "--import",
        "tsx",
        "--max-old-space-size=512",
        "-e",
        "console.log(1)",
        "--input-type=module",
        "--inspect-brk=9229",
        "--test",
      ]),
    ).toEqual(["--import", "tsx", "--max-old-space-size=512"]);
  });
});

describe("startLocalCluster", () => {
  it("starts brokers and a gateway with their settings, waits for readiness and stops them", async () => {
    const dataDirectory = temporaryDirectory();
    const records = temporaryDirectory();
    const cluster = await startLocalCluster({
      dataDirectory,
      gatewayPort: 0,
      managementPort: 0,
      issuerUrl: "http://127.0.0.1:1",
      gatewayAudience: "my-gateway",
      tokenLifetimeSeconds: 172_800,
      allowedOrigins: "http://127.0.0.1:8088,http://localhost:8088",
      logger: pino({ level: "silent" }),
      // A value inherited under another spelling must not win over the provisioner's.
      environment: {
        FAKE_RECORD_DIRECTORY: records,
        SERVICE_GATEWAY_CONTACTPOINTS: "10.0.0.1:1",
        // The local cluster uses its own secret, whatever the environment of `flowplane start` holds.
        SERVICE_CLUSTER_SECRET: TEST_CLUSTER_SECRET,
        SERVICE_CLUSTER_SECRETFILE: "/somewhere/else",
        PATH: process.env.PATH,
        // The platform's secrets, which no child may inherit.
        SERVICE_SECRETS_KEY: "a-key-encryption-key",
        SERVICE_BOOTSTRAP_CLIENTSECRET: "a-bootstrap-secret",
        // Nor the preset administration client's id: a child given it without the secret refuses to start.
        SERVICE_BOOTSTRAP_CLIENT_ID: "preset-administration-client",
        SERVICE_DATABASE_URL: "postgres://flowplane:password@db/flowplane",
        // A tunable of the operator's own, which the brokers keep beside their huge pages.
        GLIBC_TUNABLES: "glibc.malloc.arena_max=2",
      },
      command: { entry: fakeCli, nodeArguments: [] },
    });
    try {
      // Where the gateway answers, for `flowplane cluster scale` to check it scales this cluster.
      expect(JSON.parse(readFileSync(join(dataDirectory, "cluster", "gateway.json"), "utf8"))).toEqual({
        managementUrl: cluster.managementUrl,
      });
      const ports = JSON.parse(readFileSync(join(dataDirectory, "cluster", "ports.json"), "utf8")) as {
        brokers: { clusterPort: number; managementPort: number }[];
      };
      const contactPoints = ports.brokers.map((entry) => `127.0.0.1:${entry.clusterPort}`).join(",");
      const broker1 = await recorded(records, "broker-1");
      expect(broker1).toMatchObject({
        SERVICE_BROKER_CLUSTER_NODE_ID: "1",
        SERVICE_BROKER_CLUSTER_CLUSTER_SIZE: "3",
        SERVICE_BROKER_CLUSTER_PARTITIONS_COUNT: "3",
        SERVICE_BROKER_CLUSTER_REPLICATION_FACTOR: "3",
        SERVICE_BROKER_CLUSTER_INITIAL_CONTACT_POINTS: contactPoints,
        SERVICE_BROKER_CLUSTER_CLUSTER_PORT: String(ports.brokers[1]?.clusterPort),
        SERVICE_BROKER_MANAGEMENT_PORT: String(ports.brokers[1]?.managementPort),
        SERVICE_BROKER_DATA_DIRECTORY: join(dataDirectory, "cluster", "brokers", "1"),
        GLIBC_TUNABLES: "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1",
      });
      const gateway = await recorded(records, "gateway");
      // The gateway keeps no state; it runs as the operator asked.
      expect(gateway.GLIBC_TUNABLES).toBe("glibc.malloc.arena_max=2");
      expect(gateway.SERVICE_GATEWAY_CONTACT_POINTS).toBe(contactPoints);
      expect(gateway.SERVICE_GATEWAY_CONTACTPOINTS).toBeUndefined();
      expect(gateway.SERVICE_GATEWAY_ISSUER_URL).toBe("http://127.0.0.1:1");
      expect(gateway.SERVICE_AUDIENCES_GATEWAY).toBe("my-gateway");
      // The gateway keeps the platform's last key set in use as long as the platform's tokens live.
      expect(gateway.SERVICE_TOKEN_LIFETIME_SECONDS).toBe("172800");
      // The platform's web console may call the gateway from its origins.
      expect(gateway.SERVICE_GATEWAY_ALLOWED_ORIGINS).toBe("http://127.0.0.1:8088,http://localhost:8088");
      expect(cluster.managementUrl).toBe(`http://127.0.0.1:${gateway.SERVICE_MANAGEMENT_PORT}`);
      // Every child gets the secret file's path, never the secret: neither on its command line nor in its environment.
      const secretFile = join(dataDirectory, "cluster", "secret", "cluster.secret");
      expect(cluster.clusterSecretFile).toBe(secretFile);
      const secret = readFileSync(secretFile, "utf8").trim();
      for (const child of [broker1, gateway, await recorded(records, "broker-0")]) {
        expect(child.SERVICE_CLUSTER_SECRET_FILE).toBe(secretFile);
        expect(child.SERVICE_CLUSTER_SECRET).toBeUndefined();
        expect(child.SERVICE_CLUSTER_SECRETFILE).toBeUndefined();
        expect(JSON.stringify(child)).not.toContain(secret);
        expect(child.FAKE_ARGUMENTS).not.toContain(secret);
      }
      expect(cluster.brokers.map((broker) => broker.pid !== undefined)).toEqual([true, true, true]);
      expect(cluster.gatewayPid).toBeTypeOf("number");
      expect(existsSync(join(dataDirectory, "cluster", "logs", "gateway.log"))).toBe(true);
      for (const child of [broker1, gateway]) {
        // The platform's secrets are not passed on; the cluster secret's file path is the one expected exception.
        expect(Object.keys(child).filter((name) => /SECRET|DATABASE|BOOTSTRAP/.test(name))).toEqual([
          "SERVICE_CLUSTER_SECRET_FILE",
        ]);
      }
      expect(existsSync(join(dataDirectory, "cluster", "brokers", "1"))).toBe(true);
      expect(entriesOpenToOthers(join(dataDirectory, "cluster"))).toEqual({});
    } finally {
      await cluster.close();
    }
    expect(cluster.brokers.map((broker) => broker.pid)).toEqual([undefined, undefined, undefined]);
    expect(cluster.gatewayPid).toBeUndefined();
  });

  it("starts a broker added to the brokers file and stops one removed from it, deleting its data", async () => {
    const dataDirectory = temporaryDirectory();
    const records = temporaryDirectory();
    const cluster = await startLocalCluster({
      dataDirectory,
      gatewayPort: 0,
      managementPort: 0,
      issuerUrl: "http://127.0.0.1:1",
      logger: pino({ level: "silent" }),
      environment: { FAKE_RECORD_DIRECTORY: records, PATH: process.env.PATH },
      command: { entry: fakeCli, nodeArguments: [] },
    });
    try {
      const clusterDirectory = join(dataDirectory, "cluster");
      const ports = await addLocalBrokers(clusterDirectory, "127.0.0.1", [3]);
      const broker3 = await recorded(records, "broker-3");
      expect(broker3.SERVICE_BROKER_CLUSTER_INITIAL_CONTACT_POINTS).toBe(
        ports.brokers.map((entry) => `127.0.0.1:${entry.clusterPort}`).join(","),
      );
      expect(broker3.SERVICE_BROKER_CLUSTER_CLUSTER_SIZE).toBe("3");
      const added = cluster.brokers.find((broker) => broker.nodeId === 3);
      expect(added?.pid).toBeTypeOf("number");
      const pid = added?.pid as number;
      removeLocalBrokers(clusterDirectory, [3]);
      const deadline = Date.now() + 15_000;
      while (cluster.brokers.some((broker) => broker.nodeId === 3) && Date.now() < deadline) {
        await new Promise((resolveWait) => setTimeout(resolveWait, 50));
      }
      expect(cluster.brokers.map((broker) => broker.nodeId)).toEqual([0, 1, 2]);
      expect(() => process.kill(pid, 0)).toThrow();
      expect(existsSync(join(clusterDirectory, "brokers", "3"))).toBe(false);
    } finally {
      await cluster.close();
    }
  });

  it("generates the cluster's secret on the first start and keeps it for the next", async () => {
    const options = oneBrokerCluster();
    const { dataDirectory } = options;
    const first = await startLocalCluster(options);
    await first.close();
    const secret = readFileSync(first.clusterSecretFile, "utf8");
    expect(modeOf(first.clusterSecretFile)).toBe(0o600);
    expect(modeOf(join(dataDirectory, "cluster", "secret"))).toBe(0o700);
    const second = await startLocalCluster(options);
    await second.close();
    expect(second.clusterSecretFile).toBe(first.clusterSecretFile);
    expect(readFileSync(second.clusterSecretFile, "utf8")).toBe(secret);
  });

  it("moves aside a log file an earlier run left beyond the limit before its child starts writing", async () => {
    const options = oneBrokerCluster({ logFileLimits: { maxBytes: 1024 * 1024, keptFiles: 1 } });
    const first = await startLocalCluster(options);
    await first.close();
    appendFileSync(first.gatewayLogFile, Buffer.alloc(2 * 1024 * 1024, "x"));
    const second = await startLocalCluster(options);
    await second.close();
    expect(statSync(`${second.gatewayLogFile}.1`).size).toBeGreaterThanOrEqual(2 * 1024 * 1024);
    expect(statSync(second.gatewayLogFile).size).toBeLessThan(1024 * 1024);
    expect(modeOf(`${second.gatewayLogFile}.1`)).toBe(0o600);
  });

  it("kills children that ignore SIGTERM once the stop timeout passes", async () => {
    const records = temporaryDirectory();
    const cluster = await startLocalCluster(
      oneBrokerCluster({
        environment: { FAKE_RECORD_DIRECTORY: records, FAKE_IGNORE_SIGTERM: "1" },
        stopTimeoutMs: 300,
      }),
    );
    const pid = cluster.brokers[0]?.pid as number;
    await cluster.close();
    expect(() => process.kill(pid, 0)).toThrow();
  });

  it("fails with the child's log file when a child exits during start, stopping the others", async () => {
    const records = temporaryDirectory();
    const dataDirectory = temporaryDirectory();
    await expect(
      startLocalCluster({
        dataDirectory,
        gatewayPort: 0,
        managementPort: 0,
        issuerUrl: "http://127.0.0.1:1",
        logger: pino({ level: "silent" }),
        environment: {
          FAKE_RECORD_DIRECTORY: records,
          FAKE_EXIT_AT_START: "gateway",
          FAKE_EXIT_AFTER_RECORD: "broker-0",
        },
        command: { entry: fakeCli, nodeArguments: [] },
      }),
    ).rejects.toThrow(/gateway of the local cluster exited during start; see .*gateway\.log/);
    const broker0 = await recorded(records, "broker-0");
    expect(broker0.SERVICE_BROKER_CLUSTER_NODE_ID).toBe("0");
  });

  it("names the port when a child exits during start because another process holds it", async () => {
    const dataDirectory = temporaryDirectory();
    // Another process took the port after it was chosen, before the broker listens on it; it answers nobody.
    const accepted = new Set<Socket>();
    const holder = createServer((socket) => accepted.add(socket));
    await new Promise<void>((resolveListen) => holder.listen({ host: "127.0.0.1", port: 0 }, resolveListen));
    try {
      const takenPort = (holder.address() as AddressInfo).port;
      const [freeManagementPort] = await freePorts("127.0.0.1", 1, new Set([takenPort]));
      writeFileSync(
        join(dataDirectory, "ports.json"),
        JSON.stringify({ brokers: [{ nodeId: 0, clusterPort: takenPort, managementPort: freeManagementPort }] }),
      );
      const failure = await startLocalCluster({
        dataDirectory,
        clusterDirectory: dataDirectory,
        brokers: 1,
        gatewayPort: 0,
        managementPort: 0,
        issuerUrl: "http://127.0.0.1:1",
        logger: pino({ level: "silent" }),
        environment: { FAKE_RECORD_DIRECTORY: temporaryDirectory(), FAKE_BROKERS_LISTEN: "1" },
        command: { entry: fakeCli, nodeArguments: [] },
      }).catch((error: unknown) => error);
      expect(failure).toBeInstanceOf(PortInUseError);
      expect(failure).toMatchObject({ processName: "broker 0", purpose: "cluster port", port: takenPort });
      expect((failure as Error).message).toMatch(
        new RegExp(
          `broker 0 of the local cluster could not listen on its cluster port 127\\.0\\.0\\.1:${takenPort}: another process uses that port; see .*broker-0\\.log`,
        ),
      );
    } finally {
      for (const socket of accepted) socket.destroy();
      await new Promise((resolveClose) => holder.close(resolveClose));
    }
  });

  it("brackets an IPv6 host in the port a child could not listen on", () => {
    expect(new PortInUseError("gateway", "management port", "::1", 9600, "gateway.log").message).toBe(
      "gateway of the local cluster could not listen on its management port [::1]:9600: another process uses that port; see gateway.log",
    );
  });
});

/** A cluster of one fake broker and a fake gateway in a fresh data directory, started as often as a test asks. */
function oneBrokerCluster(extra: Partial<LocalClusterOptions> = {}): LocalClusterOptions {
  return {
    dataDirectory: temporaryDirectory(),
    gatewayPort: 0,
    managementPort: 0,
    issuerUrl: "http://127.0.0.1:1",
    brokers: 1,
    partitions: 1,
    replicationFactor: 1,
    logger: pino({ level: "silent" }),
    environment: { FAKE_RECORD_DIRECTORY: temporaryDirectory(), PATH: process.env.PATH },
    command: { entry: fakeCli, nodeArguments: [] },
    ...extra,
  };
}

/** A child event with when the test saw it (performance.now()). */
type SeenEvent = LocalClusterChildEvent & { seenAtMs: number };

/** A one-broker cluster of fake children, recording every child event it reports. */
async function startSupervisedFake(
  records: string,
  options: Partial<LocalClusterOptions> = {},
): Promise<{ cluster: LocalCluster; events: SeenEvent[] }> {
  const events: SeenEvent[] = [];
  const cluster = await startLocalCluster(
    oneBrokerCluster({
      environment: { FAKE_RECORD_DIRECTORY: records },
      onChildEvent: (event) => events.push({ ...event, seenAtMs: performance.now() }),
      ...options,
    }),
  );
  return { cluster, events };
}

/** The events of one child, of one kind. */
function eventsOf<Kind extends LocalClusterChildEvent["event"]>(
  events: readonly SeenEvent[],
  child: string,
  kind: Kind,
): (SeenEvent & { event: Kind })[] {
  return events.filter(
    (event): event is SeenEvent & { event: Kind } => event.process === child && event.event === kind,
  );
}

/**
 * Waits (bounded) until broker 0 runs as another process than `previousPid` that started for good (its record,
 * written once it handles signals and will not crash at start, names it), and returns its pid.
 */
async function brokerRunningAgain(
  cluster: LocalCluster,
  records: string,
  previousPid: number | undefined,
): Promise<number> {
  return eventually("broker 0 running again", 15_000, async () => {
    const child = cluster.children().find((candidate) => candidate.process === "broker 0");
    if (child?.state !== "running" || child.pid === previousPid) return undefined;
    return (await recorded(records, "broker-0")).FAKE_PID === String(child.pid) ? child.pid : undefined;
  });
}

describe("startLocalCluster's supervision", () => {
  it("restarts a crash-looping child with a doubling wait capped at the maximum, never faster", async () => {
    const records = temporaryDirectory();
    const { cluster, events } = await startSupervisedFake(records, {
      restart: { initialDelayMs: 100, maximumDelayMs: 400, stableAfterMs: 60_000 },
    });
    try {
      expect(await recorded(records, "broker-0")).toMatchObject({
        FLOWPLANE_SUPERVISOR: "ipc",
        FAKE_HAS_CHANNEL: "true",
      });
      const pid = cluster.brokers[0]?.pid as number;
      // From now on every start of broker 0 crashes at once.
      writeFileSync(join(records, "broker-0.crash"), "");
      process.kill(pid, "SIGKILL");
      await eventually("six restarts scheduled", 30_000, async () =>
        eventsOf(events, "broker 0", "restarting").length >= 6 ? true : undefined,
      );
      const restarting = eventsOf(events, "broker 0", "restarting");
      expect(restarting.slice(0, 6).map((event) => event.restartInMs)).toEqual([100, 200, 400, 400, 400, 400]);
      const exits = eventsOf(events, "broker 0", "exited");
      expect(exits[0]).toMatchObject({ pid, signal: "SIGKILL", exitCode: null, requested: false, restarts: 0 });
      expect(exits.slice(1, 6).map((event) => event.exitCode)).toEqual([3, 3, 3, 3, 3]);
      expect(eventsOf(events, "broker 0", "started").length).toBeGreaterThanOrEqual(6);

      // However fast children crash, restarts come at most once per maximum wait: count them over a window.
      const windowStartMs = performance.now();
      const before = cluster.children()[0]?.restarts as number;
      await new Promise((resolveWait) => setTimeout(resolveWait, 2_000));
      const restartsInWindow = (cluster.children()[0]?.restarts as number) - before;
      const windowMs = performance.now() - windowStartMs;
      expect(restartsInWindow).toBeLessThanOrEqual(Math.floor(windowMs / 400) + 1);

      const state = cluster.children()[0];
      expect(state).toMatchObject({ process: "broker 0", nodeId: 0, restarts: expect.any(Number) });
      expect(state?.restarts).toBeGreaterThanOrEqual(6);
      expect(state?.lastExit).toMatchObject({ exitCode: 3, signal: null, requested: false });
      // The gateway did not crash: untouched.
      expect(cluster.children()[1]).toMatchObject({ process: "gateway", state: "running", restarts: 0 });
    } finally {
      await cluster.close();
    }
  });

  it("waits the initial time again after a child ran long enough; a clean exit or close is not restarted", async () => {
    const records = temporaryDirectory();
    const { cluster, events } = await startSupervisedFake(records, {
      restart: { initialDelayMs: 100, maximumDelayMs: 400, stableAfterMs: 1_000 },
    });
    try {
      const first = cluster.brokers[0]?.pid as number;
      writeFileSync(join(records, "broker-0.crash"), "");
      process.kill(first, "SIGKILL");
      await eventually("three restarts scheduled", 30_000, async () =>
        eventsOf(events, "broker 0", "restarting").length >= 3 ? true : undefined,
      );
      rmSync(join(records, "broker-0.crash"));
      const pid = await brokerRunningAgain(cluster, records, first);
      const waits = eventsOf(events, "broker 0", "restarting").map((event) => event.restartInMs);
      expect(waits.slice(0, 3)).toEqual([100, 200, 400]);
      // Up longer than stableAfterMs: its next crash is its first in a row.
      await new Promise((resolveWait) => setTimeout(resolveWait, 1_200));
      process.kill(pid, "SIGKILL");
      await eventually("the restart after a healthy run", 15_000, async () =>
        eventsOf(events, "broker 0", "restarting").length > waits.length ? true : undefined,
      );
      expect(eventsOf(events, "broker 0", "restarting").at(-1)?.restartInMs).toBe(100);

      // Stopped by hand with SIGTERM (exit code 0, as the real command line): it stays stopped.
      const again = await brokerRunningAgain(cluster, records, pid);
      const restartsBefore = eventsOf(events, "broker 0", "restarting").length;
      process.kill(again, "SIGTERM");
      await eventually("broker 0 exited", 15_000, async () =>
        eventsOf(events, "broker 0", "exited").some((event) => event.pid === again) ? true : undefined,
      );
      expect(eventsOf(events, "broker 0", "exited").at(-1)).toMatchObject({ exitCode: 0, requested: false });
      expect(cluster.children()[0]).toMatchObject({ state: "stopped", pid: undefined, restartAtMs: undefined });
      expect(eventsOf(events, "broker 0", "restarting")).toHaveLength(restartsBefore);

      // Waking the cluster starts what was stopped, and only that.
      expect(cluster.startStopped()).toEqual(["broker 0"]);
      await brokerRunningAgain(cluster, records, again);
      expect(cluster.children().map((child) => child.state)).toEqual(["running", "running"]);
      expect(cluster.startStopped()).toEqual([]);
    } finally {
      await cluster.close();
    }
    // Stopping the cluster is asked for: the gateway's exit says so and schedules nothing.
    expect(eventsOf(events, "gateway", "exited")).toEqual([
      expect.objectContaining({ event: "exited", requested: true, restarts: 0 }),
    ]);
    expect(eventsOf(events, "gateway", "restarting")).toEqual([]);
    expect(cluster.children().map((child) => child.state)).toEqual(["stopped", "stopped"]);
  });

  it("restartBroker starts a broker at once while its restart waits, and its backoff starts over", async () => {
    const records = temporaryDirectory();
    const { cluster, events } = await startSupervisedFake(records, {
      restart: { initialDelayMs: 60_000, maximumDelayMs: 600_000, stableAfterMs: 600_000 },
    });
    try {
      const pid = cluster.brokers[0]?.pid as number;
      process.kill(pid, "SIGKILL");
      await eventually("the restart scheduled", 15_000, async () =>
        cluster.children()[0]?.state === "restarting" ? true : undefined,
      );
      expect(cluster.children()[0]?.restartAtMs).toBeGreaterThan(Date.now() + 30_000);
      expect(cluster.brokers[0]?.pid).toBeUndefined();
      await cluster.restartBroker(0);
      const second = cluster.brokers[0]?.pid as number;
      expect(cluster.children()[0]).toMatchObject({
        state: "running",
        pid: second,
        restarts: 0,
        restartAtMs: undefined,
      });
      await expect(cluster.restartBroker(0)).rejects.toThrow(/still running/);

      process.kill(second, "SIGKILL");
      await eventually("the next restart scheduled", 15_000, async () =>
        eventsOf(events, "broker 0", "restarting").length === 2 ? true : undefined,
      );
      // Not 120 s: the restart by hand started the backoff over.
      expect(eventsOf(events, "broker 0", "restarting").map((event) => event.restartInMs)).toEqual([60_000, 60_000]);

      const gatewayPid = cluster.gatewayPid as number;
      process.kill(gatewayPid, "SIGKILL");
      await eventually("the gateway's restart scheduled", 15_000, async () =>
        cluster.children()[1]?.state === "restarting" ? true : undefined,
      );
      expect(cluster.gatewayPid).toBeUndefined();
    } finally {
      await cluster.close();
    }
    // close() cancelled both scheduled restarts.
    expect(cluster.children().map((child) => [child.state, child.restartAtMs])).toEqual([
      ["stopped", undefined],
      ["stopped", undefined],
    ]);
  });

  it("leaves a crashed child down when restarts are off", async () => {
    const records = temporaryDirectory();
    const { cluster, events } = await startSupervisedFake(records, { restart: false });
    try {
      const pid = cluster.brokers[0]?.pid as number;
      process.kill(pid, "SIGKILL");
      await eventually("broker 0 exited", 15_000, async () =>
        eventsOf(events, "broker 0", "exited").length === 1 ? true : undefined,
      );
      expect(cluster.children()[0]).toMatchObject({
        state: "stopped",
        restarts: 0,
        lastExit: { exitCode: null, signal: "SIGKILL", requested: false },
      });
      expect(eventsOf(events, "broker 0", "restarting")).toEqual([]);
      await cluster.restartBroker(0);
      expect(cluster.children()[0]?.state).toBe("running");
    } finally {
      await cluster.close();
    }
  });

  it("refuses a restart policy whose waits could spin", async () => {
    await expect(startSupervisedFake(temporaryDirectory(), { restart: { initialDelayMs: 0 } })).rejects.toThrow(
      /initialDelayMs must be at least 1 ms/,
    );
  });
});
