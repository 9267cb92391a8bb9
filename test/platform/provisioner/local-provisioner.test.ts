/**
 * The local provisioner with a stand-in command line (fake-cli.mjs): where clusters are placed, what the gateway is
 * told, the access policy file, the adoption of an earlier version's `<data>/cluster` as the first cluster, and
 * restores: what is kept aside until the restored cluster is ready, put back on failure (the commit's own included) or
 * at the next launch once no process holds the brokers' data, and discarded once the restore is committed, where
 * nothing that fails afterwards undoes it.
 */
import { spawn } from "node:child_process";
import { once } from "node:events";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterEach, describe, expect, it } from "vitest";
import { openAccessPolicy, parseAccessPolicy, serializeAccessPolicy } from "../../../src/auth/access-policy.js";
import type { LocalClustersOptions } from "../../../src/platform/platform.js";
import { modeOf } from "../../support/file-modes.js";
import { startTestPlatform, type TestPlatform } from "../../support/platform.js";
import { requestToken } from "../../support/tokens.js";

const fakeCli = fileURLToPath(new URL("./fake-cli.mjs", import.meta.url));
const cleanups: (() => Promise<void>)[] = [];

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

function temporaryDirectory(): string {
  const directory = mkdtempSync(join(tmpdir(), "flowplane-local-provisioner-"));
  cleanups.push(async () => rmSync(directory, { recursive: true, force: true }));
  return directory;
}

/** Timings of the local provisioner a test sets (see `LocalProvisionerOptions`). */
type ProvisionerTimings = Pick<LocalClustersOptions, "dataHolderWaitMs" | "writesResume">;

async function platformWithFakeClusters(
  dataDirectory: string,
  records: string,
  earlier?: TestPlatform,
  timings: ProvisionerTimings = {},
): Promise<TestPlatform> {
  const platform = await startTestPlatform(
    { "service.gateway.port": 0, "service.management.port": 0 },
    {
      dataDirectory,
      localClusters: {
        command: { entry: fakeCli, nodeArguments: [] },
        environment: { FAKE_RECORD_DIRECTORY: records, PATH: process.env.PATH },
        ...timings,
      },
      ...(earlier === undefined ? {} : { adminClient: earlier.adminClient }),
    },
  );
  cleanups.push(() => platform.close());
  return platform;
}

async function recorded(directory: string, name: string): Promise<Record<string, string>> {
  const deadline = Date.now() + 15_000;
  for (;;) {
    try {
      return JSON.parse(readFileSync(join(directory, `${name}.json`), "utf8")) as Record<string, string>;
    } catch (error) {
      if (Date.now() > deadline) throw error;
      await new Promise((resolveWait) => setTimeout(resolveWait, 20));
    }
  }
}

/** The platform's first cluster started on the fake command line, and what a restore of it is given. */
async function runningCluster(dataDirectory: string, records: string, timings: ProvisionerTimings = {}) {
  const platform = await platformWithFakeClusters(dataDirectory, records, undefined, timings);
  const provisioner = platform.running.provisioner;
  const clusterId = platform.running.primaryClusterId as string;
  if (provisioner === undefined) throw new Error("the platform runs no provisioner");
  await provisioner.whenStarted(clusterId);
  const specification = {
    clusterId,
    organizationId: platform.organizationId,
    shape: { brokers: 3, partitions: 3, replicationFactor: 3 },
    primary: true,
  };
  return { platform, provisioner, clusterId, clusterDirectory: join(dataDirectory, "cluster"), specification };
}

