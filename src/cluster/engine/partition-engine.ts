/**
 * The partition state machine. It applies committed records in log order and holds the partition's buffered
 * messages. It is pure and deterministic: no clocks, randomness or IO; the same records applied in the same order
 * give the same results and the same snapshot bytes on every replica.
 */
import { encodeKey, isValidPartitionId, MAX_KEY_COUNTER, parseKey } from "./keys.js";
import { type DecodedPublishMessage, decodeAppliedRecord, decodeVariables, engineCodec } from "./records.js";

/** What applying one record produced; the leader turns it into the client's answer. */
export type ApplyResult =
  | { readonly kind: "published"; readonly key: string }
  | {
      readonly kind: "rejected";
      readonly reason: "duplicate-message-id";
      readonly detail: string;
      /** Key of the buffered message that already has this message id. */
      readonly existingKey: string;
    }
  | { readonly kind: "rejected"; readonly reason: "invalid-record"; readonly detail: string }
  | { readonly kind: "expired"; readonly count: number };

/** A buffered message as readers see it. */
export interface BufferedMessage {
  readonly key: string;
  readonly partitionId: number;
  readonly name: string;
  /** The empty string when the message has no correlation key. */
  readonly correlationKey: string;
  readonly timeToLiveMs: number;
  readonly messageId?: string;
  readonly variables: Record<string, unknown>;
  readonly tenantId: string;
  readonly publishedAtMs: number;
  /**
   * `publishedAtMs + timeToLiveMs`: the message is dropped by the first expiry record or publication whose time is
   * at or after it. A reader with a clock may treat the message as gone once its clock passes this.
   */
  readonly deadlineMs: number;
}

/** Options of a fresh engine. */
export interface PartitionEngineOptions {
  /** The partition this engine serves (1..8191); it is encoded into every key the engine creates. */
  readonly partitionId: number;
}

interface StoredMessage {
  readonly counter: number;
  readonly name: string;
  readonly correlationKey: string;
  readonly timeToLiveMs: number;
  readonly messageId: string | null;
  readonly variablesBytes: Uint8Array;
  readonly tenantId: string;
  readonly publishedAtMs: number;
  readonly deadlineMs: number;
  /** Size of the record that buffered the message; the basis of the buffered-bytes metric. */
  readonly sizeBytes: number;
}

/** Snapshot layout version, written first so a future layout can be told apart. */
const SNAPSHOT_FORMAT_VERSION = 1;

/**
 * Min-heap of buffered messages ordered by (deadline, counter). Ties are broken by counter so the order is total;
 * expiry removes every message up to a time, so the set removed never depends on the heap's internal layout.
 */
class DeadlineHeap {
  private readonly items: StoredMessage[] = [];

  get size(): number {
    return this.items.length;
  }

  peek(): StoredMessage | undefined {
    return this.items[0];
  }

  push(message: StoredMessage): void {
    const items = this.items;
    items.push(message);
    let index = items.length - 1;
    while (index > 0) {
      const parentIndex = (index - 1) >> 1;
      const parent = items[parentIndex]!;
      if (!precedes(message, parent)) break;
      items[index] = parent;
      index = parentIndex;
    }
    items[index] = message;
  }

  pop(): StoredMessage | undefined {
    const items = this.items;
    const top = items[0];
    const last = items.pop();
    if (top === undefined || last === undefined || items.length === 0) return top;
    let index = 0;
    const length = items.length;
    while (true) {
      const left = 2 * index + 1;
      if (left >= length) break;
      const right = left + 1;
      let child = left;
      if (right < length && precedes(items[right]!, items[left]!)) child = right;
      if (!precedes(items[child]!, last)) break;
      items[index] = items[child]!;
      index = child;
    }
    items[index] = last;
    return top;
  }
}

function precedes(a: StoredMessage, b: StoredMessage): boolean {
  return a.deadlineMs < b.deadlineMs || (a.deadlineMs === b.deadlineMs && a.counter < b.counter);
}

/** The state machine of one partition: buffered messages, the key counter and the last applied log index. */
export class PartitionEngine {
  /** The partition this engine serves. */
  readonly partitionId: number;
  private appliedIndex = 0;
  private nextCounter = 1;
  private totalBytes = 0;
  /** Buffered messages by key counter, in ascending counter order (insertion order), which snapshots rely on. */
  private readonly messages = new Map<number, StoredMessage>();
  /** Counter of the buffered message holding each message id, per tenant. */
  private readonly messageIds = new Map<string, Map<string, number>>();
  private readonly deadlines = new DeadlineHeap();

  /** Creates an empty engine for `options.partitionId`. */
  constructor(options: PartitionEngineOptions) {
    if (!isValidPartitionId(options.partitionId)) {
      throw new Error(`invariant violated: partition id must be an integer in 1..8191, got ${options.partitionId}`);
    }
    this.partitionId = options.partitionId;
  }

  /** Index of the last log entry applied (or skipped with `markApplied`); 0 before any. */
  get lastAppliedIndex(): number {
    return this.appliedIndex;
  }

