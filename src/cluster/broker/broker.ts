/**
 * The broker: one process (or, in tests, one object) that hosts partition replicas, keeps the cluster configuration
 * and spreads it by gossip, tracks which other brokers are reachable, serves the gateway's requests
 * (`protocol.ts`), and exposes health and metrics on its management port.
 *
 * One ClusterTransport carries everything between brokers: Raft messages routed by partition id, gossip, and
 * requests. Gateways connect to the same transport as clients.
 */
import type { Logger } from "pino";
import type { HttpServer } from "../../http/server.js";
import type { Message } from "../raft/index.js";
import type { StorageEnvironment } from "../raft/storage/environment.js";
import {
  type ClusterConfiguration,
  ConfigurationDecodeError,
  decodeConfiguration,
  encodeConfiguration,
  type MergeResult,
  mergeConfigurations,
  partitionsOf,
  replicasOf,
} from "../topology/index.js";
import { ClusterTransport, type RequestSender } from "../transport/index.js";
import { type BrokerMessage, type GossipedAddress, parseBrokerMessage, parseBrokerRequest } from "./broker-messages.js";
import {
  claimDataDirectory,
  openStorageEnvironment,
  persistConfiguration,
  readPersistedConfiguration,
} from "./files.js";
import { type BrokerMetrics, createBrokerMetrics, type ManagementSource, startManagementServer } from "./management.js";
import { type BrokerOptions, firstConfiguration, initialDistribution } from "./options.js";
import { PartitionReplica } from "./partition-replica.js";
import type {
  BrokerAddress,
  BrokerDescription,
  BrokerLiveness,
  BrokerRequest,
  BrokerResponses,
  GetMessageResponse,
  PublishMessageResponse,
  ReplicaReport,
} from "./protocol.js";

type BrokerResponse = BrokerResponses[keyof BrokerResponses];

/** Interval at which a closing broker checks whether its in-flight proposals finished. */
const SHUTDOWN_POLL_MS = 10;

/** A running broker; create it with `Broker.start`. */
export class Broker {
  readonly nodeId: number;
  private readonly options: BrokerOptions;
  private readonly logger: Logger;
  private readonly transport: ClusterTransport<unknown, unknown, BrokerResponse>;
  private readonly replicas = new Map<number, PartitionReplica>();
  /** The one storage environment of every replica hosted here; opened with the replicas, closed after them. */
  private environment: StorageEnvironment | null = null;
  private readonly addresses = new Map<number, GossipedAddress>();
  private readonly lastContactMs = new Map<number, number>();
  private readonly metrics: BrokerMetrics;
  private readonly managementSource: ManagementSource;
  private readonly releaseDataDirectory: () => Promise<void>;
  private readonly startedAtMs = Date.now();
  private configurationValue: ClusterConfiguration;
  private persistence: Promise<void> = Promise.resolve();
  private gossipTimer: NodeJS.Timeout | null = null;
  private managementServer: HttpServer | null = null;
  private managementUrlValue = "";
  private ownAddress: GossipedAddress;
  private closing = false;
  private closed: Promise<void> | null = null;

  private constructor(
    options: BrokerOptions,
    configuration: ClusterConfiguration,
    releaseDataDirectory: () => Promise<void>,
  ) {
    this.options = options;
    this.nodeId = options.nodeId;
    this.logger = options.logger.child({ broker: options.nodeId });
    this.configurationValue = configuration;
    this.releaseDataDirectory = releaseDataDirectory;
    this.transport = new ClusterTransport({ nodeId: options.nodeId, host: options.host, port: options.clusterPort });
    this.ownAddress = { nodeId: options.nodeId, host: options.advertisedHost, port: 0, incarnation: this.startedAtMs };
    const source: ManagementSource = {
      nodeId: options.nodeId,
      replicas: () => this.replicaReports(),
      logSizes: () => new Map([...this.replicas].map(([id, replica]) => [id, replica.logSizeEntries()])),
      peerReachability: () => new Map(this.liveness().map((peer) => [peer.nodeId, peer.reachable])),
      closing: () => this.closing,
    };
    this.managementSource = source;
    this.metrics = createBrokerMetrics(source);
  }

