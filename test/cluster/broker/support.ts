/**
 * Helpers for broker tests: in-process brokers on loopback port 0 in temporary directories, partition replicas run in
 * process (their storage, their options, publishing through whichever leads), and bounded polling.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pino from "pino";
import { Broker } from "../../../src/cluster/broker/broker.js";
import type { CoordinatorContext } from "../../../src/cluster/broker/coordinator.js";
import { BROKER_DEFAULTS, type BrokerOptions } from "../../../src/cluster/broker/options.js";
import type { PartitionReplica, PartitionReplicaOptions } from "../../../src/cluster/broker/partition-replica.js";
import type {
  BrokerAddress,
  BrokerRequest,
  PublishMessageCommand,
  PublishMessageResponse,
  ReplicaReport,
} from "../../../src/cluster/broker/protocol.js";
import type { Member, Message } from "../../../src/cluster/raft/index.js";
import { StorageEnvironment } from "../../../src/cluster/raft/storage/environment.js";
import { type AcceptorState, type AcceptorStep, accept, prepare } from "../../../src/cluster/topology/index.js";
import type { TransportClient } from "../../../src/cluster/transport/index.js";
import { testClusterCredentials } from "../../support/cluster-secret.js";
import { defaultHttpServerLimits } from "../../support/http.js";

/** Polls `condition` until it holds; throws after `attempts` polls so a broken test fails instead of hanging. */
export async function waitFor(
  condition: () => boolean | Promise<boolean>,
  description: string,
  attempts = 1_000,
): Promise<void> {
  for (let attempt = 0; attempt < attempts; attempt += 1) {
    if (await condition()) return;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  throw new Error(`condition never held: ${description}`);
}

/** Creates a temporary directory; the caller removes it with `removeDirectory`. */
export function temporaryDirectory(prefix: string): Promise<string> {
  return mkdtemp(join(tmpdir(), `flowplane-broker-${prefix}-`));
}

/** Removes a temporary directory. */
export async function removeDirectory(directory: string): Promise<void> {
  await rm(directory, { recursive: true, force: true });
}

/** Options of a test broker: fast Raft timings, loopback, port 0, silent logs. */
export function testBrokerOptions(root: string, nodeId: number, overrides: Partial<BrokerOptions> = {}): BrokerOptions {
  return {
    nodeId,
    host: "127.0.0.1",
    advertisedHost: "127.0.0.1",
    clusterPort: 0,
    managementHost: "127.0.0.1",
    managementPort: 0,
    managementLimits: defaultHttpServerLimits,
    dataDirectory: join(root, "brokers", String(nodeId)),
    clusterSize: 3,
    partitionsCount: 3,
    replicationFactor: 3,
    partitioning: { scheme: "ROUND_ROBIN" },
    contactPoints: [],
    heartbeatIntervalMs: 25,
    electionTimeoutMs: 250,
    synchronousCommit: true,
    snapshotIntervalEntries: 10_000,
    maxBufferedMessageBytes: 1024 ** 3,
    partitionScalingEnabled: false,
    ...BROKER_DEFAULTS,
    gossipIntervalMs: 100,
    shutdownTimeoutMs: 2_000,
    clusterCredentials: testClusterCredentials(),
    version: "0.0.0-test",
    logger: pino({ level: process.env.TEST_LOG_LEVEL ?? "silent" }),
    ...overrides,
  };
}

/**
 * Starts `count` brokers one after the other; each gets the addresses of those started before it as contact points,
 * and learns the later ones by gossip.
 */
export async function startBrokers(
  root: string,
  count: number,
  overrides: (nodeId: number) => Partial<BrokerOptions> = () => ({}),
): Promise<Broker[]> {
  const brokers: Broker[] = [];
  for (let nodeId = 0; nodeId < count; nodeId += 1) {
    const contactPoints: BrokerAddress[] = brokers.map((broker) => broker.clusterAddress);
    brokers.push(
      await Broker.start(testBrokerOptions(root, nodeId, { contactPoints, clusterSize: count, ...overrides(nodeId) })),
    );
  }
  return brokers;
}

/** Every replica report of `partitionId` among `brokers`. */
export function reportsOf(brokers: readonly Broker[], partitionId: number): ReplicaReport[] {
  return brokers.flatMap((broker) => broker.replicaReports().filter((report) => report.partitionId === partitionId));
}

/** Whether `partitionId` has exactly one leader, every other replica follows it, and all are healthy. */
export function partitionSettled(brokers: readonly Broker[], partitionId: number, replicas: number): boolean {
  const reports = reportsOf(brokers, partitionId);
  const leaders = reports.filter((report) => report.role === "leader");
  const leader = leaders[0];
  return (
    reports.length === replicas &&
    leaders.length === 1 &&
    leader !== undefined &&
    reports.every(
      (report) => report.leaderId === leader.leaderId && report.term === leader.term && report.health === "healthy",
    )
  );
}

/**
 * Whether `partitionId` is settled among `brokers` (see `partitionSettled`) and led by the running replica of the
 * highest priority, so no priority hand-over is still to come: work that a leadership change fails (a backup, a
 * change) can start.
 */
export function partitionSettledOnPriorityLeader(brokers: readonly Broker[], partitionId: number): boolean {
  const hosts = brokers.filter((broker) => broker.replica(partitionId) !== undefined);
  if (!partitionSettled(hosts, partitionId, hosts.length)) return false;
  const priorityOf = (broker: Broker): number =>
    broker.configuration.members.get(broker.nodeId)?.partitions.get(partitionId)?.priority ?? 0;
  const highest = Math.max(...hosts.map(priorityOf));
  const leader = leaderOf(hosts, partitionId);
  return leader !== undefined && priorityOf(leader) === highest;
}

/** The broker leading `partitionId`, or undefined. */
export function leaderOf(brokers: readonly Broker[], partitionId: number): Broker | undefined {
  return brokers.find((broker) => broker.replica(partitionId)?.report().role === "leader");
}

/** The replica among `replicas()` that leads, waiting for one (the candidates are looked at again on every poll). */
export async function leadingReplica(
  replicas: () => Iterable<PartitionReplica | undefined>,
): Promise<PartitionReplica> {
  let found: PartitionReplica | undefined;
  await waitFor(() => {
    found = [...replicas()].find((replica) => replica?.report().role === "leader");
    return found !== undefined;
  }, "a leader");
  return found as PartitionReplica;
}

/**
 * Publishes `command` through whichever of `replicas()` leads at the time until it is published, and returns its key:
 * with elections as quick as the tests' (80 ms), leadership can move under load, and a replica that no longer leads
 * refuses a publication. Bounded: an election settles, and a new leader commits its first entry, within a few
 * timeouts, far less than these attempts 10 ms apart.
 */
export async function publishThroughLeader(
  replicas: () => Iterable<PartitionReplica | undefined>,
  command: PublishMessageCommand,
): Promise<string> {
  for (let attempt = 1; ; attempt += 1) {
    const answer = await (await leadingReplica(replicas)).publish(command);
    if (answer.outcome === "published") return answer.key;
    if (attempt === 1_000) throw new Error(`${command.name} was not published: ${answer.outcome}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/**
 * Storage environments of replicas a test runs in process, one temporary directory per member. A member's directory
 * outlives its environment, so a replica closed and opened again finds what it stored.
 */
export class MemberEnvironments {
  private readonly directories = new Map<number, string>();
  private readonly environments = new Map<number, StorageEnvironment>();

  /** `prefix` names the temporary directories. */
  constructor(private readonly prefix: string) {}

  /** The member's environment, opened (over a new directory the first time) when it is not open. */
  async of(memberId: number): Promise<StorageEnvironment> {
    let environment = this.environments.get(memberId);
    if (environment === undefined) {
      const directory = this.directories.get(memberId) ?? (await temporaryDirectory(`${this.prefix}-${memberId}`));
      this.directories.set(memberId, directory);
      environment = StorageEnvironment.open({ directory, synchronousCommit: true });
      this.environments.set(memberId, environment);
    }
    return environment;
  }

  /** The member's environment if it is open. */
  opened(memberId: number): StorageEnvironment | undefined {
    return this.environments.get(memberId);
  }

  /** Closes the member's environment; its directory stays for the next `of`. */
  async close(memberId: number): Promise<void> {
    await this.environments.get(memberId)?.close();
    this.environments.delete(memberId);
  }

  /** Closes the member's environment and deletes its directory, as a replaced disk would lose it. */
  async lose(memberId: number): Promise<void> {
    await this.close(memberId);
    const directory = this.directories.get(memberId);
    if (directory !== undefined) await removeDirectory(directory);
    this.directories.delete(memberId);
  }

  /** Closes every environment and deletes every directory. */
  async removeAll(): Promise<void> {
    for (const memberId of [...this.environments.keys()]) await this.close(memberId);
    await Promise.all([...this.directories.values()].map((directory) => removeDirectory(directory)));
    this.directories.clear();
  }
}

/** What `inProcessReplicaOptions` needs besides the quick timings every in-process replica test uses. */
export interface InProcessReplica {
  readonly memberId: number;
  readonly environment: StorageEnvironment;
  readonly bootstrap: readonly Member[] | null;
  /** Delivers a message to another member (the test decides whether and when). */
  readonly send: (to: number, message: Message) => void;
  /** By default a failure is thrown, so that it fails the test. */
  readonly onFailure?: (error: Error) => void;
  readonly snapshotWindowChunks?: number | undefined;
}

/**
 * Options of a replica of partition 1 run in process: heartbeats every 10 ms, elections after 80, a snapshot every 50
 * entries (so a joining replica catches up through one), silent logs.
 */
export function inProcessReplicaOptions(replica: InProcessReplica): PartitionReplicaOptions {
  return {
    partitionId: 1,
    memberId: replica.memberId,
    environment: replica.environment,
    bootstrap: replica.bootstrap,
    heartbeatIntervalMs: 10,
    electionTimeoutMs: 80,
    snapshotIntervalEntries: 50,
    snapshotWindowChunks: replica.snapshotWindowChunks,
    maxPendingProposals: 256,
    maxApplyLagEntries: 10_000,
    send: replica.send,
    onFailure:
      replica.onFailure ??
      ((error) => {
        throw error;
      }),
    logger: pino({ level: "silent" }),
  };
}

/**
 * In-memory acceptors of a change (topology/change-acceptance.ts) for coordinators under test: member `brokerId`
 * answers as one holding configuration version `heldVersion(brokerId)` would, and not at all when that is null.
 * `pause`, when given, runs before each answer (a scheduler interleaving two coordinators).
 */
export class MemberAcceptors {
  readonly states = new Map<number, AcceptorState | null>();
  /** Answers given, by phase, for tests that assert what was asked. */
  readonly answered = { prepare: 0, accept: 0 };

  constructor(
    private readonly heldVersion: (brokerId: number) => number | null,
    private readonly pause: () => Promise<void> = async () => {},
  ) {}

  /** The two functions a coordinator's context needs. */
  context(): Pick<CoordinatorContext, "prepareChange" | "acceptChange"> {
    return {
      prepareChange: async (brokerId, version, ballot, othersHoldNothing) => {
        await this.pause();
        const held = this.heldVersion(brokerId);
        if (held === null) return null;
        this.answered.prepare++;
        const state = this.states.get(brokerId) ?? null;
        return this.apply(brokerId, prepare(state, held, version, ballot, othersHoldNothing === true));
      },
      acceptChange: async (brokerId, version, ballot, configuration) => {
        await this.pause();
        const held = this.heldVersion(brokerId);
        if (held === null) return null;
        this.answered.accept++;
        return this.apply(brokerId, accept(this.states.get(brokerId) ?? null, held, version, ballot, configuration));
      },
    };
  }

  private apply<Answer>(brokerId: number, step: AcceptorStep<Answer>): Answer {
    if (step.state !== null) this.states.set(brokerId, step.state);
    return step.answer;
  }
}

/**
 * Publishes `message` on `partitionId` through its current leader among `brokers`, asking again (every 20 ms, at most
 * `attempts` times) while there is none or it does not answer `published`; returns the message's key.
 */
export async function publishThroughLeadingBroker(
  client: TransportClient<BrokerRequest, unknown>,
  brokers: readonly Broker[],
  partitionId: number,
  message: PublishMessageCommand,
  options: { attempts: number; timeoutMs: number },
): Promise<string> {
  for (let attempt = 0; attempt < options.attempts; attempt += 1) {
    const leader = leaderOf(brokers, partitionId);
    if (leader !== undefined) {
      const answer = (await client
        .request(
          leader.clusterAddress,
          { type: "publish-message", partitionId, message },
          { timeoutMs: options.timeoutMs },
        )
        .catch(() => null)) as PublishMessageResponse | null;
      if (answer?.outcome === "published") return answer.key;
    }
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  throw new Error(`could not publish ${message.name}`);
}
