/**
 * The broker: one process (or, in tests, one object) that hosts partition replicas, keeps the cluster configuration
 * and spreads it by gossip, tracks which other brokers are reachable, serves the gateway's requests
 * (`protocol.ts`) and the other brokers' (`peer-requests.ts`), and exposes health and metrics on its management port.
 *
 * One ClusterTransport carries everything between brokers: Raft messages routed by partition id, gossip, and
 * requests. Gateways connect to the same transport as clients.
 *
 * Starting, a broker first asks its contact points what the cluster looks like (discovery.ts) and only then opens
 * replicas: the configuration it persisted may be stale, and a broker without one must not invent one while a
 * running cluster could tell it. Which partitions it hosts then changes at runtime, through the operations of
 * cluster changes; the replicas come and go in a ReplicaHost.
 */
import type { Logger } from "pino";
import type { HttpServer } from "../../http/server.js";
import { steadyEpochMs } from "../../time/monotonic.js";
import { BackupActivity } from "../backup/backup-activity.js";
import type { BackupStore } from "../backup/store.js";
import { MAX_TIMESTAMP_MS } from "../engine/index.js";
import { type Member, type Message, StorageCorruptionError, UnerasedWriteError } from "../raft/index.js";
import type { StorageEnvironment } from "../raft/storage/environment.js";
import {
  AbsorbedGossip,
  type AcceptAnswer,
  type AcceptorState,
  type ClusterConfiguration,
  ConfigurationDecodeError,
  decodeConfiguration,
  encodeConfiguration,
  gossipDigest,
  INITIAL_CONFIGURATION_VERSION,
  type MergeResult,
  mergeConfigurations,
  type PrepareAnswer,
  partitionsOf,
  replicasOf,
} from "../topology/index.js";
import { ClusterTransport, RefusalLog, type RequestSender, TransportClient } from "../transport/index.js";
import { BackupCoordinator, failAbandonedParts, type LargeCheckpointIdSupport } from "./backups.js";
import { boundedReason } from "./bounded-reason.js";
import { type BrokerMessage, type GossipedAddress, parseBrokerMessage, parseBrokerRequest } from "./broker-messages.js";
import { ChangeAcceptor } from "./change-acceptor.js";
import { ChangeExecutor } from "./change-executor.js";
import { type ClockOffsets, ClusterClock } from "./cluster-clock.js";
import { ChangeCoordinator } from "./coordinator.js";
import { type DiscoveryResult, discoverCluster } from "./discovery.js";
import {
  claimDataDirectory,
  holdsInterruptedRestore,
  InterruptedRestoreError,
  openStorageEnvironment,
  persistConfiguration,
  readChangeAcceptance,
  readPersistedConfiguration,
} from "./files.js";
import { type BrokerMetrics, createBrokerMetrics, type ManagementSource, startManagementServer } from "./management.js";
import { bufferedMessagesRefusal } from "./message-memory.js";
import { askPartitionLeader, type ChangeContext, pause } from "./operations.js";
import { type BrokerOptions, firstConfiguration, initialDistribution } from "./options.js";
import {
  type MessageClock,
  type PartitionReplica,
  type PartitionReplicaOptions,
  type ReplicaClock,
  systemClock,
} from "./partition-replica.js";
import { answerPartitionRequest } from "./partition-requests.js";
import {
  type ClusterConfigurationAnswer,
  isPeerRequestType,
  type PeerMessageOnWire,
  type PeerRequest,
  type PeerResponses,
  parseAcceptAnswer,
  parseClusterConfigurationAnswer,
  parsePeerRequest,
  parsePrepareAnswer,
  peerAnswerFromWire,
  peerMessageOnWire,
} from "./peer-requests.js";
import type {
  BrokerAddress,
  BrokerDescription,
  BrokerLiveness,
  BrokerResponses,
  GetMessageResponse,
  ParsedBrokerRequest,
  PublishMessageResponse,
  ReplicaReport,
} from "./protocol.js";
import { inactiveReplicaReport, ReplicaHost } from "./replica-host.js";

/** An answer as it goes out on the transport: the gateway's as they are, the peers' with encoded checkpoint ids. */
type BrokerResponse = BrokerResponses[keyof BrokerResponses] | PeerMessageOnWire<PeerResponses[keyof PeerResponses]>;

/** How often the middle of the brokers' clocks (the messages' times) is worked out again from their offsets. */
const CLOCK_OFFSETS_REFRESH_MS = 100;

/** How far another broker's clock may be from this one's before the broker warns about it. */
const DISTANT_CLOCK_WARNING_MS = 10_000;

/** Interval at which a closing broker checks whether its in-flight proposals finished. */
const SHUTDOWN_POLL_MS = 10;
/** How often a broker tries again to mark the backup parts its previous process left in progress FAILED. */
const ABANDONED_PARTS_RETRY_MS = 30_000;

/** Longest wait for one contact point's answer during discovery. */
const DISCOVERY_REQUEST_TIMEOUT_MS = 1_000;

/** Pause between two discovery rounds. */
const DISCOVERY_RETRY_INTERVAL_MS = 200;

/**
 * How long a broker that persisted a configuration asks its contact points for a newer one before it starts with its
 * own: long enough for brokers started together to answer each other, short enough that a broker restarted alone
 * (the others down) starts soon.
 */
const RESTART_DISCOVERY_TIMEOUT_MS = 3_000;

/**
 * How long a founding broker without a configuration waits for its contact points before it takes the cluster's
 * first configuration as its own (the contact points that do answer, all still starting, shorten it).
 */
const FIRST_START_DISCOVERY_TIMEOUT_MS = 10_000;

/** How often the change executor looks at the configuration when nothing told it to. */
const CHANGE_POLL_INTERVAL_MS = 500;

/**
 * How long the coordinator waits for another broker's configuration before it decides a cancel without it: well
 * within the gateway's default wait for the coordinator (10 s).
 */
const CONFIGURATION_REQUEST_TIMEOUT_MS = 2_000;

/**
 * How long the coordinator waits for a member's answer to one phase of accepting a change (a promise or an
 * acceptance, each one synced file write): the gathering (2 s) and two attempts of up to three rounds of requests
 * (prepare, the abstaining members' second prepare, accept) stay below the gateway's default wait (10 s).
 */
const ACCEPTANCE_REQUEST_TIMEOUT_MS = 1_000;

/** The first pause after a failed attempt at an operation, and the longest. */
const OPERATION_RETRY_BACKOFF_MS = 500;
const MAX_OPERATION_RETRY_BACKOFF_MS = 30_000;

/** The first pause before a failed replica is opened again, and the longest. */
const REPLICA_RESTART_BACKOFF_MS = 1_000;
const MAX_REPLICA_RESTART_BACKOFF_MS = 60_000;

