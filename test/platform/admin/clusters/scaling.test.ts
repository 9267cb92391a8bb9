/**
 * `ClusterScalingService` against a scripted management API on 127.0.0.1 and a provisioner that records what it is
 * asked: the refusals (409 while a change is pending, 400 with the cluster's reason, 502 when the management API
 * fails), the retry while the cluster has not heard of a new broker yet, and the cleanup of brokers that are not
 * members once a change ended, never while it runs; and that scaling and a restore of the cluster exclude each other
 * (also a restore that begins while a cleanup waits for the cluster).
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { pino } from "pino";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import type { ClusterStatus } from "../../../../src/client/cluster.js";
import { ServiceError } from "../../../../src/http/errors.js";
import type { ClusterDirectory } from "../../../../src/platform/admin/cluster-directory.js";
import { ClusterScalingService, type ScalingProvisioner } from "../../../../src/platform/admin/clusters/scaling.js";
import type { ProvisionedBroker, ProvisionedState } from "../../../../src/platform/provisioner/provisioner.js";

const organizationId = "organization-1";
const clusterId = "3f0c6b1e-4a53-4a4e-9d55-0d7c1a2b3c4d";

/** A broker entry of the management API with no partitions. */
function broker(id: number): ClusterStatus["brokers"][number] {
  return { id, state: "ACTIVE", version: 1, lastUpdatedAt: "2026-11-25T04:00:00.000Z", partitions: [] };
}

/** The management API's answers, changed by each test; every request is recorded. */
interface Script {
  status: ClusterStatus;
  /** Answers to PATCH /actuator/cluster, in order (the last one repeats). */
  patches: { status: number; body: unknown }[];
  /** Status of GET /actuator/cluster (200 unless set). */
  statusCode?: number;
  /** The broker component's state in answers to GET /actuator/health, in order (the last one repeats). */
  brokerStates: string[];
}

/** Provisioner calls and management API requests in the order they happened. */
const events: string[] = [];

class RecordingProvisioner implements ScalingProvisioner {
  readonly calls: string[] = [];
  running: number[] = [0];
  /** Called while the brokers are listed (something that happens while a cleanup waits for the list). */
  onBrokersListed: (() => void) | undefined;
  constructor(private readonly managementUrl: () => string) {}
  state(): ProvisionedState {
    return this.current;
  }
  async brokers(): Promise<ProvisionedBroker[]> {
    this.onBrokersListed?.();
    return this.running.map((nodeId) => ({ nodeId, managementUrl: this.managementUrl() }));
  }
  /** When set, starting brokers fails with it. */
  addFailure: Error | undefined;
  async addBrokers(_clusterId: string, nodeIds: readonly number[]): Promise<void> {
    if (this.addFailure !== undefined) throw this.addFailure;
    this.calls.push(`add ${nodeIds.join(",")}`);
    events.push(`add ${nodeIds.join(",")}`);
    this.running = [...new Set([...this.running, ...nodeIds])].sort((left, right) => left - right);
  }
  current: ProvisionedState = "running";
  /** When set, removals wait for it. */
  removalHeld: Promise<void> | undefined;
  async removeBrokers(_clusterId: string, nodeIds: readonly number[]): Promise<void> {
    this.calls.push(`remove ${nodeIds.join(",")}`);
    events.push(`remove ${nodeIds.join(",")}`);
    await this.removalHeld;
    this.calls.push(`removed ${nodeIds.join(",")}`);
    events.push(`removed ${nodeIds.join(",")}`);
    this.running = this.running.filter((nodeId) => !nodeIds.includes(nodeId));
  }
}

