import { describe, expect, it } from "vitest";
import type { MessageView, PublishMessageCommand } from "../../src/cluster/broker/protocol.js";
import { type Publication, PublicationHistory } from "./replica-history.js";

const KEY = "2251799813685249";
const OTHER_KEY = "2251799813685250";

function command(name: string, timeToLiveMs = 60_000): PublishMessageCommand {
  return { name, correlationKey: "c", timeToLiveMs, messageId: `id-${name}`, variables: { name }, tenantId: "t" };
}

function view(publication: Publication, key: string, publishedAtMs: number): MessageView {
  const { command: sent } = publication;
  return {
    key,
    partitionId: 1,
    name: sent.name,
    correlationKey: sent.correlationKey,
    timeToLiveMs: sent.timeToLiveMs,
    ...(sent.messageId === undefined ? {} : { messageId: sent.messageId }),
    variables: sent.variables,
    tenantId: sent.tenantId,
    publishedAt: new Date(publishedAtMs).toISOString(),
    expiresAt: new Date(publishedAtMs + sent.timeToLiveMs).toISOString(),
  };
}

/** A publication acknowledged with `key`, published at `atMs`. */
function acknowledged(history: PublicationHistory, name: string, key: string, atMs: number): Publication {
  const publication = history.startPublication(command(name));
  const attempt = history.startAttempt(publication, 1, atMs);
  expect(history.recordAnswer(publication, attempt, { outcome: "published", key, partitionId: 1, tenantId: "t" })).toBe(
    null,
  );
  return publication;
}

describe("publication history checks", () => {
  it("accepts acknowledged publications read back with their content, and misses before they existed", () => {
    const history = new PublicationHistory();
    const early = history.startRead(KEY, 1);
    history.recordRead(early, { outcome: "not-found" }, 900);
    const publication = acknowledged(history, "a", KEY, 1_000);
    const read = history.startRead(KEY, 1);
    history.recordRead(read, { outcome: "found", message: view(publication, KEY, 1_000) }, 1_010);
    expect(history.check()).toEqual([]);
  });

  it("reports an acknowledged publication that a later read misses before its deadline", () => {
    const history = new PublicationHistory();
    acknowledged(history, "a", KEY, 1_000);
    const read = history.startRead(KEY, 2);
    history.recordRead(read, { outcome: "not-found" }, 1_020);
    expect(history.check()).toEqual([expect.stringContaining("no linearization")]);
  });

  it("accepts a miss after the deadline and reports a message found after it", () => {
    const history = new PublicationHistory();
    const publication = acknowledged(history, "a", KEY, 1_000);
    const missed = history.startRead(KEY, 1);
    history.recordRead(missed, { outcome: "not-found" }, 61_000);
    expect(history.check()).toEqual([]);
    const found = history.startRead(KEY, 1);
    history.recordRead(found, { outcome: "found", message: view(publication, KEY, 1_000) }, 61_000);
    expect(history.check()).toEqual([expect.stringContaining("expired")]);
  });

  it("reports a publication found under a second key, and content that differs", () => {
    const history = new PublicationHistory();
    const publication = acknowledged(history, "a", KEY, 1_000);
    const twice = history.startRead(OTHER_KEY, 1);
    history.recordRead(twice, { outcome: "found", message: view(publication, OTHER_KEY, 1_000) }, 1_010);
    expect(history.check()).toEqual([expect.stringContaining("applied twice")]);

    const other = new PublicationHistory();
    const changed = acknowledged(other, "b", KEY, 1_000);
    const read = other.startRead(KEY, 1);
    const message = { ...view(changed, KEY, 1_000), variables: { name: "c" } };
    other.recordRead(read, { outcome: "found", message }, 1_010);
    expect(other.check()).toEqual([expect.stringContaining("variables")]);
  });

  it("reports a retry refused as a duplicate and a key acknowledged twice", () => {
    const history = new PublicationHistory();
    const publication = history.startPublication(command("a"));
    const first = history.startAttempt(publication, 1, 1_000);
    expect(history.recordAnswer(publication, first, { outcome: "not-leader", leaderId: 2 })).toBe(null);
    const second = history.startAttempt(publication, 2, 1_010);
    expect(
      history.recordAnswer(publication, second, {
        outcome: "rejected",
        reason: "duplicate-message-id",
        detail: "already buffered",
      }),
    ).toContain("certainly not applied took effect");
    acknowledged(history, "b", KEY, 1_020);
    const clash = history.startPublication(command("c"));
    const attempt = history.startAttempt(clash, 1, 1_030);
    expect(
      history.recordAnswer(clash, attempt, { outcome: "published", key: KEY, partitionId: 1, tenantId: "t" }),
    ).toContain("acknowledged for two publications");
  });

  it("reports a publication given up as failed that a read finds, and accepts one of unknown outcome", () => {
    const history = new PublicationHistory();
    const failed = history.startPublication(command("a"));
    const attempt = history.startAttempt(failed, 1, 1_000);
    history.recordAnswer(failed, attempt, { outcome: "unavailable", detail: "stopping" });
    history.giveUp(failed);
    const read = history.startRead(KEY, 1);
    history.recordRead(read, { outcome: "found", message: view(failed, KEY, 1_000) }, 1_050);
    expect(history.check()).toEqual([expect.stringContaining("certainly not applied")]);

    const other = new PublicationHistory();
    const unknown = other.startPublication(command("b"));
    other.loseAttempt(unknown, other.startAttempt(unknown, 1, 1_000));
    const found = other.startRead(KEY, 1);
    other.recordRead(found, { outcome: "found", message: view(unknown, KEY, 1_000) }, 1_050);
    expect(other.check()).toEqual([]);
  });
});