/** How long the coordinator waits for each broker's `describe` answer before a backup id above 2^53 − 1. */
const DESCRIBE_TIMEOUT_MS = 2_000;

/** A running broker; create it with `Broker.start`. */
export class Broker {
  readonly nodeId: number;
  private readonly options: BrokerOptions;
  private readonly logger: Logger;
  /** Malformed messages are logged at most once a minute per sender: a peer sending them in a loop must not fill the disk. */
  private readonly malformedMessageLog: RefusalLog<"malformed-message">;
  private readonly transport: ClusterTransport<unknown, unknown, BrokerResponse>;
  /** Asks contact points, whose node ids are not known yet, for the cluster configuration. */
  private readonly contactClient: TransportClient<PeerRequest, unknown>;
  private readonly replicas: ReplicaHost;
  /** The one storage environment of every replica hosted here; opened with the replicas, closed after them. */
  private environment: StorageEnvironment | null = null;
  /** The storage being opened again after it failed, which every replica restarting meanwhile waits for. */
  private storageRecovery: Promise<void> | null = null;
  private readonly addresses = new Map<number, GossipedAddress>();
  /**
   * When each broker was last heard from, on the monotonic clock: liveness measures how long ago, which a step of the
   * wall clock (an NTP correction) must not change (a step back made a dead broker look alive for as long as the step).
   */
  private readonly lastContactMs = new Map<number, number>();
  /** Gossip whose merge would give back the configuration this broker holds, skipped (see `AbsorbedGossip`). */
  private readonly absorbedGossip = new AbsorbedGossip();
  /** The brokers' clocks, from their gossip: messages are stamped and expire by the middle of them. */
  private readonly clusterClock = new ClusterClock();
  private readonly wallClockMs: () => number;
  /** The middle of the brokers' clocks (see `messageClock`) and when it was worked out, on the monotonic clock. */
  private clockOffsets: { offsets: ClockOffsets; atMs: number } = {
    offsets: { expiryMs: 0, publicationMs: 0 },
    atMs: Number.NEGATIVE_INFINITY,
  };
  /** Peers whose clock this broker last reported as far from its own (so it warns once per crossing). */
  private readonly peersWithDistantClocks = new Set<number>();
  /** What the replicas run on: the system's timers and this broker's wall clock (unless a test gives one). */
  private readonly replicaClock: ReplicaClock;
  /** The times the replicas stamp publications with and expire messages by: the middle of the brokers' clocks. */
  private readonly messageClock: MessageClock;
  private readonly metrics: BrokerMetrics;
  private readonly managementSource: ManagementSource;
  private readonly releaseDataDirectory: () => Promise<void>;
  /** This broker's wall clock at its start: its incarnation, which orders the addresses gossiped for it. */
  private readonly startedAtMs: number;
  /** Null until the broker knows the cluster's configuration (while it discovers it at start). */
  private configurationValue: ClusterConfiguration | null;
  private persistence: Promise<void> = Promise.resolve();
  private gossipTimer: NodeJS.Timeout | null = null;
  private managementServer: HttpServer | null = null;
  private managementUrlValue = "";
  private ownAddress: GossipedAddress;
  private readonly stopping = new AbortController();
  private readonly executor: ChangeExecutor;
  private readonly changeContext: ChangeContext;
  private readonly coordinator: ChangeCoordinator;
  private readonly acceptor: ChangeAcceptor;
  private readonly backups: BackupCoordinator;
  /** The backup parts this broker's replicas are writing; every replica defers its snapshots while there are any. */
  private readonly backupActivity = new BackupActivity();
  private closing = false;
  private closed: Promise<void> | null = null;
  /** What the start is doing (the management port says so), or null once the broker has started. */
  private startingStep: string | null = "listening on the cluster port";

  private constructor(
    options: BrokerOptions,
    persisted: ClusterConfiguration | null,
    acceptance: AcceptorState | null,
    releaseDataDirectory: () => Promise<void>,
  ) {
    this.options = options;
    this.nodeId = options.nodeId;
    this.logger = options.logger.child({ broker: options.nodeId });
    this.malformedMessageLog = new RefusalLog(this.logger);
    this.wallClockMs = options.wallClockMs ?? Date.now;
    this.startedAtMs = this.wallClockMs();
    this.replicaClock = options.replicaClock ?? { ...systemClock, now: () => this.wallClockMs() };
    this.messageClock = {
      publicationNowMs: () => this.clusterTimeMs(this.currentClockOffsets().publicationMs),
      expiryNowMs: () => this.clusterTimeMs(this.currentClockOffsets().expiryMs),
    };
    this.configurationValue = persisted;
    this.acceptor = new ChangeAcceptor(options.dataDirectory, acceptance, () => this.configuration.version);
    this.releaseDataDirectory = releaseDataDirectory;
    this.transport = new ClusterTransport({
      nodeId: options.nodeId,
      host: options.host,
      port: options.clusterPort,
      credentials: options.clusterCredentials,
      logger: this.logger,
    });
    this.contactClient = new TransportClient({
      maxConnections: 64,
      credentials: options.clusterCredentials,
      logger: this.logger,
    });
    this.ownAddress = { nodeId: options.nodeId, host: options.advertisedHost, port: 0, incarnation: this.startedAtMs };
    this.replicas = new ReplicaHost({
      replicaOptions: (partitionId, bootstrap, onFailure) => this.replicaOptions(partitionId, bootstrap, onFailure),
      logger: this.logger,
      restartBackoffMs: REPLICA_RESTART_BACKOFF_MS,
      maxRestartBackoffMs: MAX_REPLICA_RESTART_BACKOFF_MS,
      beforeRestart: () => this.recoverStorageIfFailed(),
    });
    const source: ManagementSource = {
      nodeId: options.nodeId,
      replicas: () => this.replicaReports(),
      deadReason: (partitionId) => {
        const reason = this.replicas.deadReason(partitionId);
        return reason === null ? null : boundedReason(reason);
      },
      logSizes: () =>
        new Map(this.replicas.running().map((replica) => [replica.partitionId, replica.logSizeEntries()])),
      bufferedMessages: () =>
        new Map(this.replicas.running().map((replica) => [replica.partitionId, replica.bufferedMessages()])),
      maxBufferedMessageBytes: options.maxBufferedMessageBytes,
      peerReachability: () => new Map(this.liveness().map((peer) => [peer.nodeId, peer.reachable])),
      closing: () => this.closing,
      startingStep: () => this.startingStep,
    };
    this.managementSource = source;
    this.metrics = createBrokerMetrics(source);
    const context: ChangeContext = {
      requestLocal: (request) => this.requestLocal(request),
      nodeId: options.nodeId,
      logger: this.logger,
      heartbeatIntervalMs: options.heartbeatIntervalMs,
      electionTimeoutMs: options.electionTimeoutMs,
      replicas: this.replicas,
      configuration: () => this.configuration,
      merge: async (configuration) => {
        await this.mergeConfiguration(configuration);
      },
      isReachable: (nodeId) => this.isReachable(nodeId),
      requestPeer: (nodeId, request, timeoutMs) => this.requestPeer(nodeId, request, timeoutMs),
      now: () => new Date().toISOString(),
    };
    this.changeContext = context;
    this.executor = new ChangeExecutor(context, {
      pollIntervalMs: CHANGE_POLL_INTERVAL_MS,
      retryBackoffMs: OPERATION_RETRY_BACKOFF_MS,
      maxRetryBackoffMs: MAX_OPERATION_RETRY_BACKOFF_MS,
      onOperationCompleted: (operation, durationMs) =>
        this.metrics.observeOperation(operation.operation, durationMs / 1000),
    });
    this.backups = new BackupCoordinator({
      nodeId: options.nodeId,
      logger: this.logger,
      store: options.backupStore ?? null,
      configuration: () => this.configuration,
      isReachable: (nodeId) => this.isReachable(nodeId),
      checkpoint: async (partitionId, checkpointId) => {
        const attempts = { uncertain: false };
        const answer = await askPartitionLeader(
          context,
          { type: "partition-checkpoint", partitionId, checkpointId },
          attempts,
        );
        return answer === null ? null : { answer, afterUncertainAttempt: attempts.uncertain };
      },
      largeCheckpointIdSupport: (brokerIds) => this.largeCheckpointIdSupport(brokerIds),
      nowMs: () => Date.now(),
      monotonicNowMs: () => performance.now(),
      flowplaneVersion: options.version,
    });
    this.coordinator = new ChangeCoordinator({
      nodeId: options.nodeId,
      logger: this.logger,
      partitionScalingEnabled: options.partitionScalingEnabled,
      configuration: () => this.configuration,
      merge: async (configuration) => (await this.mergeConfiguration(configuration)).configuration,
      configurationOf: (brokerId) => this.configurationHeldBy(brokerId),
      prepareChange: (brokerId, version, ballot, othersHoldNothing) =>
        this.askAcceptor(brokerId, {
          type: "change-prepare",
          version,
          ballot,
          ...(othersHoldNothing === true ? { othersHoldNothing } : {}),
        }),
      acceptChange: (brokerId, version, ballot, configuration) =>
        this.askAcceptor(brokerId, { type: "change-accept", version, ballot, configuration }),
      isReachable: (nodeId) => this.isReachable(nodeId),
      knownBrokers: () => [...this.addresses.keys()],
      now: () => new Date().toISOString(),
      holdBackups: () => this.backups.holdForChange(),
      largeBackupIdProblem: (brokerIds) => this.backups.largeBackupIdProblem(brokerIds),
    });
  }

