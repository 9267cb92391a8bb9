/**
 * Requests brokers send each other on the cluster transport, beyond the gateway's (protocol.ts): the cluster
 * configuration a starting broker discovers, and the membership changes a broker applying a cluster change asks of
 * a partition's leader or of the other replicas. Received requests are checked before use, like every input.
 *
 * Checkpoint ids are bigints here; on the transport they travel as `encodedCheckpointId` writes them (a number up to
 * 2^53 − 1, as earlier versions send and expect them), through `peerMessageOnWire` and `peerAnswerFromWire`.
 */

import {
  decodedCheckpointId,
  encodedCheckpointId,
  MAX_RELOCATION_BATCH,
  type RelocatedMessage,
} from "../engine/index.js";
import type { Member } from "../raft/index.js";
import {
  type AcceptAnswer,
  type AcceptedChange,
  type Ballot,
  type PrepareAnswer,
  parseBallot,
  recordedChangeProblem,
} from "../topology/index.js";
import type { GossipedAddress } from "./broker-messages.js";
import { isGossipedAddress } from "./broker-messages.js";
import { type MembershipAnswer, type MembershipChange, parseMembershipChange } from "./membership.js";
import type { BackupIdOnWire, ReplicaReport } from "./protocol.js";

/** Requests between brokers. */
export type PeerRequest =
  /** What the answering broker knows of the cluster; asked by a starting broker of its contact points. */
  | { readonly type: "cluster-configuration" }
  /**
   * Phase 1 of accepting a new change at configuration version `version` (topology/change-acceptance.ts);
   * `othersHoldNothing`: see `prepare` there (absent: false).
   */
  | {
      readonly type: "change-prepare";
      readonly version: number;
      readonly ballot: Ballot;
      readonly othersHoldNothing?: true;
    }
  /** Phase 2: accept `configuration` (encoded), which records the change, as version `version`. */
  | {
      readonly type: "change-accept";
      readonly version: number;
      readonly ballot: Ballot;
      readonly configuration: string;
    }
  /**
   * Asks a partition's leader for a membership change (see membership.ts). With `waitMs` (at most
   * `MAX_MEMBERSHIP_WAIT_MS`), the leader answers as soon as the outcome is anything but `in-progress`, or after
   * `waitMs` (see `PartitionReplica.changeMembership`); brokers of earlier versions ignore it and answer at once.
   */
  | {
      readonly type: "partition-membership";
      readonly partitionId: number;
      readonly change: MembershipChange;
      readonly waitMs?: number;
    }
  /** Asks a replica to take `members` as its group's membership without the old quorum (forced reconfiguration). */
  | { readonly type: "partition-force"; readonly partitionId: number; readonly members: readonly Member[] }
  /** Asks a partition's leader to own only the correlation keys hashing to it over `correlationCount` partitions. */
  | {
      readonly type: "partition-route";
      readonly partitionId: number;
      readonly correlationCount: number;
      readonly basePartitionCount: number;
      readonly relocating: boolean;
    }
  /** Asks a partition's leader to relocate (some of) the messages another partition owns now. */
  | { readonly type: "partition-relocate"; readonly partitionId: number }
  /**
   * Hands relocated messages to the leader of the partition that owns their keys now, with the sending partition's
   * latest checkpoint id (null: none; brokers of earlier versions send none).
   */
  | {
      readonly type: "partition-relocate-in";
      readonly partitionId: number;
      readonly messages: readonly RelocatedMessage[];
      readonly checkpointId: bigint | null;
    }
  /** Asks a partition's leader to take checkpoint `checkpointId` (backup `checkpointId`) in its log. */
  | { readonly type: "partition-checkpoint"; readonly partitionId: number; readonly checkpointId: bigint };

/** The requests addressed to one partition's replica rather than to the broker. */
export type PartitionPeerRequest = Extract<PeerRequest, { readonly partitionId: number }>;

/** Answer to `cluster-configuration`. */
export interface ClusterConfigurationAnswer {
  readonly nodeId: number;
  /** The configuration the broker holds (as `encodeConfiguration` writes it), or null while it is still starting. */
  readonly configuration: string | null;
  /** Addresses of every broker it knows, itself included. */
  readonly brokers: readonly GossipedAddress[];
  /** The replicas it hosts, so that a starting broker can tell whether a partition's group already runs. */
  readonly replicas: readonly ReplicaReport[];
}

/** Answer to `partition-force`. */
export type ForceAnswer = { readonly outcome: "forced" } | { readonly outcome: "unavailable"; readonly detail: string };

/** Answers shared by requests a partition's leader must handle. */
export type LeaderRedirect =
  | { readonly outcome: "not-leader"; readonly leaderId: number | null }
  | { readonly outcome: "unavailable"; readonly detail: string };

