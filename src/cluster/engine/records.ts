/**
 * The commands a partition leader proposes (the data of normal Raft entries) and their byte layout.
 *
 * Every record is a msgpack array whose first element is the record kind:
 * - publishMessage: `[1, name, correlationKey, timeToLiveMs, messageId | null, variables, tenantId, publishedAtMs]`,
 *   where `variables` is itself a msgpack-encoded map carried as a binary value. Keeping the variables as bytes
 *   lets replicas buffer them without decoding (they are decoded only when a message is read) and makes the size
 *   limit exact.
 * - expireMessages: `[2, nowMs]`.
 * - routeMessages: `[3, correlationCount, basePartitionCount, relocating]`: from now on the partition owns only the
 *   correlation keys that hash to it over `correlationCount` partitions; while `relocating`, messages moving here
 *   from the `basePartitionCount` partitions of before may still be on their way (see partition-engine.ts).
 * - relocateOut: `[4, counters]`: these buffered messages leave for their new owner partition.
 * - relocatedOut: `[5, [[counter, newKey | null], …], checkpointId?]`: the new owner holds each message under
 *   `newKey` (null: it had expired on arrival); reads of its old key are forwarded there until its deadline.
 * - relocateIn: `[6, [[sourceKey, name, correlationKey, timeToLiveMs, messageId | null, variables, tenantId,
 *   publishedAtMs], …], nowMs, checkpointId?]`: messages relocated here from the partition that buffered each under
 *   `sourceKey`. Relocation moves messages in batches: one record, one commit and one round trip per batch rather
 *   than per message (moving a few thousand messages one at a time took over a minute on the development machine).
 * - checkpoint: `[7, checkpointId]`: the partition takes checkpoint `checkpointId` (a backup's id) where it applies
 *   this record, unless it took that checkpoint or a later one already.
 *
 * Checkpoint ids are 0..2^63 − 1 (bigint in memory). One up to 2^53 − 1 is encoded as a msgpack number, as every
 * earlier version encodes it, so those records keep their bytes; one above is encoded as a msgpack int64, which
 * earlier versions decode as a bigint and reject as invalid. Replicas of such a version would then apply the record
 * differently from this version's, so the coordinator takes an id above 2^53 − 1 only once every broker of the
 * cluster says it runs a version that takes them (see DEVELOPERS.md, "Backup ids beyond 2^53 − 1").
 *
 * The optional `checkpointId` of relocateIn and relocatedOut is the latest checkpoint of the partition on the other
 * side of the hand-over (absent when it has none, so that such records keep the layout of earlier versions). A partition applying one with a checkpoint id above its own takes
 * that checkpoint first, just before the record: whatever the other partition did after its checkpoint is then
 * after this partition's checkpoint too, so the checkpoints of all partitions form one consistent cut. Records
 * written before checkpoints existed have no such element and decode as carrying none.
 *
 * Arrays rather than maps keep records small and fast on the hot path. Times are milliseconds since the Unix epoch
 * read from the LEADER's clock when it proposes; replicas never read clocks, which keeps applying deterministic.
 */
import { Packr } from "msgpackr";
import { MAX_INT64 } from "../../json/int64.js";

/** Tenant of messages published without one; the same literal the workflow engine uses. */
export const DEFAULT_TENANT_ID = "<default>";

/** Explicit input limits, checked before a record is proposed and again when it is applied. */
export const MESSAGE_LIMITS = {
  /** Longest message name, in UTF-8 bytes (names must not be empty). */
  maxNameBytes: 1024,
  /** Longest correlation key, in UTF-8 bytes (the empty string means "no correlation key"). */
  maxCorrelationKeyBytes: 1024,
  /** Longest message id, in UTF-8 bytes (message ids, when present, must not be empty). */
  maxMessageIdBytes: 1024,
  /** Largest msgpack encoding of the variables, in bytes. */
  maxVariablesBytes: 256 * 1024,
  /** Longest time to live: ten years, in milliseconds. */
  maxTimeToLiveMs: 10 * 365 * 24 * 60 * 60 * 1000,
  /** Largest record as a whole: the variables plus the other fields with room for framing. */
  maxRecordBytes: 256 * 1024 + 8 * 1024,
} as const;

