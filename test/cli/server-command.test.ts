import { describe, expect, it } from "vitest";
import { UsageError } from "../../src/cli/io.js";
import { collectRepeated, settingAssignments, stopReason, waitForAbort } from "../../src/cli/server-command.js";

describe("settingAssignments", () => {
  it("keeps everything after the first equals sign as the value and trims the key", () => {
    expect(settingAssignments([" service.a =x=y", "service.b="], "service.a=1")).toEqual({
      "service.a": "x=y",
      "service.b": "",
    });
  });

  it("refuses an assignment without a key, quoting the command's example", () => {
    expect(() => settingAssignments(["=value"], "service.gateway.port=8080")).toThrow(
      new UsageError('--set expects key=value (e.g. service.gateway.port=8080), got "=value"'),
    );
    expect(() => settingAssignments(["no-equals-sign"], "x=1")).toThrow(UsageError);
  });

  it("collects a repeated option in order", () => {
    expect(collectRepeated("b", collectRepeated("a", undefined))).toEqual(["a", "b"]);
  });
});

describe("stopReason", () => {
  it("answers signal when the shutdown signal is aborted", async () => {
    const controller = new AbortController();
    const reason = stopReason(controller.signal, { gone: new Promise(() => undefined), stop: () => undefined });
    controller.abort();
    await expect(reason).resolves.toBe("signal");
  });

  it("answers supervisor when the supervisor is gone first", async () => {
    const controller = new AbortController();
    await expect(stopReason(controller.signal, { gone: Promise.resolve(), stop: () => undefined })).resolves.toBe(
      "supervisor",
    );
  });

  it("waits only for the signal without a supervisor, and resolves at once when it is already aborted", async () => {
    await expect(stopReason(AbortSignal.abort(), undefined)).resolves.toBe("signal");
    await expect(waitForAbort(AbortSignal.abort())).resolves.toBeUndefined();
  });
});
