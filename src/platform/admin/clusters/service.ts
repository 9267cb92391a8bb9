import { randomUUID } from "node:crypto";
import type { Kysely } from "kysely";
import type { Logger } from "pino";
import { type AccessPolicy, openAccessPolicy } from "../../../auth/access-policy.js";
import { conflict, invalidRequest, notFound, ServiceError } from "../../../http/errors.js";
import {
  type ClusterStatus,
  deriveClusterStatus,
  describeProcessExit,
  type HealthProbe,
  probeClusterHealth,
} from "../../provisioner/health-monitor.js";
import type {
  ClusterProcessExit,
  ClusterSpecification,
  Provisioner,
  RestoreTarget,
} from "../../provisioner/provisioner.js";
import type { ClusterTable, PlatformDatabase } from "../../store/schema.js";
import { logBackgroundFailure } from "../../store/unavailable.js";
import { ActivityService } from "../activity/service.js";
import type { ClusterDirectory, ClusterLinks, ClusterSummary } from "../cluster-directory.js";
import { channels, defaultPlanType, type Generation, localRegion, planTypes, regions } from "./parameters.js";

/** Stage labels a cluster may carry. */
export const stageLabels = ["dev", "test", "stage", "prod"] as const;

/** One stage label. */
export type StageLabel = (typeof stageLabels)[number];

/** A cluster as the Administration API shows it. */
export interface Cluster {
  uuid: string;
  name: string;
  description?: string;
  stageLabel?: StageLabel;
  ownerId: string;
  created: string;
  autoUpdate: boolean;
  channel: { uuid: string; name: string };
  generation: { uuid: string; name: string };
  region: { uuid: string; name: string };
  planType: { uuid: string; name: string };
  /** `reason` (flowplane's addition) says why a cluster is not Healthy, e.g. a broker that is being restarted. */
  status: { ready: ClusterStatus; gatewayStatus: ClusterStatus; reason?: string };
  links: { gateway: string; management: string; oauth: string; console: string };
  ipallowlist: { ip: string; description: string }[];
}

/** The body of `POST /clusters`. */
export interface ClusterCreation {
  name: string;
  planTypeId: string;
  channelId: string;
  generationId: string;
  regionId: string;
  description?: string;
  stageLabel?: StageLabel;
  autoUpdate?: boolean;
}

/** The body of `PATCH /clusters/{clusterId}`. */
export interface ClusterChange {
  name?: string;
  description?: string;
  stageLabel?: StageLabel;
}

/** A deleted cluster, as the deletion hooks learn of it. */
export interface DeletedCluster {
  organizationId: string;
  clusterId: string;
}

/** Removes what another part of the platform keeps about a cluster that was deleted. */
export type ClusterDeletionHook = (cluster: DeletedCluster) => Promise<void>;

/** A cluster as other resources under `/clusters/{clusterId}` look it up. */
export interface ClusterRecord extends ClusterSummary {
  organizationId: string;
  name: string;
}

/** Who a policy is built for: the cluster and its organization. */
export interface ClusterIdentity {
  id: string;
  organizationId: string;
  name: string;
}

/** Builds a cluster's whole access policy from the resources that keep its parts (allowlist, monitoring, …). */
export type AccessPolicyBuilder = (cluster: ClusterIdentity) => Promise<AccessPolicy>;

/** Reads the IP allowlist a cluster's answer shows (kept by the IP allowlist resource). */
export type AllowlistReader = (
  organizationId: string,
  clusterId: string,
) => Promise<{ ip: string; description: string }[]>;

/** Options of `ClusterService`. */
export interface ClusterServiceOptions {
  database: Kysely<PlatformDatabase>;
  /** Runs the clusters; absent when the platform runs none (`flowplane platform`). */
  provisioner?: Provisioner | undefined;
  /** The platform's issuer URL: clusters' token and console links point there. */
  issuerUrl: string;
  /** Most clusters one organization may have: each one runs processes on this machine. */
  maxClustersPerOrganization: number;
  /** How often every running cluster's health is polled. */
  healthCheckIntervalMs: number;
  logger: Logger;
  now?: () => Date;
}

/** Owner id recorded for the cluster that the platform itself creates on the first `flowplane start`. */
export const systemOwnerId = "system";

/** The service and the user that activity entries of the provisioner's own doing name. */
export const provisionerActivityService = "provisioner";

/** The name of the first cluster. */
const primaryClusterName = "local";

