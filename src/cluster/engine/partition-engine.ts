/**
 * The partition state machine. It applies committed records in log order and holds the partition's buffered
 * messages. It is pure and deterministic: no clocks, randomness or IO; the same records applied in the same order
 * give the same results and the same snapshot bytes on every replica.
 *
 * When partitions are added to the cluster, correlation keys are hashed over more partitions, so some buffered
 * messages belong elsewhere. The engine's part of moving them:
 * - a `routeMessages` record tells the partition which keys it owns from now on; it refuses publications of keys it
 *   does not own (the gateway routes them to their owner), and while messages are still being relocated it refuses
 *   publications that carry a message id and whose key moved here from another partition (that partition may still
 *   buffer a message with the same id, and the id must stay unique; the publisher retries once relocation is done);
 * - `relocateOut` takes messages out of the buffer into an outbound set: they still answer reads here, and are no
 *   longer expired here, so exactly one partition ever expires a message;
 * - at the owner, `relocateIn` buffers the message under a new key with its original deadline (or counts it expired
 *   if its deadline passed on the way), idempotently per source key, since the sender retries until it hears back;
 * - `relocatedOut` turns the outbound message into a forward of its old key to the new one, kept until its deadline,
 *   so a key a client holds keeps answering.
 *
 * Checkpoints (backups): a `checkpoint` record makes the partition take that checkpoint at the record's position,
 * unless it has taken it or a later one already. Relocation hand-overs carry the latest checkpoint of the partition
 * on the other side; when it is above this partition's, this partition takes it first, at the position just before
 * the hand-over's record, so that nothing another partition did after its checkpoint lands before this one's.
 */
import { partitionForCorrelationKey, routingKeyOf } from "./correlation.js";
import { EntrySlabs, type SlabStatistics } from "./entry-slabs.js";
import { encodeKey, isValidPartitionId, MAX_KEY_COUNTER, parseKey } from "./keys.js";
import { MsgpackArrayStream, type MsgpackArrayVisitor, MsgpackStreamError } from "./msgpack-stream.js";
import {
  type DecodedPublishMessage,
  decodeAppliedRecord,
  decodedCheckpointId,
  decodeVariables,
  encodedCheckpointId,
  type RelocatedMessage,
  type RouteMessagesRecord,
} from "./records.js";
import { EngineSnapshotEncoder } from "./snapshot-encoder.js";
import {
  entryFields,
  isNonNegativeInteger,
  type MessageFields,
  moveEntry,
  restoredMessage,
  type StoredMessage,
  storedMessage,
} from "./stored-message.js";

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
  /** The correlation key belongs to another partition now (partitions were added); publish it there. */
  | {
      readonly kind: "rejected";
      readonly reason: "not-owner";
      readonly detail: string;
      readonly ownerPartitionId: number;
    }
  /** Messages are being relocated and this one's id may still be buffered where its key lived before; retry later. */
  | { readonly kind: "rejected"; readonly reason: "relocating"; readonly detail: string }
  | { readonly kind: "expired"; readonly count: number }
  | { readonly kind: "routed" }
  /** Messages taken out for relocation. */
  | { readonly kind: "relocatingOut"; readonly count: number }
  | { readonly kind: "forwarded" }
  /** Relocated messages buffered here, each under its key (null: its deadline had passed on the way), in order. */
  | { readonly kind: "relocatedIn"; readonly keys: readonly (string | null)[] }
  /** The partition took checkpoint `checkpoint.id` at the record's position. */
  | { readonly kind: "checkpointed"; readonly checkpoint: Checkpoint }
  /** The partition had taken this checkpoint or a later one already; `latest` is the one it holds. */
  | { readonly kind: "checkpoint-ignored"; readonly latest: Checkpoint };

/** A checkpoint the partition took: the id of a backup and the last log position that belongs to it. */
export interface Checkpoint {
  /** 0..2^63 − 1; encoded as `encodedCheckpointId` writes it (records.ts). */
  readonly id: bigint;
  /** The last log index whose effect is part of the checkpoint; everything after it is not. */
  readonly position: number;
}

/** A message taken out for relocation, as the leader sends it to its new owner. */
export interface OutboundMessage {
  /** Its key here, which the new owner records as the source. */
  readonly sourceKey: string;
  readonly counter: number;
  readonly name: string;
  readonly correlationKey: string;
  readonly timeToLiveMs: number;
  readonly messageId?: string;
  readonly variablesBytes: Uint8Array;
  readonly tenantId: string;
  readonly publishedAtMs: number;
  /** The partition that owns its correlation key now. */
  readonly ownerPartitionId: number;
  /** Size of the record that buffered it here: what relocating it moves, for progress. */
  readonly sizeBytes: number;
}

/** Where a relocated message's old key points, until the message's deadline. */
interface Forward {
  readonly key: string;
  readonly deadlineMs: number;
}

/** A message relocated here, by its source key, so a repeated relocation is answered with the same key. */
interface Received {
  readonly key: string | null;
  readonly deadlineMs: number;
}

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

/**
 * Snapshot layout version, written first so a future layout can be told apart. Version 2 adds the routing and the
 * relocation state, version 3 the latest checkpoint; snapshots of versions 1 and 2 (without them) are still read.
 */
