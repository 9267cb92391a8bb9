/**
 * Scaling a cluster through the Administration API (`POST /clusters/{clusterId}/scale`): the platform does what the
 * management API cannot do alone. A scale-up needs the new brokers' processes running before the cluster accepts
 * it, so the platform asks the provisioner to start them, waits until they answer, and only then sends the change to
 * the cluster's management API (with a token it signs for itself). When a change has ended, brokers the provisioner
 * still runs but that are no longer members of the cluster's configuration (removed by a completed scale-down, or
 * started for a scale-up that was cancelled or refused) are stopped and their data deleted.
 *
 * Following changes to their end is done at the health polls of the clusters service: a cluster is followed from the
 * change it started until the management API shows no change pending, and every cluster is looked at once after the
 * platform starts, so a change that ended while the platform was down is cleaned up too.
 *
 * Scaling and restoring a cluster exclude each other: no scale request is taken and no broker is stopped while a
 * restore of the cluster runs (it stops and starts every broker itself), and a restore does not start while a scale
 * request is handled or brokers are being stopped (`inProgress`).
 */

import type { Logger } from "pino";
import type { TokenSource } from "../../../client/api.js";
import { brokerHasStarted } from "../../../client/broker-health.js";
import {
  brokerDelta,
  ClusterManagementClient,
  type ClusterPatch,
  type ClusterStatus,
  type ScaleResponse,
} from "../../../client/cluster.js";
import { ApiError } from "../../../client/errors.js";
import type { HttpOptions } from "../../../client/http.js";
import { MAX_BROKER_ID } from "../../../cluster/topology/index.js";
import { conflict, invalidRequest, ServiceError } from "../../../http/errors.js";
import { monotonicNowMs } from "../../../time/monotonic.js";
import type { Provisioner } from "../../provisioner/provisioner.js";
import { type ClusterDirectory, type ClusterSummary, requireCluster } from "../cluster-directory.js";
import { MAX_BROKERS_PER_CLUSTER, MAX_PARTITIONS } from "./limits.js";

/** Highest broker id a change may name (ids need not be contiguous, but they stay small): the cluster's own bound. */
export { MAX_BROKER_ID, MAX_BROKERS_PER_CLUSTER, MAX_PARTITIONS };

/** How long new brokers may take to answer before the scale-up is given up (and they are stopped again). */
const NEW_BROKERS_TIMEOUT_MS = 60_000;

/** How long the cluster may take to hear of new brokers by gossip once they answer (its 400 is retried until then). */
const GOSSIP_TIMEOUT_MS = 30_000;

/** Pause between two checks of the new brokers, and between two attempts while gossip catches up. */
const RETRY_INTERVAL_MS = 250;

/** How long a call to a cluster's management API may take before the platform gives up on it (502). */
const MANAGEMENT_TIMEOUT_MS = 30_000;

/**
 * How long the cleanup at a health poll waits for the cluster's configuration: the poll waits for it, so one cluster
 * that does not answer must not hold up every cluster's status for long.
 */
const CLEANUP_READ_TIMEOUT_MS = 5_000;

/** Largest answer read from a cluster's management API: plans of the largest allowed shape stay far below it. */
const MAX_MANAGEMENT_RESPONSE_BYTES = 8 * 1024 * 1024;

/** Longest part of a cluster's answer repeated in a problem document or a log line. */
const MAX_DETAIL_LENGTH = 1_000;

/** What scaling asks of the provisioner. */
export type ScalingProvisioner = Pick<Provisioner, "brokers" | "addBrokers" | "removeBrokers" | "state">;

/** Options of `ClusterScalingService`. */
export interface ClusterScalingServiceOptions {
  clusters: ClusterDirectory;
  /** Runs the clusters' brokers; absent when the platform runs none (`flowplane platform`). */
  provisioner?: ScalingProvisioner | undefined;
  /** Token source for calls to one cluster's management API (the platform's own tokens for that cluster). */
  tokensFor: (organizationId: string, clusterId: string) => TokenSource;
  logger: Logger;
  /** Transport of the calls to the management APIs (tests). */
  http?: HttpOptions;
  /** Whether a restore of the cluster runs: its brokers are left alone meanwhile. */
  restoreRunning?: (clusterId: string) => boolean;
}