  /** Number of buffered messages, for metrics. */
  get bufferedMessageCount(): number {
    return this.messages.size;
  }

  /** Total size of the records of the buffered messages in bytes, for metrics. */
  get bufferedBytes(): number {
    return this.totalBytes;
  }

  /**
   * Earliest deadline of any buffered message, or undefined when none is buffered. The leader proposes an expiry
   * record only once its clock reaches this, so an idle partition does not fill its log with expiry records.
   */
  get nextDeadlineMs(): number | undefined {
    return this.deadlines.peek()?.deadlineMs;
  }

  /**
   * Applies the record committed at log `index`. `index` must be greater than `lastAppliedIndex` (indexes of entries
   * that carry no record may be skipped). Invalid records are rejected, never thrown, so replicas stay in step.
   */
  apply(index: number, recordBytes: Uint8Array): ApplyResult {
    this.advanceTo(index);
    const record = decodeAppliedRecord(recordBytes);
    switch (record.kind) {
      case "invalid":
        return { kind: "rejected", reason: "invalid-record", detail: record.detail };
      case "expireMessages":
        return { kind: "expired", count: this.expire(record.nowMs) };
      case "publishMessage":
        return this.publish(record, recordBytes.byteLength);
    }
  }

  /** Records that the entry at `index` was applied without an engine record (a no-op or membership entry). */
  markApplied(index: number): void {
    this.advanceTo(index);
  }

  /** The buffered message with `key`, or undefined when it is unknown, expired, malformed or of another partition. */
  getMessage(key: string): BufferedMessage | undefined {
    const decoded = parseKey(key);
    if (decoded === undefined || decoded.partitionId !== this.partitionId) return undefined;
    const stored = this.messages.get(decoded.counter);
    if (stored === undefined) return undefined;
    return {
      key,
      partitionId: this.partitionId,
      name: stored.name,
      correlationKey: stored.correlationKey,
      timeToLiveMs: stored.timeToLiveMs,
      ...(stored.messageId === null ? {} : { messageId: stored.messageId }),
      variables: decodeVariables(stored.variablesBytes),
      tenantId: stored.tenantId,
      publishedAtMs: stored.publishedAtMs,
      deadlineMs: stored.deadlineMs,
    };
  }

  /**
   * The whole state (partition id, applied index, key counter, buffered messages) as bytes. Equal states give equal
   * bytes. Layout (msgpack): `[1, partitionId, lastAppliedIndex, nextCounter, messages]`, each message
   * `[counter, name, correlationKey, timeToLiveMs, messageId | null, variables (bytes), tenantId, publishedAtMs,
   * sizeBytes]` in ascending counter order.
   */
  snapshot(): Uint8Array {
    const messages: unknown[] = [];
    for (const message of this.messages.values()) {
      messages.push([
        message.counter,
        message.name,
        message.correlationKey,
        message.timeToLiveMs,
        message.messageId,
        message.variablesBytes,
        message.tenantId,
        message.publishedAtMs,
        message.sizeBytes,
      ]);
    }
    return engineCodec.pack([SNAPSHOT_FORMAT_VERSION, this.partitionId, this.appliedIndex, this.nextCounter, messages]);
  }

  /** Rebuilds an engine from `snapshot()` bytes; throws on any malformed or inconsistent snapshot. */
  static restore(bytes: Uint8Array): PartitionEngine {
    const value: unknown = engineCodec.unpack(bytes);
    if (!Array.isArray(value) || value.length !== 5 || value[0] !== SNAPSHOT_FORMAT_VERSION) {
      throw new Error(`corrupt engine snapshot: expected [${SNAPSHOT_FORMAT_VERSION}, ...] with 5 elements`);
    }
    const [, partitionId, appliedIndex, nextCounter, messages] = value as unknown[];
    if (typeof partitionId !== "number" || !isValidPartitionId(partitionId)) {
      throw new Error(`corrupt engine snapshot: partition id ${String(partitionId)}`);
    }
    if (!isNonNegativeInteger(appliedIndex)) {
      throw new Error(`corrupt engine snapshot: applied index ${String(appliedIndex)}`);
    }
    if (!isNonNegativeInteger(nextCounter) || nextCounter < 1 || nextCounter > MAX_KEY_COUNTER + 1) {
      throw new Error(`corrupt engine snapshot: next key counter ${String(nextCounter)}`);
    }
    if (!Array.isArray(messages)) throw new Error("corrupt engine snapshot: messages is not an array");
    const engine = new PartitionEngine({ partitionId });
    engine.appliedIndex = appliedIndex;
    engine.nextCounter = nextCounter;
    let previousCounter = 0;
    for (const [position, entry] of messages.entries()) {
      const message = storedMessageFromSnapshot(entry);
      if (message === undefined) throw new Error(`corrupt engine snapshot: message ${position} is malformed`);
      if (message.counter <= previousCounter || message.counter >= nextCounter) {
        throw new Error(`corrupt engine snapshot: message ${position} has counter ${message.counter} out of order`);
      }
      previousCounter = message.counter;
      if (message.messageId !== null && engine.findMessageId(message.tenantId, message.messageId) !== undefined) {
        throw new Error(`corrupt engine snapshot: message id ${message.messageId} buffered twice`);
      }
      engine.buffer(message);
    }
    return engine;
  }