/** Latest publication time or expiry time accepted, so that `publishedAtMs + timeToLiveMs` stays a safe integer. */
export const MAX_TIMESTAMP_MS = Number.MAX_SAFE_INTEGER - MESSAGE_LIMITS.maxTimeToLiveMs;

/** Tenant ids other than the default: letters, digits, `_`, `.` and `-`, at most 31 characters. */
const TENANT_ID_PATTERN = /^[A-Za-z0-9_.-]{1,31}$/;

/** Buffer a message: the leader proposes it for `POST /v2/messages/publication`. */
export interface PublishMessageRecord {
  readonly kind: "publishMessage";
  readonly name: string;
  /** The empty string when the message has no correlation key. */
  readonly correlationKey: string;
  readonly timeToLiveMs: number;
  /** Unique per partition and tenant while a message with it is buffered; absent when the publisher gave none. */
  readonly messageId?: string;
  readonly variables: Readonly<Record<string, unknown>>;
  readonly tenantId: string;
  /** The leader's clock when it proposed the record, in milliseconds since the Unix epoch. */
  readonly publishedAtMs: number;
}

/** Drop every buffered message whose deadline (`publishedAtMs + timeToLiveMs`) is at or before `nowMs`. */
export interface ExpireMessagesRecord {
  readonly kind: "expireMessages";
  /** The leader's clock when it proposed the record, in milliseconds since the Unix epoch. */
  readonly nowMs: number;
}

/** Which correlation keys the partition owns from now on (proposed when partitions are added to the cluster). */
export interface RouteMessagesRecord {
  readonly kind: "routeMessages";
  /** Correlation keys are hashed over this many partitions. */
  readonly correlationCount: number;
  /** The partition count before partitions were added: where a key's messages may still be while relocating. */
  readonly basePartitionCount: number;
  /** Whether buffered messages are still being relocated to their new owners. */
  readonly relocating: boolean;
}

/** These buffered messages (by key counter) leave for the partitions that own their correlation keys now. */
export interface RelocateOutRecord {
  readonly kind: "relocateOut";
  readonly counters: readonly number[];
}

/** One relocated message the new owner took, under `newKey` (null when it had expired on arrival). */
export interface Relocation {
  readonly counter: number;
  readonly newKey: string | null;
}

/** The new owners took these relocated messages. */
export interface RelocatedOutRecord {
  readonly kind: "relocatedOut";
  readonly relocations: readonly Relocation[];
  /** The latest checkpoint of the partition that took the messages when it answered (null or absent: none). */
  readonly checkpointId?: bigint | null;
}

/** A message relocated from another partition, where it was buffered under `sourceKey`. */
export interface RelocatedMessage {
  readonly sourceKey: string;
  readonly name: string;
  readonly correlationKey: string;
  readonly timeToLiveMs: number;
  readonly messageId?: string;
  readonly variablesBytes: Uint8Array;
  readonly tenantId: string;
  /** When the message was first published; its deadline stays `publishedAtMs + timeToLiveMs`. */
  readonly publishedAtMs: number;
}

/** Messages relocated here from other partitions. */
export interface RelocateInRecord {
  readonly kind: "relocateIn";
  readonly messages: readonly RelocatedMessage[];
  /** The receiving leader's clock when it proposed the record. */
  readonly nowMs: number;
  /** The latest checkpoint of the partition the messages came from when it sent them (null or absent: none). */
  readonly checkpointId?: bigint | null;
}

/** Take checkpoint `checkpointId` (the id of a backup) where this record is applied. */
export interface CheckpointRecord {
  readonly kind: "checkpoint";
  readonly checkpointId: bigint;
}

/** Every record a partition applies. */
export type EngineRecord =
  | PublishMessageRecord
  | ExpireMessagesRecord
  | RouteMessagesRecord
  | RelocateOutRecord
  | RelocatedOutRecord
  | RelocateInRecord
  | CheckpointRecord;

/** Thrown by `encodeRecord` when a record breaks a limit or is malformed; `problems` name each broken rule. */
export class RecordValidationError extends Error {
  constructor(readonly problems: readonly string[]) {
    super(`invalid record: ${problems.join("; ")}`);
    this.name = "RecordValidationError";
  }
}

