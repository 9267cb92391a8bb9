/** `flowplane clusters`, against a platform that runs clusters with the local provisioner (1-broker plan). */
import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  clusterScalePatch,
  creationFromOptions,
  formatClusterTable,
  resolveParameter,
} from "../../../src/cli/commands/clusters.js";
import { exitCodes } from "../../../src/cli/io.js";
import { clusterParameters } from "../../../src/platform/admin/clusters/parameters.js";
import { openStore } from "../../../src/platform/store/database.js";
import { eventually } from "../../support/cluster.js";
import { type CliFixture, startCliFixture } from "../support.js";

let fixture: CliFixture;

beforeAll(async () => {
  fixture = await startCliFixture(
    { localClusters: { createPrimaryCluster: false } },
    { "service.provisioner.healthCheckIntervalMs": 200, "service.log.level": "warn" },
  );
}, 60_000);

afterAll(async () => {
  await fixture?.close();
}, 60_000);

describe("resolveParameter and creationFromOptions", () => {
  const parameters = clusterParameters();

  it("take an id or the start of a name, and default channel, generation and region", () => {
    const plan = parameters.clusterPlanTypes[0] as { uuid: string; name: string };
    expect(resolveParameter(parameters.clusterPlanTypes, plan.uuid, "--plan")).toEqual(plan);
    expect(resolveParameter(parameters.clusterPlanTypes, "DEVELOPMENT", "--plan")).toEqual(plan);
    const creation = creationFromOptions("orders", { plan: "large", stage: "prod" }, parameters);
    expect(creation).toEqual({
      name: "orders",
      planTypeId: parameters.clusterPlanTypes[2]?.uuid,
      channelId: parameters.channels[0]?.uuid,
      generationId: parameters.channels[0]?.defaultGeneration.uuid,
      regionId: parameters.regions[0]?.uuid,
      stageLabel: "prod",
    });
  });

  it("refuse a value matching none, listing the choices", () => {
    expect(() => resolveParameter(parameters.clusterPlanTypes, "huge", "--plan")).toThrow(
      /matches none of: Development/,
    );
    expect(() => creationFromOptions("x", { plan: "standard", stage: "qa" }, parameters)).toThrow(/--stage/);
  });
});

describe("clusterScalePatch", () => {
  it("builds the management API's PATCH body and refuses options that do not go together", () => {
    expect(clusterScalePatch({ brokers: 4 })).toEqual({ brokers: { count: 4 } });
    expect(clusterScalePatch({ add: [3], remove: [0], partitions: 3, replicationFactor: 2 })).toEqual({
      brokers: { add: [3], remove: [0] },
      partitions: { count: 3, replicationFactor: 2 },
    });
    expect(() => clusterScalePatch({ brokers: 2, add: [3] })).toThrow(/either --brokers or --add/);
    expect(() => clusterScalePatch({ replicationFactor: 2 })).toThrow(/--partitions and --replication-factor/);
    // Where today's values are: the cluster's own management API, whose link the Administration API shows.
    expect(() => clusterScalePatch({ partitions: 6 })).toThrow(/management link flowplane clusters get shows/);
    expect(() => clusterScalePatch({})).toThrow(/say what to change/);
  });

  it("refuses counts beyond the Administration API's bounds under the option's name, before any request", async () => {
    const brokers = await fixture.cli(["clusters", "scale", "any-cluster", "--brokers", "33"]);
    expect(brokers.exitCode).toBe(exitCodes.usage);
    expect(brokers.stderr).toContain(
      "option '--brokers <count>' argument '33' is invalid. It must be a whole number from 1 to 32.",
    );
    const partitions = await fixture.cli([
      "clusters",
      "scale",
      "any-cluster",
      "--partitions",
      "1001",
      "--replication-factor",
      "3",
    ]);
    expect(partitions.exitCode).toBe(exitCodes.usage);
    expect(partitions.stderr).toContain("argument '1001' is invalid. It must be a whole number from 1 to 1000.");
  });
});