/** Answer to `partition-route`. */
export type RouteAnswer = { readonly outcome: "routed" } | LeaderRedirect;

/** Messages (and the bytes of their records) one `partition-relocate` request moved, and what still has to move. */
export interface RelocationProgress {
  readonly outcome: "progress";
  readonly moved: number;
  readonly movedBytes: number;
  readonly remaining: number;
  readonly remainingBytes: number;
}

/** Answer to `partition-relocate`. */
export type RelocateAnswer = RelocationProgress | LeaderRedirect;

/**
 * Answer to `partition-relocate-in`: the messages' keys at their new owner, in order (null: that one had expired on
 * the way), and the owner's latest checkpoint id once it took them (null or absent: none).
 */
export type RelocateInAnswer =
  | {
      readonly outcome: "relocated";
      readonly keys: readonly (string | null)[];
      readonly checkpointId?: bigint | null;
    }
  | LeaderRedirect;

/**
 * Answer to `partition-checkpoint`: the checkpoint the partition holds once the record applied (`checkpointId` and
 * its log position), and whether the record took it (`taken`) or the partition held it or a later one already.
 */
export type CheckpointAnswer =
  | {
      readonly outcome: "checkpointed";
      readonly checkpointId: bigint;
      readonly position: number;
      readonly taken: boolean;
    }
  | LeaderRedirect;

/** The answer type of each peer request type. */
export interface PeerResponses {
  "cluster-configuration": ClusterConfigurationAnswer;
  "change-prepare": PrepareAnswer;
  "change-accept": AcceptAnswer;
  "partition-membership": MembershipAnswer;
  "partition-force": ForceAnswer;
  "partition-route": RouteAnswer;
  "partition-relocate": RelocateAnswer;
  "partition-relocate-in": RelocateInAnswer;
  "partition-checkpoint": CheckpointAnswer;
}

const PEER_REQUEST_TYPES = new Set([
  "cluster-configuration",
  "change-prepare",
  "change-accept",
  "partition-membership",
  "partition-force",
  "partition-route",
  "partition-relocate",
  "partition-relocate-in",
  "partition-checkpoint",
]);

/** Whether `value` is a request of one of the peer request types (to be parsed by `parsePeerRequest`). */
export function isPeerRequestType(value: unknown): boolean {
  return (
    typeof value === "object" &&
    value !== null &&
    PEER_REQUEST_TYPES.has(String((value as Record<string, unknown>).type))
  );
}

function isPartitionId(value: unknown): value is number {
  return Number.isSafeInteger(value) && (value as number) >= 1;
}

function parseMembers(value: unknown): Member[] | string {
  if (!Array.isArray(value) || value.length === 0) return "members must be a non-empty array";
  const members: Member[] = [];
  for (const member of value) {
    if (typeof member !== "object" || member === null) return "a member is not an object";
    const { id, role, priority } = member as Record<string, unknown>;
    if (!Number.isSafeInteger(id) || (id as number) < 0) return "a member has no valid id";
    if (role !== "voter") return "forced members must be voters";
    if (!Number.isSafeInteger(priority) || (priority as number) < 1) return "a member has no valid priority";
    members.push({ id: id as number, role, priority: priority as number });
  }
  return members;
}

/** Longest a `partition-membership` request may ask its leader to wait for the change (below any request timeout). */
export const MAX_MEMBERSHIP_WAIT_MS = 5_000;