/** A publish record as applied: the variables stay encoded. */
export interface DecodedPublishMessage {
  readonly kind: "publishMessage";
  readonly name: string;
  readonly correlationKey: string;
  readonly timeToLiveMs: number;
  readonly messageId: string | null;
  readonly variablesBytes: Uint8Array;
  readonly tenantId: string;
  readonly publishedAtMs: number;
}

/** What `decodeAppliedRecord` yields: a record ready to apply, or the reason it cannot be applied. */
export type AppliedRecord =
  | DecodedPublishMessage
  | ExpireMessagesRecord
  | RouteMessagesRecord
  | RelocateOutRecord
  | RelocatedOutRecord
  | RelocateInRecord
  | CheckpointRecord
  | { readonly kind: "invalid"; detail: string };

const PUBLISH_MESSAGE_CODE = 1;
const EXPIRE_MESSAGES_CODE = 2;
const ROUTE_MESSAGES_CODE = 3;
const RELOCATE_OUT_CODE = 4;
const RELOCATED_OUT_CODE = 5;
const RELOCATE_IN_CODE = 6;
const CHECKPOINT_CODE = 7;

/**
 * The largest checkpoint id earlier versions take, 2^53 − 1: up to it an id is encoded as the msgpack number they
 * write, above it as an int64 they reject (see the module comment).
 */
export const MAX_SAFE_CHECKPOINT_ID = 2n ** 53n - 1n;

/** Whether `value` is a checkpoint id: a bigint in 0..2^63 − 1 (backup ids are chosen by operators). */
export function isCheckpointId(value: unknown): value is bigint {
  return typeof value === "bigint" && value >= 0n && value <= MAX_INT64;
}

/**
 * A checkpoint id as records, snapshots and requests between brokers carry it: a number up to 2^53 − 1 (the bytes
 * every earlier version writes), a bigint (msgpack int64) above.
 */
export function encodedCheckpointId(checkpointId: bigint): number | bigint {
  return checkpointId <= MAX_SAFE_CHECKPOINT_ID ? Number(checkpointId) : checkpointId;
}

/**
 * Reads a checkpoint id in one of the two forms `encodedCheckpointId` writes, as msgpack decodes them, and returns it
 * as a bigint: a number that is a safe integer ≥ 0, or a bigint in 2^53..2^63 − 1. Returns null for anything else: a
 * negative or fractional number, a double beyond 2^53 − 1 (it may have been rounded), a bigint from 2^63 on, and a
 * bigint up to 2^53 − 1, which no version writes and earlier versions refuse, so that every version rejects such a
 * record alike.
 */
export function decodedCheckpointId(value: unknown): bigint | null {
  if (typeof value === "number") return Number.isSafeInteger(value) && value >= 0 ? BigInt(value) : null;
  return isCheckpointId(value) && value > MAX_SAFE_CHECKPOINT_ID ? value : null;
}

/** Whether `value` may be the checkpoint id a hand-over carries: a checkpoint id, or null for none. */
function isCarriedCheckpointId(value: unknown): value is bigint | null {
  return value === null || isCheckpointId(value);
}

/** What the optional last field of a hand-over record (relocatedOut, relocateIn) holds. */
type CarriedCheckpointId =
  | { readonly wellFormed: true; readonly checkpointId: bigint | null }
  | { readonly wellFormed: false };

/**
 * The checkpoint id a hand-over record carries at `fields[index]`: none when the field is absent (the layout of
 * versions before checkpoints) or null, the id `decodedCheckpointId` reads otherwise, and not well formed when it
 * reads none.
 */
function carriedCheckpointId(fields: readonly unknown[], index: number): CarriedCheckpointId {
  const value = index < fields.length ? fields[index] : null;
  if (value === null) return { wellFormed: true, checkpointId: null };
  const checkpointId = decodedCheckpointId(value);
  return checkpointId === null ? { wellFormed: false } : { wellFormed: true, checkpointId };
}

/** Most messages one relocateOut, relocatedOut or relocateIn record carries. */
export const MAX_RELOCATION_BATCH = 1024;

/** msgpackr without record extensions, so every value decodes on its own without shared structures. */
const packr = new Packr({ useRecords: false });

