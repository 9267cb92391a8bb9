/**
 * Moving buffered messages to the partition that owns their correlation key after partitions were added (the
 * relocation of spec/cluster-management.md's AWAIT_RELOCATION): the source partition's leader takes a batch of
 * misplaced messages out of its engine (a `relocateOut` record), hands each owner its share (which the owner buffers
 * with a `relocateIn` record and answers with the messages' new keys), and records them as relocated (`relocatedOut`),
 * so that their old keys keep answering by forwarding. Every step is a record of the partition's log, so a leader
 * change or a crash in between resumes from what the log says: messages taken out but not yet recorded as relocated
 * are handed over again first, and the owner buffers each source key once.
 */

import {
  type EngineRecord,
  MESSAGE_LIMITS,
  type OutboundMessage,
  type PartitionEngine,
  type RelocatedMessage,
  type Relocation,
} from "../engine/index.js";
import type { ProposalEnd } from "./partition-replica.js";
import type { RelocationProgress } from "./peer-requests.js";
import type { PartitionRedirect } from "./protocol.js";

/** Messages taken out for relocation by one record, and most messages one hand-over carries. */
const RELOCATION_BATCH_MESSAGES = 256;

/**
 * Most bytes of messages one hand-over carries, by the estimate of `relocatedMessageBytes`: the owner's relocateIn
 * record must stay within the record size limit, and one message alone always fits.
 */
const RELOCATION_BATCH_BYTES = MESSAGE_LIMITS.maxRecordBytes - 8 * 1024;

/** Hands `messages` to the leader of `ownerPartitionId` and resolves with its answer. */
export type HandOver = (
  ownerPartitionId: number,
  messages: readonly RelocatedMessage[],
  checkpointId: bigint | null,
) => Promise<HandOverAnswer>;

/** What relocation needs of the source partition's leading replica. */
export interface RelocationSource {
  /** The replica's engine now, which has applied everything committed. */
  engine(): PartitionEngine;
  /** The id of the latest checkpoint the replica applied, or null: what its hand-overs carry. */
  latestCheckpointId(): bigint | null;
  /** Proposes a record of the partition's own and resolves with how it ended. */
  proposeRecord(record: EngineRecord): Promise<ProposalEnd>;
}

/** How much one run of `relocateMisplacedMessages` may do before it answers. */
export interface RelocationLimits {
  /** Most batches taken out. */
  readonly maxBatches: number;
  /** No step starts once `nowMs()` reaches this, so the run answers within its caller's wait for the answer. */
  readonly untilMs: number;
  nowMs(): number;
}

/**
 * Moves up to `limits.maxBatches` batches of the messages whose correlation key another partition owns now, starting
 * no step after `limits.untilMs`: each batch is taken out (a `relocateOut` record), handed to its owners through
 * `send` in batches per owner (which resolves with the keys the owner buffered them under, null for one that had
 * expired), and then recorded as relocated (`relocatedOut`). Messages taken out earlier but not yet acknowledged (a
 * previous leader's, after a failure, or left by a run that ran out of time) are sent first. Resolves with how many
 * were moved and how many remain, or why it stopped.
 */
export async function relocateMisplacedMessages(
  source: RelocationSource,
  send: HandOver,
  limits: RelocationLimits,
): Promise<RelocationProgress | PartitionRedirect> {
  let moved = 0;
  let movedBytes = 0;
  const timeLeft = (): boolean => limits.nowMs() < limits.untilMs;
  batches: for (let batch = 0; batch < limits.maxBatches; batch += 1) {
    for (const handOver of handOverBatches(source.engine().outboundMessages())) {
      if (!timeLeft()) break batches;
      const answer = await send(handOver.ownerPartitionId, handOver.messages, source.latestCheckpointId());
      const keys = answer.keys;
      if (keys.length !== handOver.messages.length) {
        return {
          outcome: "unavailable",
          detail: `partition ${handOver.ownerPartitionId} answered a key count unlike the batch`,
        };
      }
      const relocations: Relocation[] = handOver.counters.map((counter, index) => ({
        counter,
        newKey: keys[index] ?? null,
      }));
      const end = await source.proposeRecord({ kind: "relocatedOut", relocations, checkpointId: answer.checkpointId });
      if (end.kind === "refused") return end.redirect;
      if (end.kind !== "applied") {
        return { outcome: "unavailable", detail: end.kind === "unknown" ? end.detail : "replaced" };
      }
      moved += relocations.length;
      movedBytes += handOver.bytes;
    }
    if (!timeLeft()) break;
    const misplaced = source.engine().misplacedMessages(RELOCATION_BATCH_MESSAGES);
    if (misplaced.length === 0) break;
    const end = await source.proposeRecord({ kind: "relocateOut", counters: misplaced });
    if (end.kind === "refused") return end.redirect;
    if (end.kind !== "applied") {
      return { outcome: "unavailable", detail: end.kind === "unknown" ? end.detail : "replaced" };
    }
  }
  const backlog = source.engine().relocationBacklog();
  return { outcome: "progress", moved, movedBytes, remaining: backlog.messages, remainingBytes: backlog.bytes };
}

/** The owner's answer to a hand-over: the messages' keys there, and its latest checkpoint id when it answered. */
export interface HandOverAnswer {
  readonly keys: readonly (string | null)[];
  readonly checkpointId: bigint | null;
}

/** Outbound messages for one owner partition, as one hand-over carries them. */
interface HandOverBatch {
  readonly ownerPartitionId: number;
  readonly counters: number[];
  readonly messages: RelocatedMessage[];
  /** The size of the records that buffered them at the source, for progress. */
  bytes: number;
}

/**
 * Groups outbound messages by the partition that owns them now, in batches of at most `RELOCATION_BATCH_MESSAGES`
 * messages and `RELOCATION_BATCH_BYTES` estimated bytes, so each batch fits in one relocateIn record.
 */
function handOverBatches(outbound: readonly OutboundMessage[]): HandOverBatch[] {
  const batches: HandOverBatch[] = [];
  const open = new Map<number, { batch: HandOverBatch; bytes: number }>();
  for (const { counter, ownerPartitionId, sizeBytes, ...message } of outbound) {
    const bytes = relocatedMessageBytes(message);
    let current = open.get(ownerPartitionId);
    if (
      current === undefined ||
      current.batch.messages.length >= RELOCATION_BATCH_MESSAGES ||
      current.bytes + bytes > RELOCATION_BATCH_BYTES
    ) {
      current = { batch: { ownerPartitionId, counters: [], messages: [], bytes: 0 }, bytes: 0 };
      open.set(ownerPartitionId, current);
      batches.push(current.batch);
    }
    current.batch.counters.push(counter);
    current.batch.messages.push(message);
    current.batch.bytes += sizeBytes;
    current.bytes += bytes;
  }
  return batches;
}

/** An upper bound on the bytes a relocated message takes in a record: three per UTF-16 unit of text, plus framing. */
function relocatedMessageBytes(message: RelocatedMessage): number {
  const text =
    message.sourceKey.length +
    message.name.length +
    message.correlationKey.length +
    (message.messageId?.length ?? 0) +
    message.tenantId.length;
  return message.variablesBytes.byteLength + 3 * text + 64;
}