/** 400 naming `body/brokers` when the change would give the cluster more than `MAX_BROKERS_PER_CLUSTER` brokers. */
function refuseTooManyBrokers(patch: ClusterPatch, status: ClusterStatus): void {
  const currentIds = status.brokers.map((broker) => broker.id);
  const { added, removed } = brokerDelta(patch, currentIds);
  const targetCount = currentIds.length + added.length - removed.length;
  if (targetCount > MAX_BROKERS_PER_CLUSTER) {
    const message = `would give the cluster ${targetCount} brokers; a cluster has at most ${MAX_BROKERS_PER_CLUSTER}`;
    throw invalidRequest(`body/brokers ${message}`, { errors: [{ location: "body/brokers", message }] });
  }
}

/** Scales clusters and cleans up after their changes; see the module comment. */
export class ClusterScalingService {
  /** Clusters whose brokers are compared with their configuration at the next health poll, by id. */
  private readonly followed = new Map<string, { organizationId: string }>();
  /** Clusters a scale request is being handled for: their brokers are left alone meanwhile. */
  private readonly scaling = new Set<string>();
  /** Removals of brokers under way, by cluster: a scale request of the cluster waits for its end. */
  private readonly cleanups = new Map<string, Promise<void>>();
  /**
   * Per cluster, what the last poll found to remove (configuration version and broker ids): a removal needs two polls
   * in a row to agree.
   */
  private readonly removalCandidates = new Map<string, string>();
  /** Clusters polled at least once in this process. */
  private readonly polled = new Set<string>();

  constructor(private readonly options: ClusterScalingServiceOptions) {}

  /**
   * Plans (dry run) or starts a change of the cluster's shape and answers the management API's answer. A real
   * scale-up first has the provisioner start the brokers it adds and waits until they answer. 409 when a change is
   * pending or another scale request of the cluster is being handled; 400 (the cluster's reason) when the cluster
   * refuses the change; 502 when its management API fails.
   */
  async scale(
    organizationId: string,
    clusterId: string,
    patch: ClusterPatch,
    options: { dryRun: boolean },
  ): Promise<ScaleResponse> {
    if (patch.brokers?.count !== undefined && (patch.brokers.add !== undefined || patch.brokers.remove !== undefined)) {
      throw invalidRequest("body/brokers takes either count or add/remove, not both", {
        errors: [{ location: "body/brokers", message: "takes either count or add/remove, not both" }],
      });
    }
    const cluster = await requireCluster(this.options.clusters, organizationId, clusterId);
    const client = this.managementClient(organizationId, cluster);
    // A dry run too: a restore stops the cluster's processes, so its plan would be a 502 from a cluster that is down.
    if (this.options.restoreRunning?.(clusterId) === true) {
      throw conflict(`A restore of cluster ${clusterId} is running; scale it once the restore is COMPLETED or FAILED.`);
    }
    if (options.dryRun) {
      // Bounded as the real change is, so a preview never shows a plan the real request refuses.
      refuseTooManyBrokers(patch, await this.callCluster(() => client.status()));
      return await this.callCluster(() => client.patch(patch, { dryRun: true }));
    }
    const provisioner = this.options.provisioner;
    if (provisioner === undefined) {
      throw conflict(
        "this platform runs without a provisioner (started with flowplane platform): it cannot start brokers; scale the cluster through its management API",
      );
    }
    if (this.scaling.has(clusterId)) {
      throw conflict(`A scale request of cluster ${clusterId} is being handled; wait for its answer.`);
    }
    const state = provisioner.state(clusterId);
    if (state !== "running" && state !== "degraded") {
      throw conflict(
        `Cluster ${clusterId} is ${state}: its brokers can be changed only while it runs (wake it first).`,
      );
    }
    this.scaling.add(clusterId);
    try {
      // A cleanup that began before this request ends first: it may be stopping a broker this change adds again.
      await this.cleanups.get(clusterId);
      const status = await this.callCluster(() => client.status());
      if (status.pendingChange !== undefined) {
        throw conflict(
          `Another configuration change [${status.pendingChange.id}] is in progress; wait until it ends or cancel it.`,
        );
      }
      refuseTooManyBrokers(patch, status);
      const { added } = brokerDelta(
        patch,
        status.brokers.map((broker) => broker.id),
      );
      const logger = this.options.logger.child({ clusterId });
      // From here on the cluster is followed: brokers started for a change the cluster then refuses are stopped again.
      this.followed.set(clusterId, { organizationId });
      if (added.length > 0) {
        // The cluster checks the change before any process is started for it: a change it refuses starts nothing.
        await this.callCluster(() => client.patch(patch, { dryRun: true }));
        logger.info({ added }, "starting the brokers a scale-up adds");
        try {
          await provisioner.addBrokers(clusterId, added);
        } catch (error) {
          // The cluster stopped meanwhile, or no ports were free: the provisioner's reason, not the cluster's.
          const reason = error instanceof Error ? error.message : String(error);
          throw conflict(
            `The brokers ${added.join(", ")} could not be started: ${reason.slice(0, MAX_DETAIL_LENGTH)}; nothing was changed.`,
          );
        }
        await this.waitForBrokers(provisioner, clusterId, added);
      }
      const started = await this.sendChange(client, patch, added.length > 0);
      logger.info(
        { changeId: started.changeId, operations: started.plannedChanges.length },
        "scaling change started through the Administration API",
      );
      return started;
    } finally {
      this.scaling.delete(clusterId);
    }
  }