const SNAPSHOT_FORMAT_VERSION = 3;
/** Position of the outbound messages in a snapshot of version 2 or 3. */
const OUTBOUND_FIELD = 5;

/**
 * Min-heap ordered by `precedes`. The engine's heaps are ordered by deadline, ties broken so the order is total;
 * expiry removes every entry up to a time, so what it removes never depends on a heap's internal layout.
 */
class MinHeap<Item> {
  private items: Item[] = [];

  constructor(private readonly precedes: (a: Item, b: Item) => boolean) {}

  get size(): number {
    return this.items.length;
  }

  peek(): Item | undefined {
    return this.items[0];
  }

  push(item: Item): void {
    const items = this.items;
    items.push(item);
    let index = items.length - 1;
    while (index > 0) {
      const parentIndex = (index - 1) >> 1;
      const parent = items[parentIndex]!;
      if (!this.precedes(item, parent)) break;
      items[index] = parent;
      index = parentIndex;
    }
    items[index] = item;
  }

  pop(): Item | undefined {
    const items = this.items;
    const top = items[0];
    const last = items.pop();
    if (top === undefined || last === undefined || items.length === 0) return top;
    this.siftDown(0, last);
    return top;
  }

  /** Replaces the contents with `items`, in O(n). */
  rebuild(items: Iterable<Item>): void {
    this.items = [...items];
    for (let index = (this.items.length >> 1) - 1; index >= 0; index -= 1) this.siftDown(index, this.items[index]!);
  }

  /** Places `item` at `start` or below it, moving earlier children up. */
  private siftDown(start: number, item: Item): void {
    const items = this.items;
    const length = items.length;
    let index = start;
    while (true) {
      const left = 2 * index + 1;
      if (left >= length) break;
      const right = left + 1;
      let child = left;
      if (right < length && this.precedes(items[right]!, items[left]!)) child = right;
      if (!this.precedes(items[child]!, item)) break;
      items[index] = items[child]!;
      index = child;
    }
    items[index] = item;
  }
}

function precedes(a: StoredMessage, b: StoredMessage): boolean {
  return a.deadlineMs < b.deadlineMs || (a.deadlineMs === b.deadlineMs && a.counter < b.counter);
}

/** The messages misplaced under `routing`, by ascending counter; those before `low` are no longer buffered. */
interface MisplacedMessages {
  readonly routing: RouteMessagesRecord;
  readonly counters: number[];
  low: number;
}

/** The deadline of a forward (by old key counter) or of a received source key, in the queues that drop them. */
interface KeyDeadline<Key extends number | string> {
  readonly deadlineMs: number;
  readonly key: Key;
}

function keyDeadlinePrecedes<Key extends number | string>(a: KeyDeadline<Key>, b: KeyDeadline<Key>): boolean {
  return a.deadlineMs < b.deadlineMs || (a.deadlineMs === b.deadlineMs && a.key < b.key);
}

/**
 * Entries of messages relocated away that the deadline heap may keep before it is rebuilt without them: they hold
 * the messages' entries (their variables) in memory until their deadlines otherwise.
 */
const MIN_STALE_DEADLINES_BEFORE_REBUILD = 1_024;

/** The state machine of one partition: buffered messages, the key counter and the last applied log index. */
export class PartitionEngine {
  /** The partition this engine serves. */
  readonly partitionId: number;
  private appliedIndex = 0;
  private nextCounter = 1;
  private totalBytes = 0;
  /** Buffered messages by key counter, in ascending counter order (insertion order), which snapshots rely on. */
  private readonly messages = new Map<number, StoredMessage>();
  /** What relocation has to move from here under the current routing (see `misplacedUnderRouting`). */
  private misplaced: MisplacedMessages | null = null;
  /** Counter of the buffered message holding each message id, per tenant. */
  private readonly messageIds = new Map<string, Map<string, number>>();
  /** Buffered messages by deadline; a message relocated away leaves its entry behind (see `staleDeadlines`). */
  private readonly deadlines = new MinHeap<StoredMessage>(precedes);
  /** Entries of `deadlines` whose message was relocated away; the heap is rebuilt once they outnumber the rest. */
  private staleDeadlines = 0;
  /** Which keys this partition owns; null until partitions were added to the cluster (it owns every key then). */
  private routing: RouteMessagesRecord | null = null;
  /** Messages taken out for relocation, waiting for their new owner, by key counter. */
  private readonly outbound = new Map<number, StoredMessage>();
  /** Old keys (by counter) of messages relocated away, to their new key, until their deadline. */
  private readonly forwards = new Map<number, Forward>();
  /** The forwards by deadline, so that dropping the past ones costs only what it drops. */
  private readonly forwardDeadlines = new MinHeap<KeyDeadline<number>>(keyDeadlinePrecedes);
  /** Source keys of messages relocated here, until their deadline. */
  private readonly received = new Map<string, Received>();
  /** The received source keys by deadline, as `forwardDeadlines`. */
  private readonly receivedDeadlines = new MinHeap<KeyDeadline<string>>(keyDeadlinePrecedes);
  /**
   * Counters of buffered messages whose message id another buffered message holds (relocated duplicates), per tenant
   * and message id. When the holder leaves, the lowest of them takes the id over, which is the rule a restore applies
   * too (the lowest counter holds the id): replicas that restored a snapshot and replicas that did not agree.
   */
  private readonly unindexed = new Map<string, Map<string, Set<number>>>();
  /** The latest checkpoint this partition took, or null before its first. */
  private checkpoint: Checkpoint | null = null;
  /** Memory of the entries of the messages this engine was restored with (`entry-slabs.ts`). */
  private readonly entrySlabs = new EntrySlabs(
    (counter) => this.messages.get(counter) ?? this.outbound.get(counter),
    moveEntry,
  );

