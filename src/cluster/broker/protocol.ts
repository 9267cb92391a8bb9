/**
 * The requests a gateway sends to a broker over the cluster transport (connecting as a client), and the answers.
 * This file is the contract between `cluster/broker` and `cluster/gateway`; both import it and nothing else of
 * each other. Every value is msgpack-safe (plain objects, strings, numbers, bigints, booleans, null).
 */

/**
 * A backup id as gateway and broker send it (0..2^63 − 1): a number up to 2^53 − 1, as earlier versions send every
 * id, and a bigint (msgpack int64) above. `encodedCheckpointId` and `decodedCheckpointId` (cluster/engine) write and
 * read it; the management port answers either as the exact digits.
 */
export type BackupIdOnWire = number | bigint;

/** A message to publish, as the gateway validated it; the leader adds the publication time when proposing. */
export interface PublishMessageCommand {
  name: string;
  /** Empty when the client sent none. */
  correlationKey: string;
  timeToLiveMs: number;
  messageId?: string;
  variables: Record<string, unknown>;
  tenantId: string;
}

/** A buffered message as a broker reports it. */
export interface MessageView {
  /** The message key as a decimal string (it names its partition in its high bits). */
  key: string;
  partitionId: number;
  name: string;
  correlationKey: string;
  timeToLiveMs: number;
  messageId?: string;
  variables: Record<string, unknown>;
  tenantId: string;
  /** When the leader accepted it, as an ISO-8601 instant. */
  publishedAt: string;
  /** When it expires, as an ISO-8601 instant. */
  expiresAt: string;
}

/** Role of one replica, as its own Raft node reports it. */
export type ReplicaRole = "leader" | "follower" | "inactive";

/** Health of one replica from its own checks: role known, storage writable, not far behind its leader. */
export type ReplicaHealth = "healthy" | "unhealthy" | "dead";

/** What a broker says about one partition replica it hosts. */
export interface ReplicaReport {
  partitionId: number;
  role: ReplicaRole;
  health: ReplicaHealth;
  term: number;
  commitIndex: number;
  appliedIndex: number;
  /** The leader this replica currently follows (its own id when leading), or null when none is known. */
  leaderId: number | null;
  /** Entries held in the replica's log after its latest snapshot (absent from brokers that do not report it). */
  logSizeEntries?: number;
}

/** Where a broker can be reached on the cluster transport. */
export interface BrokerAddress {
  nodeId: number;
  host: string;
  port: number;
}

/** What a broker knows about another broker's liveness. */
export interface BrokerLiveness {
  nodeId: number;
  /** Whether this broker heard from it recently (any message or gossip). */
  reachable: boolean;
  /** When this broker last heard from it, as an ISO-8601 instant, or null when never since it started. */
  lastContactAt: string | null;
}

/** A broker's answer to `describe`. */
export interface BrokerDescription {
  nodeId: number;
  /** The address this broker advertises. */
  host: string;
  port: number;
  version: string;
  /** The cluster configuration this broker holds, as `encodeConfiguration` (cluster/topology) writes it. */
  configuration: string;
  /** Addresses of every broker this broker knows, itself included. */
  brokers: BrokerAddress[];
  /** The replicas this broker hosts. */
  replicas: ReplicaReport[];
  /** Liveness of every other broker this broker knows (added after the first version; absent from older brokers). */
  liveness?: BrokerLiveness[];
  /**
   * True from the version on that applies checkpoint ids above 2^53 − 1 (absent from older brokers, which reject the
   * records carrying them): the coordinator takes such a backup only when every broker says so.
   */
  largeCheckpointIds?: true;
  /** The operation of a cluster change this broker is applying, if any (absent from older brokers). */
  changeProgress?: OperationProgress | null;
}

/**
 * A change of the cluster as the management API received it, validated for shape only: the coordinator translates
 * and plans it against its own configuration (spec/cluster-management.md), since the gateway's view may be stale.
 */
export type ClusterChangeCommand =
  /** `POST /actuator/cluster/brokers`: the body as sent (ids of all brokers of the final cluster). */
  | { kind: "brokers"; body: unknown; replicationFactor?: number; force: boolean }
  /** `PATCH /actuator/cluster`: the body as sent. */
  | { kind: "patch"; body: unknown; force: boolean }
  | { kind: "add-broker"; brokerId: number }
  | { kind: "remove-broker"; brokerId: number }
  | { kind: "join"; brokerId: number; partitionId: number; priority: number }
  | { kind: "leave"; brokerId: number; partitionId: number };

