/**
 * What the commands that run a server (`start`, `platform`, `broker`, `gateway`) share: repeatable `--set key=value`
 * options turned into configuration flags, and waiting until the process must stop.
 */
import type { SupervisorWatch } from "../platform/provisioner/supervision.js";
import { UsageError } from "./io.js";

/** Commander's argument parser for a repeatable option: every occurrence is kept, in order. */
export function collectRepeated(value: string, previous: string[] | undefined): string[] {
  return [...(previous ?? []), value];
}

/**
 * Turns `--set key=value` assignments into configuration flags; `example` is a valid assignment for this command,
 * quoted in the error when one has no key.
 */
export function settingAssignments(
  assignments: readonly string[] | undefined,
  example: string,
): Record<string, string> {
  const flags: Record<string, string> = {};
  for (const assignment of assignments ?? []) {
    const separator = assignment.indexOf("=");
    if (separator <= 0) throw new UsageError(`--set expects key=value (e.g. ${example}), got "${assignment}"`);
    flags[assignment.slice(0, separator).trim()] = assignment.slice(separator + 1);
  }
  return flags;
}

/** Resolves once the signal is aborted (at once when it already is). */
export function waitForAbort(signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => signal.addEventListener("abort", () => resolve(), { once: true }));
}

/** Resolves with why the server must stop: the shutdown signal, or its supervisor gone (when it has one). */
export function stopReason(
  signal: AbortSignal,
  supervisor: SupervisorWatch | undefined,
): Promise<"signal" | "supervisor"> {
  const reasons: Promise<"signal" | "supervisor">[] = [waitForAbort(signal).then(() => "signal" as const)];
  if (supervisor !== undefined) reasons.push(supervisor.gone.then(() => "supervisor" as const));
  return Promise.race(reasons);
}