  /** Creates an empty engine for `options.partitionId`. */
  constructor(options: PartitionEngineOptions) {
    if (!isValidPartitionId(options.partitionId)) {
      throw new Error(`invariant violated: partition id must be an integer in 1..8191, got ${options.partitionId}`);
    }
    this.partitionId = options.partitionId;
  }

  /** The shared memory of the entries this engine was restored with (`entry-slabs.ts`), for tests and accounting. */
  restoredEntryMemory(): SlabStatistics {
    return this.entrySlabs.statistics();
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
      case "routeMessages":
        // Routing only moves forward: more partitions, then relocation over. A record behind the routing held (a
        // coordinator paused while another broker finished the scale-up, whose late request still reached the log)
        // changes nothing; undoing the end of relocation would refuse message ids here until the next scale-up.
        if (!this.routesBehind(record)) this.routing = record;
        return { kind: "routed" };
      case "relocateOut":
        return { kind: "relocatingOut", count: this.relocateOut(record.counters) };
      case "relocatedOut":
        this.checkpointFirst(record.checkpointId ?? null, index);
        for (const { counter, newKey } of record.relocations) this.relocatedOut(counter, newKey);
        return { kind: "forwarded" };
      case "checkpoint": {
        const latest = this.checkpoint;
        if (latest !== null && latest.id >= record.checkpointId) return { kind: "checkpoint-ignored", latest };
        const checkpoint: Checkpoint = { id: record.checkpointId, position: index };
        this.checkpoint = checkpoint;
        return { kind: "checkpointed", checkpoint };
      }
      case "relocateIn": {
        this.checkpointFirst(record.checkpointId ?? null, index);
        this.expire(record.nowMs);
        // The record's size is shared out for the buffered-bytes metric.
        const sizeBytes = Math.ceil(recordBytes.byteLength / record.messages.length);
        return {
          kind: "relocatedIn",
          keys: record.messages.map((message) => this.relocateIn(message, record.nowMs, sizeBytes)),
        };
      }
    }
  }

  /** The latest checkpoint this partition took, or null before its first. */
  get latestCheckpoint(): Checkpoint | null {
    return this.checkpoint;
  }

  /**
   * Before applying a hand-over record at `index` that carries the other partition's latest checkpoint id: takes
   * that checkpoint first when it is above this partition's own, at the position just before the record.
   */
  private checkpointFirst(carriedCheckpointId: bigint | null, index: number): void {
    if (carriedCheckpointId === null) return;
    if (this.checkpoint !== null && this.checkpoint.id >= carriedCheckpointId) return;
    this.checkpoint = { id: carriedCheckpointId, position: index - 1 };
  }

  /** The routing this partition follows, or null when it owns every key (no partition was ever added). */
  get messageRouting(): RouteMessagesRecord | null {
    return this.routing;
  }

  /**
   * Up to `limit` buffered messages, by ascending key counter, whose correlation key another partition owns under
   * the current routing: what the leader takes out next for relocation.
   */
  misplacedMessages(limit: number): number[] {
    const misplaced = this.misplacedUnderRouting();
    if (misplaced === null) return [];
    const counters: number[] = [];
    for (let position = misplaced.low; position < misplaced.counters.length && counters.length < limit; position += 1) {
      const counter = misplaced.counters[position]!;
      if (this.messages.has(counter)) counters.push(counter);
    }
    return counters;
  }

  /**
   * The counters of the messages misplaced under the current routing, found by one pass over the buffered messages
   * when the routing changed, then only consumed: a message published afterwards is one this partition owns (it
   * refuses the others), so the set only shrinks, and relocation, which takes the lowest counters first, advances
   * `low` past the ones gone. Finding each batch by a pass from the first buffered message instead made a relocation
   * quadratic in the messages it passes over. Derived from the state, so not part of a snapshot.
   */
  private misplacedUnderRouting(): MisplacedMessages | null {
    const routing = this.routing;
    if (routing === null) return null;
    let misplaced = this.misplaced;
    if (misplaced?.routing !== routing) {
      const counters: number[] = [];
      for (const message of this.messages.values()) {
        if (this.ownerOf(message, routing) !== this.partitionId) counters.push(message.counter);
      }
      misplaced = { routing, counters, low: 0 };
      this.misplaced = misplaced;
    }
    while (misplaced.low < misplaced.counters.length && !this.messages.has(misplaced.counters[misplaced.low]!)) {
      misplaced.low += 1;
    }
    return misplaced;
  }

  /** Messages taken out for relocation and not yet acknowledged by their new owner, by ascending counter. */
  outboundMessages(): OutboundMessage[] {
    const routing = this.routing;
    return [...this.outbound.values()].map((message) => ({
      sourceKey: encodeKey(this.partitionId, message.counter),
      counter: message.counter,
      name: message.name,
      correlationKey: message.correlationKey,
      timeToLiveMs: message.timeToLiveMs,
      ...(message.messageId === null ? {} : { messageId: message.messageId }),
      variablesBytes: message.variablesBytes,
      tenantId: message.tenantId,
      publishedAtMs: message.publishedAtMs,
      ownerPartitionId: routing === null ? this.partitionId : this.ownerOf(message, routing),
      sizeBytes: message.sizeBytes,
    }));
  }

  /** What relocation still has to move from here: misplaced and outbound messages, and the bytes of their records. */
  relocationBacklog(): { readonly messages: number; readonly bytes: number } {
    let messages = 0;
    let bytes = 0;
    for (const message of this.outbound.values()) {
      messages += 1;
      bytes += message.sizeBytes;
    }
    const misplaced = this.misplacedUnderRouting();
    if (misplaced === null) return { messages, bytes };
    for (let position = misplaced.low; position < misplaced.counters.length; position += 1) {
      const message = this.messages.get(misplaced.counters[position]!);
      if (message === undefined) continue;
      messages += 1;
      bytes += message.sizeBytes;
    }
    return { messages, bytes };
  }

  /** The key a relocated message's old `key` now answers under, or undefined when it was not relocated from here. */
  forwardOf(key: string): string | undefined {
    const decoded = parseKey(key);
    if (decoded === undefined || decoded.partitionId !== this.partitionId) return undefined;
    return this.forwards.get(decoded.counter)?.key;
  }

  /**
   * The partition owning `message` under `routing`, by its routing key (see correlation.ts); this one for a message
   * with neither a correlation key nor a message id.
   */
  private ownerOf(
    message: { readonly correlationKey: string; readonly messageId: string | null },
    routing: RouteMessagesRecord,
  ): number {
    const routingKey = routingKeyOf(message.correlationKey, message.messageId);
    if (routingKey === "") return this.partitionId;
    return partitionForCorrelationKey(routingKey, routing.correlationCount);
  }

  /** Records that the entry at `index` was applied without an engine record (a no-op or membership entry). */
  markApplied(index: number): void {
    this.advanceTo(index);
  }

  /** The buffered message with `key`, or undefined when it is unknown, expired, malformed or of another partition. */
  getMessage(key: string): BufferedMessage | undefined {
    const decoded = parseKey(key);
    if (decoded === undefined || decoded.partitionId !== this.partitionId) return undefined;
    const stored = this.messages.get(decoded.counter) ?? this.outbound.get(decoded.counter);
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
   * The whole state (partition id, applied index, key counter, routing, relocation state, buffered messages) as
   * bytes. Equal states give equal bytes. Layout (msgpack): `[3, partitionId, lastAppliedIndex, nextCounter,
   * routing | null, outbound, forwards, received, checkpoint | null, messages]`: checkpoint `[id, position]`; routing `[correlationCount, basePartitionCount,
   * relocating]`; outbound and messages as lists of messages `[counter, name, correlationKey, timeToLiveMs,
   * messageId | null, variables (bytes), tenantId, publishedAtMs, sizeBytes]` in ascending counter order; forwards
   * `[counter, newKey, deadlineMs]`; received `[sourceKey, key | null, deadlineMs]`, both in insertion order.
   */
  snapshot(): Uint8Array {
    return this.snapshotEncoder().readAll();
  }

  /**
   * A snapshot of the state as it is now, read out a piece at a time by whoever stores it, so that a large state is
   * never copied whole. The engine may go on applying records meanwhile: the encoder keeps the buffered messages of
   * this moment (they are immutable, each with its snapshot entry), and gives exactly the bytes `snapshot()` gives now.
   */
  snapshotEncoder(): EngineSnapshotEncoder {
    const routing = this.routing;
    return new EngineSnapshotEncoder(
      this.appliedIndex,
      [
        SNAPSHOT_FORMAT_VERSION,
        this.partitionId,
        this.appliedIndex,
        this.nextCounter,
        routing === null ? null : [routing.correlationCount, routing.basePartitionCount, routing.relocating],
        [...this.outbound.values()].map(entryFields),
        [...this.forwards].map(([counter, forward]) => [counter, forward.key, forward.deadlineMs]),
        [...this.received].map(([sourceKey, received]) => [sourceKey, received.key, received.deadlineMs]),
        this.checkpoint === null ? null : [encodedCheckpointId(this.checkpoint.id), this.checkpoint.position],
      ],
      Array.from(this.messages.values()),
    );
  }

  /** Rebuilds an engine from `snapshot()` bytes; throws on any malformed or inconsistent snapshot. */
  static restore(bytes: Uint8Array): PartitionEngine {
    const restorer = PartitionEngine.restorer();
    restorer.push(bytes);
    return restorer.finish();
  }

  /**
   * Rebuilds an engine from `snapshot()` bytes handed over in pieces of any size, as they are read or received, so a
   * large snapshot is never held whole: between two pieces only an incomplete message (or field) is kept, besides the
   * pieces given away whose memory now holds restored messages (`pushGiven`). Throws, as `restore` does, on any
   * malformed or inconsistent snapshot.
   */
  static restorer(): EngineSnapshotRestorer {
    return new EngineSnapshotRestorer(PartitionEngine.restoreVisitor());
  }

  /**
   * The checks and steps of a restore, fed by the snapshot's fields and list items in order. Layout versions: 1 is
   * `[1, partitionId, lastAppliedIndex, nextCounter, messages]`, 2 adds routing, outbound, forwards and received
   * before the messages, 3 the checkpoint after them (see `snapshot`).
   */
  private static restoreVisitor(): EngineRestoreVisitor {
    let fieldCount = 0;
    let version = 0;
    let partitionId = 0;
    let appliedIndex = 0;
    let engine: PartitionEngine | null = null;
    let previousCounter = 0;
    // The piece being decoded when its caller gave it away (`EngineSnapshotRestorer.pushGiven`).
    let givenPiece: Uint8Array | null = null;
    const restoring = (): PartitionEngine => {
      if (engine === null) throw new Error("corrupt engine snapshot: the header is incomplete");
      return engine;
    };
    const messagesField = (): number => fieldCount - 1;
    const isRelocationList = (index: number): boolean => version !== 1 && index >= 5 && index <= 7;
    return {
      begin(count) {
        if (count !== 5 && count !== 9 && count !== 10) {
          throw new Error(
            `corrupt engine snapshot: expected [1, ...] with 5 elements, [2, ...] with 9 or [${SNAPSHOT_FORMAT_VERSION}, ...] with 10`,
          );
        }
        fieldCount = count;
      },
      isList: (index) => index === messagesField() || isRelocationList(index),
      // Messages come as their snapshot entries, which the restored messages keep: copied out of the stream's buffer,
      // or where they lie in a piece given away (`entry-slabs.ts`).
      itemsEncoded: (index) => index === messagesField() || (version !== 1 && index === OUTBOUND_FIELD),
      field(index, value) {
        if (index === 0) {
          if (
            !(
              (value === 1 && fieldCount === 5) ||
              (value === 2 && fieldCount === 9) ||
              (value === 3 && fieldCount === 10)
            )
          ) {
            throw new Error(
              `corrupt engine snapshot: expected [1, ...] with 5 elements, [2, ...] with 9 or [${SNAPSHOT_FORMAT_VERSION}, ...] with 10`,
            );
          }
          version = value;
        } else if (index === 1) {
          if (typeof value !== "number" || !isValidPartitionId(value)) {
            throw new Error(`corrupt engine snapshot: partition id ${String(value)}`);
          }
          partitionId = value;
        } else if (index === 2) {
          if (!isNonNegativeInteger(value)) throw new Error(`corrupt engine snapshot: applied index ${String(value)}`);
          appliedIndex = value;
        } else if (index === 3) {
          if (!isNonNegativeInteger(value) || value < 1 || value > MAX_KEY_COUNTER + 1) {
            throw new Error(`corrupt engine snapshot: next key counter ${String(value)}`);
          }
          engine = new PartitionEngine({ partitionId });
          engine.appliedIndex = appliedIndex;
          engine.nextCounter = value;
        } else if (index === messagesField()) {
          throw new Error("corrupt engine snapshot: messages is not an array");
        } else if (index === 4) {
          restoring().restoreRouting(value);
        } else if (isRelocationList(index)) {
          throw new Error("corrupt engine snapshot: relocation state is malformed");
        } else if (index === 8 && value !== null) {
          const [encodedId, position] = Array.isArray(value) ? value : [];
          const id = decodedCheckpointId(encodedId);
          if (id === null || !isNonNegativeInteger(position) || position > appliedIndex) {
            throw new Error("corrupt engine snapshot: the checkpoint is malformed");
          }
          restoring().checkpoint = { id, position };
        }
      },
      listStart() {
        restoring();
      },
      encodedItem(index, position, bytes) {
        const target = restoring();
        const message = restoredMessage(bytes, (entry, counter) => target.entrySlabs.place(entry, counter, givenPiece));
        if (index === messagesField()) {
          if (message === undefined) throw new Error(`corrupt engine snapshot: message ${position} is malformed`);
          if (message.counter <= previousCounter || message.counter >= target.nextCounter) {
            throw new Error(`corrupt engine snapshot: message ${position} has counter ${message.counter} out of order`);
          }
          if (target.outbound.has(message.counter)) {
            throw new Error("corrupt engine snapshot: an outbound message is malformed");
          }
          previousCounter = message.counter;
          // The first message with an id holds it; a later one with the same id can only be a relocated duplicate.
          const indexed =
            message.messageId === null || target.findMessageId(message.tenantId, message.messageId) === undefined;
          if (!indexed && version === 1) {
            throw new Error(`corrupt engine snapshot: message id ${message.messageId} buffered twice`);
          }
          target.buffer(message, indexed);
        } else {
          if (message === undefined || message.counter >= target.nextCounter || target.outbound.has(message.counter)) {
            throw new Error("corrupt engine snapshot: an outbound message is malformed");
          }
          target.outbound.set(message.counter, message);
        }
      },
      item(index, _position, value) {
        const target = restoring();
        if (index === 6) {
          const [counter, key, deadlineMs] = Array.isArray(value) ? value : [];
          if (!isNonNegativeInteger(counter) || typeof key !== "string" || !isNonNegativeInteger(deadlineMs)) {
            throw new Error("corrupt engine snapshot: a forward is malformed");
          }
          target.setForward(counter, { key, deadlineMs });
        } else {
          const [sourceKey, key, deadlineMs] = Array.isArray(value) ? value : [];
          if (
            typeof sourceKey !== "string" ||
            !(key === null || typeof key === "string") ||
            !isNonNegativeInteger(deadlineMs)
          ) {
            throw new Error("corrupt engine snapshot: a received source key is malformed");
          }
          target.setReceived(sourceKey, { key, deadlineMs });
        }
      },
      pieceStart(piece) {
        givenPiece = piece;
      },
      pieceEnd() {
        givenPiece = null;
        engine?.entrySlabs.endPiece();
      },
      result() {
        const restored = restoring();
        restored.entrySlabs.trim();
        return restored;
      },
    };
  }

  /** Whether `record` describes a routing earlier than the one this partition holds (see `apply`). */
  private routesBehind(record: RouteMessagesRecord): boolean {
    const routing = this.routing;
    if (routing === null) return false;
    if (record.correlationCount !== routing.correlationCount) return record.correlationCount < routing.correlationCount;
    return record.basePartitionCount < routing.basePartitionCount;
  }

  /** Restores the routing of a version 2 or 3 snapshot; throws when it is malformed. */
  private restoreRouting(routing: unknown): void {
    if (routing === null) return;
    const [correlationCount, basePartitionCount, relocating] = Array.isArray(routing) ? routing : [];
    if (
      !isNonNegativeInteger(correlationCount) ||
      !isNonNegativeInteger(basePartitionCount) ||
      typeof relocating !== "boolean"
    ) {
      throw new Error("corrupt engine snapshot: routing is malformed");
    }
    this.routing = { kind: "routeMessages", correlationCount, basePartitionCount, relocating };
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
    const routing = this.routing;
    const routingKey = routingKeyOf(record.correlationKey, record.messageId);
    if (routing !== null && routingKey !== "") {
      const owner = this.ownerOf(record, routing);
      const formerOwner = partitionForCorrelationKey(routingKey, routing.basePartitionCount);
      if (owner !== this.partitionId) {
        if (routing.relocating && record.messageId !== null && formerOwner === this.partitionId) {
          // A message with this id may be buffered here, to be relocated. The new owner refuses the id for as long as
          // relocation runs, but only once it has the new routing itself: while the partitions are routed one after
          // the other, a new partition without routing yet owns every key and would take the id a second time.
          return {
            kind: "rejected",
            reason: "relocating",
            detail: `messages are being relocated after partitions were added; a message with this id may still be buffered on partition ${formerOwner}`,
          };
        }
        const what = record.correlationKey === "" ? "message id (it has no correlation key)" : "correlation key";
        return {
          kind: "rejected",
          reason: "not-owner",
          detail: `the message's ${what} belongs to partition ${owner} now that the cluster has ${routing.correlationCount} partitions`,
          ownerPartitionId: owner,
        };
      }
      if (routing.relocating && record.messageId !== null && formerOwner !== this.partitionId) {
        return {
          kind: "rejected",
          reason: "relocating",
          detail: `messages are being relocated after partitions were added; a message with this id may still be buffered on partition ${formerOwner}`,
        };
      }
    }
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
    const message = this.newMessage(record, record.messageId, sizeBytes);
    this.buffer(message);
    return { kind: "published", key: encodeKey(this.partitionId, message.counter) };
  }

  /**
   * A message under the next key counter, made from a publication or a relocated message: the counter is taken
   * (they are never reused) and the message's snapshot entry encoded.
   */
  private newMessage(
    fields: Omit<MessageFields, "counter" | "messageId" | "sizeBytes">,
    messageId: string | null,
    sizeBytes: number,
  ): StoredMessage {
    const counter = this.nextCounter;
    if (counter > MAX_KEY_COUNTER) {
      throw new Error(`invariant violated: partition ${this.partitionId} exhausted its key counter`);
    }
    this.nextCounter = counter + 1;
    return storedMessage({
      counter,
      name: fields.name,
      correlationKey: fields.correlationKey,
      timeToLiveMs: fields.timeToLiveMs,
      messageId,
      variablesBytes: fields.variablesBytes,
      tenantId: fields.tenantId,
      publishedAtMs: fields.publishedAtMs,
      sizeBytes,
    });
  }

  private relocateOut(counters: readonly number[]): number {
    let moved = 0;
    for (const counter of counters) {
      const message = this.messages.get(counter);
      // Gone meanwhile (expired by an earlier record of the same turn) or taken out already: nothing to move.
      if (message === undefined) continue;
      this.unbuffer(message);
      this.outbound.set(counter, message);
      moved += 1;
    }
    // The moved messages' deadline entries stay in the heap; once they outnumber the buffered messages, the heap is
    // rebuilt from those, so that it does not keep what moved in memory until its deadline.
    this.staleDeadlines += moved;
    if (this.staleDeadlines >= MIN_STALE_DEADLINES_BEFORE_REBUILD && this.staleDeadlines > this.messages.size) {
      this.deadlines.rebuild(this.messages.values());
      this.staleDeadlines = 0;
    }
    return moved;
  }

  private relocatedOut(counter: number, newKey: string | null): void {
    const message = this.outbound.get(counter);
    if (message === undefined) return;
    this.outbound.delete(counter);
    this.entrySlabs.release(message.entry);
    if (newKey !== null) this.setForward(counter, { key: newKey, deadlineMs: message.deadlineMs });
  }

  /** Buffers one relocated message (see the module comment); returns its key here, null when it had expired. */
  private relocateIn(record: RelocatedMessage, nowMs: number, sizeBytes: number): string | null {
    const known = this.received.get(record.sourceKey);
    if (known !== undefined) return known.key;
    const deadlineMs = record.publishedAtMs + record.timeToLiveMs;
    if (deadlineMs <= nowMs) {
      // Expired on the way: it is expired here, once (the source no longer expires what it took out).
      this.setReceived(record.sourceKey, { key: null, deadlineMs: nowMs });
      return null;
    }
    const messageId = record.messageId ?? null;
    // Another partition may have buffered a different message with the same id before partitions were added: both
    // stay (neither may be lost), and the id keeps pointing at the one buffered here first.
    const indexed = messageId === null || this.findMessageId(record.tenantId, messageId) === undefined;
    const message = this.newMessage(record, messageId, sizeBytes);
    this.buffer(message, indexed);
    const routing = this.routing;
    if (
      routing !== null &&
      this.misplaced?.routing === routing &&
      this.ownerOf(message, routing) !== this.partitionId
    ) {
      // A hand-over retried from an earlier scale-up can arrive after a later one changed the routing: the message is
      // misplaced here at once and moves on like the others (it has the highest counter, so the order holds).
      this.misplaced.counters.push(message.counter);
    }
    const key = encodeKey(this.partitionId, message.counter);
    this.setReceived(record.sourceKey, { key, deadlineMs });
    return key;
  }

  private expire(nowMs: number): number {
    let count = 0;
    // Bounded by the number of entries of the deadline heap: each iteration removes one.
    for (
      let next = this.deadlines.peek();
      next !== undefined && next.deadlineMs <= nowMs;
      next = this.deadlines.peek()
    ) {
      this.deadlines.pop();
      // A message taken out for relocation left the heap's entry behind: its new owner expires it.
      if (this.messages.get(next.counter) !== next) {
        this.staleDeadlines -= 1;
        if (this.staleDeadlines < 0)
          throw new Error("invariant violated: more stale deadline entries dropped than made");
        continue;
      }
      this.unbuffer(next);
      this.entrySlabs.release(next.entry);
      count += 1;
    }
    this.dropPastForwards(nowMs);
    return count;
  }

  /**
   * Forgets forwards and received source keys whose message's deadline passed: the message is gone everywhere by
   * then. Each queue is looked at only up to its first entry still to come, so a publication pays for what it drops.
   */
  private dropPastForwards(nowMs: number): void {
    for (
      let next = this.forwardDeadlines.peek();
      next !== undefined && next.deadlineMs <= nowMs;
      next = this.forwardDeadlines.peek()
    ) {
      this.forwardDeadlines.pop();
      if ((this.forwards.get(next.key)?.deadlineMs ?? Number.POSITIVE_INFINITY) <= nowMs)
        this.forwards.delete(next.key);
    }
    for (
      let next = this.receivedDeadlines.peek();
      next !== undefined && next.deadlineMs <= nowMs;
      next = this.receivedDeadlines.peek()
    ) {
      this.receivedDeadlines.pop();
      if ((this.received.get(next.key)?.deadlineMs ?? Number.POSITIVE_INFINITY) <= nowMs)
        this.received.delete(next.key);
    }
  }

  private setForward(counter: number, forward: Forward): void {
    this.forwards.set(counter, forward);
    this.forwardDeadlines.push({ deadlineMs: forward.deadlineMs, key: counter });
  }

  private setReceived(sourceKey: string, received: Received): void {
    this.received.set(sourceKey, received);
    this.receivedDeadlines.push({ deadlineMs: received.deadlineMs, key: sourceKey });
  }

  private findMessageId(tenantId: string, messageId: string): number | undefined {
    return this.messageIds.get(tenantId)?.get(messageId);
  }

  private buffer(message: StoredMessage, indexed = true): void {
    this.messages.set(message.counter, message);
    this.deadlines.push(message);
    this.totalBytes += message.sizeBytes;
    if (message.messageId === null) return;
    if (indexed) {
      nestedMap(this.messageIds, message.tenantId).set(message.messageId, message.counter);
      return;
    }
    const holder = this.findMessageId(message.tenantId, message.messageId);
    if (holder === undefined || holder > message.counter) {
      throw new Error(`invariant violated: message ${message.counter} left unindexed without an earlier holder`);
    }
    const byId = nestedMap(this.unindexed, message.tenantId);
    let counters = byId.get(message.messageId);
    if (counters === undefined) {
      counters = new Set();
      byId.set(message.messageId, counters);
    }
    counters.add(message.counter);
  }

  private unbuffer(message: StoredMessage): void {
    if (!this.messages.delete(message.counter)) {
      throw new Error(`invariant violated: expired message ${message.counter} was not buffered`);
    }
    this.totalBytes -= message.sizeBytes;
    const messageId = message.messageId;
    if (messageId === null) return;
    const byId = this.unindexed.get(message.tenantId);
    const duplicates = byId?.get(messageId);
    // A relocated message whose id another message held already was buffered without the index.
    if (duplicates?.delete(message.counter) === true) {
      if (duplicates.size === 0) removeNested(this.unindexed, message.tenantId, messageId);
      return;
    }
    const ids = this.messageIds.get(message.tenantId);
    if (ids?.get(messageId) !== message.counter) {
      throw new Error(`invariant violated: message id index lost message ${message.counter}`);
    }
    if (duplicates !== undefined && duplicates.size > 0) {
      // The lowest duplicate takes the id over (see `unindexed`).
      const next = Math.min(...duplicates);
      duplicates.delete(next);
      if (duplicates.size === 0) removeNested(this.unindexed, message.tenantId, messageId);
      ids.set(messageId, next);
      return;
    }
    removeNested(this.messageIds, message.tenantId, messageId);
  }
}