  /**
   * Starts a broker: validates the partitioning, claims the data directory (`broker.pid`), listens on the cluster
   * port, learns the cluster configuration (its own persisted one, a newer one from its contact points, or the first
   * configuration on a cluster's first start), opens the replicas it hosts, and starts gossip and the management
   * port. Throws ConfigurationError for invalid sizes or a bad FIXED scheme, DataDirectoryInUseError when another
   * live broker holds the directory.
   */
  static async start(options: BrokerOptions): Promise<Broker> {
    initialDistribution(options);
    const release = await claimDataDirectory(options.dataDirectory);
    let broker: Broker | null = null;
    try {
      if (await holdsInterruptedRestore(options.dataDirectory))
        throw new InterruptedRestoreError(options.dataDirectory);
      const persisted = await readPersistedConfiguration(options.dataDirectory);
      const acceptance = await readChangeAcceptance(options.dataDirectory);
      broker = new Broker(options, persisted, acceptance, release);
      await broker.open();
      return broker;
    } catch (error) {
      // Undo what was started; the original error is what the caller needs to see.
      try {
        if (broker !== null) await broker.close();
        else await release();
      } catch (cleanupError) {
        options.logger.error({ err: cleanupError }, "cleanup after a failed broker start failed");
      }
      throw error;
    }
  }

  /** The address other brokers and gateways reach this broker's cluster transport at. */
  get clusterAddress(): BrokerAddress {
    return { nodeId: this.nodeId, host: this.ownAddress.host, port: this.ownAddress.port };
  }

  /** Base URL of the management server, e.g. `http://127.0.0.1:9700`. */
  get managementUrl(): string {
    return this.managementUrlValue;
  }

  /** The broker's data directory. */
  get dataDirectory(): string {
    return this.options.dataDirectory;
  }

  /** The cluster configuration this broker holds. */
  get configuration(): ClusterConfiguration {
    if (this.configurationValue === null) {
      throw new Error(`broker ${this.nodeId} does not know the cluster configuration yet`);
    }
    return this.configurationValue;
  }

  /** The replica of `partitionId` hosted here, if any (tests and operators). */
  replica(partitionId: number): PartitionReplica | undefined {
    return this.replicas.get(partitionId);
  }

  /** Partitions of which this broker's storage holds any data (its replicas', and leftovers of ones it deleted). */
  storedPartitions(): number[] {
    return this.environment?.scopes() ?? [];
  }

  /**
   * Reports of every hosted replica (dead ones included), by ascending partition id. While the broker starts, the
   * partitions it hosts whose replicas are not open yet are reported too, inactive and unhealthy: they do not serve.
   */
  replicaReports(): ReplicaReport[] {
    const reports = this.replicas.reports();
    const configuration = this.configurationValue;
    if (this.startingStep === null || configuration === null) return reports;
    const reported = new Set(reports.map((report) => report.partitionId));
    for (const hosted of partitionsOf(configuration, this.nodeId)) {
      if (!reported.has(hosted.partitionId)) reports.push(inactiveReplicaReport(hosted.partitionId, "unhealthy"));
    }
    return reports.sort((left, right) => left.partitionId - right.partitionId);
  }

  /** Liveness of every other known broker, members of the configuration or not (a broker waiting to be added). */
  liveness(): BrokerLiveness[] {
    const nowMs = performance.now();
    const wallNowMs = Date.now();
    const timeoutMs = this.livenessTimeoutMs();
    return [...this.addresses.keys()]
      .filter((nodeId) => nodeId !== this.nodeId)
      .sort((left, right) => left - right)
      .map((nodeId) => {
        const lastMs = this.lastContactMs.get(nodeId);
        return {
          nodeId,
          reachable: lastMs !== undefined && nowMs - lastMs <= timeoutMs,
          lastContactAt: lastMs === undefined ? null : new Date(wallNowMs - (nowMs - lastMs)).toISOString(),
        };
      });
  }

