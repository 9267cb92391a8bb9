/**
 * Raft messages passed between replicas of one process. A replica reuses the bytes of a snapshot chunk it sent once
 * its `send` returned (the real transport has encoded them by then), so a test that hands the message object itself
 * to another replica hands over a copy of those bytes.
 */
import type { Message } from "../../src/cluster/raft/index.js";

/** `message` with bytes of its own, as the receiving end of the real transport would decode it. */
export function detachedMessage(message: Message): Message {
  return message.type === "snapshotChunk" ? { ...message, data: message.data.slice() } : message;
}