/** The inner map of `outer` under `key`, created when missing. */
function nestedMap<Value>(outer: Map<string, Map<string, Value>>, key: string): Map<string, Value> {
  let inner = outer.get(key);
  if (inner === undefined) {
    inner = new Map();
    outer.set(key, inner);
  }
  return inner;
}

/** Removes `innerKey` from the inner map of `outer` under `key`, and that map once it is empty. */
function removeNested<Value>(outer: Map<string, Map<string, Value>>, key: string, innerKey: string): void {
  const inner = outer.get(key);
  if (inner === undefined) return;
  inner.delete(innerKey);
  if (inner.size === 0) outer.delete(key);
}

/** The steps of one restore (`PartitionEngine.restoreVisitor`) and the engine they built. */
interface EngineRestoreVisitor extends MsgpackArrayVisitor {
  /** A piece starts being decoded: `piece` when its caller gave it away (`pushGiven`), null when it lent it. */
  pieceStart(piece: Uint8Array | null): void;
  /** The piece announced by `pieceStart` was decoded. */
  pieceEnd(): void;
  /** The restored engine, once the whole snapshot was handed over. */
  result(): PartitionEngine;
}

/**
 * Restores one engine from a snapshot handed over in pieces (see `PartitionEngine.restorer`). A restorer that threw
 * is unusable; its partial engine is never handed out.
 */
