import { describe, expect, it } from "vitest";
import {
  AbsorbedGossip,
  encodeConfiguration,
  gossipDigest,
  mergeConfigurations,
} from "../../../src/cluster/topology/index.js";
import { threeBrokerConfiguration } from "../gateway/fake-broker.js";
import { competingChanges } from "./competing-changes.js";

const base = threeBrokerConfiguration();

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
    // Once another configuration is held, what was merged into the earlier one is forgotten.
    absorbed.record(2, digest, base);
    expect(absorbed.size).toBe(2);
    const next = { ...base, version: base.version + 1 };
    absorbed.record(3, gossipDigest(encodeConfiguration(next)), next);
    expect(absorbed.size).toBe(1);
    expect(absorbed.repeats(1, digest, base)).toBe(false);
  });

  it("merges a repeated text again once the configuration moved on, which can change what wins", () => {
    const { ownChange, otherChange, ownChangeBegun } = competingChanges();
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