/** What an upgrade did: the cluster and the generations it moved from and to (the reference SDK's answer). */
export interface GenerationUpgrade {
  cluster: { id: string; name: string };
  oldGeneration: { id: string; name: string };
  newGeneration: { id: string; name: string };
  orgId: string;
}

/**
 * Holds the clusters of organizations and asks the provisioner to run them. It is the cluster directory of the
 * resources under `/clusters/{clusterId}` (`find`), delivers the access policies they change, and tells them when a
 * cluster is deleted.
 */
export class ClusterService implements ClusterDirectory {
  /** Called after a cluster was deleted, so other resources remove what they keep about it. */
  readonly onClusterDeleted: ClusterDeletionHook[] = [];
  /** Reads a cluster's IP allowlist for its answer; the allowlist resource sets it. */
  allowlistReader: AllowlistReader = async () => [];
  /** Builds a cluster's access policy; the open policy until the resources keeping its parts are wired in. */
  accessPolicyBuilder: AccessPolicyBuilder = async (cluster) => openAccessPolicy(cluster.id, cluster.organizationId);
  /**
   * Called after each health poll of a cluster whose processes run (the scaling service cleans up after changes
   * there), with the cluster and its organization.
   */
  readonly onHealthPolled: ((cluster: { id: string; organizationId: string }) => Promise<void>)[] = [];
  /** Runs the clusters; undefined when the platform runs none. */
  readonly provisioner: Provisioner | undefined;
  private readonly database: Kysely<PlatformDatabase>;
  private readonly now: () => Date;
  private readonly activity: ActivityService;
  /** Why each cluster is not Healthy, as the latest poll found (kept in memory: it describes what runs now). */
  private readonly statusReasons = new Map<string, string>();
  /** How many times each cluster's processes exited unexpectedly: a poll that saw this change meanwhile is stale. */
  private readonly processExits = new Map<string, number>();
  private healthTimer: NodeJS.Timeout | undefined;
  /** Clusters whose latest access policy could not be delivered; tried again at every health poll. */
  private readonly undeliveredPolicies = new Set<string>();
  private polling: Promise<void> | undefined;

  constructor(private readonly options: ClusterServiceOptions) {
    this.database = options.database;
    this.provisioner = options.provisioner;
    this.now = options.now ?? (() => new Date());
    this.activity = new ActivityService(options.database, this.now);
    this.provisioner?.onProcessExit((exit) => {
      this.processExits.set(exit.clusterId, (this.processExits.get(exit.clusterId) ?? 0) + 1);
      this.recordProcessExit(exit).catch((error: unknown) =>
        this.options.logger.error({ err: error, clusterId: exit.clusterId }, "could not record a process exit"),
      );
    });
  }

  /**
   * Records in the organization's activity log that one of its cluster's processes ended unexpectedly and is being
   * restarted, and logs it: the provisioner's doing, not a client's, so the entry names the provisioner.
   */
  private async recordProcessExit(exit: ClusterProcessExit): Promise<void> {
    this.statusReasons.set(exit.clusterId, describeProcessExit(exit));
    this.options.logger.warn(
      { clusterId: exit.clusterId, process: exit.process, exitCode: exit.exitCode, signal: exit.signal },
      describeProcessExit(exit),
    );
    // Unhealthy at once rather than at the next poll: the restart can come before that poll (the first waits 0.5 s,
    // a poll can wait seconds for a slow gateway), and the status would never have said a process crashed.
    await this.database
      .updateTable("clusters")
      .set({
        status: "Unhealthy",
        ...(exit.process === "gateway" ? { gateway_status: "Unhealthy" } : {}),
      })
      .where("id", "=", exit.clusterId)
      .where("status", "!=", "Creating")
      .execute();
    const row = await this.database
      .selectFrom("clusters")
      .select(["organization_id"])
      .where("id", "=", exit.clusterId)
      .executeTakeFirst();
    if (row === undefined) return;
    await this.activity.record({
      organizationId: row.organization_id,
      service: provisionerActivityService,
      entity: "cluster-process",
      entityId: `${exit.clusterId}/${exit.process}`,
      auditType: "u",
      userId: provisionerActivityService,
    });
  }