export class EngineSnapshotRestorer {
  private readonly stream: MsgpackArrayStream;
  private failed = false;

  /** Called by `PartitionEngine.restorer`. */
  constructor(private readonly visitor: EngineRestoreVisitor) {
    this.stream = new MsgpackArrayStream(visitor);
  }

  /** Bytes of the snapshot handed over and decoded so far. */
  get decodedBytes(): number {
    return this.stream.decodedBytes;
  }

  /** The most bytes kept between two pieces (the start of a message that had not arrived whole). */
  get peakBufferedBytes(): number {
    return this.stream.peakBufferedBytes;
  }

  /** Decodes the messages and fields `piece` completes; `piece` may be reused afterwards. */
  push(piece: Uint8Array): void {
    this.decode(piece, null);
  }

  /**
   * Decodes the messages and fields `piece` completes, like `push`, but the caller gives `piece` away: the restored
   * messages may keep their entries where they lie in its memory instead of copies (`entry-slabs.ts`), so nothing may
   * write that memory afterwards. A snapshot chunk a joiner received is such a piece.
   */
  pushGiven(piece: Uint8Array): void {
    this.decode(piece, piece);
  }

  /** Decodes `piece`; `given` is the piece itself when its caller gave it away, else null. */
  private decode(piece: Uint8Array, given: Uint8Array | null): void {
    this.guard(() => {
      this.visitor.pieceStart(given);
      this.stream.push(piece);
      this.visitor.pieceEnd();
    });
  }

  /** The restored engine; throws when the snapshot ended early or bytes follow its end. */
  finish(): PartitionEngine {
    return this.guard(() => {
      this.stream.end();
      return this.visitor.result();
    });
  }

  private guard<T>(step: () => T): T {
    if (this.failed) throw new Error("invariant violated: a failed snapshot restore was continued");
    try {
      return step();
    } catch (error) {
      this.failed = true;
      if (error instanceof MsgpackStreamError) throw new Error(`corrupt engine snapshot: ${error.message}`);
      throw error;
    }
  }
}
