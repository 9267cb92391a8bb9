/**
 * The JSON form of the cluster configuration, used for gossip and for persisting it. The document has the shape of
 * the monitoring response of spec/cluster-management.md (`brokers` as an array sorted by id, each with its
 * partitions sorted by id; `lastChange`, `earlierChanges` and `pendingChange` omitted when there is none), so the same document can
 * answer `GET /actuator/cluster`. Encoding is canonical: equal configurations give equal text.
 */
import { type Static, Type } from "typebox";
import { Compile } from "typebox/compile";
import {
  type ClusterConfiguration,
  type ClusterOperation,
  type CompletedChange,
  type CompletedOperation,
  isIsoTimestamp,
  MAX_EARLIER_CHANGES,
  type MemberState,
  type PartitionReplica,
  type RoutingState,
} from "./configuration.js";
import { MAX_PARTITION_COUNT } from "./distribution.js";

const brokerId = Type.Integer({ minimum: 0 });
const partitionId = Type.Integer({ minimum: 1, maximum: MAX_PARTITION_COUNT });
const priority = Type.Integer({ minimum: 1 });
const timestamp = Type.String({ minLength: 1 });
const positiveCount = Type.Integer({ minimum: 1, maximum: MAX_PARTITION_COUNT });

const operationFields = {
  operation: Type.Union(
    (
      [
        "BROKER_ADD",
        "BROKER_REMOVE",
        "PARTITION_JOIN",
        "PARTITION_LEAVE",
        "PARTITION_RECONFIGURE_PRIORITY",
        "PARTITION_FORCE_RECONFIGURE",
        "START_PARTITION_SCALE_UP",
        "PARTITION_BOOTSTRAP",
        "AWAIT_REDISTRIBUTION",
        "AWAIT_RELOCATION",
      ] as const
    ).map((name) => Type.Literal(name)),
  ),
  brokerId,
  partitionId: Type.Optional(partitionId),
  priority: Type.Optional(priority),
  brokers: Type.Optional(Type.Array(brokerId)),
};

const partitionSchema = Type.Object({
  id: partitionId,
  state: Type.Union([
    Type.Literal("JOINING"),
    Type.Literal("ACTIVE"),
    Type.Literal("LEAVING"),
    Type.Literal("BOOTSTRAPPING"),
  ]),
  priority,
  config: Type.Object({
    exporting: Type.Object({
      exporters: Type.Array(
        Type.Object({
          id: Type.String({ minLength: 1 }),
          state: Type.Union([Type.Literal("ENABLED"), Type.Literal("DISABLED")]),
        }),
      ),
    }),
  }),
});

const brokerSchema = Type.Object({
  id: brokerId,
  state: Type.Union([Type.Literal("ACTIVE"), Type.Literal("JOINING"), Type.Literal("LEAVING"), Type.Literal("LEFT")]),
  version: Type.Integer({ minimum: 0 }),
  lastUpdatedAt: timestamp,
  partitions: Type.Array(partitionSchema),
});

/** Longest history of earlier changes a document may carry. */
const MAX_DECODED_EARLIER_CHANGES = 100;

const completedChangeSchema = Type.Object({
  id: Type.Integer({ minimum: 1 }),
  status: Type.Union([Type.Literal("COMPLETED"), Type.Literal("CANCELLED"), Type.Literal("FAILED")]),
  startedAt: timestamp,
  completedAt: timestamp,
});

const documentSchema = Type.Object({
  version: Type.Integer({ minimum: 1 }),
  brokers: Type.Array(brokerSchema),
  lastChange: Type.Optional(completedChangeSchema),
  // Another version may keep a longer history (or write an empty one): accepted up to a generous bound and cut to
  // what this version keeps, so a mixed cluster never refuses a configuration over its history.
  earlierChanges: Type.Optional(Type.Array(completedChangeSchema, { maxItems: MAX_DECODED_EARLIER_CHANGES })),
  pendingChange: Type.Optional(
    Type.Object({
      id: Type.Integer({ minimum: 1 }),
      status: Type.Literal("IN_PROGRESS"),
      startedAt: timestamp,
      completed: Type.Array(Type.Object({ ...operationFields, completedAt: timestamp })),
      pending: Type.Array(Type.Object(operationFields)),
    }),
  ),
  routing: Type.Object({
    version: Type.Integer({ minimum: 1 }),
    requestHandling: Type.Union([
      Type.Object({ strategy: Type.Literal("AllPartitions"), partitionCount: positiveCount }),
      Type.Object({
        strategy: Type.Literal("ActivePartitions"),
        basePartitionCount: positiveCount,
        additionalActivePartitions: Type.Array(partitionId),
        inactivePartitions: Type.Array(partitionId),
      }),
    ]),
    messageCorrelation: Type.Object({ strategy: Type.Literal("HashMod"), partitionCount: positiveCount }),
  }),
});
/** The document's validator, compiled once. */
const documentValidator = Compile(documentSchema);