  /**
   * The organization's cluster of that id, or undefined when it has none (another organization's cluster is not
   * told apart): the lookup of the resources under `/clusters/{clusterId}`.
   */
  async find(organizationId: string, clusterId: string): Promise<ClusterRecord | undefined> {
    const row = await this.database
      .selectFrom("clusters")
      .select(["id", "organization_id", "name"])
      .where("organization_id", "=", organizationId)
      .where("id", "=", clusterId)
      .executeTakeFirst();
    if (row === undefined) return undefined;
    const links = await this.linksOf(row.id);
    return {
      id: row.id,
      organizationId: row.organization_id,
      name: row.name,
      links: { gateway: links.gateway, management: links.management, oauth: links.oauth },
    };
  }

  /** A cluster's links: where its gateway and management API answer (empty before it was placed), its token URL. */
  private async linksOf(clusterId: string): Promise<ClusterLinks & { console: string }> {
    const endpoints = await this.provisioner?.endpoints(clusterId);
    const issuerUrl = this.options.issuerUrl.replace(/\/+$/, "");
    return {
      gateway: endpoints?.gatewayUrl ?? "",
      management: endpoints?.managementUrl ?? "",
      oauth: `${issuerUrl}/oauth/token`,
      console: `${issuerUrl}/`,
    };
  }

  /** The cluster as the API shows it; 404 when the organization has no cluster of that id. */
  async get(organizationId: string, clusterId: string): Promise<Cluster> {
    const row = await this.row(organizationId, clusterId);
    if (row === undefined) throw notFound("cluster", clusterId);
    return await this.present(row);
  }

  /** The organization's clusters, oldest first. */
  async list(organizationId: string): Promise<Cluster[]> {
    const rows = await this.database
      .selectFrom("clusters")
      .selectAll()
      .where("organization_id", "=", organizationId)
      .orderBy("created_at")
      .orderBy("id")
      .execute();
    return await Promise.all(rows.map((row) => this.present(row)));
  }

  /** The ids of the organization's clusters, oldest first (without the work of presenting each). */
  async clusterIds(organizationId: string): Promise<string[]> {
    const rows = await this.database
      .selectFrom("clusters")
      .select("id")
      .where("organization_id", "=", organizationId)
      .orderBy("created_at")
      .orderBy("id")
      .execute();
    return rows.map((row) => row.id);
  }

  /**
   * Records a cluster and has the provisioner start it; answers at once (status Creating). Every parameter must be
   * one of `GET /clusters/parameters`.
   */
  async create(organizationId: string, ownerId: string, creation: ClusterCreation): Promise<{ clusterId: string }> {
    const plan = planTypes.find((candidate) => candidate.uuid === creation.planTypeId);
    if (plan === undefined) throw unknownParameter("planTypeId", creation.planTypeId, "a plan type");
    const channel = channels.find((candidate) => candidate.uuid === creation.channelId);
    if (channel === undefined) throw unknownParameter("channelId", creation.channelId, "a channel");
    const generation = channel.allowedGenerations.find((candidate) => candidate.uuid === creation.generationId);
    if (generation === undefined) {
      throw unknownParameter("generationId", creation.generationId, `a generation of channel '${channel.name}'`);
    }
    const region = regions.find((candidate) => candidate.uuid === creation.regionId);
    if (region === undefined) throw unknownParameter("regionId", creation.regionId, "a region");
    const provisioner = this.requireProvisioner();
    const clusterId = randomUUID();
    await this.insert({
      id: clusterId,
      organization_id: organizationId,
      name: creation.name,
      description: creation.description ?? null,
      stage_label: creation.stageLabel ?? null,
      plan_type_id: plan.uuid,
      channel_id: channel.uuid,
      generation_id: generation.uuid,
      generation_name: generation.name,
      region_id: region.uuid,
      auto_update: creation.autoUpdate === true ? 1 : 0,
      owner_id: ownerId,
      primary_cluster: 0,
    });
    const specification: ClusterSpecification = { clusterId, organizationId, shape: plan.shape, primary: false };
    try {
      await provisioner.prepare(specification);
      await provisioner.applyAccessPolicy(
        clusterId,
        await this.accessPolicyBuilder({ id: clusterId, organizationId, name: creation.name }),
      );
      await provisioner.launch(specification);
    } catch (error) {
      // Nothing runs: the cluster is not kept half made.
      await provisioner.remove(clusterId).catch(() => undefined);
      await this.database.deleteFrom("clusters").where("id", "=", clusterId).execute();
      throw error;
    }
    this.options.logger.info({ clusterId, organizationId, plan: plan.name }, "cluster created");
    return { clusterId };
  }