/** Checks a request from another broker; returns it typed, or a description of what is wrong. */
export function parsePeerRequest(value: unknown): PeerRequest | string {
  if (typeof value !== "object" || value === null) return "the request is not an object";
  const request = value as Record<string, unknown>;
  switch (request.type) {
    case "cluster-configuration":
      return { type: "cluster-configuration" };
    case "change-prepare":
    case "change-accept": {
      const { version, configuration } = request;
      if (!Number.isSafeInteger(version) || (version as number) < 2) return `${request.type} needs a version ≥ 2`;
      const ballot = parseBallot(request.ballot);
      if (typeof ballot === "string") return `${request.type}: ${ballot}`;
      if (request.type === "change-prepare") {
        const { othersHoldNothing } = request;
        if (othersHoldNothing !== undefined && othersHoldNothing !== true) {
          return "change-prepare: othersHoldNothing must be true or absent";
        }
        return {
          type: "change-prepare",
          version: version as number,
          ballot,
          ...(othersHoldNothing === true ? { othersHoldNothing } : {}),
        };
      }
      if (typeof configuration !== "string") return "change-accept needs the configuration it records";
      const problem = recordedChangeProblem(configuration, version as number);
      if (problem !== null) return `change-accept: ${problem}`;
      return { type: "change-accept", version: version as number, ballot, configuration };
    }
    case "partition-membership": {
      if (!isPartitionId(request.partitionId)) return "partition-membership needs a partition id ≥ 1";
      const change = parseMembershipChange(request.change);
      if (typeof change === "string") return change;
      const waitMs = request.waitMs;
      if (waitMs === undefined) return { type: "partition-membership", partitionId: request.partitionId, change };
      if (!Number.isSafeInteger(waitMs) || (waitMs as number) < 0 || (waitMs as number) > MAX_MEMBERSHIP_WAIT_MS) {
        return `partition-membership waitMs must be an integer from 0 to ${MAX_MEMBERSHIP_WAIT_MS}`;
      }
      return { type: "partition-membership", partitionId: request.partitionId, change, waitMs: waitMs as number };
    }
    case "partition-force": {
      if (!isPartitionId(request.partitionId)) return "partition-force needs a partition id ≥ 1";
      const members = parseMembers(request.members);
      if (typeof members === "string") return members;
      return { type: "partition-force", partitionId: request.partitionId, members };
    }
    case "partition-route": {
      const { partitionId, correlationCount, basePartitionCount, relocating } = request;
      if (!isPartitionId(partitionId) || !isPartitionId(correlationCount) || !isPartitionId(basePartitionCount)) {
        return "partition-route needs a partition id and partition counts ≥ 1";
      }
      if (typeof relocating !== "boolean") return "partition-route needs a boolean relocating";
      return { type: "partition-route", partitionId, correlationCount, basePartitionCount, relocating };
    }
    case "partition-relocate":
      if (!isPartitionId(request.partitionId)) return "partition-relocate needs a partition id ≥ 1";
      return { type: "partition-relocate", partitionId: request.partitionId };
    case "partition-relocate-in": {
      if (!isPartitionId(request.partitionId)) return "partition-relocate-in needs a partition id ≥ 1";
      const { messages } = request;
      if (!Array.isArray(messages) || messages.length === 0 || messages.length > MAX_RELOCATION_BATCH) {
        return `partition-relocate-in carries 1..${MAX_RELOCATION_BATCH} messages`;
      }
      const parsed: RelocatedMessage[] = [];
      for (const value of messages) {
        const message = parseRelocatedMessage(value);
        if (typeof message === "string") return message;
        parsed.push(message);
      }
      const encodedId = request.checkpointId ?? null;
      const checkpointId = encodedId === null ? null : decodedCheckpointId(encodedId);
      if (encodedId !== null && checkpointId === null) {
        return "partition-relocate-in carries a checkpoint id ≥ 0 or none";
      }
      return { type: "partition-relocate-in", partitionId: request.partitionId, messages: parsed, checkpointId };
    }
    case "partition-checkpoint": {
      if (!isPartitionId(request.partitionId)) return "partition-checkpoint needs a partition id ≥ 1";
      const checkpointId = decodedCheckpointId(request.checkpointId);
      if (checkpointId === null) return "partition-checkpoint needs a checkpoint id ≥ 0";
      return { type: "partition-checkpoint", partitionId: request.partitionId, checkpointId };
    }
    default:
      return `unknown peer request type ${JSON.stringify(request.type)}`;
  }
}

/**
 * Checks the shape of a relocated message; its fields are validated again (limits included) when the owner encodes
 * its record, which refuses anything invalid.
 */
function parseRelocatedMessage(value: unknown): RelocatedMessage | string {
  if (typeof value !== "object" || value === null) return "the relocated message is not an object";
  const message = value as Record<string, unknown>;
  const { sourceKey, name, correlationKey, timeToLiveMs, messageId, variablesBytes, tenantId, publishedAtMs } = message;
  if (
    typeof sourceKey !== "string" ||
    typeof name !== "string" ||
    typeof correlationKey !== "string" ||
    !Number.isSafeInteger(timeToLiveMs) ||
    !(messageId === undefined || messageId === null || typeof messageId === "string") ||
    !(variablesBytes instanceof Uint8Array) ||
    typeof tenantId !== "string" ||
    !Number.isSafeInteger(publishedAtMs)
  ) {
    return "the relocated message is malformed";
  }
  return {
    sourceKey,
    name,
    correlationKey,
    timeToLiveMs: timeToLiveMs as number,
    ...(typeof messageId === "string" ? { messageId } : {}),
    variablesBytes,
    tenantId,
    publishedAtMs: publishedAtMs as number,
  };
}