describe("the local provisioner", () => {
  it("adopts the cluster directory of an earlier version in place as the organization's first cluster", async () => {
    const dataDirectory = temporaryDirectory();
    const records = temporaryDirectory();
    // What an earlier version left: its brokers file with its brokers' ports, and a broker's data.
    const clusterDirectory = join(dataDirectory, "cluster");
    mkdirSync(join(clusterDirectory, "brokers", "0"), { recursive: true, mode: 0o700 });
    writeFileSync(join(clusterDirectory, "brokers", "0", "journal"), "acknowledged records");
    const brokers = [
      { nodeId: 0, clusterPort: 41_001, managementPort: 41_002 },
      { nodeId: 1, clusterPort: 41_003, managementPort: 41_004 },
    ];
    writeFileSync(join(clusterDirectory, "ports.json"), JSON.stringify({ brokers }));

    const platform = await platformWithFakeClusters(dataDirectory, records);
    const clusterId = platform.running.primaryClusterId as string;
    expect(clusterId).toBeTypeOf("string");
    const started = await platform.running.provisioner?.whenStarted(clusterId);
    expect(started?.brokers.map((broker) => broker.clusterAddress)).toEqual(["127.0.0.1:41001", "127.0.0.1:41003"]);
    expect(readFileSync(join(clusterDirectory, "brokers", "0", "journal"), "utf8")).toBe("acknowledged records");
    expect((await recorded(records, "broker-1")).SERVICE_BROKER_DATA_DIRECTORY).toBe(
      join(clusterDirectory, "brokers", "1"),
    );

    // The gateway enforces the policy file in the cluster's directory, the open policy of this cluster.
    const gateway = await recorded(records, "gateway");
    const policyFile = join(clusterDirectory, "access-policy.json");
    expect(gateway.SERVICE_GATEWAY_ACCESS_POLICY_FILE).toBe(policyFile);
    expect(parseAccessPolicy(readFileSync(policyFile, "utf8"))).toEqual(
      openAccessPolicy(clusterId, platform.organizationId),
    );
    expect(modeOf(policyFile)).toBe(0o600);

    const token = await requestToken(platform, platform.adminClient, "admin-api");
    const list = (await (
      await fetch(`${platform.url}/admin/clusters`, { headers: { authorization: `Bearer ${token}` } })
    ).json()) as { uuid: string; name: string; links: { management: string } }[];
    expect(list).toEqual([expect.objectContaining({ uuid: clusterId, name: "local" })]);
    expect(list[0]?.links.management).toBe(started?.managementUrl);
  });

  it("runs the clusters of a data directory moved elsewhere where it now is, not at the path it had", async () => {
    const original = join(temporaryDirectory(), "data");
    const records = temporaryDirectory();
    const first = await platformWithFakeClusters(original, records);
    const clusterId = first.running.primaryClusterId as string;
    await first.running.provisioner?.whenStarted(clusterId);
    await first.close();

    const moved = join(temporaryDirectory(), "moved");
    renameSync(original, moved);
    rmSync(join(records, "broker-0.json"));
    const second = await platformWithFakeClusters(moved, records, first);
    await second.running.provisioner?.whenStarted(clusterId);
    expect((await recorded(records, "broker-0")).SERVICE_BROKER_DATA_DIRECTORY).toBe(
      join(moved, "cluster", "brokers", "0"),
    );
    // Nothing was started anew at the old path.
    expect(existsSync(original)).toBe(false);
  });

  it("delivers the policy built from the store before every launch, and a changed one without a restart", async () => {
    const dataDirectory = temporaryDirectory();
    const records = temporaryDirectory();
    const platform = await platformWithFakeClusters(dataDirectory, records);
    const clusterId = platform.running.primaryClusterId as string;
    const provisioner = platform.running.provisioner;
    if (provisioner === undefined) throw new Error("the test platform has no provisioner");
    const before = await provisioner.whenStarted(clusterId);
    const token = await requestToken(platform, platform.adminClient, "admin-api");
    const ipallowlist = [{ ip: "10.0.0.0/8", description: "office" }];
    const response = await fetch(`${platform.url}/admin/clusters/${clusterId}/ipallowlist`, {
      method: "PUT",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify({ ipallowlist }),
    });
    expect(response.status).toBe(204);
    const policyFile = join(dataDirectory, "cluster", "access-policy.json");
    const expected = { ...openAccessPolicy(clusterId, platform.organizationId), ipAllowlist: ipallowlist };
    expect(parseAccessPolicy(readFileSync(policyFile, "utf8"))).toEqual(expected);
    expect(modeOf(policyFile)).toBe(0o600);
    expect((await provisioner.whenStarted(clusterId))?.gatewayPid).toBe(before?.gatewayPid);
    // A policy file lost or damaged while the platform was down is written again from the store.
    await platform.close();
    cleanups.pop();
    writeFileSync(policyFile, "{}");
    await platformWithFakeClusters(dataDirectory, records, platform);
    expect(parseAccessPolicy(readFileSync(policyFile, "utf8"))).toEqual(expected);
  });

  it("restores every broker of the target with its own settings, and puts the previous data back when a restore fails", async () => {
    const dataDirectory = temporaryDirectory();
    const records = temporaryDirectory();
    const { provisioner, clusterId, clusterDirectory, specification } = await runningCluster(dataDirectory, records);
    writeFileSync(join(clusterDirectory, "brokers", "0", "journal"), "before the restore");

    const target = { brokerIds: [0, 1, 2], configurationDocument: '{"version":7}' };

    // A target naming a broker the provisioner does not run is refused before anything stops.
    const gatewayPid = (await provisioner.whenStarted(clusterId))?.gatewayPid;
    await expect(provisioner.restore(specification, 8n, { ...target, brokerIds: [0, 1, 5] })).rejects.toThrow(
      "the cluster's configuration lists brokers 0, 1, 5, and the provisioner runs no broker 5; nothing was changed",
    );
    expect((await provisioner.whenStarted(clusterId))?.gatewayPid).toBe(gatewayPid);

    // A refused restore: the previous data comes back and the cluster runs again.
    writeFileSync(join(records, "restore-1.fail"), "");
    await expect(provisioner.restore(specification, 8n, target)).rejects.toThrow(
      /restore of broker 1 failed \(exit code 1\): restore refused: the backup's part of partition 1 is damaged/,
    );
    expect(readFileSync(join(clusterDirectory, "brokers", "0", "journal"), "utf8")).toBe("before the restore");
    expect(existsSync(join(clusterDirectory, "brokers.before-restore"))).toBe(false);
    expect(provisioner.state(clusterId)).toBe("running");

    rmSync(join(records, "restore-1.fail"));
    await provisioner.restore(specification, 9n, target);
    for (const nodeId of [0, 1, 2]) {
      const restore = await recorded(records, `restore-${nodeId}`);
      const configurationFile = join(clusterDirectory, "restore-configuration.json");
      expect(JSON.parse(restore.FAKE_ARGUMENTS ?? "[]")).toEqual([
        "restore",
        "--backup-id",
        "9",
        "--cluster-configuration",
        configurationFile,
      ]);
      expect(restore.FAKE_CLUSTER_CONFIGURATION).toBe('{"version":7}');
      // Deleted once the brokers are restored.
      expect(existsSync(configurationFile)).toBe(false);
      expect(restore.SERVICE_BROKER_DATA_DIRECTORY).toBe(join(clusterDirectory, "brokers", String(nodeId)));
      expect(restore.SERVICE_BACKUP_FILESYSTEM_BASE_PATH).toBe(join(clusterDirectory, "backups"));
      // Supervised like the brokers: a restore whose platform is gone aborts rather than outlive it.
      expect(restore.FLOWPLANE_SUPERVISOR).toBe("ipc");
      expect(restore.FAKE_HAS_CHANNEL).toBe("true");
    }
    // The brokers run with the same backup store, and the previous data is gone once the cluster is ready.
    expect((await recorded(records, "broker-0")).SERVICE_BACKUP_FILESYSTEM_BASE_PATH).toBe(
      join(clusterDirectory, "backups"),
    );
    expect(existsSync(join(clusterDirectory, "brokers", "0", "journal"))).toBe(false);
    expect(existsSync(join(clusterDirectory, "brokers.before-restore"))).toBe(false);
    expect(provisioner.state(clusterId)).toBe("running");

    // A restore the platform did not finish: the next launch puts the previous data back.
    await provisioner.stop(clusterId);
    mkdirSync(join(clusterDirectory, "brokers.before-restore", "0"), { recursive: true });
    writeFileSync(join(clusterDirectory, "brokers.before-restore", "0", "journal"), "kept aside");
    writeFileSync(join(clusterDirectory, "brokers", "0", "half"), "half restored");
    await provisioner.launch(specification);
    await provisioner.whenStarted(clusterId);
    expect(readFileSync(join(clusterDirectory, "brokers", "0", "journal"), "utf8")).toBe("kept aside");
    expect(existsSync(join(clusterDirectory, "brokers", "0", "half"))).toBe(false);

    // A broker the configuration does not list (a scale-down removed it) is not restored: it leaves, with its data.
    writeFileSync(join(clusterDirectory, "brokers", "1", "journal"), "left the cluster");
    rmSync(join(records, "restore-1.json"));
    await provisioner.restore(specification, 10n, { ...target, brokerIds: [0, 2] });
    expect(JSON.parse((await recorded(records, "restore-2")).FAKE_ARGUMENTS ?? "[]")).toContain("10");
    expect(existsSync(join(records, "restore-1.json"))).toBe(false);
    expect((await provisioner.brokers(clusterId)).map((broker) => broker.nodeId)).toEqual([0, 2]);
    expect(existsSync(join(clusterDirectory, "brokers", "1"))).toBe(false);
    expect(provisioner.state(clusterId)).toBe("running");
  });

  it("keeps brokers that are not members, data and ports, until the restored cluster is ready, and commits with one rename", async () => {
    const dataDirectory = temporaryDirectory();
    const records = temporaryDirectory();
    const { provisioner, clusterId, clusterDirectory, specification } = await runningCluster(dataDirectory, records);
    const journalOf = (nodeId: number, under = "brokers") => join(clusterDirectory, under, String(nodeId), "journal");
    writeFileSync(journalOf(1), "broker 1 left the cluster");
    const portsFile = join(clusterDirectory, "ports.json");
    const portsBefore = readFileSync(portsFile, "utf8");
    const listed = async () => (await provisioner.brokers(clusterId)).map((broker) => broker.nodeId);
    const expectPreviousStateBack = async () => {
      expect(readFileSync(journalOf(1), "utf8")).toBe("broker 1 left the cluster");
      expect(readFileSync(portsFile, "utf8")).toBe(portsBefore);
      expect(await listed()).toEqual([0, 1, 2]);
      expect(existsSync(join(clusterDirectory, "brokers.before-restore"))).toBe(false);
      expect(existsSync(join(clusterDirectory, "ports.before-restore.json"))).toBe(false);
      expect(provisioner.state(clusterId)).toBe("running");
    };
    // Broker 1 is no member of the configuration restored into (a scale-down whose cleanup had not run yet).
    const target = { brokerIds: [0, 2], configurationDocument: '{"version":7}' };

    // A broker's restore is refused: broker 1 comes back with its data and its ports, as every member does.
    writeFileSync(join(records, "restore-2.fail"), "");
    await expect(provisioner.restore(specification, 8n, target)).rejects.toThrow(/restore of broker 2 failed/);
    await expectPreviousStateBack();
    rmSync(join(records, "restore-2.fail"));

    // A step between moving the data aside and the brokers' restores throws (the brokers file cannot be rewritten):
    // the cluster does not stay stopped without its data.
    mkdirSync(join(clusterDirectory, "ports.json.tmp"));
    await expect(provisioner.restore(specification, 8n, target)).rejects.toThrow(/EISDIR/);
    await expectPreviousStateBack();
    rmSync(join(clusterDirectory, "ports.json.tmp"), { recursive: true });

    // The platform stopped before the commit: the next launch puts the data and the brokers file back.
    await provisioner.stop(clusterId);
    renameSync(join(clusterDirectory, "brokers"), join(clusterDirectory, "brokers.before-restore"));
    writeFileSync(join(clusterDirectory, "ports.before-restore.json"), portsBefore);
    const members = (JSON.parse(portsBefore) as { brokers: { nodeId: number }[] }).brokers.filter(
      (broker) => broker.nodeId !== 1,
    );
    writeFileSync(portsFile, JSON.stringify({ brokers: members }));
    mkdirSync(join(clusterDirectory, "brokers", "0"), { recursive: true });
    writeFileSync(journalOf(0), "half restored");
    await provisioner.launch(specification);
    await provisioner.whenStarted(clusterId);
    await expectPreviousStateBack();
    expect(existsSync(journalOf(0))).toBe(false);

    // A restore that succeeds is committed once the restored cluster is ready: the previous data is renamed to be
    // discarded (nothing puts it back from then on), `onRestored` runs, and only then is it deleted.
    let seenAtRestored: Record<string, boolean> | undefined;
    await provisioner.restore(specification, 9n, target, async () => {
      seenAtRestored = {
        running: provisioner.state(clusterId) === "running",
        aside: existsSync(join(clusterDirectory, "brokers.before-restore")),
        savedPorts: existsSync(join(clusterDirectory, "ports.before-restore.json")),
        discarded: existsSync(journalOf(1, "brokers.restored-over")),
      };
    });
    expect(seenAtRestored).toEqual({ running: true, aside: false, savedPorts: false, discarded: true });
    expect(existsSync(join(clusterDirectory, "brokers.restored-over"))).toBe(false);
    expect(existsSync(join(clusterDirectory, "brokers", "1"))).toBe(false);
    expect(await listed()).toEqual([0, 2]);

    // The platform stopped after the commit, before the previous data was deleted: the next launch deletes it and
    // keeps the restored data.
    await provisioner.stop(clusterId);
    mkdirSync(join(clusterDirectory, "brokers.restored-over", "0"), { recursive: true });
    writeFileSync(journalOf(0, "brokers.restored-over"), "before the restore");
    writeFileSync(journalOf(0), "restored");
    // Until then the provisioner tells the platform's next start that the restore was committed.
    expect(await provisioner.restoreCommitted(clusterId)).toBe(true);
    await provisioner.launch(specification);
    await provisioner.whenStarted(clusterId);
    expect(await provisioner.restoreCommitted(clusterId)).toBe(false);
    expect(readFileSync(journalOf(0), "utf8")).toBe("restored");
    expect(existsSync(join(clusterDirectory, "brokers.restored-over"))).toBe(false);
    expect(await listed()).toEqual([0, 2]);
  });

  it("puts the previous data back when the commit fails, and keeps a committed restore whatever fails after it", async () => {
    const dataDirectory = temporaryDirectory();
    const records = temporaryDirectory();
    const { provisioner, clusterId, clusterDirectory, specification } = await runningCluster(dataDirectory, records);
    const target = { brokerIds: [0, 1, 2], configurationDocument: '{"version":7}' };
    const journal = join(clusterDirectory, "brokers", "0", "journal");
    const discarded = join(clusterDirectory, "brokers.restored-over");
    writeFileSync(journal, "before the restore");

    // The commit's rename fails (its target is in the way): the restore was not committed, so the previous data
    // comes back and the cluster runs on it.
    writeFileSync(join(records, "restore-0.occupy-commit"), "");
    await expect(provisioner.restore(specification, 8n, target)).rejects.toThrow(/ENOTEMPTY|EEXIST/);
    expect(readFileSync(journal, "utf8")).toBe("before the restore");
    expect(existsSync(join(clusterDirectory, "brokers.before-restore"))).toBe(false);
    expect(existsSync(discarded)).toBe(false);
    expect(provisioner.state(clusterId)).toBe("running");
    rmSync(join(records, "restore-0.occupy-commit"));

    // Deleting the saved brokers file fails after the commit: the restore still succeeds and is recorded.
    writeFileSync(join(records, "restore-0.saved-ports-directory"), "");
    let recordedCompleted = false;
    await provisioner.restore(specification, 9n, target, async () => {
      recordedCompleted = true;
    });
    expect(recordedCompleted).toBe(true);
    expect(existsSync(journal)).toBe(false);
    expect(existsSync(discarded)).toBe(false);
    expect(provisioner.state(clusterId)).toBe("running");
    rmSync(join(records, "restore-0.saved-ports-directory"));
    rmSync(join(clusterDirectory, "ports.before-restore.json"), { recursive: true });

    // Recording the restore fails: the restored data stays, and so does the previous data renamed to be discarded,
    // which tells the platform's next start that the restore was committed.
    writeFileSync(journal, "before the restore");
    await expect(
      provisioner.restore(specification, 10n, target, async () => {
        throw new Error("the store cannot be written");
      }),
    ).rejects.toThrow("the store cannot be written");
    expect(existsSync(journal)).toBe(false);
    expect(readFileSync(join(discarded, "0", "journal"), "utf8")).toBe("before the restore");
    expect(await provisioner.restoreCommitted(clusterId)).toBe(true);
    expect(existsSync(join(clusterDirectory, "brokers.before-restore"))).toBe(false);
    expect(provisioner.state(clusterId)).toBe("running");
  });

  it("starts a restored cluster with its writes paused until the commit, keeping the pause in a policy delivered meanwhile", async () => {
    const dataDirectory = temporaryDirectory();
    const records = temporaryDirectory();
    const { platform, provisioner, clusterId, clusterDirectory, specification } = await runningCluster(
      dataDirectory,
      records,
      { writesResume: { waitMs: 2_000, retryMs: 100 } },
    );
    const target = { brokerIds: [0, 1, 2], configurationDocument: '{"version":7}' };
    const policyFile = join(clusterDirectory, "access-policy.json");
    const policyNow = () => parseAccessPolicy(readFileSync(policyFile, "utf8"));
    const pausedBy = (backupId: number) => ({ reason: `it is being restored from backup ${backupId}` });
    const startedGateway = async () => {
      rmSync(join(records, "gateway.json"), { force: true });
      return async () => (await recorded(records, "gateway")).FAKE_WRITES_PAUSED_AT_START;
    };
    // What the running gateway says; the fake one, like the real one, reads its policy file only now and then.
    const gatewayPausesWrites = async () => {
      const cluster = await provisioner.whenStarted(clusterId);
      const health = (await (await fetch(`${cluster?.managementUrl}/actuator/health`)).json()) as {
        components: { writes: { details: { paused: boolean } } };
      };
      return health.components.writes.details.paused;
    };

    // The restored cluster's gateway starts with writes paused; it stays unready until the test says so.
    writeFileSync(join(records, "gateway.unready"), "");
    let pausedWhenRecorded: boolean | undefined;
    const pausedAtStart = await startedGateway();
    const restore = provisioner.restore(specification, 9n, target, async () => {
      pausedWhenRecorded = (await gatewayPausesWrites()) || policyNow().writesPaused !== undefined;
    });
    expect(await pausedAtStart()).toBe(pausedBy(9).reason);
    // A policy the platform delivers meanwhile (an allowlist changed) keeps the pause.
    const ipAllowlist = [{ ip: "10.0.0.0/8", description: "office" }];
    const delivered = { ...openAccessPolicy(clusterId, platform.organizationId), ipAllowlist };
    await provisioner.applyAccessPolicy(clusterId, delivered);
    expect(policyNow()).toEqual({ ...delivered, writesPaused: pausedBy(9) });
    rmSync(join(records, "gateway.unready"));
    await restore;
    // The gateway took writes again, and the file said so, before the restore was recorded; later deliveries do not
    // bring the pause back.
    expect(pausedWhenRecorded).toBe(false);
    expect(policyNow()).toEqual(delivered);
    await provisioner.applyAccessPolicy(clusterId, delivered);
    expect(policyNow()).toEqual(delivered);

    // A restore undone (its commit failed) starts the cluster again on its previous data with writes taken.
    writeFileSync(join(records, "restore-0.occupy-commit"), "");
    const pausedAtRestart = await startedGateway();
    await expect(provisioner.restore(specification, 10n, target)).rejects.toThrow(/ENOTEMPTY|EEXIST/);
    rmSync(join(records, "restore-0.occupy-commit"));
    expect(await pausedAtRestart()).toBe("");
    expect(policyNow()).toEqual(delivered);

    // The policy file cannot be written when the restore is committed (something is in its place): the restore still
    // completes, the pause stays, and it ends once the file can be written again.
    writeFileSync(join(records, "gateway.unready"), "");
    const pausedAtCommit = await startedGateway();
    const blocked = provisioner.restore(specification, 11n, target);
    expect(await pausedAtCommit()).toBe(pausedBy(11).reason);
    rmSync(policyFile);
    mkdirSync(join(policyFile, "in-the-way"), { recursive: true });
    rmSync(join(records, "gateway.unready"));
    await blocked;
    expect(await gatewayPausesWrites()).toBe(true);
    rmSync(policyFile, { recursive: true });
    writeFileSync(policyFile, serializeAccessPolicy({ ...delivered, writesPaused: pausedBy(11) }));
    await expect.poll(gatewayPausesWrites, { timeout: 5_000 }).toBe(false);
    expect(policyNow()).toEqual(delivered);

    // A pause an interrupted restore left in the file ends at the next launch.
    await provisioner.stop(clusterId);
    writeFileSync(policyFile, JSON.stringify({ ...delivered, writesPaused: pausedBy(12) }));
    const pausedAtLaunch = await startedGateway();
    await provisioner.launch(specification);
    await provisioner.whenStarted(clusterId);
    expect(await pausedAtLaunch()).toBe("");
    expect(policyNow()).toEqual(delivered);
  });

  it("puts an interrupted restore's previous data back only once no process holds the brokers' data, and lists the brokers after it", async () => {
    const dataDirectory = temporaryDirectory();
    const records = temporaryDirectory();
    const { provisioner, clusterId, clusterDirectory, specification } = await runningCluster(dataDirectory, records, {
      dataHolderWaitMs: 300,
    });
    const journalOf = (nodeId: number) => join(clusterDirectory, "brokers", String(nodeId), "journal");
    writeFileSync(journalOf(0), "before the restore");
    const portsFile = join(clusterDirectory, "ports.json");
    const portsBefore = readFileSync(portsFile, "utf8");

    // What a platform killed during a restore into brokers 0 and 2 leaves: the data and the brokers file aside, the
    // brokers file without broker 1, and broker 0's restore still running (its pid file names a live process).
    await provisioner.stop(clusterId);
    renameSync(join(clusterDirectory, "brokers"), join(clusterDirectory, "brokers.before-restore"));
    writeFileSync(join(clusterDirectory, "ports.before-restore.json"), portsBefore);
    const members = (JSON.parse(portsBefore) as { brokers: { nodeId: number }[] }).brokers.filter(
      (broker) => broker.nodeId !== 1,
    );
    writeFileSync(portsFile, JSON.stringify({ brokers: members }));
    mkdirSync(join(clusterDirectory, "brokers", "0"), { recursive: true });
    writeFileSync(journalOf(0), "half restored");
    const orphan = spawn(process.execPath, ["-e", "setInterval(() => {}, 60_000)"], { stdio: "ignore" });
    const orphanExit = once(orphan, "exit");
    cleanups.push(async () => {
      if (orphan.exitCode === null && orphan.signalCode === null) orphan.kill("SIGKILL");
    });
    writeFileSync(join(clusterDirectory, "brokers", "0", "broker.pid"), `${orphan.pid}\n`);

    // While it runs, nothing moves and the cluster is not launched, with the reason.
    await expect(provisioner.launch(specification)).rejects.toThrow(
      `process ${orphan.pid} still holds ${join(clusterDirectory, "brokers", "0", "broker.pid")}`,
    );
    expect(readFileSync(journalOf(0), "utf8")).toBe("half restored");
    expect(existsSync(join(clusterDirectory, "brokers.before-restore"))).toBe(true);
    expect(provisioner.state(clusterId)).toBe("stopped");
    // A restore started meanwhile is refused before anything changes, for the same reason.
    const target = { brokerIds: [0, 1, 2], configurationDocument: '{"version":7}' };
    await expect(provisioner.restore(specification, 9n, target)).rejects.toThrow(`process ${orphan.pid} still holds`);
    expect(readFileSync(journalOf(0), "utf8")).toBe("half restored");

    // Once it has exited, a restore puts the previous data back first and finds broker 1 among the brokers again.
    orphan.kill("SIGKILL");
    await orphanExit;
    await provisioner.restore(specification, 9n, target);
    expect(JSON.parse((await recorded(records, "restore-1")).FAKE_ARGUMENTS ?? "[]")).toContain("9");
    expect((await provisioner.brokers(clusterId)).map((broker) => broker.nodeId)).toEqual([0, 1, 2]);
    expect(existsSync(journalOf(0))).toBe(false);
    expect(existsSync(join(clusterDirectory, "brokers.before-restore"))).toBe(false);
    expect(provisioner.state(clusterId)).toBe("running");
  });
});