  /** Whether broker `nodeId` (this one included) was heard from recently. */
  isReachable(nodeId: number): boolean {
    if (nodeId === this.nodeId) return true;
    const lastMs = this.lastContactMs.get(nodeId);
    return lastMs !== undefined && performance.now() - lastMs <= this.livenessTimeoutMs();
  }

  /** What `describe` answers. */
  describe(): BrokerDescription {
    return {
      nodeId: this.nodeId,
      host: this.ownAddress.host,
      port: this.ownAddress.port,
      version: this.options.version,
      configuration: encodeConfiguration(this.configuration),
      brokers: [...this.addresses.values()]
        .sort((left, right) => left.nodeId - right.nodeId)
        .map(({ nodeId, host, port }) => ({ nodeId, host, port })),
      replicas: this.replicaReports(),
      liveness: this.liveness(),
      changeProgress: this.executor.progress(),
      largeCheckpointIds: true,
    };
  }

  /**
   * Asks `brokerIds` (this broker aside, which applies them) with `describe` whether they apply checkpoint ids above
   * 2^53 − 1: those that do not answer within `DESCRIBE_TIMEOUT_MS`, and those whose answer lacks
   * `largeCheckpointIds: true` (earlier versions), with the version they answered.
   */
  private async largeCheckpointIdSupport(brokerIds: readonly number[]): Promise<LargeCheckpointIdSupport> {
    const unanswered: number[] = [];
    const unsupported: { brokerId: number; version: string }[] = [];
    const asked = [...new Set(brokerIds)]
      .filter((brokerId) => brokerId !== this.nodeId)
      .sort((left, right) => left - right);
    await Promise.all(
      asked.map(async (brokerId) => {
        let answer: unknown;
        try {
          answer = await this.transport.request(brokerId, { type: "describe" }, { timeoutMs: DESCRIBE_TIMEOUT_MS });
        } catch {
          unanswered.push(brokerId);
          return;
        }
        // Another broker's answer: read as data, whatever version wrote it.
        const description = (typeof answer === "object" && answer !== null ? answer : {}) as Partial<BrokerDescription>;
        if (description.largeCheckpointIds !== true) {
          const version = typeof description.version === "string" ? description.version : "unknown";
          unsupported.push({ brokerId, version });
        }
      }),
    );
    return {
      unanswered: unanswered.sort((left, right) => left - right),
      unsupported: unsupported.sort((left, right) => left.brokerId - right.brokerId),
    };
  }

  /**
   * Merges `configuration` into the one this broker holds (higher version wins, see `mergeConfigurations`); when it
   * changed, persists it and gossips it at once. This is how a configuration received by gossip, or produced here by
   * a change, is adopted.
   */
  async mergeConfiguration(configuration: ClusterConfiguration): Promise<MergeResult> {
    const result = mergeConfigurations(this.configuration, configuration);
    for (const conflict of result.conflicts) {
      this.logger.error({ conflict }, "cluster configuration conflict; keeping the local value");
    }
    if (result.changed) {
      this.configurationValue = result.configuration;
      this.logger.info({ version: result.configuration.version }, "cluster configuration changed");
      const persisted = this.persistConfigurationInOrder(result.configuration);
      this.gossip();
      await persisted;
      this.executor.kick();
    }
    return result;
  }

  /** Sends a request to another broker over the cluster transport (its address must be known by gossip). */
  /** The configuration broker `brokerId` holds, or null when it sends none (unreachable, starting, or invalid). */
  private async configurationHeldBy(brokerId: number): Promise<ClusterConfiguration | null> {
    let answer: ReturnType<typeof parseClusterConfigurationAnswer>;
    try {
      const raw = await this.requestPeer(brokerId, { type: "cluster-configuration" }, CONFIGURATION_REQUEST_TIMEOUT_MS);
      answer = parseClusterConfigurationAnswer(raw);
    } catch {
      return null;
    }
    if (answer === null || answer.nodeId !== brokerId || answer.configuration === null) return null;
    try {
      return decodeConfiguration(answer.configuration);
    } catch (error) {
      if (!(error instanceof ConfigurationDecodeError)) throw error;
      this.logger.warn({ from: brokerId, err: error }, "ignored an invalid cluster configuration");
      return null;
    }
  }

  /**
   * Asks broker `brokerId`'s acceptor (this broker's own in-process) one phase of accepting a change; null when it
   * does not answer in time, answers something malformed, or is of an earlier version that does not know the request.
   */
  private askAcceptor(
    brokerId: number,
    request: Extract<PeerRequest, { type: "change-prepare" }>,
  ): Promise<PrepareAnswer | null>;
  private askAcceptor(
    brokerId: number,
    request: Extract<PeerRequest, { type: "change-accept" }>,
  ): Promise<AcceptAnswer | null>;
  private async askAcceptor(
    brokerId: number,
    request: Extract<PeerRequest, { type: "change-prepare" | "change-accept" }>,
  ): Promise<PrepareAnswer | AcceptAnswer | null> {
    if (brokerId === this.nodeId) return this.answerAcceptor(request);
    try {
      const answer = await this.requestPeer(brokerId, request, ACCEPTANCE_REQUEST_TIMEOUT_MS);
      return request.type === "change-prepare"
        ? parsePrepareAnswer(answer, request.version)
        : parseAcceptAnswer(answer);
    } catch {
      return null;
    }
  }

  /** Answers one phase of accepting a change as a member; throws while the broker does not know the configuration. */
  private answerAcceptor(
    request: Extract<PeerRequest, { type: "change-prepare" | "change-accept" }>,
  ): Promise<PrepareAnswer | AcceptAnswer> {
    if (this.configurationValue === null) {
      // A broker still learning the configuration (its disk replaced, say) cannot tell what it promised before.
      return Promise.reject(new Error(`broker ${this.nodeId} does not know the cluster configuration yet`));
    }
    if (request.type === "change-prepare") {
      return this.acceptor.prepare(request.version, request.ballot, request.othersHoldNothing === true);
    }
    return this.acceptor.accept(request.version, request.ballot, request.configuration);
  }

  requestPeer<T extends PeerRequest>(nodeId: number, request: T, timeoutMs: number): Promise<PeerResponses[T["type"]]> {
    return this.transport
      .request(nodeId, peerMessageOnWire(request), { timeoutMs })
      .then(peerAnswerFromWire) as Promise<PeerResponses[T["type"]]>;
  }

  /**
   * Stops cleanly: new requests are answered `unavailable`, in-flight proposals get up to `shutdownTimeoutMs` to
   * finish, then the replicas stop (flushing their storage), the transport and the management server close and
   * `broker.pid` is removed. Idempotent.
   */
  close(): Promise<void> {
    this.closed ??= this.shutDown();
    return this.closed;
  }

