import { EventEmitter } from "node:events";
import { afterEach, describe, expect, it, vi } from "vitest";
import {
  DEFAULT_RESTART_POLICY,
  ORPHAN_STOP_DEADLINE_MS,
  restartDelayMs,
  restartPolicy,
  type SupervisedProcess,
  watchSupervisor,
} from "../../../src/platform/provisioner/supervision.js";

afterEach(() => {
  vi.useRealTimers();
});

describe("restartDelayMs", () => {
  it("doubles from the initial wait with every crash in a row, up to the maximum", () => {
    expect([0, 1, 2, 3, 4, 5, 6, 7, 8].map((crashes) => restartDelayMs(DEFAULT_RESTART_POLICY, crashes))).toEqual([
      500, 1_000, 2_000, 4_000, 8_000, 16_000, 30_000, 30_000, 30_000,
    ]);
    expect(restartDelayMs(DEFAULT_RESTART_POLICY, 10_000)).toBe(30_000);
  });
});

describe("restartPolicy", () => {
  it("fills in the defaults and refuses waits that could spin or make no sense", () => {
    expect(restartPolicy({ initialDelayMs: 100 })).toEqual({ ...DEFAULT_RESTART_POLICY, initialDelayMs: 100 });
    expect(() => restartPolicy({ initialDelayMs: 0 })).toThrow(/initialDelayMs must be at least 1 ms/);
    expect(() => restartPolicy({ maximumDelayMs: Number.NaN })).toThrow(/maximumDelayMs/);
    expect(() => restartPolicy({ initialDelayMs: 2_000, maximumDelayMs: 1_000 })).toThrow(/at least initialDelayMs/);
  });
});

/** A stand-in for `process` with an IPC channel. */
function supervisedProcess(connected = true) {
  const emitter = new EventEmitter();
  const target = Object.assign(emitter, {
    channel: { unref: vi.fn() },
    connected,
    exit: vi.fn() as unknown as SupervisedProcess["exit"],
  });
  return target;
}

describe("watchSupervisor", () => {
  it("watches only a process started with FLOWPLANE_SUPERVISOR=ipc and an IPC channel", () => {
    expect(watchSupervisor({}, supervisedProcess())).toBeUndefined();
    expect(watchSupervisor({ FLOWPLANE_SUPERVISOR: "other" }, supervisedProcess())).toBeUndefined();
    const withoutChannel = Object.assign(new EventEmitter(), { channel: undefined, exit: vi.fn() });
    expect(
      watchSupervisor({ FLOWPLANE_SUPERVISOR: "ipc" }, withoutChannel as unknown as SupervisedProcess),
    ).toBeUndefined();
  });

  it("resolves when the channel closes, keeps nothing alive, and exits if the clean stop takes too long", async () => {
    vi.useFakeTimers();
    const target = supervisedProcess();
    const watch = watchSupervisor({ FLOWPLANE_SUPERVISOR: "ipc" }, target);
    expect(watch).toBeDefined();
    expect(target.channel.unref).toHaveBeenCalled();
    let gone = false;
    void watch?.gone.then(() => {
      gone = true;
    });
    await vi.advanceTimersByTimeAsync(0);
    expect(gone).toBe(false);
    target.emit("disconnect");
    await vi.advanceTimersByTimeAsync(0);
    expect(gone).toBe(true);
    watch?.stop();
    await vi.advanceTimersByTimeAsync(ORPHAN_STOP_DEADLINE_MS - 1);
    expect(target.exit).not.toHaveBeenCalled();
    await vi.advanceTimersByTimeAsync(1);
    expect(target.exit).toHaveBeenCalledWith(1);
  });

  it("resolves at once when the channel closed before watching began; stop() ends the watch", async () => {
    const closed = watchSupervisor({ FLOWPLANE_SUPERVISOR: "ipc" }, supervisedProcess(false));
    await expect(closed?.gone).resolves.toBeUndefined();
    const target = supervisedProcess();
    watchSupervisor({ FLOWPLANE_SUPERVISOR: "ipc" }, target)?.stop();
    expect(target.listenerCount("disconnect")).toBe(0);
  });
});
