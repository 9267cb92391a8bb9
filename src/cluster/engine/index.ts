/**
 * Public surface of the engine: the partition state machine, its records and codecs, record keys and the
 * correlation-key hash that picks a message's partition.
 */
export { correlationKeyHash, partitionForCorrelationKey, routingKeyOf } from "./correlation.js";
export type { SlabStatistics } from "./entry-slabs.js";
export {
  type DecodedKey,
  encodeKey,
  isValidPartitionId,
  MAX_KEY_COUNTER,
  MAX_PARTITION_ID,
  MIN_KEY_COUNTER,
  MIN_PARTITION_ID,
  parseKey,
  partitionOfKey,
} from "./keys.js";
export {
  type ApplyResult,
  type BufferedMessage,
  type Checkpoint,
  type EngineSnapshotRestorer,
  type OutboundMessage,
  PartitionEngine,
  type PartitionEngineOptions,
} from "./partition-engine.js";
export {
  type CheckpointRecord,
  DEFAULT_TENANT_ID,
  decodedCheckpointId,
  decodeRecord,
  type EngineRecord,
  type ExpireMessagesRecord,
  encodedCheckpointId,
  encodeRecord,
  isCheckpointId,
  isTimestamp,
  isValidTenantId,
  MAX_RELOCATION_BATCH,
  MAX_SAFE_CHECKPOINT_ID,
  MAX_TIMESTAMP_MS,
  MESSAGE_LIMITS,
  type PublishMessageRecord,
  RecordValidationError,
  type RelocatedMessage,
  type RelocatedOutRecord,
  type RelocateInRecord,
  type RelocateOutRecord,
  type Relocation,
  type RouteMessagesRecord,
} from "./records.js";
export type { EngineSnapshotEncoder } from "./snapshot-encoder.js";