  private async shutDown(): Promise<void> {
    this.closing = true;
    this.stopping.abort();
    this.logger.info("broker shutting down");
    await this.executor.close();
    const deadlineMs = performance.now() + this.options.shutdownTimeoutMs;
    while (
      performance.now() < deadlineMs &&
      this.replicas.running().some((replica) => replica.pendingProposalCount > 0)
    ) {
      await new Promise((resolve) => setTimeout(resolve, SHUTDOWN_POLL_MS));
    }
    // Leaders hand over before stopping, so their partitions keep a leader instead of waiting for an election.
    await Promise.all(
      this.replicas.running().map((replica) => replica.handOverLeadership(this.options.electionTimeoutMs)),
    );
    if (this.gossipTimer !== null) clearInterval(this.gossipTimer);
    this.gossipTimer = null;
    const failures: unknown[] = [];
    const settle = async (step: () => Promise<unknown>) => {
      try {
        await step();
      } catch (error) {
        failures.push(error);
      }
    };
    await settle(() => this.replicas.close());
    const environment = this.environment;
    if (environment !== null) await settle(() => environment.close());
    await settle(() => this.contactClient.close());
    await settle(() => this.transport.close());
    const server = this.managementServer;
    if (server !== null) await settle(() => server.close());
    await settle(() => this.persistence);
    await settle(() => this.releaseDataDirectory());
    if (failures.length > 0) {
      this.logger.error({ err: failures[0] }, "broker did not shut down cleanly");
      throw failures[0];
    }
    this.logger.info("broker stopped");
  }

  private async open(): Promise<void> {
    const bound = await this.transport.listen();
    this.ownAddress = { ...this.ownAddress, port: bound.port };
    this.addresses.set(this.nodeId, this.ownAddress);
    this.transport.onMessage((from, message) => this.receive(from, message));
    this.transport.onRequest((sender, request) => this.handleRequest(sender, request));
    // First, so that health and metrics answer (STARTING) however long the rest of the start takes.
    const management = await startManagementServer({
      host: this.options.managementHost,
      port: this.options.managementPort,
      source: this.managementSource,
      metrics: this.metrics,
      logger: this.logger,
      limits: this.options.managementLimits,
    });
    this.managementServer = management.server;
    this.managementUrlValue = management.url;
    this.logger.info({ managementUrl: this.managementUrlValue }, "broker starting; its management port answers");
    this.startingStep = "discovering the cluster configuration";
    const discovery = await this.establishConfiguration();
    if (this.closing) throw new Error(`broker ${this.nodeId} closed while it was starting`);
    const backupStore = this.options.backupStore;
    if (backupStore !== undefined && backupStore !== null) {
      this.startingStep = "marking the backup parts its previous process left in progress FAILED";
      await this.settleAbandonedBackupParts(backupStore, new Date().toISOString());
    }
    this.startingStep = "opening its storage";
    const environment = await this.openStorage();
    if (environment !== null) {
      this.environment = environment;
      this.startingStep = "opening partition replicas";
      await this.deleteReplicasNotHosted(environment);
      await this.openHostedReplicas(discovery);
    }
    this.gossip();
    this.gossipTimer = setInterval(() => this.gossip(), this.options.gossipIntervalMs);
    this.executor.start();
    this.startingStep = null;
    this.logger.info(
      {
        clusterAddress: `${this.ownAddress.host}:${this.ownAddress.port}`,
        managementUrl: this.managementUrlValue,
        configurationVersion: this.configuration.version,
        partitions: this.replicas.partitionIds(),
        member: this.configuration.members.has(this.nodeId),
      },
      "broker started",
    );
  }

  /**
   * Learns the cluster configuration before any replica opens: asks the contact points, adopts the newest
   * configuration among theirs and the persisted one, and only when no configuration exists anywhere (a cluster's
   * first start) takes the first configuration, and only as one of its founding brokers. A broker new to the cluster
   * (or one that lost its data directory) waits for a contact point to answer rather than invent one.
   */
  private async establishConfiguration(): Promise<DiscoveryResult> {
    const founding = firstConfiguration(this.options, initialDistribution(this.options));
    const isFounding = founding.members.has(this.nodeId);
    const persisted = this.configurationValue;
    const timeoutMs =
      persisted !== null ? RESTART_DISCOVERY_TIMEOUT_MS : isFounding ? FIRST_START_DISCOVERY_TIMEOUT_MS : null;
    const discovery = await discoverCluster({
      client: this.contactClient,
      contactPoints: this.options.contactPoints,
      ownAddress: this.ownAddress,
      ownNodeId: this.nodeId,
      timeoutMs,
      requestTimeoutMs: DISCOVERY_REQUEST_TIMEOUT_MS,
      retryIntervalMs: DISCOVERY_RETRY_INTERVAL_MS,
      signal: this.stopping.signal,
      logger: this.logger,
    });
    let newest = persisted;
    for (const answer of discovery.answers) {
      for (const address of answer.brokers) this.learnAddress(address);
      this.lastContactMs.set(answer.nodeId, performance.now());
      if (answer.configuration === null) continue;
      let candidate: ClusterConfiguration;
      try {
        candidate = decodeConfiguration(answer.configuration);
      } catch (error) {
        if (!(error instanceof ConfigurationDecodeError)) throw error;
        this.logger.warn({ from: answer.nodeId, err: error }, "ignored an invalid cluster configuration");
        continue;
      }
      newest = newest === null ? candidate : mergeConfigurations(newest, candidate).configuration;
    }
    if (newest === null) {
      if (this.closing) return discovery;
      if (!isFounding) throw new Error(`invariant violated: broker ${this.nodeId} found no configuration`);
      this.logger.info(
        { answered: discovery.answers.map((answer) => answer.nodeId) },
        "no broker knows a cluster configuration: taking the first configuration (the cluster's first start)",
      );
      newest = founding;
    }
    if (
      persisted === null &&
      newest.version > INITIAL_CONFIGURATION_VERSION &&
      newest !== founding &&
      newest.members.has(this.nodeId)
    ) {
      // A member that starts without its data (a replaced disk) cannot know what it promised for the next change
      // before: answering again could let two changes be chosen for that version, so it answers none for it. (At
      // the first version this is every broker of a cluster's first start but the first one, which must answer.)
      // Durable before the configuration is taken or written: until then the broker answers no acceptance request,
      // and a crash in between leaves no configuration, so the next start abstains again.
      await this.acceptor.abstain(newest.version + 1);
      this.logger.warn(
        { version: newest.version + 1 },
        "started without its data while a member: abstains from accepting the next cluster change",
      );
    }
    if (newest !== persisted) {
      this.configurationValue = newest;
      await this.persistConfigurationInOrder(newest);
    }
    return discovery;
  }

