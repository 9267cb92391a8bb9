/**
 * Typed client of the cluster management API (a gateway's management port, spec/cluster-management.md): plan and
 * start changes, watch them, cancel them. Every call needs a token with the `cluster` scope for the gateway audience.
 */
import { type Static, Type } from "typebox";
import { type ApiClientOptions, ApiTransport } from "./api.js";

/** The default audience of gateway tokens. */
export const gatewayAudience = "gateway-api";

/** Schema of one operation of a change (the spec's operation entry). */
export const operationSchema = Type.Object(
  {
    operation: Type.String(),
    brokerId: Type.Integer(),
    partitionId: Type.Optional(Type.Integer()),
    priority: Type.Optional(Type.Integer()),
    brokers: Type.Optional(Type.Array(Type.Integer())),
    completedAt: Type.Optional(Type.String()),
  },
  { additionalProperties: true },
);

/** One operation of a change. */
export type ClusterOperationEntry = Static<typeof operationSchema>;

/** Schema of a broker entry (configuration, expected topology). */
export const brokerEntrySchema = Type.Object(
  {
    id: Type.Integer(),
    state: Type.String(),
    version: Type.Integer(),
    lastUpdatedAt: Type.String(),
    partitions: Type.Array(
      Type.Object(
        { id: Type.Integer(), state: Type.String(), priority: Type.Integer() },
        { additionalProperties: true },
      ),
    ),
  },
  { additionalProperties: true },
);

/** One broker of the cluster configuration. */
export type BrokerEntry = Static<typeof brokerEntrySchema>;

/** Schema of the answer to a change request (202). */
export const scaleResponseSchema = Type.Object(
  {
    changeId: Type.Integer(),
    currentTopology: Type.Array(brokerEntrySchema),
    plannedChanges: Type.Array(operationSchema),
    expectedTopology: Type.Array(brokerEntrySchema),
  },
  { additionalProperties: true },
);

/** The answer to a change request. */
export type ScaleResponse = Static<typeof scaleResponseSchema>;

/** Schema of the progress of the running operation, as its broker reports it. */
export const operationProgressSchema = Type.Object(
  {
    operation: operationSchema,
    startedAt: Type.String(),
    attempts: Type.Integer(),
    lastError: Type.Union([Type.String(), Type.Null()]),
    bytesTotal: Type.Union([Type.Number(), Type.Null()]),
    bytesMoved: Type.Union([Type.Number(), Type.Null()]),
    estimatedSecondsLeft: Type.Union([Type.Number(), Type.Null()]),
  },
  { additionalProperties: true },
);

/** Schema of a change that ended, as the monitoring response shows it. */
export const endedChangeSchema = Type.Object(
  { id: Type.Integer(), status: Type.String(), startedAt: Type.String(), completedAt: Type.String() },
  { additionalProperties: true },
);

/** A change that ended: how, and when it started and ended. */
export type EndedChange = Static<typeof endedChangeSchema>;

/** Schema of the monitoring response (`GET /actuator/cluster`). */
export const clusterStatusSchema = Type.Object(
  {
    version: Type.Integer(),
    brokers: Type.Array(brokerEntrySchema),
    lastChange: Type.Optional(endedChangeSchema),
    /** Changes that ended before `lastChange`, newest first (a short history). */
    earlierChanges: Type.Optional(Type.Array(endedChangeSchema)),
    /** Why no change may start now (a backup being written); absent when nothing blocks changes. */
    changesBlockedBy: Type.Optional(Type.String()),
    pendingChange: Type.Optional(
      Type.Object(
        {
          id: Type.Integer(),
          status: Type.String(),
          startedAt: Type.String(),
          completed: Type.Array(operationSchema),
          pending: Type.Array(operationSchema),
          progress: Type.Optional(operationProgressSchema),
          /** Present when the running operation's broker does not answer the gateway. */
          waitingFor: Type.Optional(Type.String()),
        },
        { additionalProperties: true },
      ),
    ),
    routing: Type.Object({}, { additionalProperties: true }),
  },
  { additionalProperties: true },
);