describe("flowplane clusters", () => {
  it("creates a cluster and waits for it, lists, gets and deletes it", async () => {
    const created = await fixture.cli(["clusters", "create", "orders", "--plan", "development", "--wait", "--json"]);
    expect(created.stderr).toBe("");
    expect(created.exitCode).toBe(exitCodes.ok);
    const cluster = JSON.parse(created.stdout) as {
      uuid: string;
      status: { ready: string };
      links: { gateway: string };
    };
    expect(cluster.status.ready).toBe("Healthy");

    const table = await fixture.cli(["clusters", "list"]);
    expect(table.exitCode).toBe(exitCodes.ok);
    expect(table.stdout.split("\n")[0]).toMatch(/^ID\s+NAME\s+STATUS\s+PLAN\s+GATEWAY$/);
    expect(table.stdout).toContain(cluster.uuid);
    expect(table.stdout).toContain(cluster.links.gateway);

    const listed = JSON.parse((await fixture.cli(["clusters", "list", "--json"])).stdout) as { uuid: string }[];
    expect(listed.map((entry) => entry.uuid)).toEqual([cluster.uuid]);

    const shown = await fixture.cli(["clusters", "get", cluster.uuid]);
    expect(shown.exitCode).toBe(exitCodes.ok);
    expect(shown.stdout).toContain("name: orders");
    expect(shown.stdout).toContain("status: Healthy");

    const plan = await fixture.cli(["clusters", "scale", cluster.uuid, "--brokers", "2", "--dry-run"]);
    expect(plan.stderr).toBe("");
    expect(plan.stdout).toMatch(/^Dry run, nothing recorded\. Planned: 1 operation\n\s+1\. BROKER_ADD/);
    const scaled = await fixture.cli(["clusters", "scale", cluster.uuid, "--brokers", "2", "--json"]);
    expect(scaled.stderr).toBe("");
    expect(scaled.exitCode).toBe(exitCodes.ok);
    expect((JSON.parse(scaled.stdout) as { changeId: number }).changeId).toBeGreaterThan(1);
    const provisioner = fixture.platform.running.provisioner;
    expect((await provisioner?.brokers(cluster.uuid))?.map((broker) => broker.nodeId)).toEqual([0, 1]);

    const deleted = await fixture.cli(["clusters", "delete", cluster.uuid, "--json"]);
    expect(deleted.exitCode).toBe(exitCodes.ok);
    expect(JSON.parse(deleted.stdout)).toEqual({ clusterId: cluster.uuid, deleted: true });
    const again = await fixture.cli(["clusters", "get", cluster.uuid]);
    expect(again.exitCode).toBe(exitCodes.failure);
    expect(again.stderr).toContain("HTTP 404");
  }, 120_000);

  it("scales a created cluster with flowplane cluster scale --cluster-id; its brokers' ports are recorded", async () => {
    const created = await fixture.cli(["clusters", "create", "scaled", "--plan", "development", "--wait", "--json"]);
    expect(created.exitCode).toBe(exitCodes.ok);
    const cluster = JSON.parse(created.stdout) as { uuid: string; links: { management: string } };
    const scaled = await fixture.cli(
      [
        "cluster",
        "scale",
        "--add",
        "1",
        "--cluster-id",
        cluster.uuid,
        "--data-directory",
        fixture.platform.dataDirectory,
        "--json",
      ],
      { ...fixture.clientEnvironment, SERVICE_CLUSTER_MANAGEMENT_URL: cluster.links.management },
    );
    expect(scaled.stderr).toBe("");
    expect(scaled.exitCode).toBe(exitCodes.ok);
    // The plan, then the answer the change ended on.
    const [plan, ended] = scaled.stdout
      .trimEnd()
      .split(/\n(?=\{)/)
      .map((document) => JSON.parse(document) as { changeId?: number; brokers?: { id: number }[] });
    expect(plan?.changeId).toBeGreaterThan(1);
    expect(ended?.brokers?.map((broker) => broker.id)).toEqual([0, 1]);
    const provisioner = fixture.platform.running.provisioner;
    expect((await provisioner?.whenStarted(cluster.uuid))?.brokers.map((broker) => broker.nodeId)).toEqual([0, 1]);
    const store = await openStore({ url: "", dataDirectory: fixture.platform.dataDirectory });
    try {
      await eventually("the added broker's ports recorded", 10_000, async () => {
        const rows = await store.database
          .selectFrom("local_cluster_brokers")
          .select("node_id")
          .where("cluster_id", "=", cluster.uuid)
          .orderBy("node_id")
          .execute();
        return rows.length === 2 ? rows : undefined;
      });
    } finally {
      await store.close();
    }
    expect((await fixture.cli(["clusters", "delete", cluster.uuid])).exitCode).toBe(exitCodes.ok);
  }, 180_000);

  it("exits 2 for a plan that matches none and 1 for an unknown cluster", async () => {
    const badPlan = await fixture.cli(["clusters", "create", "orders", "--plan", "huge"]);
    expect(badPlan.exitCode).toBe(exitCodes.usage);
    expect(badPlan.stderr).toContain("--plan");
    const unknown = await fixture.cli(["clusters", "delete", randomUUID()]);
    expect(unknown.exitCode).toBe(exitCodes.failure);
    expect(unknown.stderr).toContain("HTTP 404");
  });

  it("prints names from the API through the terminal filter", () => {
    const table = formatClusterTable([
      {
        uuid: "id",
        name: "evil\u001b[2J",
        ownerId: "o",
        created: "",
        autoUpdate: false,
        channel: { uuid: "", name: "" },
        generation: { uuid: "", name: "" },
        region: { uuid: "", name: "" },
        planType: { uuid: "", name: "plan" },
        status: { ready: "Healthy", gatewayStatus: "Healthy" },
        links: { gateway: "", management: "", oauth: "", console: "" },
        ipallowlist: [],
      },
    ]);
    expect(table).not.toContain("\u001b");
  });
});