  /**
   * Marks the backup parts this broker's previous process left IN_PROGRESS FAILED: they have no writer any more, and
   * until they are marked the cluster counts their backup as running, which holds up backups and changes. The backup
   * store is an aid, not a part of the broker: when it cannot be read or written now (an entry it cannot list, a full
   * or read-only volume), the broker starts all the same and tries again every `ABANDONED_PARTS_RETRY_MS` beside it,
   * until it succeeds or the broker stops.
   */
  private async settleAbandonedBackupParts(store: BackupStore, processStartedAt: string): Promise<void> {
    if (await this.markAbandonedBackupParts(store, processStartedAt)) return;
    void (async () => {
      do await pause(ABANDONED_PARTS_RETRY_MS, this.stopping.signal);
      while (!this.closing && !(await this.markAbandonedBackupParts(store, processStartedAt)));
    })();
  }

  /** One attempt of `settleAbandonedBackupParts`; false (logged) when the store could not be read or written. */
  private async markAbandonedBackupParts(store: BackupStore, processStartedAt: string): Promise<boolean> {
    try {
      const failed = await failAbandonedParts(store, this.nodeId, new Date().toISOString(), processStartedAt);
      if (failed > 0) this.logger.warn({ parts: failed }, "backup parts left in progress by the previous start failed");
      return true;
    } catch (error) {
      this.logger.warn(
        { reason: boundedReason(error), retryInMs: ABANDONED_PARTS_RETRY_MS },
        "the backup store could not be read or written to mark the parts the previous start left in progress " +
          "FAILED; their backup counts as running until it can",
      );
      return false;
    }
  }

  /**
   * Before a dead replica is opened again: when the storage refuses writes since a failure (a full disk, an I/O
   * error), its in-memory view may differ from the disk, so every replica on it is stopped and it is closed and
   * opened again from the disk, where the journal holds what was durable. Shared by the replicas restarting
   * meanwhile; a storage that still cannot be opened fails this attempt, which the replica host retries.
   */
  private recoverStorageIfFailed(): Promise<void> {
    const environment = this.environment;
    if (environment === null || environment.failure === null || this.closing) return Promise.resolve();
    // A failed journal write that could not be erased may still be read back as if it were durable: the replicas
    // stay down, each reported with this reason, until an operator has checked the disk and restarted the broker.
    if (environment.failure instanceof UnerasedWriteError) return Promise.reject(environment.failure);
    this.storageRecovery ??= this.reopenStorage(environment, environment.failure).finally(() => {
      this.storageRecovery = null;
    });
    return this.storageRecovery;
  }

  private async reopenStorage(failed: StorageEnvironment, cause: Error): Promise<void> {
    this.logger.warn(
      { reason: boundedReason(cause) },
      "the broker's storage refuses writes since a failure: its replicas stop and it is opened again from the disk",
    );
    await this.replicas.failAll(cause);
    await failed.close().catch((error: unknown) => {
      this.logger.warn({ err: error }, "closing the failed storage failed; it is opened again all the same");
    });
    if (this.closing) throw new Error("the broker is closing");
    this.environment = await openStorageEnvironment(
      this.options.dataDirectory,
      this.options.synchronousCommit,
      (commit) => this.metrics.observeCommit(commit.durationMs / 1000, commit.writes),
    );
    this.reportTornTail(this.environment);
    this.logger.info("the broker's storage is open again; its replicas follow after their pause");
  }

  /**
   * Opens the replicas' storage. When it is damaged (a journal record that is not a torn last write, a bad segment),
   * the broker still starts, without replicas: it keeps taking part in gossip and answers the gateway and the
   * management port, which report each of its replicas dead with the reason, and the other brokers keep serving
   * every partition that still has a quorum. Nothing is repaired or cut: the files stay as they are for an operator.
   */
  private async openStorage(): Promise<StorageEnvironment | null> {
    try {
      const environment = await openStorageEnvironment(
        this.options.dataDirectory,
        this.options.synchronousCommit,
        (commit) => this.metrics.observeCommit(commit.durationMs / 1000, commit.writes),
      );
      this.reportTornTail(environment);
      return environment;
    } catch (error) {
      if (!(error instanceof StorageCorruptionError)) throw error;
      this.logger.error(
        { err: error, location: error.location },
        "the broker's storage is damaged: none of its replicas can run until it is repaired; they are reported dead",
      );
      for (const hosted of partitionsOf(this.configuration, this.nodeId)) {
        this.replicas.reportUnopenable(hosted.partitionId, error);
      }
      return null;
    }
  }

  /**
   * Logs the torn last write opening cut from the journal: a crash (or a failed write) during a commit leaves one, and
   * it held nothing acknowledged, but an operator should hear of it; several in a row point at the disk.
   */
  private reportTornTail(environment: StorageEnvironment): void {
    for (const tornTail of environment.tornTailCutOnOpen) {
      this.logger.warn(
        { tornTail },
        "cut the torn last write of the storage's journal: a commit is acknowledged only once it is durable, and a crash or a failed write cut this one short",
      );
    }
  }

  /** Deletes the data of replicas this broker kept but no longer hosts (e.g. a forced reconfiguration left it out). */
  private async deleteReplicasNotHosted(environment: StorageEnvironment): Promise<void> {
    const hosted = new Set(partitionsOf(this.configuration, this.nodeId).map((partition) => partition.partitionId));
    for (const scope of environment.scopes()) {
      if (hosted.has(scope)) continue;
      this.logger.warn({ partitionId: scope }, "deleting the data of a partition replica this broker no longer hosts");
      await this.replicas.ensure(scope, null);
      await this.replicas.remove(scope);
    }
  }

  /**
   * Opens a replica of every partition the configuration gives this broker. A replica whose storage is empty writes
   * the group's first configuration only on the cluster's first start (the configuration never changed and no
   * contacted broker reports the group past its first term); otherwise it waits to be caught up by the group's
   * leader, as a broker that joined or lost its disk must.
   */
  private async openHostedReplicas(discovery: DiscoveryResult): Promise<void> {
    const configuration = this.configuration;
    const firstStart =
      configuration.version === 1 && configuration.lastChange === null && configuration.pendingChange === null;
    for (const hosted of partitionsOf(configuration, this.nodeId)) {
      const partitionId = hosted.partitionId;
      const groupRuns = discovery.answers.some((answer) => groupProgressed(answer, partitionId));
      const bootstrap: Member[] | null =
        firstStart && hosted.state === "ACTIVE" && !groupRuns
          ? replicasOf(configuration, partitionId).map((replica) => ({
              id: replica.brokerId,
              role: "voter",
              priority: replica.priority,
            }))
          : null;
      try {
        await this.replicas.ensure(partitionId, bootstrap);
      } catch {
        // Reported dead and retried by the replica host; the broker serves its other partitions meanwhile.
      }
    }
  }

