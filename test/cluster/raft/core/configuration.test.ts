import { describe, expect, it } from "vitest";
import {
  applyChange,
  ConfigurationHistory,
  decodeConfiguration,
  encodeConfiguration,
  votersOf,
} from "../../../../src/cluster/raft/core/configuration.js";
import type { Configuration } from "../../../../src/cluster/raft/types.js";

const base: Configuration = {
  members: [
    { id: 1, role: "voter", priority: 1 },
    { id: 2, role: "voter", priority: 2 },
  ],
};

describe("configuration changes", () => {
  it("a new member joins as a learner and becomes a voter only by promotion", () => {
    const withLearner = applyChange(base, { type: "addLearner", member: 3, priority: 1 });
    expect(votersOf(withLearner)).toEqual([1, 2]);
    expect(withLearner.members.find((member) => member.id === 3)?.role).toBe("learner");
    expect(votersOf(applyChange(withLearner, { type: "promote", member: 3 }))).toEqual([1, 2, 3]);
  });

  it("each change alters at most one voter and refuses changes that do not fit", () => {
    expect(() => applyChange(base, { type: "addLearner", member: 1, priority: 1 })).toThrow(/already/);
    expect(() => applyChange(base, { type: "promote", member: 2 })).toThrow(/not a learner/);
    expect(() => applyChange(base, { type: "remove", member: 7 })).toThrow(/not a member/);
    expect(() =>
      applyChange({ members: [{ id: 1, role: "voter", priority: 1 }] }, { type: "remove", member: 1 }),
    ).toThrow(/last voter/);
    expect(() => applyChange(base, { type: "setPriority", member: 1, priority: 0 })).toThrow(/priority/);
  });

  it("priority changes keep the role", () => {
    const changed = applyChange(base, { type: "setPriority", member: 1, priority: 5 });
    expect(changed.members.find((member) => member.id === 1)).toEqual({ id: 1, role: "voter", priority: 5 });
  });

  it("configurations survive encoding as entry data", () => {
    expect(decodeConfiguration(encodeConfiguration(base))).toEqual(base);
  });

  it("the history reverts to the previous configuration when the log is truncated, and folds on compaction", () => {
    const history = new ConfigurationHistory(0, base);
    const grown = applyChange(base, { type: "addLearner", member: 3, priority: 1 });
    history.append(5, grown);
    expect(history.current()).toEqual(grown);
    expect(history.at(4)).toEqual(base);
    history.truncateFrom(5);
    expect(history.current()).toEqual(base);
    history.append(6, grown);
    history.compactTo(10);
    expect(history.current()).toEqual(grown);
    expect(history.currentIndex()).toBe(6);
  });
});