  /** Inserts a cluster unless the organization is at its limit (checked again after the insert, for racers). */
  private async insert(
    values: Omit<ClusterTable, "status" | "gateway_status" | "created_at" | "updated_at">,
  ): Promise<void> {
    const limit = this.options.maxClustersPerOrganization;
    const count = async (): Promise<number> => {
      const row = await this.database
        .selectFrom("clusters")
        .select((expression) => expression.fn.countAll<string | number>().as("count"))
        .where("organization_id", "=", values.organization_id)
        .executeTakeFirstOrThrow();
      return Number(row.count);
    };
    const tooMany = new ServiceError(
      "conflict",
      `the organization has ${limit} clusters, the most it may have (setting service.provisioner.maxClustersPerOrganization); delete one first`,
    );
    if ((await count()) >= limit) throw tooMany;
    const timestamp = this.now().toISOString();
    await this.database
      .insertInto("clusters")
      .values({
        ...values,
        status: "Creating",
        gateway_status: "Creating",
        created_at: timestamp,
        updated_at: timestamp,
      })
      .execute();
    if ((await count()) > limit) {
      await this.database.deleteFrom("clusters").where("id", "=", values.id).execute();
      throw tooMany;
    }
  }

  /** Changes a cluster's name, description or stage label. */
  async update(organizationId: string, clusterId: string, change: ClusterChange): Promise<void> {
    const set: Partial<ClusterTable> = { updated_at: this.now().toISOString() };
    if (change.name !== undefined) set.name = change.name;
    if (change.description !== undefined) set.description = change.description;
    if (change.stageLabel !== undefined) set.stage_label = change.stageLabel;
    const result = await this.database
      .updateTable("clusters")
      .set(set)
      .where("organization_id", "=", organizationId)
      .where("id", "=", clusterId)
      .executeTakeFirst();
    if (Number(result.numUpdatedRows) === 0) throw notFound("cluster", clusterId);
  }

  /** Deletes a cluster: its record first (so it is gone for every caller), then its processes and data. */
  async delete(organizationId: string, clusterId: string): Promise<void> {
    if ((await this.find(organizationId, clusterId)) === undefined) throw notFound("cluster", clusterId);
    const provisioner = this.requireProvisioner();
    const result = await this.database
      .deleteFrom("clusters")
      .where("organization_id", "=", organizationId)
      .where("id", "=", clusterId)
      .executeTakeFirst();
    if (Number(result.numDeletedRows) === 0) throw notFound("cluster", clusterId);
    this.statusReasons.delete(clusterId);
    this.processExits.delete(clusterId);
    await provisioner.remove(clusterId);
    for (const hook of this.onClusterDeleted) {
      try {
        await hook({ organizationId, clusterId });
      } catch (error) {
        this.options.logger.error({ err: error, clusterId }, "a deletion hook failed for a deleted cluster");
      }
    }
    this.options.logger.info({ clusterId, organizationId }, "cluster deleted");
  }

  /**
   * Starts a cluster whose processes do not run (its start failed, or it was stopped), or the processes of a running
   * cluster that are stopped (a broker stopped by hand); nothing when everything runs.
   */
  async wake(organizationId: string, clusterId: string): Promise<void> {
    const row = await this.row(organizationId, clusterId);
    if (row === undefined) throw notFound("cluster", clusterId);
    const provisioner = this.requireProvisioner();
    const state = provisioner.state(clusterId);
    if (state === "starting") return;
    if (state === "running" || state === "degraded") {
      const started = (await provisioner.startStopped?.(clusterId)) ?? [];
      if (started.length > 0)
        this.options.logger.info({ clusterId, processes: started }, "stopped processes started again");
      return;
    }
    await provisioner.launch(specificationOf(row));
  }

  /**
   * Restores a cluster from one of its backups into its current shape through the provisioner (stop, restore every
   * broker, start) and resolves once it is ready, having awaited `onRestored` before the previous data is deleted;
   * 404 for a cluster the organization does not have, 409 without a provisioner.
   */
  async restoreFromBackup(
    organizationId: string,
    clusterId: string,
    backupId: bigint,
    target: RestoreTarget,
    onRestored: () => Promise<void>,
  ): Promise<void> {
    const row = await this.row(organizationId, clusterId);
    if (row === undefined) throw notFound("cluster", clusterId);
    await this.requireProvisioner().restore(specificationOf(row), backupId, target, onRestored);
  }