/** The processes the fake command line started, in order: its name ("gateway", "broker-1", ...) and pid. */
function startedProcesses(records: string): { name: string; pid: number }[] {
  const file = join(records, "started.log");
  if (!existsSync(file)) return [];
  return readFileSync(file, "utf8")
    .trim()
    .split("\n")
    .filter((line) => line !== "")
    .map((line) => {
      const [name, pid] = line.split(" ");
      return { name: name ?? "", pid: Number(pid) };
    });
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Polls `condition` every 20 ms for up to `timeoutMs`. */
async function eventually(condition: () => boolean, description: string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`condition never held: ${description}`);
    await new Promise((resolveWait) => setTimeout(resolveWait, 20));
  }
}

describe("the local provisioner's actions on one cluster, one at a time", () => {
  /** A platform with fake clusters whose primary cluster was started and stopped; kills what it started at the end. */
  async function stoppedCluster() {
    const dataDirectory = temporaryDirectory();
    const records = temporaryDirectory();
    cleanups.push(async () => {
      for (const { pid } of startedProcesses(records)) if (isAlive(pid)) process.kill(pid, "SIGKILL");
    });
    const { platform, provisioner, clusterId, specification } = await runningCluster(dataDirectory, records);
    await provisioner.stop(clusterId);
    return { platform, provisioner, clusterId, specification, records, dataDirectory };
  }

  it("starts a cluster once for two launches at once, and its stop leaves no process behind", async () => {
    const { provisioner, clusterId, specification, records } = await stoppedCluster();
    const before = startedProcesses(records).length;
    await Promise.all([provisioner.launch(specification), provisioner.launch(specification)]);
    await provisioner.whenStarted(clusterId);
    // A fake child records itself once it runs, which may be after the cluster counts as started.
    await eventually(() => startedProcesses(records).length - before >= 4, "every process recorded itself");
    const started = startedProcesses(records).slice(before);
    expect(started.filter((process) => process.name === "gateway")).toHaveLength(1);
    expect(started.map((process) => process.name).sort()).toEqual(["broker-0", "broker-1", "broker-2", "gateway"]);
    await provisioner.stop(clusterId);
    await eventually(() => started.every((process) => !isAlive(process.pid)), "every process stopped");
  });

  it("starts nothing that outlives a removal sent while the launch is under way", async () => {
    const { provisioner, clusterId, specification, records } = await stoppedCluster();
    const before = startedProcesses(records).length;
    const launching = provisioner.launch(specification);
    const removing = provisioner.remove(clusterId);
    await Promise.all([launching, removing]);
    // Queued behind the removal, a launch is refused.
    await expect(provisioner.launch(specification)).rejects.toThrow(`cluster ${clusterId} was deleted`);
    const started = startedProcesses(records).slice(before);
    await eventually(() => started.every((process) => !isAlive(process.pid)), "every process of the launch stopped");
    expect(provisioner.state(clusterId)).toBe("stopped");
  });

  it("puts an interrupted restore's previous data back once for two launches, keeping it", async () => {
    const { provisioner, clusterId, specification, dataDirectory } = await stoppedCluster();
    const clusterDirectory = join(dataDirectory, "cluster");
    writeFileSync(join(clusterDirectory, "brokers", "0", "journal"), "acknowledged");
    // An interrupted restore: the data aside, the brokers file saved, half-restored data in its place.
    renameSync(join(clusterDirectory, "brokers"), join(clusterDirectory, "brokers.before-restore"));
    writeFileSync(
      join(clusterDirectory, "ports.before-restore.json"),
      readFileSync(join(clusterDirectory, "ports.json"), "utf8"),
    );
    mkdirSync(join(clusterDirectory, "brokers", "0"), { recursive: true });
    writeFileSync(join(clusterDirectory, "brokers", "0", "journal"), "half restored");
    // The interrupted restore's process still holds broker 0's data for a moment: both launches come to wait for it.
    const holder = spawn(process.execPath, ["-e", "setTimeout(() => {}, 1_000)"], { stdio: "ignore" });
    cleanups.push(async () => {
      if (holder.exitCode === null && holder.signalCode === null) holder.kill("SIGKILL");
    });
    writeFileSync(join(clusterDirectory, "brokers", "0", "broker.pid"), `${holder.pid}\n`);
    await Promise.all([provisioner.launch(specification), provisioner.launch(specification)]);
    await provisioner.whenStarted(clusterId);
    expect(readFileSync(join(clusterDirectory, "brokers", "0", "journal"), "utf8")).toBe("acknowledged");
    expect(existsSync(join(clusterDirectory, "brokers.before-restore"))).toBe(false);
    expect(provisioner.state(clusterId)).toBe("running");
  });

  it("is no longer degraded once a broker whose restart was pending is removed", async () => {
    const { provisioner, clusterId, specification, records } = await stoppedCluster();
    await provisioner.launch(specification);
    await provisioner.whenStarted(clusterId);
    // Broker 1 crash-loops, broker 2 crashes once and comes back: the cluster stays degraded for broker 1.
    writeFileSync(join(records, "broker-1.crash"), "");
    const latest = (name: string) =>
      startedProcesses(records)
        .filter((process) => process.name === name)
        .at(-1);
    process.kill(latest("broker-1")?.pid ?? 0, "SIGKILL");
    await eventually(() => provisioner.state(clusterId) === "degraded", "the cluster degraded");
    const broker2 = latest("broker-2")?.pid ?? 0;
    process.kill(broker2, "SIGKILL");
    await eventually(() => (latest("broker-2")?.pid ?? broker2) !== broker2, "broker 2 started again");
    await eventually(() => provisioner.restartingProcess(clusterId)?.process === "broker 1", "only broker 1 pending");
    expect(provisioner.state(clusterId)).toBe("degraded");
    await provisioner.removeBrokers(clusterId, [1]);
    expect(provisioner.state(clusterId)).toBe("running");
    expect(provisioner.restartingProcess(clusterId)).toBeUndefined();
  });

  it("starts a broker added again with empty data, deleting what a removed broker of its id left", async () => {
    const { provisioner, clusterId, specification, records, dataDirectory } = await stoppedCluster();
    await provisioner.launch(specification);
    await provisioner.whenStarted(clusterId);
    // A removal cut short after the brokers file stopped listing broker 5, before its data went.
    const leftover = join(dataDirectory, "cluster", "brokers", "5");
    mkdirSync(leftover, { recursive: true });
    writeFileSync(join(leftover, "journal"), "what the removed broker 5 held");
    await provisioner.addBrokers(clusterId, [5]);
    await eventually(
      () => startedProcesses(records).some((process) => process.name === "broker-5"),
      "broker 5 started",
    );
    expect(existsSync(join(leftover, "journal"))).toBe(false);
  });
});
