/**
 * The shape a Raft message must have before the core takes it. The core trusts its messages' fields: a heartbeat
 * whose commit index was the string "x" set the log's commit index to NaN, after which the replica's driver never
 * yielded again, and an append whose entry was `{}` failed the replica. A peer holding the cluster's secret is a
 * member by design, but a malformed message from it is refused here, with the field that is wrong, and never reaches
 * the core.
 *
 * Terms are bounded by `MAX_TERM`: a campaign takes the term one higher, so a message whose term was 2^53 − 1 (which
 * every member adopted and stored) left its group unable to elect anyone, since no term above it is exact.
 */
import { isCrc32c, isNonNegativeInteger, isRecord, isSnapshotMetadata } from "../shapes.js";
import type { EntryKind } from "../types.js";
import type { Message } from "./messages.js";

/** Largest term a message may carry: beyond any count of elections, and far below the last exact integer. */
export const MAX_TERM = 2 ** 48;

/** The type of every message of the protocol. */
export const RAFT_MESSAGE_TYPES: ReadonlySet<string> = new Set([
  "append",
  "appendResponse",
  "heartbeat",
  "heartbeatResponse",
  "voteRequest",
  "voteResponse",
  "timeoutNow",
  "snapshotChunk",
  "snapshotResponse",
] satisfies Message["type"][]);

const ENTRY_KINDS: ReadonlySet<EntryKind> = new Set(["normal", "configuration", "noop"]);

const SNAPSHOT_STATUSES: ReadonlySet<unknown> = new Set(["continue", "installed", "rejected"]);

/** The first of `fields` of `message` that is not an index, term, offset or sequence (an integer of 0 or more). */
function firstNonInteger(message: Record<string, unknown>, fields: readonly string[]): string | undefined {
  return fields.find((field) => !isNonNegativeInteger(message[field]));
}

/** The first of `fields` of `message` that is not a boolean. */
function firstNonBoolean(message: Record<string, unknown>, fields: readonly string[]): string | undefined {
  return fields.find((field) => typeof message[field] !== "boolean");
}

/** Why the entries of an append following `prevIndex` in `term` are malformed, or null when they are not. */
function malformedEntries(entries: unknown, prevIndex: number, term: number): string | null {
  if (!Array.isArray(entries)) return "entries is not a list";
  for (let position = 0; position < entries.length; position += 1) {
    const entry: unknown = entries[position];
    if (!isRecord(entry)) return `entry ${position} is not an object`;
    if (entry.index !== prevIndex + 1 + position) return `entry ${position} does not follow index ${prevIndex}`;
    if (!isNonNegativeInteger(entry.term) || entry.term > term) {
      return `entry ${position} has no term up to the message's ${term}`;
    }
    if (!ENTRY_KINDS.has(entry.kind as EntryKind)) return `entry ${position} is of no known kind`;
    if (!(entry.data instanceof Uint8Array)) return `entry ${position} carries no bytes`;
  }
  return null;
}

/**
 * Why `message`, whose type is one of the protocol's and whose sender, recipient and term were checked, is malformed;
 * null when every field the core reads has the type it expects.
 */
export function malformedMessageReason(message: Record<string, unknown> & { readonly term: number }): string | null {
  if (message.term > MAX_TERM) return `term ${message.term} is above the largest term, ${MAX_TERM}`;
  let field: string | undefined;
  switch (message.type) {
    case "append": {
      field = firstNonInteger(message, ["prevIndex", "prevTerm", "commitIndex"]);
      if (field !== undefined) break;
      if (message.acknowledge !== undefined && typeof message.acknowledge !== "boolean") {
        field = "acknowledge";
        break;
      }
      const entries = malformedEntries(message.entries, message.prevIndex as number, message.term);
      if (entries !== null) return `append: ${entries}`;
      break;
    }
    case "appendResponse":
      field = firstNonInteger(message, ["index", "hintIndex", "hintTerm"]) ?? firstNonBoolean(message, ["rejected"]);
      break;
    case "heartbeat":
      field = firstNonInteger(message, ["commitIndex", "readSequence"]);
      break;
    case "heartbeatResponse":
      field = firstNonInteger(message, ["readSequence"]);
      break;
    case "voteRequest":
      field = firstNonInteger(message, ["lastIndex", "lastTerm"]) ?? firstNonBoolean(message, ["preVote", "transfer"]);
      break;
    case "voteResponse":
      field = firstNonBoolean(message, ["preVote", "granted"]);
      break;
    case "timeoutNow":
      break;
    case "snapshotChunk": {
      field = firstNonInteger(message, ["offset"]) ?? firstNonBoolean(message, ["last"]);
      if (field !== undefined) break;
      if (!isSnapshotMetadata(message.metadata)) return "snapshotChunk: metadata is malformed";
      if (!(message.data instanceof Uint8Array)) return "snapshotChunk: data carries no bytes";
      if ((message.offset as number) + message.data.byteLength > message.metadata.sizeBytes) {
        return "snapshotChunk: the chunk ends beyond the snapshot's size";
      }
      if (message.checksum !== undefined && !isCrc32c(message.checksum)) field = "checksum";
      break;
    }
    case "snapshotResponse":
      field = firstNonInteger(message, ["snapshotIndex", "snapshotTerm", "nextOffset", "matchIndex"]);
      if (field === undefined && !SNAPSHOT_STATUSES.has(message.status)) field = "status";
      break;
    default:
      return `no message type ${String(message.type).slice(0, 32)}`;
  }
  return field === undefined ? null : `${String(message.type)}: ${field} is malformed`;
}
