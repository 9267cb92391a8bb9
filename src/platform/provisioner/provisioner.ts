/**
 * What the platform asks of a provisioner: run a cluster's brokers and gateway somewhere, stop them, remove their
 * data, tell where the cluster answers, and deliver its access policy beside its gateway. The Administration API
 * talks only to this interface, so a provisioner of another kind (a StatefulSet per cluster on Kubernetes, with the
 * policy in a mounted ConfigMap) fits without changing the API. Health is not the provisioner's business: the
 * platform polls the management URL the provisioner names (health-monitor.ts), wherever the cluster runs.
 */
import type { AccessPolicy } from "../../auth/access-policy.js";

/** The initial shape of a cluster: brokers, partitions and replication factor. */
export interface ClusterShape {
  readonly brokers: number;
  readonly partitions: number;
  readonly replicationFactor: number;
}

/** What a provisioner needs to know to run a cluster. */
export interface ClusterSpecification {
  readonly clusterId: string;
  readonly organizationId: string;
  /** The shape of the cluster's first start; later starts keep the shape scaling gave it. */
  readonly shape: ClusterShape;
  /**
   * Whether this is the cluster `flowplane start` runs: a provisioner may give it the operator's configured
   * addresses (the local one runs it in `<data>/cluster` at the configured gateway and management ports).
   */
  readonly primary: boolean;
}

/**
 * The shape a cluster is restored into: the cluster as it is before the restore, which scaling may have changed since
 * its first start (its brokers, partitions, replicas and replication factor), so that restoring it keeps them.
 */
export interface RestoreTarget {
  /** The brokers of the cluster's configuration, by node id: every one is restored and must be one the provisioner runs. */
  readonly brokerIds: readonly number[];
  /**
   * The cluster's configuration document as its management API answers it (`GET /actuator/cluster`, JSON text, no
   * change pending): the restored brokers host the partitions it gives them and start with it.
   */
  readonly configurationDocument: string;
}

/** Where a cluster answers. */
export interface ClusterEndpoints {
  /** Base URL of the gateway's REST API (`/v2/...`). */
  readonly gatewayUrl: string;
  /** Base URL of the gateway's management API (`/actuator/...`). */
  readonly managementUrl: string;
}

/**
 * Whether the provisioner runs a cluster's processes: `degraded` when it runs them but some ended unexpectedly and
 * are being restarted.
 */
export type ProvisionedState = "starting" | "running" | "degraded" | "stopped" | "failed";

/** A broker a provisioner runs for a cluster. */
export interface ProvisionedBroker {
  readonly nodeId: number;
  /**
   * Base URL of the broker's own management API. Its liveness answers 200 as soon as it listens, before the broker
   * has started; its `/actuator/health` says `RUNNING` in the `broker` component once it has (`brokerHasStarted`).
   */
  readonly managementUrl: string;
}

/** A process of a cluster that ended without being asked to; the provisioner restarts it itself. */
export interface ClusterProcessExit {
  readonly clusterId: string;
  /** The process: `gateway` or `broker <node id>`. */
  readonly process: string;
  /** Its exit code, or null when a signal ended it. */
  readonly exitCode: number | null;
  /** The signal that ended it, or null. */
  readonly signal: string | null;
  /** When it is started again. */
  readonly restartInMs: number;
  /** Automatic restarts of it so far, this one included. */
  readonly restarts: number;
}

