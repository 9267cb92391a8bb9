/** The backup parts a broker writes, counted until each ends. */
import { describe, expect, it } from "vitest";
import { BackupActivity } from "../../../src/cluster/backup/backup-activity.js";

describe("BackupActivity", () => {
  it("counts each part until it ends, and ending a part twice does not end another", () => {
    const activity = new BackupActivity();
    expect(activity.writing).toBe(false);
    const endFirst = activity.begin();
    const endSecond = activity.begin();
    expect(activity.writing).toBe(true);
    endFirst();
    endFirst();
    expect(activity.writing).toBe(true);
    endSecond();
    expect(activity.writing).toBe(false);
  });
});
