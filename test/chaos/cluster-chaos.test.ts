/**
 * A short chaos run in the suite: 30 s of seeded faults on the brokers of a real local cluster while publishers
 * write (longer, up to 60 s, until at least 5 faults were injected: recoveries take longer on a loaded machine), then
 * every acknowledged message read back (see `cluster-chaos.ts`). Longer and repeated runs:
 * `npm run chaos -- --runs 5 --duration-s 300`. `CHAOS_SEED` replays a seed's fault schedule.
 */
import { describe, expect, it } from "vitest";
import { runClusterChaos } from "./cluster-chaos.js";

const seed = Number(process.env.CHAOS_SEED ?? 20_261_122);

describe("cluster under chaos", () => {
  it("loses no acknowledged message while brokers are killed, paused and stopped", async () => {
    // Paced publishers: the suite runs other test files beside this one on the same cores.
    const result = await runClusterChaos({
      seed,
      durationMs: 30_000,
      minimumFaults: 5,
      clients: 8,
      pauseBetweenPublicationsMs: 10,
      snapshotIntervalEntries: 200,
    });
    const summary =
      `chaos seed ${seed} (replay: CHAOS_SEED=${seed} npx vitest run test/chaos): ${result.acknowledged} acknowledged, ` +
      `${result.faults.length} faults:\n  ${result.faults.join("\n  ")}`;
    expect(result.violations, summary).toEqual([]);
    // The run must have exercised something: writes before and after faults, and reads while they happened.
    expect(result.faults.length, summary).toBeGreaterThanOrEqual(5);
    expect(result.acknowledged, summary).toBeGreaterThan(500);
    expect(result.readsFoundDuringFaults, summary).toBeGreaterThan(0);
  }, 240_000);
});
