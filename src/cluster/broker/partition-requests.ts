/**
 * How a broker answers the peer requests addressed to one of its partition replicas: membership changes and forced
 * memberships (cluster changes), the routing and relocation of messages when partitions are added, and checkpoints
 * (backups). Each maps
 * the replica's outcome onto the request's answer; a proposal whose fate this replica cannot tell is answered
 * `unavailable`, which is safe here because every one of these requests is repeatable (the same routing again, a
 * relocation the owner recognizes by its source key).
 */

import { monotonicNowMs } from "../../time/monotonic.js";
import type { RelocatedMessage } from "../engine/index.js";
import { askPartitionLeader, type ChangeContext, pause } from "./operations.js";
import type { PartitionReplica, ProposalEnd } from "./partition-replica.js";
import type { LeaderRedirect, PartitionPeerRequest, PeerRequest, PeerResponses } from "./peer-requests.js";
import type { HandOverAnswer } from "./relocation.js";

/** Batches one `partition-relocate` request moves at most, so it answers well within its timeout. */
const RELOCATION_BATCHES_PER_REQUEST = 4;

/**
 * How long one `partition-relocate` request starts new steps: half the coordinator's wait for its answer (2 s), so
 * that a slow hand-over does not make the answer, and the progress it reports, arrive after the coordinator gave up.
 */
const RELOCATION_REQUEST_BUDGET_MS = 1_000;

/** Attempts at handing one batch of relocated messages to its owner within one request, one pause apart. */
const RELOCATE_IN_ATTEMPTS = 20;

/** The answer to a proposal that did not apply, for a repeatable request. */
function notApplied(end: Exclude<ProposalEnd, { kind: "applied" }>): LeaderRedirect {
  switch (end.kind) {
    case "refused":
      return end.redirect;
    case "replaced":
      return { outcome: "not-leader", leaderId: end.leaderId };
    case "unknown":
      return { outcome: "unavailable", detail: end.detail };
  }
}

/** Answers a peer request addressed to `replica`'s partition. */
export async function answerPartitionRequest(
  replica: PartitionReplica,
  request: PartitionPeerRequest,
  context: ChangeContext,
): Promise<PeerResponses[PeerRequest["type"]]> {
  switch (request.type) {
    case "partition-membership":
      return replica.changeMembership(request.change, request.waitMs ?? 0);
    case "partition-force":
      try {
        await replica.forceMembership(request.members);
        return { outcome: "forced" };
      } catch (error) {
        return { outcome: "unavailable", detail: (error as Error).message };
      }
    case "partition-route": {
      const end = await replica.routeMessages(request.correlationCount, request.basePartitionCount, request.relocating);
      return end.kind === "applied" ? { outcome: "routed" } : notApplied(end);
    }
    case "partition-relocate":
      return replica.relocateMessages(
        (ownerPartitionId, messages, checkpointId) => handOver(context, ownerPartitionId, messages, checkpointId),
        {
          maxBatches: RELOCATION_BATCHES_PER_REQUEST,
          untilMs: monotonicNowMs() + RELOCATION_REQUEST_BUDGET_MS,
          nowMs: () => monotonicNowMs(),
        },
      );
    case "partition-relocate-in": {
      const end = await replica.receiveRelocated(request.messages, request.checkpointId);
      if (end.kind !== "applied") return notApplied(end);
      if (end.result.kind !== "relocatedIn") {
        return { outcome: "unavailable", detail: `the relocated messages were applied as ${end.result.kind}` };
      }
      return { outcome: "relocated", keys: end.result.keys, checkpointId: replica.latestCheckpointId };
    }
    case "partition-checkpoint": {
      const end = await replica.takeCheckpoint(request.checkpointId);
      if (end.kind !== "applied") return notApplied(end);
      const result = end.result;
      if (result.kind === "checkpointed") {
        const { id, position } = result.checkpoint;
        return { outcome: "checkpointed", checkpointId: id, position, taken: true };
      }
      if (result.kind === "checkpoint-ignored") {
        const { id, position } = result.latest;
        return { outcome: "checkpointed", checkpointId: id, position, taken: false };
      }
      return { outcome: "unavailable", detail: `the checkpoint was applied as ${result.kind}` };
    }
  }
}

/**
 * Hands a batch of relocated messages to the leader of the partition owning their keys now, with the sender's latest
 * checkpoint id, and resolves with their keys there, in order (null for one that had expired on the way), and the
 * owner's latest checkpoint id; throws when no leader took them, which fails
 * this relocation request and leaves the messages outbound for the next one.
 */
async function handOver(
  context: ChangeContext,
  ownerPartitionId: number,
  messages: readonly RelocatedMessage[],
  checkpointId: bigint | null,
): Promise<HandOverAnswer> {
  const signal = new AbortController().signal;
  for (let attempt = 0; attempt < RELOCATE_IN_ATTEMPTS; attempt += 1) {
    const answer = await askPartitionLeader(context, {
      type: "partition-relocate-in",
      partitionId: ownerPartitionId,
      messages,
      checkpointId,
    });
    if (answer?.outcome === "relocated") {
      // A broker of an earlier version answers without a checkpoint id.
      return { keys: answer.keys, checkpointId: answer.checkpointId ?? null };
    }
    await pause(context.heartbeatIntervalMs * 2, signal);
  }
  throw new Error(`no leader of partition ${ownerPartitionId} took ${messages.length} relocated messages`);
}
