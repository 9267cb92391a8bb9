/**
 * Public surface of the Raft layer: the pure core (`RaftNode`), its message and batch types, and the shared
 * storage contract.
 */
export {
  applyChange,
  type ConfigurationChange,
  decodeConfiguration,
  encodeConfiguration,
  isVoter,
  memberOf,
  sameConfiguration,
  votersOf,
} from "./core/configuration.js";
export type { StableLog } from "./core/log.js";
export { MAX_TERM, malformedMessageReason, RAFT_MESSAGE_TYPES } from "./core/message-shape.js";
export type { Message } from "./core/messages.js";
export {
  type ForceReconfigurationOptions,
  type NodeStatus,
  type ProposalResult,
  RaftNode,
  type RaftNodeOptions,
  type ReceiptDamage,
  type Refusal,
  type RequestResult,
} from "./core/raft.js";
export { type RandomSource, SeededRandom } from "./core/random.js";
export type { ReadContext, ReadState } from "./core/read-index.js";
export type { Ready, Role, SoftState } from "./core/ready.js";
export { sameSnapshot, snapshotChecksum } from "./core/snapshot-transfer.js";
export * from "./types.js";
