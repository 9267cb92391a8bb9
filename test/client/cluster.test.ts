import { describe, expect, it } from "vitest";
import { brokerDelta } from "../../src/client/cluster.js";

describe("brokerDelta", () => {
  it("computes the brokers a change adds and removes, ascending", () => {
    expect(brokerDelta({ brokers: { count: 2 } }, [0, 1, 2])).toEqual({ added: [], removed: [2] });
    expect(brokerDelta({ brokers: { count: 4 } }, [0, 2])).toEqual({ added: [1, 3], removed: [] });
    expect(brokerDelta({ brokers: { add: [4, 3], remove: [0] } }, [0, 1])).toEqual({ added: [3, 4], removed: [0] });
    expect(brokerDelta({ brokers: { add: [1] } }, [0, 1])).toEqual({ added: [], removed: [] });
    expect(brokerDelta({ partitions: { count: 3, replicationFactor: 1 } }, [0])).toEqual({ added: [], removed: [] });
  });
});