/** The monitoring response. */
export type ClusterStatus = Static<typeof clusterStatusSchema>;

/** The PATCH body (spec endpoint 5). */
export interface ClusterPatch {
  brokers?: { add?: number[]; remove?: number[]; count?: number };
  partitions?: { count: number; replicationFactor: number };
}

/** Brokers a change adds to and removes from the cluster as it is. */
export interface BrokerDelta {
  added: number[];
  removed: number[];
}

/** The broker ids a PATCH body adds to and removes from a cluster whose members are `currentIds`, ascending. */
export function brokerDelta(patch: ClusterPatch, currentIds: readonly number[]): BrokerDelta {
  let target: number[];
  if (patch.brokers?.count !== undefined) target = Array.from({ length: patch.brokers.count }, (_, id) => id);
  else {
    const remove = new Set(patch.brokers?.remove ?? []);
    target = [...new Set([...currentIds, ...(patch.brokers?.add ?? [])])].filter((id) => !remove.has(id));
  }
  const ascending = (left: number, right: number): number => left - right;
  return {
    added: target.filter((id) => !currentIds.includes(id)).sort(ascending),
    removed: currentIds.filter((id) => !target.includes(id)).sort(ascending),
  };
}

/** Query options of change requests. */
export interface ChangeOptions {
  /** Plan and simulate, record nothing. */
  dryRun?: boolean;
  /** Remove brokers that are gone for good without moving their partitions. */
  force?: boolean;
}

function query(parameters: Record<string, string | number | boolean | undefined>): string {
  const entries = Object.entries(parameters).filter((entry): entry is [string, string | number | boolean] => {
    const value = entry[1];
    return value !== undefined && value !== false;
  });
  const pairs: [string, string][] = entries.map(([key, value]) => [key, String(value)]);
  return pairs.length === 0 ? "" : `?${new URLSearchParams(pairs)}`;
}

/** See the module comment. */
export class ClusterManagementClient {
  private readonly transport: ApiTransport;

  /** Creates a client for the management port at `options.baseUrl` (e.g. `http://localhost:9600`). */
  constructor(options: ApiClientOptions) {
    this.transport = new ApiTransport(options, gatewayAudience);
  }

  /** The configuration, the last change and the running one with its progress. */
  async status(): Promise<ClusterStatus> {
    return (await this.transport.sendForJson("GET", "/actuator/cluster", clusterStatusSchema)) as ClusterStatus;
  }

  /** Scales to exactly `brokerIds` (endpoint 4); with `force`, keeps only them without moving partitions. */
  async scaleBrokers(
    brokerIds: readonly number[],
    options: ChangeOptions & { replicationFactor?: number } = {},
  ): Promise<ScaleResponse> {
    const path = `/actuator/cluster/brokers${query({ dryRun: options.dryRun, force: options.force, replicationFactor: options.replicationFactor })}`;
    return (await this.transport.sendForJson("POST", path, scaleResponseSchema, brokerIds, {
      readOnly: options.dryRun === true,
    })) as ScaleResponse;
  }

  /** Adds or removes brokers, changes the partition count or replication factor (endpoint 5). */
  async patch(body: ClusterPatch, options: ChangeOptions = {}): Promise<ScaleResponse> {
    const path = `/actuator/cluster${query({ dryRun: options.dryRun, force: options.force })}`;
    return (await this.transport.sendForJson("PATCH", path, scaleResponseSchema, body, {
      readOnly: options.dryRun === true,
    })) as ScaleResponse;
  }

  /** Cancels the running change `changeId`; operations already applied stay applied. */
  async cancel(changeId: number): Promise<ClusterStatus> {
    return (await this.transport.sendForJson(
      "DELETE",
      `/actuator/cluster/changes/${changeId}`,
      clusterStatusSchema,
    )) as ClusterStatus;
  }
}