  private replicaOptions(
    partitionId: number,
    bootstrap: readonly Member[] | null,
    onFailure: (error: Error) => void,
  ): PartitionReplicaOptions {
    const environment = this.environment;
    if (environment === null) throw new Error("invariant violated: a replica opened before the storage");
    return {
      environment,
      partitionId,
      memberId: this.nodeId,
      bootstrap,
      heartbeatIntervalMs: this.options.heartbeatIntervalMs,
      electionTimeoutMs: this.options.electionTimeoutMs,
      snapshotIntervalEntries: this.options.snapshotIntervalEntries,
      maxPendingProposals: this.options.maxPendingProposalsPerPartition,
      maxApplyLagEntries: this.options.maxApplyLagEntries,
      publicationRefusal: () => this.publicationRefusal(),
      clock: this.replicaClock,
      messageClock: this.messageClock,
      send: (to, message) => this.sendRaft(partitionId, to, message),
      onFailure,
      onSnapshot: (snapshot) =>
        this.metrics.observeSnapshot(snapshot.partitionId, snapshot.durationMs / 1000, snapshot.sizeBytes),
      onReceiptDamage: (damage) => this.metrics.observeReceiptDamage(damage),
      ...(this.options.backupStore === undefined || this.options.backupStore === null
        ? {}
        : {
            backups: {
              store: this.options.backupStore,
              flowplaneVersion: this.options.version,
              activity: this.backupActivity,
              onPartEnded: (manifest) =>
                this.metrics.observeBackupPart(manifest.partitionId, manifest.state, manifest.writtenBytes),
              brokerRunning: () => !this.closing,
            },
          }),
      logger: this.logger,
    };
  }

  /** Why this broker refuses new publications now (see message-memory.ts), or null. */
  private publicationRefusal(): string | null {
    let messages = 0;
    let bytes = 0;
    for (const replica of this.replicas.running()) {
      const buffered = replica.bufferedMessages();
      messages += buffered.messages;
      bytes += buffered.bytes;
    }
    return bufferedMessagesRefusal(this.nodeId, { messages, bytes }, this.options.maxBufferedMessageBytes);
  }

  /**
   * The offsets of the middle of the brokers' clocks from this broker's steady clock (see cluster-clock.ts), worked out
   * again at most every 100 ms: the replicas read the time on every publication.
   */
  private currentClockOffsets(): ClockOffsets {
    const monotonicMs = performance.now();
    if (monotonicMs - this.clockOffsets.atMs >= CLOCK_OFFSETS_REFRESH_MS) {
      const ownOffsetMs = this.wallClockMs() - steadyEpochMs();
      const offsets = this.clusterClock.offsets(ownOffsetMs, (nodeId) => this.isReachable(nodeId));
      this.clockOffsets = { offsets, atMs: monotonicMs };
    }
    return this.clockOffsets.offsets;
  }

  /**
   * The steady clock moved by `offsetMs`, as a timestamp a record takes: whole milliseconds within the records' range
   * (the offsets come from clocks the gossip checked to lie in it, and the steady clock moves on from there).
   */
  private clusterTimeMs(offsetMs: number): number {
    return Math.min(MAX_TIMESTAMP_MS, Math.max(0, Math.floor(steadyEpochMs() + offsetMs)));
  }

  /** Takes in the wall clock broker `from` sent gossip at, and warns when it is far from this broker's. */
  private observeClock(from: number, sentAtMs: number): void {
    const steadyMs = steadyEpochMs();
    this.clusterClock.observe(from, sentAtMs, steadyMs);
    const peerOffsetMs = this.clusterClock.peerOffsetMs(from);
    if (peerOffsetMs === undefined) return;
    const offsetMs = Math.round(peerOffsetMs - (this.wallClockMs() - steadyMs));
    const distant = Math.abs(offsetMs) >= DISTANT_CLOCK_WARNING_MS;
    if (distant === this.peersWithDistantClocks.has(from)) return;
    if (!distant) {
      this.peersWithDistantClocks.delete(from);
      this.logger.info({ peer: from, offsetMs }, "a broker's clock agrees with this broker's again");
      return;
    }
    this.peersWithDistantClocks.add(from);
    this.logger.warn(
      { peer: from, offsetMs },
      "a broker's clock differs from this broker's by more than 10 s; partition leaders stamp and expire messages by " +
        "the median of the brokers' clocks, but the clocks should be synchronized (NTP)",
    );
  }

  private livenessTimeoutMs(): number {
    return Math.max(3 * this.options.gossipIntervalMs, 2 * this.options.electionTimeoutMs);
  }

  private sendRaft(partitionId: number, to: number, message: Message): void {
    const envelope: BrokerMessage = { type: "raft", partitionId, message };
    // The joiner keeps a snapshot chunk's bytes as its restored messages' entries, so its transport reads the chunk
    // into a region rather than into a buffer of its own (see retained-regions.ts).
    this.transport.send(to, envelope, { retainedBody: message.type === "snapshotChunk" });
  }

  private gossip(): void {
    if (this.closing || this.configurationValue === null) return;
    const envelope: BrokerMessage = {
      type: "gossip",
      configuration: encodeConfiguration(this.configurationValue),
      brokers: [...this.addresses.values()],
      sentAtMs: this.wallClockMs(),
    };
    for (const nodeId of this.addresses.keys()) {
      if (nodeId !== this.nodeId) this.transport.send(nodeId, envelope);
    }
  }

  /**
   * Takes in where broker `address.nodeId` listens, as broker `from` gossiped it (absent: a contact point's answer).
   * A later incarnation replaces an earlier one, so an address relayed from before a restart cannot undo a newer one.
   * What a broker says of itself is taken whatever its incarnation, kept at the highest seen: a broker restarted
   * after its wall clock stepped back starts with a lower incarnation, and its new address was ignored until its
   * clock passed the old start (an hour's step back kept a broker restarted on another port unreachable for an hour).
   */
  private learnAddress(address: GossipedAddress, from?: number): void {
    if (address.nodeId === this.nodeId) return;
    const known = this.addresses.get(address.nodeId);
    if (known !== undefined && known.incarnation >= address.incarnation) {
      const selfReported = from === address.nodeId && (known.host !== address.host || known.port !== address.port);
      if (!selfReported) return;
      address = { ...address, incarnation: known.incarnation };
    }
    this.addresses.set(address.nodeId, address);
    if (known === undefined || known.host !== address.host || known.port !== address.port) {
      this.transport.setPeerAddress(address.nodeId, { host: address.host, port: address.port });
    }
  }