  /**
   * Whether the provisioner holds a committed restore of the cluster whose previous data was not deleted yet (the
   * platform stopped right after the commit); false without a provisioner.
   */
  async restoreCommitted(clusterId: string): Promise<boolean> {
    return (await this.provisioner?.restoreCommitted?.(clusterId)) ?? false;
  }

  /**
   * Moves a cluster to its channel's default generation: the record changes and its processes are started again
   * with this installation's flowplane. 400 when it runs that generation already.
   */
  async upgrade(organizationId: string, clusterId: string): Promise<GenerationUpgrade> {
    const row = await this.row(organizationId, clusterId);
    if (row === undefined) throw notFound("cluster", clusterId);
    const channel = channels.find((candidate) => candidate.uuid === row.channel_id);
    const target: Generation | undefined = channel?.defaultGeneration;
    if (target === undefined) throw invalidRequest(`cluster ${clusterId} follows a channel that no longer exists`);
    if (row.generation_id === target.uuid) {
      throw invalidRequest(`cluster ${clusterId} runs ${target.name} already, the default generation of its channel`);
    }
    const provisioner = this.requireProvisioner();
    // Only from the generation read above: of two upgrades at once, one moves the cluster and restarts it.
    const updated = await this.database
      .updateTable("clusters")
      .set({ generation_id: target.uuid, generation_name: target.name, updated_at: this.now().toISOString() })
      .where("id", "=", clusterId)
      .where("organization_id", "=", organizationId)
      .where("generation_id", "=", row.generation_id)
      .executeTakeFirst();
    if (Number(updated.numUpdatedRows) === 0) {
      throw conflict(`cluster ${clusterId} changed while it was being upgraded (another upgrade); look at it again`);
    }
    await provisioner.stop(clusterId);
    await provisioner.launch(specificationOf(row));
    return {
      cluster: { id: clusterId, name: row.name },
      oldGeneration: { id: row.generation_id, name: row.generation_name },
      newGeneration: { id: target.uuid, name: target.name },
      orgId: organizationId,
    };
  }

  /**
   * Makes sure the organization has its first cluster, the one `flowplane start` runs (created once; an
   * installation of an earlier version has its cluster directory adopted in place by the local provisioner).
   * Returns its id, or undefined when it was deleted since.
   */
  async ensurePrimaryCluster(organizationId: string): Promise<string | undefined> {
    const settingName = `primary-cluster:${organizationId}`;
    const candidateId = randomUUID();
    const inserted = await this.database
      .insertInto("settings")
      .values({ name: settingName, value: candidateId })
      .onConflict((conflict) => conflict.column("name").doNothing())
      .executeTakeFirst();
    if (Number(inserted.numInsertedOrUpdatedRows ?? 0n) > 0) {
      const timestamp = this.now().toISOString();
      const channel = channels[0];
      if (channel === undefined) throw new Error("invariant violated: there is a channel");
      await this.database
        .insertInto("clusters")
        .values({
          id: candidateId,
          organization_id: organizationId,
          name: primaryClusterName,
          description: "The cluster flowplane start runs beside the platform.",
          stage_label: null,
          plan_type_id: defaultPlanType.uuid,
          channel_id: channel.uuid,
          generation_id: channel.defaultGeneration.uuid,
          generation_name: channel.defaultGeneration.name,
          region_id: localRegion.uuid,
          auto_update: 1,
          owner_id: systemOwnerId,
          primary_cluster: 1,
          status: "Creating",
          gateway_status: "Creating",
          created_at: timestamp,
          updated_at: timestamp,
        })
        .execute();
      return candidateId;
    }
    const row = await this.database
      .selectFrom("clusters")
      .select("id")
      .where("organization_id", "=", organizationId)
      .where("primary_cluster", "=", 1)
      .executeTakeFirst();
    return row?.id;
  }

