import { describe, expect, it } from "vitest";
import { DiffCache } from "../../../../src/platform/modeler/milestones/diff-cache.js";

const patch = (bytes: number) => ({ kind: "patch" as const, body: Buffer.alloc(bytes, 0x2b) });

describe("DiffCache", () => {
  it("keeps diffs until their bytes exceed the limit, dropping the least recently used first", () => {
    const cache = new DiffCache(10_000);
    cache.set("a", patch(3_000));
    cache.set("b", patch(3_000));
    cache.set("c", patch(3_000));
    expect(cache.get("a")?.kind).toBe("patch");
    cache.set("d", patch(3_000));
    expect(cache.get("b")).toBeUndefined();
    expect(cache.get("a")).toBeDefined();
    expect(cache.get("c")).toBeDefined();
    expect(cache.get("d")).toBeDefined();
    const statistics = cache.statistics();
    expect(statistics).toMatchObject({ entries: 3, hits: 4, misses: 1 });
    expect(statistics.bytes).toBeLessThanOrEqual(10_000);
  });

  it("keeps refusals, replaces an entry under the same key, and never keeps a diff larger than the limit", () => {
    const cache = new DiffCache(10_000);
    cache.set("refused", { kind: "tooDifferent", changedLinesAtLeast: 5_000 });
    expect(cache.get("refused")).toEqual({ kind: "tooDifferent", changedLinesAtLeast: 5_000 });
    cache.set("same", patch(1_000));
    cache.set("same", patch(2_000));
    expect((cache.get("same") as { body: Buffer }).body.byteLength).toBe(2_000);
    cache.set("huge", patch(20_000));
    expect(cache.get("huge")).toBeUndefined();
    expect(cache.statistics().entries).toBe(2);
    const none = new DiffCache(0);
    none.set("a", { kind: "tooDifferent", changedLinesAtLeast: null });
    expect(none.get("a")).toBeUndefined();
  });

  it("names a diff by organization, milestones, their names and the noun its sides are labelled with", () => {
    const key = DiffCache.key("org", { id: "1", name: "v1" }, { id: "2", name: "v2" }, "milestone");
    expect(DiffCache.key("org", { id: "1", name: "v1 renamed" }, { id: "2", name: "v2" }, "milestone")).not.toBe(key);
    expect(DiffCache.key("other", { id: "1", name: "v1" }, { id: "2", name: "v2" }, "milestone")).not.toBe(key);
    expect(DiffCache.key("org", { id: "1", name: "v1" }, { id: "2", name: "v2" }, "version")).not.toBe(key);
  });
});
