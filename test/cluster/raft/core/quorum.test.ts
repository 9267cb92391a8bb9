import { describe, expect, it } from "vitest";
import { committedIndex, majority, voteOutcome } from "../../../../src/cluster/raft/core/quorum.js";

describe("quorum", () => {
  it("a majority is more than half of the voters", () => {
    expect([1, 2, 3, 4, 5, 6, 7].map(majority)).toEqual([1, 2, 2, 3, 3, 4, 4]);
  });

  it("the committed index is the highest index a majority has acknowledged", () => {
    const acknowledged = new Map([
      [1, 9],
      [2, 5],
      [3, 7],
      [4, 1],
      [5, 7],
    ]);
    expect(committedIndex([1, 2, 3, 4, 5], (member) => acknowledged.get(member) ?? 0)).toBe(7);
    expect(committedIndex([1, 2, 4], (member) => acknowledged.get(member) ?? 0)).toBe(5);
    expect(committedIndex([], () => 10)).toBe(0);
  });

  it("votes: a majority wins, enough rejections lose, otherwise pending", () => {
    const voters = [1, 2, 3];
    expect(voteOutcome(voters, new Map([[1, true]]))).toBe("pending");
    expect(
      voteOutcome(
        voters,
        new Map([
          [1, true],
          [2, true],
        ]),
      ),
    ).toBe("won");
    expect(
      voteOutcome(
        voters,
        new Map([
          [1, true],
          [2, false],
          [3, false],
        ]),
      ),
    ).toBe("lost");
    expect(
      voteOutcome(
        voters,
        new Map([
          [9, true],
          [1, true],
        ]),
      ),
    ).toBe("pending");
  });

  it("votes after a forced reconfiguration need every voter", () => {
    expect(
      voteOutcome(
        [1, 2, 3],
        new Map([
          [1, true],
          [2, true],
        ]),
        true,
      ),
    ).toBe("pending");
    expect(
      voteOutcome(
        [1, 2, 3],
        new Map([
          [1, true],
          [2, true],
          [3, false],
        ]),
        true,
      ),
    ).toBe("lost");
    expect(
      voteOutcome(
        [1, 2, 3],
        new Map([
          [1, true],
          [2, true],
          [3, true],
        ]),
        true,
      ),
    ).toBe("won");
  });
});