  /**
   * Launches every recorded cluster, each with its access policy delivered first (a restarted platform resumes
   * them), removes what remains of clusters whose deletion a crash interrupted, and starts polling their health.
   */
  async start(): Promise<void> {
    const provisioner = this.requireProvisioner();
    const rows = await this.database
      .selectFrom("clusters")
      .selectAll()
      .where("region_id", "=", localRegion.uuid)
      .execute();
    const known = await this.database.selectFrom("clusters").select("id").execute();
    await provisioner.removeForgotten(new Set(known.map((row) => row.id)));
    for (const row of rows) {
      // Launching the clusters before it can take a while (a put-back waits for the processes of an interrupted
      // restore): one deleted meanwhile is not placed and started again.
      const stillThere = await this.database
        .selectFrom("clusters")
        .select("id")
        .where("id", "=", row.id)
        .executeTakeFirst();
      if (stillThere === undefined) continue;
      const specification = specificationOf(row);
      try {
        // The policy is delivered again before every launch, so the gateway starts with the one the store holds
        // (the first cluster gets its first one here).
        await provisioner.prepare(specification);
        const record = { id: row.id, organizationId: row.organization_id, name: row.name };
        await provisioner.applyAccessPolicy(row.id, await this.accessPolicyBuilder(record));
        await provisioner.launch(specification);
      } catch (error) {
        this.options.logger.error({ err: error, clusterId: row.id }, "could not launch a cluster; wake it to retry");
      }
    }
    this.healthTimer = setInterval(() => {
      if (this.polling !== undefined) return;
      this.polling = this.pollHealth()
        .catch((error: unknown) =>
          logBackgroundFailure(this.options.logger, error, {}, "cluster health polling failed"),
        )
        .finally(() => {
          this.polling = undefined;
        });
    }, this.options.healthCheckIntervalMs);
    this.healthTimer.unref();
  }

  /** Polls every cluster once and records the statuses that changed. */
  async pollHealth(): Promise<void> {
    const provisioner = this.provisioner;
    if (provisioner === undefined) return;
    for (const clusterId of [...this.undeliveredPolicies]) await this.deliverAccessPolicy(clusterId);
    const rows = await this.database
      .selectFrom("clusters")
      .select(["id", "organization_id", "status", "gateway_status"])
      .execute();
    await Promise.all(
      rows.map((row) =>
        this.pollCluster(provisioner, row).catch((error: unknown) =>
          logBackgroundFailure(this.options.logger, error, { clusterId: row.id }, "could not poll a cluster's health"),
        ),
      ),
    );
  }

  /** Polls one cluster and records its status when it changed. */
  private async pollCluster(
    provisioner: Provisioner,
    row: { id: string; organization_id: string; status: string; gateway_status: string },
  ): Promise<void> {
    await provisioner.refresh(row.id);
    const state = provisioner.state(row.id);
    if (state === "running" || state === "degraded") {
      for (const hook of this.onHealthPolled) {
        await hook({ id: row.id, organizationId: row.organization_id }).catch((error: unknown) =>
          this.options.logger.error({ err: error, clusterId: row.id }, "a health poll hook failed"),
        );
      }
    }
    // What the processes are doing, read at one instant right before the probe (the hooks above may have taken a
    // while). A process that exited, or came back, before the poll records what it found makes that stale: the poll
    // is dropped, and the exit's own record (Unhealthy, with its reason) stands until the next poll.
    const exitsBefore = this.processExits.get(row.id) ?? 0;
    const probedState = provisioner.state(row.id);
    const restarting = provisioner.restartingProcess(row.id);
    const endpoints = await provisioner.endpoints(row.id);
    let probe: HealthProbe | undefined;
    if (endpoints !== undefined && probedState !== "stopped" && probedState !== "failed") {
      probe = await probeClusterHealth(endpoints);
    }
    const processesUnchanged =
      (this.processExits.get(row.id) ?? 0) === exitsBefore &&
      provisioner.state(row.id) === probedState &&
      provisioner.restartingProcess(row.id) === restarting;
    if (!processesUnchanged) return;
    const next = deriveClusterStatus(row.status as ClusterStatus, probedState, probe, restarting);
    if (next.reason === undefined) this.statusReasons.delete(row.id);
    else this.statusReasons.set(row.id, next.reason);
    if (next.status === row.status && next.gatewayStatus === row.gateway_status) return;
    // Conditional on the status read, so a cluster deleted or changed meanwhile is left alone.
    await this.database
      .updateTable("clusters")
      .set({ status: next.status, gateway_status: next.gatewayStatus })
      .where("id", "=", row.id)
      .where("status", "=", row.status)
      .execute();
    this.options.logger.info(
      { clusterId: row.id, status: next.status, reason: next.reason },
      `cluster is ${next.status}`,
    );
  }

