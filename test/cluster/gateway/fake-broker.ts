/**
 * A fake broker for gateway tests: a real ClusterTransport on loopback that answers the gateway protocol
 * (describe, publish-message, get-message) from a small in-memory state the test controls. It sits below the unit
 * under test (the gateway), which DESIGN.md allows.
 */
import type {
  BrokerAddress,
  BrokerRequest,
  GetMessageResponse,
  MessageView,
  PublishMessageResponse,
  ReplicaReport,
} from "../../../src/cluster/broker/protocol.js";
import { encodeKey } from "../../../src/cluster/engine/index.js";
import {
  type ClusterConfiguration,
  encodeConfiguration,
  initialConfiguration,
  roundRobinDistribution,
} from "../../../src/cluster/topology/index.js";
import { ClusterTransport } from "../../../src/cluster/transport/index.js";
import { testClusterCredentials } from "../../support/cluster-secret.js";

/** The configuration of a 3-broker, 3-partition, RF 3 cluster (round robin). */
export function threeBrokerConfiguration(): ClusterConfiguration {
  return initialConfiguration({
    clusterSize: 3,
    partitionCount: 3,
    replicationFactor: 3,
    distribution: roundRobinDistribution([0, 1, 2], 3, 3),
    nowIso: "2026-01-01T00:00:00.000Z",
  });
}

/** A request addressed to one partition. */
export type PartitionRequest = Extract<BrokerRequest, { partitionId: number }>;

/** A request of the cluster management API, which the gateway sends to the coordinator. */
export type ManagementRequest = Extract<
  BrokerRequest,
  { type: "cluster-change" | "cluster-cancel" | "cluster-status" }
>;

/** A hook that may replace the fake's answer to a partition request (e.g. not-leader, or never answer). */
export type RequestInterceptor = (
  request: PartitionRequest,
) => Promise<PublishMessageResponse | GetMessageResponse> | undefined;

/** One fake broker; `leads` says which partitions it leads (it follows the others). */
export class FakeBroker {
  readonly transport: ClusterTransport<unknown, BrokerRequest, unknown>;
  leads = new Set<number>();
  /** Every partition request received, in order. */
  readonly received: BrokerRequest[] = [];
  interceptor: RequestInterceptor | undefined;
  /** Answers management requests; without it they are answered with the configuration (status) or refused. */
  management: ((request: ManagementRequest) => Promise<unknown>) | undefined;
  address: BrokerAddress | undefined;
  /** The connections (the client's address and port) each type of request arrived on. */
  readonly connectionsByRequestType = new Map<string, Set<string>>();
  private readonly messages = new Map<string, MessageView>();
  private counter = 0;

  constructor(
    readonly nodeId: number,
    private readonly cluster: { brokers: () => BrokerAddress[]; configuration: () => ClusterConfiguration },
  ) {
    this.transport = new ClusterTransport({
      nodeId,
      host: "127.0.0.1",
      port: 0,
      credentials: testClusterCredentials(),
    });
    this.transport.onRequest(async (from, request) => {
      if (from.role === "client") {
        const connections = this.connectionsByRequestType.get(request.type) ?? new Set<string>();
        connections.add(from.remoteAddress);
        this.connectionsByRequestType.set(request.type, connections);
      }
      return this.answer(request);
    });
  }

  async listen(): Promise<BrokerAddress> {
    const bound = await this.transport.listen();
    this.address = { nodeId: this.nodeId, host: bound.host, port: bound.port };
    return this.address;
  }

  private replicas(): ReplicaReport[] {
    return [1, 2, 3].map((partitionId) => ({
      partitionId,
      role: this.leads.has(partitionId) ? "leader" : "follower",
      health: "healthy",
      term: 2,
      commitIndex: 10,
      appliedIndex: 10,
      leaderId: null,
      logSizeEntries: 7,
    }));
  }

  private async answer(request: BrokerRequest): Promise<unknown> {
    if (request.type === "describe") {
      return {
        nodeId: this.nodeId,
        host: this.address?.host ?? "",
        port: this.address?.port ?? 0,
        version: "0.1.0-fake",
        configuration: encodeConfiguration(this.cluster.configuration()),
        brokers: this.cluster.brokers(),
        replicas: this.replicas(),
      };
    }
    this.received.push(request);
    if (request.type === "cluster-change" || request.type === "cluster-cancel" || request.type === "cluster-status") {
      if (this.management !== undefined) return this.management(request);
      if (request.type === "cluster-status") {
        return { outcome: "status", configuration: encodeConfiguration(this.cluster.configuration()) };
      }
      return { outcome: "refused", status: 400, detail: "the fake broker plans nothing" };
    }
    if (
      request.type === "backup-take" ||
      request.type === "backup-list" ||
      request.type === "backup-status" ||
      request.type === "backup-delete"
    ) {
      return { outcome: "refused", status: 409, detail: "the fake broker takes no backups" };
    }
    const intercepted = this.interceptor?.(request);
    if (intercepted !== undefined) return intercepted;
    if (!this.leads.has(request.partitionId)) return { outcome: "not-leader", leaderId: null };
    if (request.type === "publish-message") {
      const { message } = request;
      const duplicate = [...this.messages.values()].some(
        (existing) =>
          message.messageId !== undefined &&
          existing.messageId === message.messageId &&
          existing.partitionId === request.partitionId,
      );
      if (duplicate) {
        return { outcome: "rejected", reason: "duplicate-message-id", detail: "message id already buffered" };
      }
      this.counter += 1;
      const key = encodeKey(request.partitionId, this.counter);
      this.messages.set(key, {
        key,
        partitionId: request.partitionId,
        name: message.name,
        correlationKey: message.correlationKey,
        timeToLiveMs: message.timeToLiveMs,
        ...(message.messageId === undefined ? {} : { messageId: message.messageId }),
        variables: message.variables,
        tenantId: message.tenantId,
        publishedAt: "2026-01-01T00:00:00.000Z",
        expiresAt: "2026-01-01T00:00:01.000Z",
      });
      return { outcome: "published", key, partitionId: request.partitionId, tenantId: message.tenantId };
    }
    const found = this.messages.get(request.key);
    return found === undefined ? { outcome: "not-found" } : { outcome: "found", message: found };
  }
}

/** Three fake brokers, broker p−1 leading partition p. */
export async function startFakeCluster(): Promise<{ brokers: FakeBroker[]; close(): Promise<void> }> {
  const configuration = threeBrokerConfiguration();
  const brokers: FakeBroker[] = [];
  const shared = {
    brokers: () => brokers.flatMap((broker) => (broker.address === undefined ? [] : [broker.address])),
    configuration: () => configuration,
  };
  for (const nodeId of [0, 1, 2]) {
    const broker = new FakeBroker(nodeId, shared);
    broker.leads.add(nodeId + 1);
    await broker.listen();
    brokers.push(broker);
  }
  return {
    brokers,
    async close() {
      await Promise.all(brokers.map((broker) => broker.transport.close()));
    },
  };
}