/** Checks a `cluster-configuration` answer; returns it typed or null when it is malformed. */
export function parseClusterConfigurationAnswer(value: unknown): ClusterConfigurationAnswer | null {
  if (typeof value !== "object" || value === null) return null;
  const answer = value as Record<string, unknown>;
  if (!Number.isSafeInteger(answer.nodeId) || (answer.nodeId as number) < 0) return null;
  if (answer.configuration !== null && typeof answer.configuration !== "string") return null;
  if (!Array.isArray(answer.brokers) || !answer.brokers.every(isGossipedAddress)) return null;
  if (!Array.isArray(answer.replicas)) return null;
  const replicas = answer.replicas.filter(
    (report): report is ReplicaReport =>
      typeof report === "object" &&
      report !== null &&
      isPartitionId((report as ReplicaReport).partitionId) &&
      Number.isSafeInteger((report as ReplicaReport).term) &&
      Number.isSafeInteger((report as ReplicaReport).commitIndex),
  );
  return {
    nodeId: answer.nodeId as number,
    configuration: answer.configuration as string | null,
    brokers: answer.brokers,
    replicas,
  };
}

function parseAcceptedChange(value: unknown): AcceptedChange | null {
  if (typeof value !== "object" || value === null) return null;
  const { ballot, configuration } = value as Record<string, unknown>;
  const parsed = parseBallot(ballot);
  if (typeof parsed === "string" || typeof configuration !== "string") return null;
  return { ballot: parsed, configuration };
}

/**
 * Checks a `change-prepare` answer to a prepare for `version`; returns it typed or null when it is malformed, which
 * includes a reported acceptance that no coordinator could have proposed for the version (a broker of the version
 * before these checks accepted anything): adopting it would stop every later change.
 */
export function parsePrepareAnswer(value: unknown, version: number): PrepareAnswer | null {
  if (typeof value !== "object" || value === null) return null;
  const answer = value as Record<string, unknown>;
  if (answer.outcome === "behind" || answer.outcome === "abstaining") return { outcome: answer.outcome };
  if (answer.outcome === "rejected") {
    const promised = parseBallot(answer.promised);
    return typeof promised === "string" ? null : { outcome: "rejected", promised };
  }
  if (answer.outcome !== "promised") return null;
  if (answer.accepted === null) return { outcome: "promised", accepted: null };
  const accepted = parseAcceptedChange(answer.accepted);
  if (accepted === null || recordedChangeProblem(accepted.configuration, version) !== null) return null;
  return { outcome: "promised", accepted };
}

/** Checks a `change-accept` answer; returns it typed or null when it is malformed. */
export function parseAcceptAnswer(value: unknown): AcceptAnswer | null {
  if (typeof value !== "object" || value === null) return null;
  const answer = value as Record<string, unknown>;
  if (answer.outcome === "accepted" || answer.outcome === "behind" || answer.outcome === "abstaining") {
    return { outcome: answer.outcome };
  }
  if (answer.outcome !== "rejected") return null;
  const promised = parseBallot(answer.promised);
  return typeof promised === "string" ? null : { outcome: "rejected", promised };
}

/** A checkpoint id field's type on the transport: a bigint becomes either encoding; null and absence stay. */
type CheckpointIdOnWire<CheckpointId> = CheckpointId extends bigint ? BackupIdOnWire : CheckpointId;

/** A peer request or answer as the transport carries it (`peerMessageOnWire`): every other field as it is. */
export type PeerMessageOnWire<Message> = {
  [Key in keyof Message]: Key extends "checkpointId" ? CheckpointIdOnWire<Message[Key]> : Message[Key];
};

/**
 * A peer request or answer as the transport carries it: its checkpoint id (if it has one) as `encodedCheckpointId`
 * writes it, so that brokers of earlier versions read ids up to 2^53 − 1 as before.
 */
export function peerMessageOnWire<Message extends object>(message: Message): PeerMessageOnWire<Message> {
  if (!("checkpointId" in message) || typeof message.checkpointId !== "bigint") {
    return message as PeerMessageOnWire<Message>;
  }
  return { ...message, checkpointId: encodedCheckpointId(message.checkpointId) } as PeerMessageOnWire<Message>;
}

/**
 * A peer answer as it arrived, with its checkpoint id decoded: a `checkpointed` answer whose id is malformed is
 * answered `unavailable` (no checkpoint can be told from it), and a `relocated` one carries none.
 */
export function peerAnswerFromWire(answer: unknown): unknown {
  if (typeof answer !== "object" || answer === null || !("checkpointId" in answer)) return answer;
  const { outcome, checkpointId } = answer as { outcome?: unknown; checkpointId: unknown };
  if (outcome !== "checkpointed" && outcome !== "relocated") return answer;
  const decoded = checkpointId === null || checkpointId === undefined ? null : decodedCheckpointId(checkpointId);
  if (outcome === "checkpointed" && decoded === null) {
    return { outcome: "unavailable", detail: "the leader answered a malformed checkpoint id" };
  }
  return { ...answer, checkpointId: decoded };
}