  /**
   * Delivers a cluster's access policy, as the builder makes it now, to its gateway (after the allowlist, its
   * monitoring or its clients changed). Without a provisioner nothing runs the gateway here, and nothing is
   * delivered; neither for a cluster that no longer exists.
   *
   * A delivery that fails (the policy file cannot be written, say) is logged and tried again at every health poll
   * until it succeeds, rather than thrown: the change that asked for it is stored already, so failing its request
   * would say nothing changed when it did (and lose a monitoring client's password, shown only in that answer).
   */
  async deliverAccessPolicy(clusterId: string): Promise<void> {
    try {
      await this.deliverAccessPolicyNow(clusterId);
      this.undeliveredPolicies.delete(clusterId);
    } catch (error) {
      this.undeliveredPolicies.add(clusterId);
      this.options.logger.error(
        { err: error, clusterId },
        "could not deliver a cluster's access policy; it is delivered again at the next health poll",
      );
    }
  }

  private async deliverAccessPolicyNow(clusterId: string): Promise<void> {
    if (this.provisioner === undefined) return;
    const row = await this.database
      .selectFrom("clusters")
      .select(["id", "organization_id", "name"])
      .where("id", "=", clusterId)
      .executeTakeFirst();
    if (row === undefined) return;
    const policy = await this.accessPolicyBuilder({ id: row.id, organizationId: row.organization_id, name: row.name });
    await this.provisioner.applyAccessPolicy(clusterId, policy);
  }

  /** Stops polling; the provisioner's clusters are stopped by whoever owns the provisioner. */
  async close(): Promise<void> {
    if (this.healthTimer !== undefined) clearInterval(this.healthTimer);
    this.healthTimer = undefined;
    await this.polling;
  }

  private requireProvisioner(): Provisioner {
    if (this.provisioner === undefined) {
      // A conflict rather than 503: the condition lasts until the platform is started otherwise, and clients retry
      // a 503.
      throw new ServiceError(
        "conflict",
        "this platform runs without a provisioner (started with flowplane platform): clusters can be listed here but are started, stopped and deleted only by a platform started with flowplane start",
      );
    }
    return this.provisioner;
  }

  private async row(organizationId: string, clusterId: string): Promise<ClusterTable | undefined> {
    return await this.database
      .selectFrom("clusters")
      .selectAll()
      .where("organization_id", "=", organizationId)
      .where("id", "=", clusterId)
      .executeTakeFirst();
  }

  private async present(row: ClusterTable): Promise<Cluster> {
    const plan = planTypes.find((candidate) => candidate.uuid === row.plan_type_id);
    const channel = channels.find((candidate) => candidate.uuid === row.channel_id);
    const region = regions.find((candidate) => candidate.uuid === row.region_id);
    return {
      uuid: row.id,
      name: row.name,
      ...(row.description === null ? {} : { description: row.description }),
      ...(row.stage_label === null ? {} : { stageLabel: row.stage_label as StageLabel }),
      ownerId: row.owner_id,
      created: row.created_at,
      autoUpdate: row.auto_update === 1,
      channel: { uuid: row.channel_id, name: channel?.name ?? row.channel_id },
      generation: { uuid: row.generation_id, name: row.generation_name },
      region: { uuid: row.region_id, name: region?.name ?? row.region_id },
      planType: { uuid: row.plan_type_id, name: plan?.name ?? row.plan_type_id },
      status: {
        ready: row.status as ClusterStatus,
        gatewayStatus: row.gateway_status as ClusterStatus,
        ...(row.status === "Healthy" || !this.statusReasons.has(row.id)
          ? {}
          : { reason: this.statusReasons.get(row.id) as string }),
      },
      links: await this.linksOf(row.id),
      ipallowlist: await this.allowlistReader(row.organization_id, row.id),
    };
  }
}

/** The provisioner's view of a recorded cluster. */
function specificationOf(row: ClusterTable): ClusterSpecification {
  const plan = planTypes.find((candidate) => candidate.uuid === row.plan_type_id) ?? defaultPlanType;
  return {
    clusterId: row.id,
    organizationId: row.organization_id,
    shape: plan.shape,
    primary: row.primary_cluster === 1,
  };
}

/** A 400 naming a parameter that is not one of `GET /clusters/parameters`. */
function unknownParameter(field: string, value: string, what: string): ServiceError {
  return invalidRequest(`${field} '${value}' is not ${what} of GET /clusters/parameters`, {
    errors: [{ location: `body/${field}`, message: `is not ${what} of GET /clusters/parameters` }],
  });
}
