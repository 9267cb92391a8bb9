import { describe, expect, it } from "vitest";
import {
  clusterParameters,
  currentGeneration,
  generationOf,
  planTypes,
} from "../../../../src/platform/admin/clusters/parameters.js";
import { platformVersion } from "../../../../src/platform/version.js";

describe("cluster parameters", () => {
  it("give every version one stable generation id, a name-based UUID", () => {
    const generation = generationOf("1.2.3");
    expect(generationOf("1.2.3")).toEqual(generation);
    expect(generationOf("1.2.4").uuid).not.toBe(generation.uuid);
    expect(generation.uuid).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(currentGeneration).toEqual({
      uuid: generationOf(platformVersion).uuid,
      name: `flowplane ${platformVersion}`,
    });
  });

  it("offer the 1-broker, 3/3/3 and 5-broker plans, one channel following this version, the local region", () => {
    expect(planTypes.map((plan) => plan.shape)).toEqual([
      { brokers: 1, partitions: 1, replicationFactor: 1 },
      { brokers: 3, partitions: 3, replicationFactor: 3 },
      { brokers: 5, partitions: 5, replicationFactor: 3 },
    ]);
    const parameters = clusterParameters();
    expect(new Set(parameters.clusterPlanTypes.map((plan) => plan.uuid)).size).toBe(3);
    expect(parameters.channels).toEqual([
      {
        uuid: expect.any(String),
        name: "Stable",
        defaultGeneration: currentGeneration,
        allowedGenerations: [currentGeneration],
      },
    ]);
    expect(parameters.regions.map((region) => region.name)).toEqual(["local"]);
  });
});
