/**
 * The client history of the real-driver simulation and its checkers.
 *
 * Clients publish messages (each a logical publication with a unique name, most with a unique `messageId`) and read
 * them back by key through whichever replica leads. A publication answered `not-leader` or `unavailable` certainly did
 * not take effect (the replica's contract), so the client retries it like the gateway does, with the same
 * `messageId`; one answered `unknown`, or sent to a replica that crashed before answering, is never retried.
 *
 * Checked while the run goes on (`recordAnswer` returns the violation):
 * - no key is acknowledged for two publications, and no publication is acknowledged twice;
 * - no retry is refused as a duplicate `messageId`: the earlier attempt that answered `not-leader`/`unavailable` took
 *   effect after all.
 *
 * Checked at the end (`check`), per key (keys are handed out by the partition in increasing order and never reused, so
 * each key is a register written once, then emptied when its message's time to live is over):
 * - a message found under a key is the publication that key was acknowledged for, with its content, and no
 *   publication is found under two keys; a found message whose publication was answered as certainly not applied is
 *   a violation;
 * - no message is found at or after its deadline;
 * - reads served before the deadline are linearizable with the publication (`checkRegister`): once the publication was
 *   acknowledged, or a read found it, no later read misses it. Times in the register history are the sequence
 *   numbers of invocations and answers, which order them exactly (many happen within one simulated millisecond).
 */
import type {
  GetMessageResponse,
  MessageView,
  PublishMessageCommand,
  PublishMessageResponse,
} from "../../src/cluster/broker/protocol.js";
import { checkRegister, type RegisterOperation } from "./linearizability.js";

/** One attempt of a publication at one replica. */
export interface PublicationAttempt {
  readonly replicaId: number;
  readonly invokedAtMs: number;
  readonly invokedSequence: number;
  respondedSequence: number | null;
  /** The answer's outcome, `lost` when the replica crashed before answering, null while waiting. */
  outcome: PublishMessageResponse["outcome"] | "lost" | null;
}

/** A logical publication and its attempts. */
export interface Publication {
  readonly command: PublishMessageCommand;
  readonly attempts: PublicationAttempt[];
  /**
   * `acknowledged`: published; `failed`: every attempt answered that it certainly did not take effect and the client
   * gave up; `unknown`: an attempt may have taken effect (answered `unknown`, or its replica crashed).
   */
  status: "pending" | "acknowledged" | "failed" | "unknown";
  acknowledgedKey: string | null;
  acknowledgedAttempt: PublicationAttempt | null;
}

/** One read of a key. */
export interface KeyRead {
  readonly key: string;
  readonly replicaId: number;
  readonly invokedSequence: number;
  respondedSequence: number | null;
  /** Simulated time of the answer, which is when the leader served it. */
  respondedAtMs: number | null;
  outcome: "found" | "not-found" | "failed" | null;
  message: MessageView | null;
}

/** Everything the clients did, and the checks over it. */
export class PublicationHistory {
  readonly publications = new Map<string, Publication>();
  readonly reads: KeyRead[] = [];
  private readonly publicationByKey = new Map<string, Publication>();
  private sequence = 0;

  /** Starts a logical publication. */
  startPublication(command: PublishMessageCommand): Publication {
    const publication: Publication = {
      command,
      attempts: [],
      status: "pending",
      acknowledgedKey: null,
      acknowledgedAttempt: null,
    };
    this.publications.set(command.name, publication);
    return publication;
  }

  /** Records that an attempt of `publication` was sent to `replicaId` at `nowMs`. */
  startAttempt(publication: Publication, replicaId: number, nowMs: number): PublicationAttempt {
    const attempt: PublicationAttempt = {
      replicaId,
      invokedAtMs: nowMs,
      invokedSequence: this.nextSequence(),
      respondedSequence: null,
      outcome: null,
    };
    publication.attempts.push(attempt);
    return attempt;
  }