function utf8Bytes(text: string): number {
  return Buffer.byteLength(text, "utf8");
}

/** Whether `value` is a time a record may hold: whole milliseconds since the epoch, in 0..`MAX_TIMESTAMP_MS`. */
export function isTimestamp(value: unknown): value is number {
  return Number.isSafeInteger(value) && (value as number) >= 0 && (value as number) <= MAX_TIMESTAMP_MS;
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return false;
  const prototype = Object.getPrototypeOf(value);
  return prototype === Object.prototype || prototype === null;
}

/** A UTF-16 surrogate without its other half: text that has no UTF-8 form. */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/**
 * Whether `text` is well-formed Unicode. A lone surrogate (which JSON's `\uD800` escapes can carry) has no UTF-8 form:
 * msgpack writes it as bytes that read back as U+FFFD, so the stored text would differ from the text sent, and two
 * message ids that differ only there would collide.
 */
function isWellFormed(text: string): boolean {
  return !LONE_SURROGATE.test(text);
}

/**
 * What in `variables` would not read back as it was sent, or null: the key `__proto__` (msgpack decoding renames such
 * keys to keep prototypes safe), a key or string that is not well-formed Unicode, a number beyond a double's range
 * (JSON's `1e400` parses as Infinity, which reads back as null). Refused instead of changed silently. The walk uses
 * an explicit stack, and runs only on variables whose encoding is within the size limit, so it is bounded.
 */
function variablesProblem(variables: Record<string, unknown>): string | null {
  const stack: unknown[] = [variables];
  while (stack.length > 0) {
    const value = stack.pop();
    if (typeof value === "string") {
      if (!isWellFormed(value)) return "variables must be well-formed Unicode: a string holds a lone surrogate";
      continue;
    }
    if (typeof value === "number") {
      if (!Number.isFinite(value)) return "variables must not hold a number beyond the range of a double (±1.8e308)";
      continue;
    }
    if (typeof value !== "object" || value === null) continue;
    if (Array.isArray(value)) {
      stack.push(...value);
      continue;
    }
    if (Object.hasOwn(value, "__proto__")) return "variables must not contain the key __proto__";
    for (const [key, entry] of Object.entries(value)) {
      if (!isWellFormed(key)) return "variables must be well-formed Unicode: a key holds a lone surrogate";
      stack.push(entry);
    }
  }
  return null;
}

/** Whether `bytes` starts with a msgpack map header (fixmap, map 16 or map 32). */
function isEncodedMap(bytes: Uint8Array): boolean {
  const first = bytes[0];
  return first !== undefined && ((first >= 0x80 && first <= 0x8f) || first === 0xde || first === 0xdf);
}

/** Whether `tenantId` is the default tenant or a well-formed tenant id. */
export function isValidTenantId(tenantId: string): boolean {
  return tenantId === DEFAULT_TENANT_ID || TENANT_ID_PATTERN.test(tenantId);
}