/** The JSON document of a configuration (plain data, safe for `JSON.stringify`). */
export type ConfigurationDocument = Static<typeof documentSchema>;

/** Thrown by `decodeConfiguration` for malformed input; `problems` say what is wrong and where. */
export class ConfigurationDecodeError extends Error {
  constructor(readonly problems: readonly string[]) {
    super(`malformed cluster configuration: ${problems.join("; ")}`);
    this.name = "ConfigurationDecodeError";
  }
}

function copyCompletedChange(change: CompletedChange): CompletedChange {
  return { id: change.id, status: change.status, startedAt: change.startedAt, completedAt: change.completedAt };
}

function copyOperation(operation: ClusterOperation): ClusterOperation {
  return {
    operation: operation.operation,
    brokerId: operation.brokerId,
    ...(operation.partitionId === undefined ? {} : { partitionId: operation.partitionId }),
    ...(operation.priority === undefined ? {} : { priority: operation.priority }),
    ...(operation.brokers === undefined ? {} : { brokers: [...operation.brokers] }),
  };
}

function copyRouting(routing: RoutingState): RoutingState {
  const handling = routing.requestHandling;
  return {
    version: routing.version,
    requestHandling:
      handling.strategy === "AllPartitions"
        ? { strategy: "AllPartitions", partitionCount: handling.partitionCount }
        : {
            strategy: "ActivePartitions",
            basePartitionCount: handling.basePartitionCount,
            additionalActivePartitions: [...handling.additionalActivePartitions],
            inactivePartitions: [...handling.inactivePartitions],
          },
    messageCorrelation: { strategy: "HashMod", partitionCount: routing.messageCorrelation.partitionCount },
  };
}

function ascending(left: number, right: number): number {
  return left - right;
}

/** The configuration as a plain JSON document in canonical order (the monitoring response's shape). */
export function toConfigurationDocument(configuration: ClusterConfiguration): ConfigurationDocument {
  const brokers = [...configuration.members.keys()].sort(ascending).map((id) => {
    const member = configuration.members.get(id)!;
    return {
      id,
      state: member.state,
      version: member.version,
      lastUpdatedAt: member.lastUpdatedAt,
      partitions: [...member.partitions.keys()].sort(ascending).map((partitionId) => {
        const replica = member.partitions.get(partitionId)!;
        return {
          id: partitionId,
          state: replica.state,
          priority: replica.priority,
          config: {
            exporting: {
              exporters: replica.config.exporting.exporters.map((exporter) => ({
                id: exporter.id,
                state: exporter.state,
              })),
            },
          },
        };
      }),
    };
  });
  const { lastChange, earlierChanges, pendingChange } = configuration;
  return {
    version: configuration.version,
    brokers,
    ...(lastChange === null ? {} : { lastChange: copyCompletedChange(lastChange) }),
    ...(earlierChanges.length === 0 ? {} : { earlierChanges: earlierChanges.map(copyCompletedChange) }),
    ...(pendingChange === null
      ? {}
      : {
          pendingChange: {
            id: pendingChange.id,
            status: pendingChange.status,
            startedAt: pendingChange.startedAt,
            completed: pendingChange.completed.map((operation) => ({
              ...copyOperation(operation),
              completedAt: operation.completedAt,
            })),
            pending: pendingChange.pending.map(copyOperation),
          },
        }),
    routing: copyRouting(configuration.routing),
  } as ConfigurationDocument;
}

/**
 * Encodings already made, by configuration. A configuration is an immutable value (every field is read-only, and
 * changes build new objects), so its encoding never changes; a broker encodes the one it holds for every gossip
 * round, describe answer and merge, and at the replica bound one encoding takes tens of milliseconds.
 */
const encodings = new WeakMap<ClusterConfiguration, string>();

/** Canonical JSON text of the configuration, for gossip and persistence. */
export function encodeConfiguration(configuration: ClusterConfiguration): string {
  let text = encodings.get(configuration);
  if (text === undefined) {
    text = JSON.stringify(toConfigurationDocument(configuration));
    encodings.set(configuration, text);
  }
  return text;
}