  private receive(from: number, raw: unknown): void {
    const message = parseBrokerMessage(raw, from, this.nodeId);
    if (typeof message === "string") {
      this.malformedMessageLog.report(
        String(from),
        "malformed-message",
        { from, problem: message },
        "dropped a malformed message from a broker",
      );
      return;
    }
    this.lastContactMs.set(from, performance.now());
    if (message.type === "raft") {
      this.replicas.get(message.partitionId)?.receive(message.message);
      return;
    }
    if (message.sentAtMs !== undefined) this.observeClock(from, message.sentAtMs);
    for (const address of message.brokers) this.learnAddress(address, from);
    // Until it knows the configuration (it is still discovering it), a broker only learns where the others are.
    if (this.configurationValue === null) return;
    const digest = gossipDigest(message.configuration);
    if (this.absorbedGossip.repeats(from, digest, this.configurationValue)) return;
    let remote: ClusterConfiguration;
    try {
      remote = decodeConfiguration(message.configuration);
    } catch (error) {
      if (!(error instanceof ConfigurationDecodeError)) throw error;
      this.logger.warn({ from, err: error }, "dropped gossip with an invalid cluster configuration");
      return;
    }
    this.mergeConfiguration(remote).catch((error: unknown) => {
      this.logger.error({ err: error }, "could not persist the cluster configuration");
    });
    // The merge adopted its result before its first pause (persisting it), so this is what merging the text gave.
    this.absorbedGossip.record(from, digest, this.configuration);
  }

  private persistConfigurationInOrder(configuration: ClusterConfiguration): Promise<void> {
    // Writes are chained so an older configuration can never overwrite a newer one on disk.
    const next = this.persistence.then(() => persistConfiguration(this.options.dataDirectory, configuration));
    this.persistence = next.catch(() => undefined);
    return next;
  }

  private async handleRequest(sender: RequestSender, raw: unknown): Promise<BrokerResponse> {
    if (sender.role === "node") this.lastContactMs.set(sender.nodeId, performance.now());
    const startedAt = performance.now();
    if (isPeerRequestType(raw)) {
      const request = parsePeerRequest(raw);
      if (typeof request === "string") {
        this.metrics.observeRequest("malformed", "error", (performance.now() - startedAt) / 1000);
        throw new Error(`malformed peer request: ${request}`);
      }
      if (
        (request.type === "change-prepare" || request.type === "change-accept") &&
        (sender.role !== "node" || sender.nodeId !== request.ballot.brokerId)
      ) {
        // A ballot carries its proposer's id: one sent by anyone else could take over another broker's proposal.
        this.metrics.observeRequest("malformed", "error", (performance.now() - startedAt) / 1000);
        throw new Error("malformed peer request: a ballot of another broker");
      }
      const response = await this.answerPeer(request);
      const outcome = "outcome" in response ? response.outcome : "answered";
      this.metrics.observeRequest(request.type, outcome, (performance.now() - startedAt) / 1000);
      return peerMessageOnWire(response);
    }
    const request = parseBrokerRequest(raw);
    if (typeof request === "string") {
      this.metrics.observeRequest("malformed", "error", (performance.now() - startedAt) / 1000);
      throw new Error(`malformed broker request: ${request}`);
    }
    const response = await this.answer(request);
    const outcome = "outcome" in response ? response.outcome : "described";
    this.metrics.observeRequest(request.type, outcome, (performance.now() - startedAt) / 1000);
    return response;
  }

  /** Answers a peer request in this broker (a change operation asking a replica that happens to be local). */
  private requestLocal<T extends PeerRequest>(request: T): Promise<PeerResponses[T["type"]]> {
    return this.answerPeer(request) as Promise<PeerResponses[T["type"]]>;
  }

  private async answerPeer(request: PeerRequest): Promise<PeerResponses[PeerRequest["type"]]> {
    if (request.type === "cluster-configuration") return this.configurationAnswer();
    if (request.type === "change-prepare" || request.type === "change-accept") return this.answerAcceptor(request);
    const replica = this.replicas.get(request.partitionId);
    if (this.closing || replica === undefined) {
      const detail = this.closing
        ? `broker ${this.nodeId} is shutting down`
        : this.withoutReplicaDetail(request.partitionId);
      return { outcome: "unavailable", detail };
    }
    return answerPartitionRequest(replica, request, this.changeContext);
  }

  /** Why a request for `partitionId` finds no replica here: the broker does not host it, or still opens it. */
  private withoutReplicaDetail(partitionId: number): string {
    const configuration = this.configurationValue;
    const opening =
      this.startingStep !== null &&
      configuration !== null &&
      partitionsOf(configuration, this.nodeId).some((hosted) => hosted.partitionId === partitionId);
    return opening
      ? `partition ${partitionId} is not open yet on broker ${this.nodeId}; the broker is still starting`
      : `partition ${partitionId} is not hosted on broker ${this.nodeId}`;
  }

  private configurationAnswer(): ClusterConfigurationAnswer {
    return {
      nodeId: this.nodeId,
      configuration: this.configurationValue === null ? null : encodeConfiguration(this.configurationValue),
      brokers: [...this.addresses.values()],
      replicas: this.replicaReports(),
    };
  }

  private async answer(request: ParsedBrokerRequest): Promise<BrokerResponses[ParsedBrokerRequest["type"]]> {
    if (request.type === "describe") return this.describe();
    if (request.type === "cluster-status") {
      const status = this.coordinator.status();
      // The monitoring response says when a backup keeps changes from starting.
      return status.outcome === "status" ? { ...status, blockingBackup: await this.backups.blockingBackup() } : status;
    }
    if (request.type === "cluster-change") return this.coordinator.change(request.command, request.dryRun);
    if (request.type === "cluster-cancel") return this.coordinator.cancel(request.changeId);
    if (request.type === "backup-take") return this.backups.take(request.backupId);
    if (request.type === "backup-list") return this.backups.list(request.summary === true);
    if (request.type === "backup-status") return this.backups.status(request.backupId);
    if (request.type === "backup-delete") return this.backups.delete(request.backupId);
    if (this.closing) return { outcome: "unavailable", detail: `broker ${this.nodeId} is shutting down` };
    const replica = this.replicas.get(request.partitionId);
    if (replica === undefined) {
      return {
        outcome: "unavailable",
        detail: this.withoutReplicaDetail(request.partitionId),
      } satisfies PublishMessageResponse & GetMessageResponse;
    }
    if (request.type === "publish-message") return replica.publish(request.message);
    return replica.getMessage(request.key);
  }
}

/** Whether a contacted broker reports the group of `partitionId` past its first term (so the group already runs). */
function groupProgressed(answer: ClusterConfigurationAnswer, partitionId: number): boolean {
  return answer.replicas.some((report) => report.partitionId === partitionId && report.term >= 2);
}