  /** Sends the change; while brokers were just added, the cluster's refusal of them as not reachable is retried. */
  private async sendChange(
    client: ClusterManagementClient,
    patch: ClusterPatch,
    brokersAdded: boolean,
  ): Promise<ScaleResponse> {
    const deadlineMs = monotonicNowMs() + GOSSIP_TIMEOUT_MS;
    // Bounded by the deadline: the coordinator learns of a new broker by gossip a moment after it answers.
    for (;;) {
      try {
        return await client.patch(patch);
      } catch (error) {
        const notYetKnown =
          error instanceof ApiError && error.status === 400 && /not running and reachable/.test(error.detail);
        if (!brokersAdded || !notYetKnown || monotonicNowMs() > deadlineMs) throw problemOf(error);
        await sleep(RETRY_INTERVAL_MS);
      }
    }
  }

  /**
   * Waits until the brokers `nodeIds` have started (their health says RUNNING: they know the cluster's configuration
   * and opened their replicas); 502 when one has not in time.
   */
  private async waitForBrokers(
    provisioner: ScalingProvisioner,
    clusterId: string,
    nodeIds: readonly number[],
  ): Promise<void> {
    const deadlineMs = monotonicNowMs() + NEW_BROKERS_TIMEOUT_MS;
    const brokers = (await provisioner.brokers(clusterId)).filter((broker) => nodeIds.includes(broker.nodeId));
    for (const broker of brokers) {
      // Bounded by the deadline.
      for (;;) {
        if (await brokerHasStarted(broker.managementUrl, 1_000)) break;
        if (monotonicNowMs() > deadlineMs) {
          throw new ServiceError(
            "badGateway",
            `broker ${broker.nodeId} of cluster ${clusterId} did not start within ${NEW_BROKERS_TIMEOUT_MS / 1000} s; nothing was changed and it is stopped again`,
          );
        }
        await sleep(RETRY_INTERVAL_MS);
      }
    }
  }

  /**
   * Why the platform is changing the cluster's brokers now, or undefined: a scale request is being handled, or
   * brokers that left the cluster are being stopped.
   */
  inProgress(clusterId: string): string | undefined {
    if (this.scaling.has(clusterId)) {
      return `A scale request of cluster ${clusterId} is being handled; wait for its answer and for its change to end.`;
    }
    if (this.cleanups.has(clusterId)) {
      return `Brokers that left cluster ${clusterId} are being stopped; try again in a moment.`;
    }
    return undefined;
  }

  /** Forgets a deleted cluster. */
  forget(clusterId: string): void {
    this.followed.delete(clusterId);
    this.removalCandidates.delete(clusterId);
    this.polled.add(clusterId);
  }