/** Problems with the fields of a publish record other than its variables; empty when they are valid. */
function publishFieldProblems(fields: {
  name: unknown;
  correlationKey: unknown;
  timeToLiveMs: unknown;
  messageId?: unknown;
  tenantId: unknown;
  publishedAtMs: unknown;
}): string[] {
  const problems: string[] = [];
  const { name, correlationKey, timeToLiveMs, messageId, tenantId, publishedAtMs } = fields;
  if (typeof name !== "string" || name.length === 0 || utf8Bytes(name) > MESSAGE_LIMITS.maxNameBytes) {
    problems.push(`name must be a non-empty string of at most ${MESSAGE_LIMITS.maxNameBytes} UTF-8 bytes`);
  } else if (!isWellFormed(name)) {
    problems.push("name must be well-formed Unicode: it holds a lone surrogate");
  }
  if (typeof correlationKey !== "string" || utf8Bytes(correlationKey) > MESSAGE_LIMITS.maxCorrelationKeyBytes) {
    problems.push(`correlationKey must be a string of at most ${MESSAGE_LIMITS.maxCorrelationKeyBytes} UTF-8 bytes`);
  } else if (!isWellFormed(correlationKey)) {
    problems.push("correlationKey must be well-formed Unicode: it holds a lone surrogate");
  }
  if (
    !Number.isSafeInteger(timeToLiveMs) ||
    (timeToLiveMs as number) < 0 ||
    (timeToLiveMs as number) > MESSAGE_LIMITS.maxTimeToLiveMs
  ) {
    problems.push(`timeToLiveMs must be an integer in 0..${MESSAGE_LIMITS.maxTimeToLiveMs}`);
  }
  if (
    messageId !== undefined &&
    messageId !== null &&
    (typeof messageId !== "string" || messageId.length === 0 || utf8Bytes(messageId) > MESSAGE_LIMITS.maxMessageIdBytes)
  ) {
    problems.push(`messageId must be a non-empty string of at most ${MESSAGE_LIMITS.maxMessageIdBytes} UTF-8 bytes`);
  } else if (typeof messageId === "string" && !isWellFormed(messageId)) {
    problems.push("messageId must be well-formed Unicode: it holds a lone surrogate");
  }
  if (typeof tenantId !== "string" || !isValidTenantId(tenantId)) {
    problems.push(`tenantId must be "${DEFAULT_TENANT_ID}" or 1..31 characters of letters, digits, '_', '.', '-'`);
  }
  if (!isTimestamp(publishedAtMs)) {
    problems.push(`publishedAtMs must be an integer in 0..${MAX_TIMESTAMP_MS}`);
  }
  return problems;
}

/**
 * Validates `record` against `MESSAGE_LIMITS` and encodes it for proposal. Throws `RecordValidationError` listing
 * every broken rule, so the gateway can answer 400 without proposing anything.
 */
export function encodeRecord(record: EngineRecord): Uint8Array {
  switch (record.kind) {
    case "expireMessages":
      if (!isTimestamp(record.nowMs)) {
        throw new RecordValidationError([`nowMs must be an integer in 0..${MAX_TIMESTAMP_MS}`]);
      }
      return packr.pack([EXPIRE_MESSAGES_CODE, record.nowMs]);
    case "routeMessages": {
      const problems = routeProblems(record.correlationCount, record.basePartitionCount, record.relocating);
      if (problems !== null) throw new RecordValidationError([problems]);
      return packr.pack([ROUTE_MESSAGES_CODE, record.correlationCount, record.basePartitionCount, record.relocating]);
    }
    case "relocateOut": {
      const problem = countersProblem(record.counters);
      if (problem !== null) throw new RecordValidationError([problem]);
      return packr.pack([RELOCATE_OUT_CODE, [...record.counters]]);
    }
    case "relocatedOut": {
      const relocations = record.relocations;
      const valid =
        relocations.length >= 1 &&
        relocations.length <= MAX_RELOCATION_BATCH &&
        relocations.every(({ counter, newKey }) => isCounter(counter) && (newKey === null || isKeyText(newKey)));
      if (!valid) {
        throw new RecordValidationError([
          `relocatedOut needs 1..${MAX_RELOCATION_BATCH} key counters, each with its new key (or null)`,
        ]);
      }
      const checkpointId = record.checkpointId ?? null;
      if (!isCarriedCheckpointId(checkpointId)) {
        throw new RecordValidationError(["checkpointId must be a non-negative integer or null"]);
      }
      const fields: unknown[] = [RELOCATED_OUT_CODE, relocations.map(({ counter, newKey }) => [counter, newKey])];
      // Without a checkpoint the record keeps the layout of versions that knew no checkpoints, which can apply it.
      if (checkpointId !== null) fields.push(encodedCheckpointId(checkpointId));
      return packr.pack(fields);
    }
    case "checkpoint":
      if (!isCheckpointId(record.checkpointId)) {
        throw new RecordValidationError(["checkpointId must be a non-negative integer"]);
      }
      return packr.pack([CHECKPOINT_CODE, encodedCheckpointId(record.checkpointId)]);
    case "relocateIn": {
      const problems: string[] = [];
      if (record.messages.length === 0 || record.messages.length > MAX_RELOCATION_BATCH) {
        problems.push(`relocateIn carries 1..${MAX_RELOCATION_BATCH} messages`);
      }
      for (const message of record.messages) problems.push(...relocatedMessageProblems(message));
      if (!isTimestamp(record.nowMs)) problems.push(`nowMs must be an integer in 0..${MAX_TIMESTAMP_MS}`);
      const checkpointId = record.checkpointId ?? null;
      if (!isCarriedCheckpointId(checkpointId)) problems.push("checkpointId must be a non-negative integer or null");
      if (problems.length > 0) throw new RecordValidationError(problems);
      const fields: unknown[] = [
        RELOCATE_IN_CODE,
        record.messages.map((message) => [
          message.sourceKey,
          message.name,
          message.correlationKey,
          message.timeToLiveMs,
          message.messageId ?? null,
          message.variablesBytes,
          message.tenantId,
          message.publishedAtMs,
        ]),
        record.nowMs,
      ];
      // Without a checkpoint the record keeps the layout of versions that knew no checkpoints, which can apply it.
      if (checkpointId !== null) fields.push(encodedCheckpointId(checkpointId));
      const bytes = packr.pack(fields);
      if (bytes.byteLength > MESSAGE_LIMITS.maxRecordBytes) {
        throw new RecordValidationError([`relocateIn takes ${bytes.byteLength} bytes, more than a record may`]);
      }
      return bytes;
    }
    case "publishMessage":
      return encodePublishRecord(record);
  }
}