  /**
   * Starts a broker: validates the partitioning, claims the data directory (`broker.pid`), loads or creates the
   * cluster configuration, listens on the cluster and management ports, starts the hosted replicas and gossip.
   * Throws ConfigurationError for invalid sizes or a bad FIXED scheme, DataDirectoryInUseError when another live
   * broker holds the directory.
   */
  static async start(options: BrokerOptions): Promise<Broker> {
    const distribution = initialDistribution(options);
    const release = await claimDataDirectory(options.dataDirectory);
    let broker: Broker | null = null;
    try {
      let configuration = await readPersistedConfiguration(options.dataDirectory);
      const created = configuration === null;
      configuration ??= firstConfiguration(options, distribution);
      if (created) await persistConfiguration(options.dataDirectory, configuration);
      broker = new Broker(options, configuration, release);
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
    return this.configurationValue;
  }

  /** The replica of `partitionId` hosted here, if any (tests and operators). */
  replica(partitionId: number): PartitionReplica | undefined {
    return this.replicas.get(partitionId);
  }

  /** Reports of every hosted replica, by ascending partition id. */
  replicaReports(): ReplicaReport[] {
    return [...this.replicas.values()]
      .map((replica) => replica.report())
      .sort((left, right) => left.partitionId - right.partitionId);
  }

  /** Liveness of every other known broker. */
  liveness(): BrokerLiveness[] {
    const nowMs = Date.now();
    const timeoutMs = this.livenessTimeoutMs();
    return [...this.addresses.keys()]
      .filter((nodeId) => nodeId !== this.nodeId)
      .sort((left, right) => left - right)
      .map((nodeId) => {
        const lastMs = this.lastContactMs.get(nodeId);
        return {
          nodeId,
          reachable: lastMs !== undefined && nowMs - lastMs <= timeoutMs,
          lastContactAt: lastMs === undefined ? null : new Date(lastMs).toISOString(),
        };
      });
  }

  /** What `describe` answers. */
  describe(): BrokerDescription {
    return {
      nodeId: this.nodeId,
      host: this.ownAddress.host,
      port: this.ownAddress.port,
      version: this.options.version,
      configuration: encodeConfiguration(this.configurationValue),
      brokers: [...this.addresses.values()]
        .sort((left, right) => left.nodeId - right.nodeId)
        .map(({ nodeId, host, port }) => ({ nodeId, host, port })),
      replicas: this.replicaReports(),
      liveness: this.liveness(),
    };
  }

  /**
   * Merges `configuration` into the one this broker holds (higher version wins, see `mergeConfigurations`); when it
   * changed, persists it and gossips it at once. This is how a configuration received by gossip, or produced here by
   * a change, is adopted.
   */
  async mergeConfiguration(configuration: ClusterConfiguration): Promise<MergeResult> {
    const result = mergeConfigurations(this.configurationValue, configuration);
    for (const conflict of result.conflicts) {
      this.logger.error({ conflict }, "cluster configuration conflict; keeping the local value");
    }
    if (result.changed) {
      this.configurationValue = result.configuration;
      this.logger.info({ version: result.configuration.version }, "cluster configuration changed");
      const persisted = this.persistConfigurationInOrder(result.configuration);
      this.gossip();
      await persisted;
    }
    return result;
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
    this.logger.info("broker shutting down");
    const deadlineMs = Date.now() + this.options.shutdownTimeoutMs;
    while (Date.now() < deadlineMs && [...this.replicas.values()].some((replica) => replica.pendingProposalCount > 0)) {
      await new Promise((resolve) => setTimeout(resolve, SHUTDOWN_POLL_MS));
    }
    // Leaders hand over before stopping, so their partitions keep a leader instead of waiting for an election.
    await Promise.all(
      [...this.replicas.values()].map((replica) => replica.handOverLeadership(this.options.electionTimeoutMs)),
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
    await Promise.all([...this.replicas.values()].map((replica) => settle(() => replica.close())));
    const environment = this.environment;
    if (environment !== null) await settle(() => environment.close());
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
    for (const contact of this.options.contactPoints) {
      if (contact.nodeId === this.nodeId) continue;
      // Contact points have the lowest incarnation: any address a broker gossips about itself replaces them.
      this.learnAddress({ ...contact, incarnation: 0 });
    }
    this.transport.onMessage((from, message) => this.receive(from, message));
    this.transport.onRequest((sender, request) => this.handleRequest(sender, request));
    const environment = await openStorageEnvironment(
      this.options.dataDirectory,
      this.options.synchronousCommit,
      (commit) => this.metrics.observeCommit(commit.durationMs / 1000, commit.writes),
    );
    this.environment = environment;
    for (const hosted of partitionsOf(this.configurationValue, this.nodeId)) {
      const partitionId = hosted.partitionId;
      const replica = await PartitionReplica.open({
        environment,
        partitionId,
        memberId: this.nodeId,
        bootstrap: replicasOf(this.configurationValue, partitionId).map((member) => ({
          id: member.brokerId,
          role: "voter" as const,
          priority: member.priority,
        })),
        heartbeatIntervalMs: this.options.heartbeatIntervalMs,
        electionTimeoutMs: this.options.electionTimeoutMs,
        snapshotIntervalEntries: this.options.snapshotIntervalEntries,
        maxPendingProposals: this.options.maxPendingProposalsPerPartition,
        maxApplyLagEntries: this.options.maxApplyLagEntries,
        send: (to, message) => this.sendRaft(partitionId, to, message),
        onFailure: (error) =>
          this.logger.fatal({ err: error, partitionId }, "partition replica stopped after a failure"),
        onSnapshot: (snapshot) =>
          this.metrics.observeSnapshot(snapshot.partitionId, snapshot.durationMs / 1000, snapshot.sizeBytes),
        logger: this.logger,
      });
      this.replicas.set(partitionId, replica);
    }
    const management = await startManagementServer({
      host: this.options.managementHost,
      port: this.options.managementPort,
      source: this.managementSource,
      metrics: this.metrics,
      logger: this.logger,
    });
    this.managementServer = management.server;
    this.managementUrlValue = management.url;
    this.gossip();
    this.gossipTimer = setInterval(() => this.gossip(), this.options.gossipIntervalMs);
    this.logger.info(
      {
        clusterAddress: `${this.ownAddress.host}:${this.ownAddress.port}`,
        managementUrl: this.managementUrlValue,
        partitions: [...this.replicas.keys()],
      },
      "broker started",
    );
  }

  private livenessTimeoutMs(): number {
    return Math.max(3 * this.options.gossipIntervalMs, 2 * this.options.electionTimeoutMs);
  }

  private sendRaft(partitionId: number, to: number, message: Message): void {
    const envelope: BrokerMessage = { type: "raft", partitionId, message };
    this.transport.send(to, envelope);
  }

  private gossip(): void {
    if (this.closing) return;
    const envelope: BrokerMessage = {
      type: "gossip",
      configuration: encodeConfiguration(this.configurationValue),
      brokers: [...this.addresses.values()],
    };
    for (const nodeId of this.addresses.keys()) {
      if (nodeId !== this.nodeId) this.transport.send(nodeId, envelope);
    }
  }

  private learnAddress(address: GossipedAddress): void {
    if (address.nodeId === this.nodeId) return;
    const known = this.addresses.get(address.nodeId);
    if (known !== undefined && known.incarnation >= address.incarnation) return;
    this.addresses.set(address.nodeId, address);
    if (known === undefined || known.host !== address.host || known.port !== address.port) {
      this.transport.setPeerAddress(address.nodeId, { host: address.host, port: address.port });
    }
  }

  private receive(from: number, raw: unknown): void {
    const message = parseBrokerMessage(raw, from, this.nodeId);
    if (typeof message === "string") {
      this.logger.warn({ from, problem: message }, "dropped a malformed message from a broker");
      return;
    }
    this.lastContactMs.set(from, Date.now());
    if (message.type === "raft") {
      this.replicas.get(message.partitionId)?.receive(message.message);
      return;
    }
    for (const address of message.brokers) this.learnAddress(address);
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
  }

  private persistConfigurationInOrder(configuration: ClusterConfiguration): Promise<void> {
    // Writes are chained so an older configuration can never overwrite a newer one on disk.
    const next = this.persistence.then(() => persistConfiguration(this.options.dataDirectory, configuration));
    this.persistence = next.catch(() => undefined);
    return next;
  }

  private async handleRequest(sender: RequestSender, raw: unknown): Promise<BrokerResponse> {
    if (sender.role === "node") this.lastContactMs.set(sender.nodeId, Date.now());
    const startedAt = performance.now();
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

  private async answer(request: BrokerRequest): Promise<BrokerResponse> {
    if (request.type === "describe") return this.describe();
    if (this.closing) return { outcome: "unavailable", detail: `broker ${this.nodeId} is shutting down` };
    const replica = this.replicas.get(request.partitionId);
    if (replica === undefined) {
      return {
        outcome: "unavailable",
        detail: `partition ${request.partitionId} is not hosted on broker ${this.nodeId}`,
      } satisfies PublishMessageResponse & GetMessageResponse;
    }
    if (request.type === "publish-message") return replica.publish(request.message);
    return replica.getMessage(request.key);
  }
}