/** One operation of a change as the management API shows it (the spec's operation entry). */
export interface OperationView {
  operation: string;
  brokerId: number;
  partitionId?: number;
  priority?: number;
  brokers?: number[];
}

/** The body of a scale response (spec: "Scale response"), `currentTopology` and `expectedTopology` as brokers. */
export interface PlannedChange {
  changeId: number;
  currentTopology: object[];
  plannedChanges: OperationView[];
  expectedTopology: object[];
}

/** Answer of the coordinator to `cluster-change`. */
export type ClusterChangeResponse =
  | { outcome: "planned"; change: PlannedChange }
  /** The request breaks a rule (400) or conflicts with a change in progress (409); `detail` names the rule. */
  | { outcome: "refused"; status: 400 | 404 | 409; detail: string }
  /** This broker is not the coordinator: a broker with a lower id is reachable; ask it. */
  | { outcome: "not-coordinator"; coordinatorId: number };

/**
 * How far the operation a broker is applying has come: attempts and the last error (a failing operation is retried
 * with backoff), and for operations that move data, the bytes to move, moved so far and the estimated time left.
 */
export interface OperationProgress {
  changeId: number;
  operation: OperationView;
  startedAt: string;
  attempts: number;
  lastError: string | null;
  bytesTotal: number | null;
  bytesMoved: number | null;
  estimatedSecondsLeft: number | null;
}

/** Answer to `cluster-status` and `cluster-cancel`: the configuration as the coordinator holds it. */
export type ClusterStatusResponse =
  | {
      outcome: "status";
      configuration: string;
      /** Why no change may start now because of a backup (brokers of earlier versions send none). */
      blockingBackup?: string | null;
    }
  | { outcome: "refused"; status: 400 | 404 | 409; detail: string }
  | { outcome: "not-coordinator"; coordinatorId: number };

/** The backup requests to the coordinator, with backup ids of type `BackupId`. */
type BackupRequest<BackupId> =
  /** To the coordinator: take backup `backupId` (a checkpoint through every partition's log). */
  | { type: "backup-take"; backupId: BackupId }
  /** To the coordinator: every backup in the backup store, newest first. */
  /**
   * Every backup, newest first. With `summary`, each backup's details hold only the parts that carry its earliest
   * `createdAt` and its latest `lastUpdated` (one or two): a list of every part of every backup of a cluster with
   * many partitions is hundreds of megabytes.
   */
  | { type: "backup-list"; summary?: boolean }
  /** To the coordinator: one backup with its partitions' parts. */
  | { type: "backup-status"; backupId: BackupId }
  /** To the coordinator: remove a backup from the backup store. */
  | { type: "backup-delete"; backupId: BackupId };

/** Requests from a gateway to a broker, as the gateway sends them (backup ids as `BackupIdOnWire`). */
export type BrokerRequest = RequestsWithoutBackupIds | BackupRequest<BackupIdOnWire>;

/** A gateway's request as `parseBrokerRequest` hands it to the broker: backup ids exact, as bigints. */
export type ParsedBrokerRequest = RequestsWithoutBackupIds | BackupRequest<bigint>;

/** The requests from a gateway to a broker that carry no backup id. */
type RequestsWithoutBackupIds =
  | { type: "describe" }
  | { type: "publish-message"; partitionId: number; message: PublishMessageCommand }
  | { type: "get-message"; partitionId: number; key: string }
  /** To the coordinator: plan a change, and record it unless `dryRun`. */
  | { type: "cluster-change"; command: ClusterChangeCommand; dryRun: boolean }
  /** To the coordinator: cancel the change with this id. */
  | { type: "cluster-cancel"; changeId: number }
  /** To the coordinator: its configuration, for `GET /actuator/cluster`. */
  | { type: "cluster-status" };

/** State of a backup as a whole, or of one partition's part of it. */
export type BackupState = "COMPLETED" | "FAILED" | "INCOMPLETE" | "IN_PROGRESS";