/** Problems the schema cannot express: duplicate ids, timestamps, change ids. */
function semanticProblems(document: ConfigurationDocument): string[] {
  const problems: string[] = [];
  const checkTime = (path: string, value: string) => {
    if (!isIsoTimestamp(value)) problems.push(`${path} ${JSON.stringify(value)} is not an ISO time`);
  };
  const brokerIds = new Set<number>();
  for (const [index, broker] of document.brokers.entries()) {
    if (brokerIds.has(broker.id)) problems.push(`/brokers/${index}: broker ${broker.id} appears more than once`);
    brokerIds.add(broker.id);
    checkTime(`/brokers/${index}/lastUpdatedAt`, broker.lastUpdatedAt);
    const partitionIds = new Set<number>();
    for (const partition of broker.partitions) {
      if (partitionIds.has(partition.id)) {
        problems.push(`/brokers/${index}: broker ${broker.id} lists partition ${partition.id} more than once`);
      }
      partitionIds.add(partition.id);
    }
  }
  const { lastChange, earlierChanges, pendingChange } = document;
  if (lastChange !== undefined) {
    checkTime("/lastChange/startedAt", lastChange.startedAt);
    checkTime("/lastChange/completedAt", lastChange.completedAt);
  }
  if (earlierChanges !== undefined) {
    // The history is newest first and ends before the last change: each id is below the one before it.
    let newerId = lastChange?.id;
    if (newerId === undefined && earlierChanges.length > 0) {
      problems.push("/earlierChanges is present without a lastChange");
    }
    for (const [index, change] of earlierChanges.entries()) {
      checkTime(`/earlierChanges/${index}/startedAt`, change.startedAt);
      checkTime(`/earlierChanges/${index}/completedAt`, change.completedAt);
      if (newerId !== undefined && change.id >= newerId) {
        problems.push(`/earlierChanges/${index}/id ${change.id} is not lower than the newer change's id ${newerId}`);
      }
      newerId = change.id;
    }
  }
  if (pendingChange !== undefined) {
    checkTime("/pendingChange/startedAt", pendingChange.startedAt);
    for (const [index, operation] of pendingChange.completed.entries()) {
      checkTime(`/pendingChange/completed/${index}/completedAt`, operation.completedAt);
    }
    if (lastChange !== undefined && pendingChange.id <= lastChange.id) {
      problems.push(`/pendingChange/id ${pendingChange.id} is not higher than the last change id ${lastChange.id}`);
    }
  }
  return problems;
}

/** Parses and validates configuration text; throws `ConfigurationDecodeError` naming what is wrong and where. */
export function decodeConfiguration(text: string): ClusterConfiguration {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (error) {
    throw new ConfigurationDecodeError([`not JSON: ${(error as Error).message}`]);
  }
  return fromConfigurationDocument(parsed);
}

/** Validates a parsed document and builds the configuration; throws `ConfigurationDecodeError` when malformed. */
export function fromConfigurationDocument(value: unknown): ClusterConfiguration {
  // The compiled check is cheap; listing the errors walks the document again, interpreted, so only a malformed
  // document pays for it. Every broker's configuration is decoded by the gateway once a second, and by every broker
  // it gossips with.
  if (!documentValidator.Check(value)) {
    const schemaErrors = documentValidator.Errors(value);
    // The check decides: a document it refuses is refused even if the listing found nothing to name.
    throw new ConfigurationDecodeError(
      schemaErrors.length === 0
        ? ["/ does not match the configuration document's schema"]
        : schemaErrors.slice(0, 20).map((error) => `${error.instancePath || "/"} ${error.message}`),
    );
  }
  const document = value as ConfigurationDocument;
  const problems = semanticProblems(document);
  if (problems.length > 0) throw new ConfigurationDecodeError(problems);

  const members = new Map<number, MemberState>();
  for (const broker of [...document.brokers].sort((left, right) => left.id - right.id)) {
    const partitions = new Map<number, PartitionReplica>();
    for (const partition of [...broker.partitions].sort((left, right) => left.id - right.id)) {
      partitions.set(partition.id, {
        state: partition.state,
        priority: partition.priority,
        config: {
          exporting: {
            exporters: partition.config.exporting.exporters.map((exporter) => ({
              id: exporter.id,
              state: exporter.state,
            })),
          },
        },
      });
    }
    members.set(broker.id, {
      state: broker.state,
      version: broker.version,
      lastUpdatedAt: broker.lastUpdatedAt,
      partitions,
    });
  }
  const { lastChange, earlierChanges, pendingChange } = document;
  return {
    version: document.version,
    members,
    lastChange: lastChange === undefined ? null : copyCompletedChange(lastChange),
    earlierChanges: (earlierChanges ?? []).slice(0, MAX_EARLIER_CHANGES).map(copyCompletedChange),
    pendingChange:
      pendingChange === undefined
        ? null
        : {
            id: pendingChange.id,
            status: pendingChange.status,
            startedAt: pendingChange.startedAt,
            completed: pendingChange.completed.map(
              (operation): CompletedOperation => ({
                ...copyOperation(operation as ClusterOperation),
                completedAt: operation.completedAt,
              }),
            ),
            pending: pendingChange.pending.map((operation) => copyOperation(operation as ClusterOperation)),
          },
    routing: copyRouting(document.routing as RoutingState),
  };
}
