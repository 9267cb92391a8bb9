import { describe, expect, it } from "vitest";
import { withMallocHugePages } from "../../../src/platform/provisioner/child-environment.js";

describe("withMallocHugePages", () => {
  it("turns malloc's transparent huge pages on when nothing is set", () => {
    expect(withMallocHugePages(undefined)).toBe("glibc.malloc.hugetlb=1");
    expect(withMallocHugePages("")).toBe("glibc.malloc.hugetlb=1");
  });

  it("keeps the operator's other tunables, in their order", () => {
    expect(withMallocHugePages("glibc.malloc.arena_max=2:glibc.malloc.trim_threshold=65536")).toBe(
      "glibc.malloc.arena_max=2:glibc.malloc.trim_threshold=65536:glibc.malloc.hugetlb=1",
    );
  });

  it("leaves a huge pages setting of the operator's alone, even one that switches them off", () => {
    expect(withMallocHugePages("glibc.malloc.hugetlb=0")).toBe("glibc.malloc.hugetlb=0");
    expect(withMallocHugePages("glibc.malloc.arena_max=2:glibc.malloc.hugetlb=2")).toBe(
      "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=2",
    );
  });

  it("does not take a tunable whose name only starts like it for the setting", () => {
    expect(withMallocHugePages("glibc.malloc.hugetlbx=0")).toBe("glibc.malloc.hugetlbx=0:glibc.malloc.hugetlb=1");
  });
});
