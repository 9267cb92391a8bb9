import { describe, expect, it } from "vitest";
import {
  AbsorbedGossip,
  beginOperation,
  encodeConfiguration,
  gossipDigest,
  initialConfiguration,
  mergeConfigurations,
  roundRobinDistribution,
  startChange,
} from "../../../src/cluster/topology/index.js";

const base = initialConfiguration({
  clusterSize: 3,
  partitionCount: 3,
  replicationFactor: 2,
  distribution: roundRobinDistribution([0, 1, 2], 3, 2),
  nowIso: "2026-01-01T00:00:00.000Z",
});

describe("AbsorbedGossip", () => {
  it("repeats only the same text from the same sender while the very configuration merging it gave is held", () => {
    const absorbed = new AbsorbedGossip();
    const text = encodeConfiguration(base);
    const digest = gossipDigest(text);
    expect(absorbed.repeats(1, digest, base)).toBe(false);
    absorbed.record(1, digest, base);
    expect(absorbed.repeats(1, digest, base)).toBe(true);
    // Another sender, another text, or an equal configuration that is another object: merged again.
    expect(absorbed.repeats(2, digest, base)).toBe(false);
    expect(absorbed.repeats(1, gossipDigest(`${text} `), base)).toBe(false);
    expect(absorbed.repeats(1, digest, { ...base })).toBe(false);
  });

  it("merges a repeated text again once the configuration moved on, which can change what wins", () => {
    const leave = (brokerId: number) => ({
      operation: "PARTITION_LEAVE" as const,
      brokerId,
      partitionId: [...(base.members.get(brokerId)?.partitions.keys() ?? [])][0] as number,
    });
    // Two coordinators recorded different changes at one version; this broker then began its own operation.
    const ownChange = startChange(base, [leave(0)], "2026-01-02T00:00:00.000Z");
    const otherChange = startChange(base, [leave(1)], "2026-01-02T00:00:00.000Z");
    const ownChangeBegun = beginOperation(ownChange, "2026-01-02T00:00:01.000Z");
    const digest = gossipDigest(encodeConfiguration(otherChange));
    const absorbed = new AbsorbedGossip();
    // The other change lost against the one held then...
    const first = mergeConfigurations(ownChange, otherChange);
    expect(first.configuration).toBe(ownChange);
    absorbed.record(1, digest, first.configuration);
    expect(absorbed.repeats(1, digest, ownChange)).toBe(true);
    // ...and wins against the one held now: skipping it would keep the losing change for as long as it is repeated.
    expect(absorbed.repeats(1, digest, ownChangeBegun)).toBe(false);
    expect(mergeConfigurations(ownChangeBegun, otherChange).configuration.pendingChange?.pending[0]?.brokerId).toBe(1);
  });
});
