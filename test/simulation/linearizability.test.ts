import { describe, expect, it } from "vitest";
import { checkRegister, type RegisterOperation } from "./linearizability.js";

function op(kind: "write" | "read", value: string | null, invokedAt: number, respondedAt: number): RegisterOperation {
  return { kind, value, invokedAt, respondedAt, label: `${kind}${value}` };
}

describe("linearizability checker", () => {
  it("accepts a sequential history", () => {
    expect(
      checkRegister([op("write", "a", 0, 1), op("read", "a", 2, 3), op("write", "b", 4, 5), op("read", "b", 6, 7)]),
    ).toEqual({
      outcome: "linearizable",
    });
  });

  it("rejects a stale read after a completed write", () => {
    const result = checkRegister([op("write", "a", 0, 1), op("write", "b", 2, 3), op("read", "a", 4, 5)]);
    expect(result.outcome).toBe("violation");
  });

  it("accepts a read concurrent with a write returning either value", () => {
    expect(checkRegister([op("write", "a", 0, 1), op("write", "b", 2, 6), op("read", "a", 3, 4)]).outcome).toBe(
      "linearizable",
    );
    expect(checkRegister([op("write", "a", 0, 1), op("write", "b", 2, 6), op("read", "b", 3, 4)]).outcome).toBe(
      "linearizable",
    );
  });

  it("rejects reads that see a value disappear and come back", () => {
    const result = checkRegister([
      op("write", "a", 0, 1),
      op("write", "b", 2, 10),
      op("read", "b", 3, 4),
      op("read", "a", 5, 6),
    ]);
    expect(result.outcome).toBe("violation");
  });

  it("an indeterminate write may take effect late or never", () => {
    const infinite = Number.POSITIVE_INFINITY;
    expect(checkRegister([op("write", "a", 0, infinite), op("read", null, 1, 2), op("read", "a", 5, 6)]).outcome).toBe(
      "linearizable",
    );
    expect(checkRegister([op("write", "a", 0, infinite), op("read", null, 1, 2)]).outcome).toBe("linearizable");
    expect(checkRegister([op("read", "a", 0, 1), op("write", "a", 2, infinite)]).outcome).toBe("violation");
  });
});