  /**
   * Records an attempt's answer; returns a violation or null. The publication's status follows: `published` makes it
   * acknowledged, `unknown` unknown, and the caller decides whether a certain failure is retried or given up
   * (`giveUp`).
   */
  recordAnswer(publication: Publication, attempt: PublicationAttempt, answer: PublishMessageResponse): string | null {
    if (attempt.outcome !== null) return null;
    attempt.outcome = answer.outcome;
    attempt.respondedSequence = this.nextSequence();
    const name = publication.command.name;
    switch (answer.outcome) {
      case "published": {
        if (publication.status === "acknowledged") {
          return `publication ${name} acknowledged twice (keys ${publication.acknowledgedKey} and ${answer.key})`;
        }
        const holder = this.publicationByKey.get(answer.key);
        if (holder !== undefined) {
          return `key ${answer.key} acknowledged for two publications (${holder.command.name} and ${name})`;
        }
        this.publicationByKey.set(answer.key, publication);
        publication.status = "acknowledged";
        publication.acknowledgedKey = answer.key;
        publication.acknowledgedAttempt = attempt;
        return null;
      }
      case "rejected":
        if (answer.reason === "duplicate-message-id") {
          return (
            `publication ${name} was refused as a duplicate message id on attempt ${publication.attempts.length}: an ` +
            `earlier attempt answered as certainly not applied took effect (${answer.detail})`
          );
        }
        return `publication ${name} was rejected: ${answer.detail}`;
      case "unknown":
        if (publication.status !== "acknowledged") publication.status = "unknown";
        return null;
      case "not-leader":
      case "unavailable":
        return null;
    }
  }

  /** The replica an attempt went to crashed before answering: the attempt may or may not take effect. */
  loseAttempt(publication: Publication, attempt: PublicationAttempt): void {
    if (attempt.outcome !== null) return;
    attempt.outcome = "lost";
    if (publication.status !== "acknowledged") publication.status = "unknown";
  }

  /** The client stops retrying a publication whose every attempt certainly failed. */
  giveUp(publication: Publication): void {
    if (publication.status === "pending") publication.status = "failed";
  }

  /** Records that a read of `key` was sent to `replicaId`. */
  startRead(key: string, replicaId: number): KeyRead {
    const read: KeyRead = {
      key,
      replicaId,
      invokedSequence: this.nextSequence(),
      respondedSequence: null,
      respondedAtMs: null,
      outcome: null,
      message: null,
    };
    this.reads.push(read);
    return read;
  }

  /** Records a read's answer (redirects and failures count as failed reads, which constrain nothing). */
  recordRead(read: KeyRead, answer: GetMessageResponse, nowMs: number): void {
    if (read.outcome !== null) return;
    read.respondedSequence = this.nextSequence();
    read.respondedAtMs = nowMs;
    if (answer.outcome === "found") {
      read.outcome = "found";
      read.message = answer.message;
    } else {
      read.outcome = answer.outcome === "not-found" ? "not-found" : "failed";
    }
  }

  /** The replica a read went to crashed before answering. */
  loseRead(read: KeyRead): void {
    if (read.outcome === null) read.outcome = "failed";
  }

  /** Acknowledged publications. */
  acknowledged(): Publication[] {
    return [...this.publications.values()].filter((publication) => publication.status === "acknowledged");
  }

  /** When the message of an acknowledged publication expires (its leader took the attempt's time as its own). */
  deadlineOf(publication: Publication): number | null {
    const attempt = publication.acknowledgedAttempt;
    return attempt === null ? null : attempt.invokedAtMs + publication.command.timeToLiveMs;
  }

  /** Every violation of the checks listed in the module comment. */
  check(): string[] {
    const violations: string[] = [];
    const readsByKey = new Map<string, KeyRead[]>();
    for (const read of this.reads) {
      if (read.outcome !== "found" && read.outcome !== "not-found") continue;
      let reads = readsByKey.get(read.key);
      if (reads === undefined) {
        reads = [];
        readsByKey.set(read.key, reads);
      }
      reads.push(read);
    }
    const keyOfFoundPublication = new Map<string, string>();
    for (const [key, reads] of readsByKey) {
      const problem = this.checkKey(key, reads, keyOfFoundPublication);
      if (problem !== null) violations.push(problem);
    }
    return violations;
  }