describe("ClusterScalingService", () => {
  let server: Server;
  let url: string;
  let script: Script;
  let requests: string[];
  let provisioner: RecordingProvisioner;
  let service: ClusterScalingService;
  /** Whether a restore of the cluster runs, as the backups service would say. */
  let restoring: boolean;

  const answer = (response: ServerResponse, status: number, body: unknown): void => {
    const problem = status >= 400;
    response.writeHead(status, { "content-type": problem ? "application/problem+json" : "application/json" });
    response.end(JSON.stringify(body));
  };
  const handle = (request: IncomingMessage, response: ServerResponse): void => {
    requests.push(`${request.method} ${request.url}`);
    events.push(`${request.method} ${request.url}`);
    if (request.url === "/actuator/health/liveness") {
      answer(response, 200, { status: "UP" });
    } else if (request.url === "/actuator/health") {
      // What a broker's management server answers: DOWN while it starts, with the step.
      const state = (script.brokerStates.length > 1 ? script.brokerStates.shift() : script.brokerStates[0]) ?? "";
      const running = state === "RUNNING";
      answer(response, running ? 200 : 503, {
        status: running ? "UP" : "DOWN",
        components: {
          broker: running
            ? { status: "UP", details: { state } }
            : { status: "DOWN", details: { state, step: "opening partition replicas" } },
        },
      });
    } else if (request.method === "GET" && request.url === "/actuator/cluster") {
      const code = script.statusCode ?? 200;
      answer(response, code, code === 200 ? script.status : problemOf(code, "the coordinator failed"));
    } else if (request.method === "PATCH") {
      const next = script.patches.length > 1 ? script.patches.shift() : script.patches[0];
      answer(response, next?.status ?? 500, next?.body ?? {});
    } else {
      answer(response, 404, problemOf(404, "unknown route"));
    }
  };

  beforeEach(async () => {
    requests = [];
    events.length = 0;
    restoring = false;
    script = { status: { version: 1, brokers: [broker(0)], routing: {} }, patches: [], brokerStates: ["RUNNING"] };
    server = createServer(handle);
    await new Promise<void>((resolveListen) => server.listen(0, "127.0.0.1", resolveListen));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    provisioner = new RecordingProvisioner(() => url);
    const clusters: ClusterDirectory = {
      async find(organization, id) {
        if (organization !== organizationId || id !== clusterId) return undefined;
        return { id, links: { gateway: url, management: url, oauth: `${url}/oauth/token` } };
      },
      async clusterIds(organization) {
        return organization === organizationId ? [clusterId] : [];
      },
    };
    service = new ClusterScalingService({
      clusters,
      provisioner,
      tokensFor: () => ({
        async getToken() {
          return {
            accessToken: "token",
            tokenType: "Bearer",
            scope: "cluster",
            audience: "gateway-api",
            issuedAtMs: 0,
            expiresAtMs: Number.MAX_SAFE_INTEGER,
            refreshAtMs: Number.MAX_SAFE_INTEGER,
            source: "network" as const,
          };
        },
        async invalidate() {},
      }),
      logger: pino({ level: "silent" }),
      restoreRunning: () => restoring,
    });
  });
  afterEach(async () => {
    await new Promise((resolveClose) => server.close(resolveClose));
  });

  const planned = (changeId: number) => ({
    status: 202,
    body: {
      changeId,
      currentTopology: [],
      plannedChanges: [{ operation: "BROKER_ADD", brokerId: 1 }],
      expectedTopology: [],
    },
  });
  const refusal = (status: number, detail: string) => ({ status, body: problemOf(status, detail) });

  it("refuses a change while another is pending, without starting a broker", async () => {
    script.status = {
      ...script.status,
      pendingChange: {
        id: 4,
        status: "IN_PROGRESS",
        startedAt: "2026-11-25T04:00:00.000Z",
        completed: [],
        pending: [],
      },
    };
    const refused = await service
      .scale(organizationId, clusterId, { brokers: { count: 2 } }, { dryRun: false })
      .catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(ServiceError);
    expect((refused as ServiceError).status).toBe(409);
    expect((refused as ServiceError).message).toContain("Another configuration change [4] is in progress");
    expect(provisioner.calls).toEqual([]);
  });

  it("answers the cluster's refusal as a 400 with its reason and a failing management API as a 502", async () => {
    script.patches = [refusal(400, "fewer brokers than the replication factor")];
    const refused = await service
      .scale(organizationId, clusterId, { brokers: { count: 2 } }, { dryRun: true })
      .catch((error: unknown) => error as ServiceError);
    expect(refused).toMatchObject({ status: 400 });
    expect((refused as ServiceError).message).toContain("fewer brokers than the replication factor");
    // The dry run before the brokers are started fails the same way: nothing is started.
    await expect(
      service.scale(organizationId, clusterId, { brokers: { count: 2 } }, { dryRun: false }),
    ).rejects.toMatchObject({ status: 400 });
    expect(provisioner.calls).toEqual([]);
    script.statusCode = 500;
    await expect(
      service.scale(organizationId, clusterId, { brokers: { count: 2 } }, { dryRun: false }),
    ).rejects.toMatchObject({ status: 502 });
    script.statusCode = undefined;
    provisioner.current = "stopped";
    await expect(
      service.scale(organizationId, clusterId, { brokers: { count: 2 } }, { dryRun: false }),
    ).rejects.toMatchObject({ status: 409, message: expect.stringContaining("is stopped") });
    await expect(
      service.scale(
        organizationId,
        "7d1b6a3e-0000-4000-8000-000000000000",
        { brokers: { count: 2 } },
        { dryRun: true },
      ),
    ).rejects.toMatchObject({ status: 404 });
  });

  it("starts the added brokers, retries while the cluster has not heard of them, and answers the change", async () => {
    script.patches = [
      planned(2),
      refusal(400, "broker 1 is to be added but is not running and reachable; start it first"),
      refusal(400, "broker 1 is to be added but is not running and reachable; start it first"),
      planned(2),
    ];
    const started = await service.scale(organizationId, clusterId, { brokers: { count: 2 } }, { dryRun: false });
    expect(started.changeId).toBe(2);
    expect(provisioner.calls).toEqual(["add 1"]);
    expect(requests.filter((request) => request.startsWith("PATCH"))).toEqual([
      "PATCH /actuator/cluster?dryRun=true",
      "PATCH /actuator/cluster",
      "PATCH /actuator/cluster",
      "PATCH /actuator/cluster",
    ]);
    expect(requests).toContain("GET /actuator/health");
  });

  it("sends the change only once the added broker says it started, not when it merely listens", async () => {
    script.patches = [planned(2)];
    script.brokerStates = ["STARTING", "STARTING", "RUNNING"];
    const started = await service.scale(organizationId, clusterId, { brokers: { count: 2 } }, { dryRun: false });
    expect(started.changeId).toBe(2);
    // The liveness of the stub answers 200 all along; the change waits for the health's RUNNING.
    const sent = events.indexOf("PATCH /actuator/cluster");
    expect(events.slice(0, sent).filter((event) => event === "GET /actuator/health")).toHaveLength(3);
    expect(script.brokerStates).toEqual(["RUNNING"]);
  });

  it("stops brokers that are not members once the change ended, and none while it runs", async () => {
    script.patches = [planned(2)];
    await service.scale(organizationId, clusterId, { brokers: { add: [1, 2] } }, { dryRun: false });
    expect(provisioner.running).toEqual([0, 1, 2]);
    // While the change runs, nothing is touched.
    script.status = {
      version: 2,
      brokers: [broker(0), broker(1)],
      pendingChange: {
        id: 2,
        status: "IN_PROGRESS",
        startedAt: "2026-11-25T04:00:00.000Z",
        completed: [],
        pending: [],
      },
      routing: {},
    };
    await service.afterHealthPoll({ id: clusterId, organizationId });
    expect(provisioner.calls).toEqual(["add 1,2"]);
    // Cancelled after broker 1 was added: broker 2 never became a member and is stopped.
    script.status = {
      version: 3,
      brokers: [broker(0), broker(1)],
      lastChange: {
        id: 2,
        status: "CANCELLED",
        startedAt: "2026-11-25T04:00:00.000Z",
        completedAt: "2026-11-25T04:00:01.000Z",
      },
      routing: {},
    };
    // One poll only notes what it would remove; the next one that sees the same configuration removes it.
    await service.afterHealthPoll({ id: clusterId, organizationId });
    expect(provisioner.calls).toEqual(["add 1,2"]);
    await service.afterHealthPoll({ id: clusterId, organizationId });
    expect(provisioner.calls).toEqual(["add 1,2", "remove 2", "removed 2"]);
    expect(provisioner.running).toEqual([0, 1]);
    // The cluster is not followed any more: a later poll does not ask the management API.
    const asked = requests.length;
    await service.afterHealthPoll({ id: clusterId, organizationId });
    expect(requests.length).toBe(asked);
  });

  it("takes no scale request and stops no broker while a restore runs, and tells a restore what it is doing", async () => {
    restoring = true;
    await expect(
      service.scale(organizationId, clusterId, { brokers: { count: 2 } }, { dryRun: false }),
    ).rejects.toMatchObject({ status: 409, message: expect.stringContaining(`A restore of cluster ${clusterId}`) });
    // A dry run as well: the restore has the cluster's processes down, and the plan would be a 502.
    await expect(
      service.scale(organizationId, clusterId, { brokers: { count: 2 } }, { dryRun: true }),
    ).rejects.toMatchObject({ status: 409, message: expect.stringContaining(`A restore of cluster ${clusterId}`) });
    // Broker 1 runs but is no member: left alone while the restore runs, however many polls agree.
    provisioner.running = [0, 1];
    for (let poll = 0; poll < 3; poll += 1) await service.afterHealthPoll({ id: clusterId, organizationId });
    expect(provisioner.calls).toEqual([]);
    expect(requests).toEqual([]);
    restoring = false;
    expect(service.inProgress(clusterId)).toBeUndefined();
    let release: () => void = () => undefined;
    provisioner.removalHeld = new Promise((resolveHeld) => {
      release = resolveHeld;
    });
    await service.afterHealthPoll({ id: clusterId, organizationId });
    const removal = service.afterHealthPoll({ id: clusterId, organizationId });
    await vi.waitFor(() => expect(provisioner.calls).toEqual(["remove 1"]));
    // A restore does not start while the removal runs.
    expect(service.inProgress(clusterId)).toBe(
      `Brokers that left cluster ${clusterId} are being stopped; try again in a moment.`,
    );
    release();
    await removal;
    expect(service.inProgress(clusterId)).toBeUndefined();
  });

  it("stops no broker when a restore began while the cleanup waited for the cluster", async () => {
    provisioner.running = [0, 1];
    await service.afterHealthPoll({ id: clusterId, organizationId });
    // The second poll agrees with the first, but a restore starts while it lists the brokers.
    provisioner.onBrokersListed = () => {
      restoring = true;
    };
    await service.afterHealthPoll({ id: clusterId, organizationId });
    expect(provisioner.calls).toEqual([]);
    // Once the restore has ended, the cleanup carries on.
    provisioner.onBrokersListed = undefined;
    restoring = false;
    for (let poll = 0; poll < 2; poll += 1) await service.afterHealthPoll({ id: clusterId, organizationId });
    expect(provisioner.calls).toEqual(["remove 1", "removed 1"]);
  });

  it("looks at every cluster once at its first poll, so a change that ended while the platform was down is cleaned up", async () => {
    provisioner.running = [0, 3];
    let release = (): void => undefined;
    provisioner.removalHeld = new Promise<void>((resolveHeld) => {
      release = resolveHeld;
    });
    await service.afterHealthPoll({ id: clusterId, organizationId });
    expect(provisioner.calls).toEqual([]);
    const cleanup = service.afterHealthPoll({ id: clusterId, organizationId });
    await expect.poll(() => provisioner.calls).toEqual(["remove 3"]);
    // A scale-up that adds broker 3 again waits until its removal has ended: it does not even read the cluster.
    script.patches = [planned(2)];
    const scaling = service.scale(organizationId, clusterId, { brokers: { add: [3] } }, { dryRun: false });
    const removalStarted = events.indexOf("remove 3");
    // Time for a scale request that did not wait to reach the cluster; one that waits never does, however long.
    await new Promise((resolveLater) => setTimeout(resolveLater, 200));
    release();
    await cleanup;
    await scaling;
    expect(provisioner.calls).toEqual(["remove 3", "removed 3", "add 3"]);
    const afterRemovalStarted = events.slice(removalStarted);
    expect(afterRemovalStarted[0]).toBe("remove 3");
    expect(afterRemovalStarted[1]).toBe("removed 3");
    expect(afterRemovalStarted).toContain("GET /actuator/cluster");
  });

  it("answers a provisioner that cannot start the brokers as a 409 with its reason, and bounds dry runs too", async () => {
    script.patches = [planned(2)];
    provisioner.addFailure = new Error("cluster x does not run; its brokers can be changed only while it runs");
    await expect(
      service.scale(organizationId, clusterId, { brokers: { add: [1] } }, { dryRun: false }),
    ).rejects.toMatchObject({
      status: 409,
      message: expect.stringContaining("could not be started: cluster x does not run"),
    });
    const tooMany = { brokers: { add: Array.from({ length: 32 }, (_, index) => index + 1) } };
    await expect(service.scale(organizationId, clusterId, tooMany, { dryRun: true })).rejects.toMatchObject({
      status: 400,
      message: expect.stringContaining("body/brokers would give the cluster 33 brokers"),
    });
    expect(requests.filter((request) => request.startsWith("PATCH"))).toEqual(["PATCH /actuator/cluster?dryRun=true"]);
  });

  it("removes nothing when the configuration moved on between two polls", async () => {
    provisioner.running = [0, 3];
    await service.afterHealthPoll({ id: clusterId, organizationId });
    // Someone added broker 3 meanwhile: the next poll sees a newer configuration with broker 3 a member.
    script.status = { version: 3, brokers: [broker(0), broker(3)], routing: {} };
    await service.afterHealthPoll({ id: clusterId, organizationId });
    expect(provisioner.calls).toEqual([]);
  });
});

function problemOf(status: number, detail: string): Record<string, unknown> {
  return { type: "about:blank", title: "refused", status, detail, instance: "/actuator/cluster" };
}