/** Runs clusters; see the module comment. */
export interface Provisioner {
  /** Name of the region this provisioner serves (`local` for the built-in one). */
  readonly region: string;
  /**
   * Records the cluster's place (where it runs, its addresses) without starting it; idempotent. After it, the
   * cluster's endpoints are known and its access policy can be delivered before its gateway starts.
   */
  prepare(specification: ClusterSpecification): Promise<void>;
  /**
   * Starts the cluster's brokers and gateway (allocating its place on the first launch) and resolves once they
   * were started, not once they are ready. Launching a cluster that runs already does nothing.
   */
  launch(specification: ClusterSpecification): Promise<void>;
  /**
   * Restores the cluster from its backup `backupId` into its current shape `target`: stops it, restores every broker
   * of `target`, starts it, and resolves once it is ready. The previous data is kept until then; on failure it is put
   * back and the cluster started again before the error (naming the reason) is thrown. Once the restored cluster is
   * ready and its previous data can no longer come back, `onRestored` is awaited (the caller records the restore as
   * done), then the previous data is deleted; an error after that point (`onRestored`'s included) leaves the restored
   * cluster running, and when `onRestored` throws, `restoreCommitted` answers true until the cluster's next launch.
   * Throws without stopping the cluster when `target` names a broker the provisioner does not run.
   */
  restore(
    specification: ClusterSpecification,
    backupId: bigint,
    target: RestoreTarget,
    onRestored?: () => Promise<void>,
  ): Promise<void>;
  /**
   * Whether a restore of the cluster was committed (its restored data stays) but its previous data not yet deleted:
   * the platform stopped in between. True only until the cluster's next launch, which deletes that data.
   */
  restoreCommitted?(clusterId: string): Promise<boolean>;
  /** Stops the cluster's processes and keeps its data. */
  stop(clusterId: string): Promise<void>;
  /** Stops the cluster's processes and removes its data and everything recorded about its place. */
  remove(clusterId: string): Promise<void>;
  /**
   * Brings what is recorded about the cluster's place up to date with what runs (the local provisioner records the
   * brokers' ports after a scaling change added or removed brokers); called at every health poll.
   */
  refresh(clusterId: string): Promise<void>;
  /** The brokers the provisioner runs (or starts) for the cluster, by node id; empty before its first launch. */
  brokers(clusterId: string): Promise<ProvisionedBroker[]>;
  /**
   * Starts brokers `nodeIds` of the running cluster beside its others, each with empty data (ids it runs already
   * are left alone), for a scaling change that adds them. Resolves once they were started, not once they are
   * ready; throws when the cluster does not run.
   */
  addBrokers(clusterId: string, nodeIds: readonly number[]): Promise<void>;
  /**
   * Stops brokers `nodeIds` of the running cluster and deletes their data: brokers that left the cluster's
   * configuration (a completed scale-down) or never joined it (a cancelled or refused scale-up). Ids it does not
   * run are ignored. Resolves once they have stopped and their data is gone, so the same ids can be added again
   * right after; throws when the cluster does not run.
   */
  removeBrokers(clusterId: string, nodeIds: readonly number[]): Promise<void>;
  /**
   * Starts the processes of a running cluster that are stopped (stopped by hand, or crashed for good) and answers
   * their names; nothing when the cluster does not run.
   */
  startStopped?(clusterId: string): Promise<string[]>;
  /** Whether the cluster's processes run. */
  state(clusterId: string): ProvisionedState;
  /** The latest unexpected end of one of the cluster's processes, while it is being restarted; undefined otherwise. */
  restartingProcess(clusterId: string): ClusterProcessExit | undefined;
  /** Registers who hears of every process that ended unexpectedly (the platform records it in the activity log). */
  onProcessExit(listener: (exit: ClusterProcessExit) => void): void;
  /** Where the cluster answers, once it has a place; undefined before its first launch. */
  endpoints(clusterId: string): Promise<ClusterEndpoints | undefined>;
  /**
   * Delivers the cluster's access policy to its gateway (atomically: the gateway reads either the old or the new
   * document, never a part). May be called before the first launch: the gateway then starts with it.
   */
  applyAccessPolicy(clusterId: string, policy: AccessPolicy): Promise<void>;
  /**
   * Removes what the provisioner still holds of clusters the platform no longer knows: a deletion that a crash
   * interrupted after the cluster's record was gone. Only places the provisioner recorded itself are touched.
   */
  removeForgotten(knownClusterIds: ReadonlySet<string>): Promise<void>;
  /** Stops every cluster's processes (the platform is shutting down); their data stays. */
  close(): Promise<void>;
}