/** Why the fields of a routeMessages record are wrong, or null. */
function routeProblems(correlationCount: unknown, basePartitionCount: unknown, relocating: unknown): string | null {
  const isCount = (value: unknown): boolean =>
    Number.isInteger(value) && (value as number) >= 1 && (value as number) <= 8191;
  if (!isCount(correlationCount) || !isCount(basePartitionCount) || typeof relocating !== "boolean") {
    return "routeMessages needs partition counts in 1..8191 and a relocating flag";
  }
  if ((basePartitionCount as number) > (correlationCount as number)) {
    return "routeMessages: the base partition count cannot exceed the correlation count";
  }
  return null;
}

function isCounter(value: unknown): value is number {
  return Number.isSafeInteger(value) && (value as number) >= 1;
}

function isKeyText(value: unknown): value is string {
  return typeof value === "string" && /^[1-9][0-9]{0,19}$/.test(value);
}

function countersProblem(counters: unknown): string | null {
  if (!Array.isArray(counters) || counters.length === 0 || counters.length > MAX_RELOCATION_BATCH) {
    return `relocateOut needs 1..${MAX_RELOCATION_BATCH} key counters`;
  }
  return counters.every(isCounter) ? null : "relocateOut key counters must be positive integers";
}

function encodePublishRecord(record: PublishMessageRecord): Uint8Array {
  const problems = publishFieldProblems(record);
  let variablesBytes: Uint8Array | undefined;
  if (!isPlainObject(record.variables)) {
    problems.push("variables must be a JSON object");
  } else {
    variablesBytes = packr.pack(record.variables);
    if (variablesBytes.byteLength > MESSAGE_LIMITS.maxVariablesBytes) {
      problems.push(
        `variables take ${variablesBytes.byteLength} bytes encoded, more than ${MESSAGE_LIMITS.maxVariablesBytes}`,
      );
    } else {
      const problem = variablesProblem(record.variables);
      if (problem !== null) problems.push(problem);
    }
  }
  if (problems.length > 0 || variablesBytes === undefined) throw new RecordValidationError(problems);
  return packr.pack([
    PUBLISH_MESSAGE_CODE,
    record.name,
    record.correlationKey,
    record.timeToLiveMs,
    record.messageId ?? null,
    variablesBytes,
    record.tenantId,
    record.publishedAtMs,
  ]);
}

/**
 * Decodes and checks a committed record for applying. Never throws: malformed bytes or broken limits yield
 * `{ kind: "invalid" }`, which the engine rejects, so every replica reaches the same outcome and one bad entry cannot
 * stall the partition. Encoded variables are views of `bytes` (the engine copies them into the messages it buffers).
 */