  /**
   * Called at every health poll of a running cluster: once a followed cluster has no change pending, stops the
   * brokers the provisioner runs for it that are not members of its configuration, and stops following it. Every
   * cluster is followed from its first poll in this process, so a change that ended while the platform was down is
   * cleaned up as well. Brokers are stopped (and their data deleted) only when two polls in a row found the same
   * configuration version and the same brokers outside it: one answer from a coordinator that lags, or a broker just
   * listed by someone about to send a change, never deletes anything.
   */
  async afterHealthPoll(cluster: { id: string; organizationId: string }): Promise<void> {
    const clusterId = cluster.id;
    if (!this.polled.has(clusterId)) {
      this.polled.add(clusterId);
      if (!this.followed.has(clusterId)) this.followed.set(clusterId, { organizationId: cluster.organizationId });
    }
    const followed = this.followed.get(clusterId);
    const provisioner = this.options.provisioner;
    if (followed === undefined || provisioner === undefined || this.scaling.has(clusterId)) return;
    // A restore stops and starts every broker itself, and drops those that are not members.
    if (this.options.restoreRunning?.(clusterId) === true) return;
    if (this.cleanups.has(clusterId)) return;
    const summary = await this.options.clusters.find(followed.organizationId, clusterId);
    if (summary === undefined) {
      this.followed.delete(clusterId);
      this.removalCandidates.delete(clusterId);
      return;
    }
    let status: ClusterStatus;
    try {
      status = await this.managementClient(followed.organizationId, summary, CLEANUP_READ_TIMEOUT_MS).status();
    } catch {
      // The cluster does not answer now (it may still be starting): asked again at the next poll.
      return;
    }
    if (status.pendingChange !== undefined || this.scaling.has(clusterId)) {
      this.removalCandidates.delete(clusterId);
      return;
    }
    const members = new Set(status.brokers.map((broker) => broker.id));
    const extra = (await provisioner.brokers(clusterId))
      .map((broker) => broker.nodeId)
      .filter((nodeId) => !members.has(nodeId));
    // A scale request that began meanwhile may have started brokers that are not members yet: they are left alone.
    if (this.scaling.has(clusterId)) return;
    // Nor are brokers removed under a restore that began during the waits above: it stops and starts every broker
    // itself. From this check to the removal's claim below nothing waits, so no restore can start in between.
    if (this.options.restoreRunning?.(clusterId) === true) return;
    // A configuration without brokers is no configuration the cluster answers when it runs: nothing is touched then.
    if (extra.length === 0 || members.size === 0) {
      this.followed.delete(clusterId);
      this.removalCandidates.delete(clusterId);
      return;
    }
    const observation = `${status.version}:${extra.join(",")}`;
    if (this.removalCandidates.get(clusterId) !== observation) {
      // Seen once: acted upon only if the next poll sees the same.
      this.removalCandidates.set(clusterId, observation);
      return;
    }
    this.removalCandidates.delete(clusterId);
    this.followed.delete(clusterId);
    this.options.logger.info(
      { clusterId, brokers: extra },
      "stopping brokers that are not members of the cluster's configuration and deleting their data",
    );
    const removal = provisioner.removeBrokers(clusterId, extra);
    const settled = removal.then(
      () => undefined,
      () => undefined,
    );
    this.cleanups.set(clusterId, settled);
    try {
      await removal;
    } catch (error) {
      // Tried again at the next polls.
      this.followed.set(clusterId, followed);
      throw error;
    } finally {
      if (this.cleanups.get(clusterId) === settled) this.cleanups.delete(clusterId);
    }
  }

  private managementClient(
    organizationId: string,
    cluster: ClusterSummary,
    timeoutMs = MANAGEMENT_TIMEOUT_MS,
  ): ClusterManagementClient {
    if (cluster.links.management === "") {
      throw conflict(`Cluster ${cluster.id} has not been placed yet; wait until it is Healthy.`);
    }
    return new ClusterManagementClient({
      baseUrl: cluster.links.management,
      tokenProvider: this.options.tokensFor(organizationId, cluster.id),
      http: {
        timeoutMs,
        maxResponseBytes: MAX_MANAGEMENT_RESPONSE_BYTES,
        retry: { maxRetries: 0 },
        ...this.options.http,
      },
    });
  }

  /** Calls the cluster, turning its failures into the Administration API's problems (`problemOf`). */
  private async callCluster<Result>(call: () => Promise<Result>): Promise<Result> {
    try {
      return await call();
    } catch (error) {
      throw problemOf(error);
    }
  }
}

/**
 * A failed call to a cluster as the Administration API's problem: what the cluster refuses because of the request
 * (400, 409) keeps its reason; anything else is the cluster's trouble, a 502.
 */
function problemOf(error: unknown): ServiceError {
  if (error instanceof ApiError) {
    const detail = error.detail.slice(0, MAX_DETAIL_LENGTH);
    if (error.status === 400) return new ServiceError("invalidRequest", `The cluster refused the change: ${detail}`);
    if (error.status === 409) return conflict(detail);
    return new ServiceError("badGateway", `The cluster's management API answered ${error.status}: ${detail}`);
  }
  if (error instanceof ServiceError) return error;
  const message = error instanceof Error ? error.message : String(error);
  return new ServiceError(
    "badGateway",
    `The cluster's management API could not be reached: ${message.slice(0, MAX_DETAIL_LENGTH)}`,
  );
}

function sleep(durationMs: number): Promise<void> {
  return new Promise((resolveSleep) => setTimeout(resolveSleep, durationMs));
}