  private advanceTo(index: number): void {
    if (!Number.isSafeInteger(index) || index <= this.appliedIndex) {
      throw new Error(
        `invariant violated: applied indexes must increase; got ${index} after ${this.appliedIndex} on partition ${this.partitionId}`,
      );
    }
    this.appliedIndex = index;
  }

  private publish(record: DecodedPublishMessage, sizeBytes: number): ApplyResult {
    // A publication carries the leader's clock too, so it removes whatever expired by then, exactly as an expiry
    // record with that time would (every replica computes the same): a busy partition then needs no expiry records
    // at all, and a message id is free again as soon as its message's time to live is over.
    this.expire(record.publishedAtMs);
    if (record.messageId !== null) {
      const existing = this.findMessageId(record.tenantId, record.messageId);
      if (existing !== undefined) {
        return {
          kind: "rejected",
          reason: "duplicate-message-id",
          detail: `a message with id "${record.messageId}" is already buffered for tenant "${record.tenantId}" on partition ${this.partitionId}`,
          existingKey: encodeKey(this.partitionId, existing),
        };
      }
    }
    const counter = this.nextCounter;
    if (counter > MAX_KEY_COUNTER) {
      throw new Error(`invariant violated: partition ${this.partitionId} exhausted its key counter`);
    }
    this.nextCounter = counter + 1;
    this.buffer({
      counter,
      name: record.name,
      correlationKey: record.correlationKey,
      timeToLiveMs: record.timeToLiveMs,
      messageId: record.messageId,
      variablesBytes: record.variablesBytes,
      tenantId: record.tenantId,
      publishedAtMs: record.publishedAtMs,
      deadlineMs: record.publishedAtMs + record.timeToLiveMs,
      sizeBytes,
    });
    return { kind: "published", key: encodeKey(this.partitionId, counter) };
  }

  private expire(nowMs: number): number {
    let count = 0;
    // Bounded by the number of buffered messages: each iteration removes one.
    for (
      let next = this.deadlines.peek();
      next !== undefined && next.deadlineMs <= nowMs;
      next = this.deadlines.peek()
    ) {
      this.deadlines.pop();
      this.unbuffer(next);
      count += 1;
    }
    return count;
  }

  private findMessageId(tenantId: string, messageId: string): number | undefined {
    return this.messageIds.get(tenantId)?.get(messageId);
  }

  private buffer(message: StoredMessage): void {
    this.messages.set(message.counter, message);
    this.deadlines.push(message);
    this.totalBytes += message.sizeBytes;
    if (message.messageId !== null) {
      let ids = this.messageIds.get(message.tenantId);
      if (ids === undefined) {
        ids = new Map();
        this.messageIds.set(message.tenantId, ids);
      }
      ids.set(message.messageId, message.counter);
    }
  }

  private unbuffer(message: StoredMessage): void {
    if (!this.messages.delete(message.counter)) {
      throw new Error(`invariant violated: expired message ${message.counter} was not buffered`);
    }
    this.totalBytes -= message.sizeBytes;
    if (message.messageId !== null) {
      const ids = this.messageIds.get(message.tenantId);
      if (ids?.get(message.messageId) !== message.counter) {
        throw new Error(`invariant violated: message id index lost message ${message.counter}`);
      }
      ids.delete(message.messageId);
      if (ids.size === 0) this.messageIds.delete(message.tenantId);
    }
  }
}

function isNonNegativeInteger(value: unknown): value is number {
  return Number.isSafeInteger(value) && (value as number) >= 0;
}

function storedMessageFromSnapshot(entry: unknown): StoredMessage | undefined {
  if (!Array.isArray(entry) || entry.length !== 9) return undefined;
  const [counter, name, correlationKey, timeToLiveMs, messageId, variables, tenantId, publishedAtMs, sizeBytes] =
    entry as unknown[];
  if (
    !isNonNegativeInteger(counter) ||
    typeof name !== "string" ||
    typeof correlationKey !== "string" ||
    !isNonNegativeInteger(timeToLiveMs) ||
    !(messageId === null || typeof messageId === "string") ||
    !(variables instanceof Uint8Array) ||
    typeof tenantId !== "string" ||
    !isNonNegativeInteger(publishedAtMs) ||
    !isNonNegativeInteger(sizeBytes) ||
    !Number.isSafeInteger(publishedAtMs + timeToLiveMs)
  ) {
    return undefined;
  }
  return {
    counter,
    name,
    correlationKey,
    timeToLiveMs,
    messageId,
    variablesBytes: new Uint8Array(variables),
    tenantId,
    publishedAtMs,
    deadlineMs: publishedAtMs + timeToLiveMs,
    sizeBytes,
  };
}