export function decodeAppliedRecord(bytes: Uint8Array): AppliedRecord {
  if (bytes.byteLength > MESSAGE_LIMITS.maxRecordBytes) {
    return { kind: "invalid", detail: `record of ${bytes.byteLength} bytes exceeds ${MESSAGE_LIMITS.maxRecordBytes}` };
  }
  let value: unknown;
  try {
    value = packr.unpack(bytes);
  } catch {
    // The decoder's own message is left out on purpose: it can differ between calls for the same bytes, and the
    // result of applying must be identical on every replica.
    return { kind: "invalid", detail: "record is not valid msgpack" };
  }
  if (!Array.isArray(value)) return { kind: "invalid", detail: "record is not a msgpack array" };
  const code: unknown = value[0];
  if (code === EXPIRE_MESSAGES_CODE) {
    const nowMs: unknown = value[1];
    if (value.length !== 2 || !isTimestamp(nowMs)) {
      return { kind: "invalid", detail: "expireMessages record must be [2, nowMs]" };
    }
    return { kind: "expireMessages", nowMs };
  }
  if (code === ROUTE_MESSAGES_CODE) {
    const [, correlationCount, basePartitionCount, relocating] = value as unknown[];
    const problem = value.length === 4 ? routeProblems(correlationCount, basePartitionCount, relocating) : "";
    if (problem !== null) return { kind: "invalid", detail: problem || "routeMessages record must have 4 elements" };
    return {
      kind: "routeMessages",
      correlationCount: correlationCount as number,
      basePartitionCount: basePartitionCount as number,
      relocating: relocating as boolean,
    };
  }
  if (code === RELOCATE_OUT_CODE) {
    const problem = value.length === 2 ? countersProblem(value[1]) : "relocateOut record must have 2 elements";
    if (problem !== null) return { kind: "invalid", detail: problem };
    return { kind: "relocateOut", counters: value[1] as number[] };
  }
  if (code === CHECKPOINT_CODE) {
    const checkpointId = value.length === 2 ? decodedCheckpointId(value[1]) : null;
    if (checkpointId === null) return { kind: "invalid", detail: "checkpoint record must be [7, checkpointId ≥ 0]" };
    return { kind: "checkpoint", checkpointId };
  }
  if (code === RELOCATED_OUT_CODE) {
    const relocations = value[1];
    const carried = carriedCheckpointId(value, 2);
    const valid =
      (value.length === 2 || value.length === 3) &&
      Array.isArray(relocations) &&
      relocations.length >= 1 &&
      relocations.length <= MAX_RELOCATION_BATCH &&
      relocations.every(
        (entry) =>
          Array.isArray(entry) &&
          entry.length === 2 &&
          isCounter(entry[0]) &&
          (entry[1] === null || isKeyText(entry[1])),
      );
    if (!valid || !carried.wellFormed) {
      return {
        kind: "invalid",
        detail: "relocatedOut record must be [5, [[counter, newKey | null], …], checkpointId | null]",
      };
    }
    return {
      kind: "relocatedOut",
      relocations: (relocations as [number, string | null][]).map(([counter, newKey]) => ({ counter, newKey })),
      checkpointId: carried.checkpointId,
    };
  }
  if (code === RELOCATE_IN_CODE) return decodeRelocateIn(value);
  if (code !== PUBLISH_MESSAGE_CODE) return { kind: "invalid", detail: `unknown record kind ${String(code)}` };
  if (value.length !== 8) return { kind: "invalid", detail: "publishMessage record must have 8 elements" };
  const [, name, correlationKey, timeToLiveMs, messageId, variables, tenantId, publishedAtMs] = value as unknown[];
  const problems = publishFieldProblems({ name, correlationKey, timeToLiveMs, messageId, tenantId, publishedAtMs });
  if (
    !(variables instanceof Uint8Array) ||
    variables.byteLength > MESSAGE_LIMITS.maxVariablesBytes ||
    !isEncodedMap(variables)
  ) {
    problems.push(`variables must be an encoded map of at most ${MESSAGE_LIMITS.maxVariablesBytes} bytes`);
  }
  if (problems.length > 0) return { kind: "invalid", detail: problems.join("; ") };
  return {
    kind: "publishMessage",
    name: name as string,
    correlationKey: correlationKey as string,
    timeToLiveMs: timeToLiveMs as number,
    messageId: (messageId as string | null) ?? null,
    variablesBytes: variables as Uint8Array,
    tenantId: tenantId as string,
    publishedAtMs: publishedAtMs as number,
  };
}

