import { describe, expect, it } from "vitest";
import { Inflights, Progress } from "../../../../src/cluster/raft/core/progress.js";

describe("flow control window", () => {
  it("fills by message count and frees on acknowledgement", () => {
    const window = new Inflights(2, 1_000);
    window.add(5, 10);
    window.add(9, 10);
    expect(window.full()).toBe(true);
    expect(() => window.add(12, 10)).toThrow(/full/);
    window.freeUpTo(5);
    expect(window.full()).toBe(false);
    expect(window.count()).toBe(1);
  });

  it("fills by bytes", () => {
    const window = new Inflights(10, 100);
    window.add(1, 60);
    expect(window.full()).toBe(false);
    window.add(2, 60);
    expect(window.full()).toBe(true);
    window.freeFirst();
    expect(window.bytes()).toBe(60);
  });
});

describe("replication progress", () => {
  it("probe sends one message at a time; replicate pipelines until the window is full", () => {
    const progress = new Progress(2, 10, 2, 1_000);
    expect(progress.isPaused()).toBe(false);
    progress.probeSent = true;
    expect(progress.isPaused()).toBe(true);
    progress.maybeUpdate(9);
    progress.becomeReplicate();
    expect(progress.next).toBe(10);
    progress.inflights.add(12, 10);
    progress.inflights.add(14, 10);
    expect(progress.isPaused()).toBe(true);
  });

  it("a rejection in probe state backs up to the hint, ignoring stale rejections", () => {
    const progress = new Progress(2, 50, 2, 1_000);
    expect(progress.maybeDecreaseTo(30, 10)).toBe(false);
    expect(progress.maybeDecreaseTo(49, 10)).toBe(true);
    expect(progress.next).toBe(11);
  });

  it("a rejection in replicate state falls back to just after the match", () => {
    const progress = new Progress(2, 5, 2, 1_000);
    progress.maybeUpdate(20);
    progress.becomeReplicate();
    progress.next = 30;
    expect(progress.maybeDecreaseTo(15, 0)).toBe(false);
    expect(progress.maybeDecreaseTo(25, 0)).toBe(true);
    expect(progress.next).toBe(21);
  });
});