  private checkKey(key: string, reads: readonly KeyRead[], keyOfFoundPublication: Map<string, string>): string | null {
    let publication = this.publicationByKey.get(key) ?? null;
    let deadlineMs = publication === null ? null : this.deadlineOf(publication);
    for (const read of reads) {
      const message = read.message;
      if (read.outcome !== "found" || message === null) continue;
      const found = this.publications.get(message.name);
      if (found === undefined) return `key ${key} holds message ${message.name}, which no client published`;
      if (publication !== null && found !== publication) {
        return `key ${key} was acknowledged for ${publication.command.name} but a read found ${message.name} there`;
      }
      publication = found;
      if (found.status === "failed") {
        return `publication ${found.command.name} was answered as certainly not applied, but a read found it at ${key}`;
      }
      const otherKey = keyOfFoundPublication.get(message.name) ?? found.acknowledgedKey;
      if (otherKey !== null && otherKey !== key) {
        return `publication ${message.name} is found at key ${key} and at key ${otherKey}: it was applied twice`;
      }
      keyOfFoundPublication.set(message.name, key);
      const contentProblem = differsFromCommand(message, found);
      if (contentProblem !== null) return `key ${key}: ${contentProblem}`;
      const expiresAtMs = Date.parse(message.expiresAt);
      if (deadlineMs !== null && deadlineMs !== expiresAtMs) {
        return `key ${key}: reads disagree on its deadline (${deadlineMs} and ${expiresAtMs})`;
      }
      deadlineMs = expiresAtMs;
    }
    if (publication === null || deadlineMs === null) return null;
    for (const read of reads) {
      if (read.outcome === "found" && (read.respondedAtMs ?? 0) >= deadlineMs) {
        return `key ${key}: a read at ${read.respondedAtMs} found its message, which expired at ${deadlineMs}`;
      }
    }
    const operations: RegisterOperation[] = [];
    const first = publication.attempts[0];
    if (first === undefined) return `key ${key}: publication ${publication.command.name} has no attempt`;
    operations.push({
      kind: "write",
      value: publication.command.name,
      invokedAt: first.invokedSequence,
      respondedAt: publication.acknowledgedAttempt?.respondedSequence ?? Number.POSITIVE_INFINITY,
      label: `publish ${publication.command.name}`,
    });
    for (const read of reads) {
      // A read served at or after the deadline finds nothing whatever happened before: it constrains nothing more.
      if (read.respondedSequence === null || (read.respondedAtMs ?? 0) >= deadlineMs) continue;
      operations.push({
        kind: "read",
        value: read.outcome === "found" ? publication.command.name : null,
        invokedAt: read.invokedSequence,
        respondedAt: read.respondedSequence,
        label: `read at replica ${read.replicaId}`,
      });
    }
    const verdict = checkRegister(operations);
    if (verdict.outcome === "violation") return `key ${key}: ${verdict.detail}`;
    return null;
  }

  private nextSequence(): number {
    this.sequence += 1;
    return this.sequence;
  }
}

/** What differs between a message read back and the publication it claims to be, or null. */
function differsFromCommand(message: MessageView, publication: Publication): string | null {
  const command = publication.command;
  const expected = {
    name: command.name,
    correlationKey: command.correlationKey,
    timeToLiveMs: command.timeToLiveMs,
    messageId: command.messageId,
    variables: JSON.stringify(command.variables),
    tenantId: command.tenantId,
  };
  const actual = {
    name: message.name,
    correlationKey: message.correlationKey,
    timeToLiveMs: message.timeToLiveMs,
    messageId: message.messageId,
    variables: JSON.stringify(message.variables),
    tenantId: message.tenantId,
  };
  for (const field of Object.keys(expected) as (keyof typeof expected)[]) {
    if (expected[field] !== actual[field]) {
      return `message ${command.name} reads back with ${field} ${String(actual[field])}, not ${String(expected[field])}`;
    }
  }
  const publishedAtMs = Date.parse(message.publishedAt);
  const attempt = publication.acknowledgedAttempt;
  if (
    attempt !== null
      ? attempt.invokedAtMs !== publishedAtMs
      : !publication.attempts.some((candidate) => candidate.invokedAtMs === publishedAtMs)
  ) {
    return `message ${command.name} reads back published at ${message.publishedAt}, when no attempt of it was made`;
  }
  if (Date.parse(message.expiresAt) !== publishedAtMs + command.timeToLiveMs) {
    return `message ${command.name} expires at ${message.expiresAt}, not its time to live after its publication`;
  }
  return null;
}