/** Problems with one relocated message's fields; empty when it is valid. */
function relocatedMessageProblems(message: {
  sourceKey: unknown;
  name: unknown;
  correlationKey: unknown;
  timeToLiveMs: unknown;
  messageId?: unknown;
  variablesBytes: unknown;
  tenantId: unknown;
  publishedAtMs: unknown;
}): string[] {
  const problems = publishFieldProblems(message);
  if (!isKeyText(message.sourceKey)) problems.push("sourceKey must be a record key");
  const variables = message.variablesBytes;
  if (
    !(variables instanceof Uint8Array) ||
    variables.byteLength > MESSAGE_LIMITS.maxVariablesBytes ||
    !isEncodedMap(variables)
  ) {
    problems.push(`variables must be an encoded map of at most ${MESSAGE_LIMITS.maxVariablesBytes} bytes`);
  }
  return problems;
}

function decodeRelocateIn(value: unknown[]): AppliedRecord {
  const [, entries, nowMs] = value;
  const carried = carriedCheckpointId(value, 3);
  if (
    (value.length !== 3 && value.length !== 4) ||
    !Array.isArray(entries) ||
    entries.length === 0 ||
    entries.length > MAX_RELOCATION_BATCH
  ) {
    return {
      kind: "invalid",
      detail: `relocateIn record must be [6, [1..${MAX_RELOCATION_BATCH} messages], nowMs, checkpointId | null]`,
    };
  }
  if (!isTimestamp(nowMs)) return { kind: "invalid", detail: `nowMs must be an integer in 0..${MAX_TIMESTAMP_MS}` };
  if (!carried.wellFormed) {
    return { kind: "invalid", detail: "checkpointId must be a non-negative integer or null" };
  }
  const messages: RelocatedMessage[] = [];
  for (const entry of entries) {
    if (!Array.isArray(entry) || entry.length !== 8) {
      return { kind: "invalid", detail: "a relocated message must have 8 elements" };
    }
    const [sourceKey, name, correlationKey, timeToLiveMs, messageId, variablesBytes, tenantId, publishedAtMs] = entry;
    const problems = relocatedMessageProblems({
      sourceKey,
      name,
      correlationKey,
      timeToLiveMs,
      messageId,
      variablesBytes,
      tenantId,
      publishedAtMs,
    });
    if (problems.length > 0) return { kind: "invalid", detail: problems.join("; ") };
    messages.push({
      sourceKey: sourceKey as string,
      name: name as string,
      correlationKey: correlationKey as string,
      timeToLiveMs: timeToLiveMs as number,
      ...(messageId === null || messageId === undefined ? {} : { messageId: messageId as string }),
      variablesBytes: variablesBytes as Uint8Array,
      tenantId: tenantId as string,
      publishedAtMs: publishedAtMs as number,
    });
  }
  return { kind: "relocateIn", messages, nowMs: nowMs as number, checkpointId: carried.checkpointId };
}

/** Decodes msgpack-encoded variables back into an object. */
export function decodeVariables(bytes: Uint8Array): Record<string, unknown> {
  // Through a view of its own: the codec caches a DataView on whatever it decodes, and a buffered message's variables
  // are kept for as long as the message is.
  return packr.unpack(bytes.subarray(0)) as Record<string, unknown>;
}

/** Decodes a record into its public shape (variables decoded); throws `RecordValidationError` if it is invalid. */
export function decodeRecord(bytes: Uint8Array): EngineRecord {
  const decoded = decodeAppliedRecord(bytes);
  switch (decoded.kind) {
    case "invalid":
      throw new RecordValidationError([decoded.detail]);
    case "expireMessages":
    case "routeMessages":
    case "relocateOut":
    case "relocatedOut":
    case "relocateIn":
    case "checkpoint":
      return decoded;
    case "publishMessage": {
      const { variablesBytes, messageId, ...rest } = decoded;
      return {
        ...rest,
        ...(messageId === null ? {} : { messageId }),
        variables: decodeVariables(variablesBytes),
      };
    }
  }
}

/** The msgpack codec shared with the engine's snapshots. */
export const engineCodec = packr;
