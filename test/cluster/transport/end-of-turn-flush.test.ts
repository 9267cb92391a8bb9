import { setImmediate as nextTurn } from "node:timers/promises";
import { afterEach, describe, expect, it, vi } from "vitest";
import { type EndOfTurnWriter, flushAtEndOfTurn } from "../../../src/cluster/transport/end-of-turn-flush.js";

/** A writer that records when it was flushed, and can register itself again while being flushed. */
function recordingWriter(name: string, flushed: string[], onFlush: () => void = () => {}): EndOfTurnWriter {
  return {
    endTurn: () => {
      flushed.push(name);
      onFlush();
    },
  };
}

describe("end-of-turn flush", () => {
  afterEach(() => {
    vi.restoreAllMocks();
  });

  it("flushes nothing before the end of the turn", () => {
    const flushed: string[] = [];
    flushAtEndOfTurn(recordingWriter("peer", flushed), "messages");
    expect(flushed).toEqual([]);
  });

  it("flushes writers carrying answers before the others, whatever the order they wrote in", async () => {
    const flushed: string[] = [];
    flushAtEndOfTurn(recordingWriter("follower 1", flushed), "messages");
    flushAtEndOfTurn(recordingWriter("follower 2", flushed), "messages");
    flushAtEndOfTurn(recordingWriter("gateway", flushed), "answers");
    await nextTurn();
    expect(flushed).toEqual(["gateway", "follower 1", "follower 2"]);
  });

  it("flushes a writer that registers while being flushed in the next turn, not in this one", async () => {
    const flushed: string[] = [];
    let registrations = 0;
    const writer: EndOfTurnWriter = recordingWriter("again", flushed, () => {
      if (registrations < 2) {
        registrations += 1;
        flushAtEndOfTurn(writer, "messages");
      }
    });
    flushAtEndOfTurn(writer, "messages");
    await nextTurn();
    expect(flushed).toEqual(["again"]);
    await nextTurn();
    expect(flushed).toEqual(["again", "again"]);
    await nextTurn();
    expect(flushed).toEqual(["again", "again", "again"]);
  });

  it("still flushes the other writers when one throws, then reports the error", async () => {
    const flushed: string[] = [];
    const reported: (() => void)[] = [];
    vi.spyOn(globalThis, "queueMicrotask").mockImplementation((callback) => {
      reported.push(callback);
    });
    const broken = new Error("broken writer");
    flushAtEndOfTurn(
      {
        endTurn: () => {
          throw broken;
        },
      },
      "answers",
    );
    flushAtEndOfTurn(recordingWriter("follower", flushed), "messages");
    await nextTurn();
    expect(flushed).toEqual(["follower"]);
    expect(reported).toHaveLength(1);
    expect(() => reported[0]?.()).toThrow(broken);
  });
});