/** One partition's part of a backup, as the management API shows it. */
export interface BackupPartitionView {
  partitionId: number;
  /** COMPLETED, FAILED, IN_PROGRESS, or MISSING when no leader of the partition wrote a part. */
  state: "COMPLETED" | "FAILED" | "IN_PROGRESS" | "MISSING";
  /** The broker whose leader replica wrote the part shown; null when there is none. */
  brokerId: number | null;
  failureReason: string | null;
  /** The last log position of the partition in the backup; null when there is no part. */
  checkpointPosition: number | null;
  createdAt: string | null;
  lastUpdated: string | null;
  /** The flowplane version of the broker that wrote the part. */
  brokerVersion: string | null;
  /** Bytes of the part's files; while it is IN_PROGRESS, those written so far (updated every 16 MiB). */
  sizeBytes: number;
}

/** A backup, as the management API shows it. */
export interface BackupView {
  backupId: BackupIdOnWire;
  /** COMPLETED when every partition's part is, FAILED when any is, INCOMPLETE when one is missing, else IN_PROGRESS. */
  state: BackupState;
  /** The first partition's failure or absence, in a sentence; null unless FAILED or INCOMPLETE. */
  failureReason: string | null;
  /** Partitions of the cluster when the backup was taken. */
  partitionCount: number;
  details: BackupPartitionView[];
}

/** Answers of the coordinator to the backup requests that it refuses. */
export type BackupRefusal =
  | {
      outcome: "refused";
      status: 400 | 404 | 409 | 503;
      detail: string;
      /**
       * On a take refused because its id is not above every used one: the highest id the store used (a backup's, a
       * deleted backup's or an attempted take's), so that a caller choosing ids can step over it. Absent otherwise,
       * and from brokers of earlier versions.
       */
      highestUsedBackupId?: BackupIdOnWire;
    }
  | { outcome: "not-coordinator"; coordinatorId: number };

/** Answer to `backup-take`, `backup-status` and `backup-delete`. */
export type BackupResponse = { outcome: "backup"; backup: BackupView } | BackupRefusal;

/** Answer to `backup-list`. */
export type BackupListResponse = { outcome: "backups"; backups: BackupView[] } | BackupRefusal;

/** Answers shared by requests addressed to a partition. */
export type PartitionRedirect =
  /** This broker's replica is not the leader; retry at `leaderId` when known. */
  | { outcome: "not-leader"; leaderId: number | null }
  /** The partition cannot answer now (not hosted here, no leader yet, overloaded, shutting down). */
  | { outcome: "unavailable"; detail: string };

/** Answer to `publish-message`, sent once the record is committed by a quorum and applied. */
export type PublishMessageResponse =
  | { outcome: "published"; key: string; partitionId: number; tenantId: string }
  | { outcome: "rejected"; reason: "duplicate-message-id" | "invalid-record" | "relocating"; detail: string }
  /** The correlation key belongs to another partition since partitions were added: publish it there. */
  | { outcome: "rejected"; reason: "not-owner"; detail: string; ownerPartitionId: number }
  /**
   * The record is in the partition's log, but this replica stopped (or skipped past it with a snapshot) before it
   * could tell whether a quorum committed it: it may or may not take effect, so it must not be retried blindly.
   * `not-leader` and `unavailable`, by contrast, are only answered when the record is certainly not committed.
   */
  | { outcome: "unknown"; detail: string }
  | PartitionRedirect;

/** Answer to `get-message` (a linearizable read on the partition leader). */
export type GetMessageResponse =
  | { outcome: "found"; message: MessageView }
  | { outcome: "not-found" }
  /** The message was relocated to another partition when partitions were added; it answers under `key` there. */
  | { outcome: "moved"; key: string }
  | PartitionRedirect;

/** The response type of each request type. */
export interface BrokerResponses {
  describe: BrokerDescription;
  "publish-message": PublishMessageResponse;
  "get-message": GetMessageResponse;
  "cluster-change": ClusterChangeResponse;
  "cluster-cancel": ClusterStatusResponse;
  "cluster-status": ClusterStatusResponse;
  "backup-take": BackupResponse;
  "backup-list": BackupListResponse;
  "backup-status": BackupResponse;
  "backup-delete": BackupResponse;
}
