/**
 * How `flowplane cluster` shows the cluster and a change in text: the configuration as a table, a plan as a list,
 * and the progress of a running change as one line (rewritten in place on a terminal, printed anew elsewhere).
 * Pure functions of the API's answers, so they are tested without a cluster.
 */
import type { BrokerEntry, ClusterOperationEntry, ClusterStatus, ScaleResponse } from "../client/cluster.js";
import { alignedLines } from "./table.js";
import { printable } from "./terminal-text.js";

/** An operation in words, e.g. `PARTITION_JOIN broker 3 partition 2 (priority 1)`. */
export function describeOperationEntry(operation: ClusterOperationEntry): string {
  const parts = [printable(operation.operation), `broker ${operation.brokerId}`];
  if (operation.partitionId !== undefined) parts.push(`partition ${operation.partitionId}`);
  if (operation.priority !== undefined) parts.push(`(priority ${operation.priority})`);
  if (operation.brokers !== undefined && operation.brokers.length > 0) parts.push(`[${operation.brokers.join(", ")}]`);
  return parts.join(" ");
}

/** Bytes in the largest unit that keeps the number at least 1 (B, KiB, MiB, GiB). */
export function formatBytes(bytes: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return unit === 0 ? `${Math.round(value)} B` : `${value.toFixed(1)} ${units[unit]}`;
}

/** Seconds as `45 s`, `3 min 20 s` or `1 h 5 min`. */
export function formatDuration(seconds: number): string {
  const whole = Math.max(0, Math.round(seconds));
  if (whole < 60) return `${whole} s`;
  if (whole < 3600) return `${Math.floor(whole / 60)} min ${whole % 60} s`;
  return `${Math.floor(whole / 3600)} h ${Math.floor((whole % 3600) / 60)} min`;
}

function formatBrokerRows(brokers: readonly BrokerEntry[]): string[] {
  const rows = [
    ["BROKER", "STATE", "PARTITIONS (id:priority, state when not ACTIVE)"],
    ...brokers.map((broker) =>
      [
        String(broker.id),
        broker.state,
        broker.partitions
          .map(
            (partition) =>
              `${partition.id}:${partition.priority}${partition.state === "ACTIVE" ? "" : ` ${partition.state}`}`,
          )
          .join("  ") || "-",
      ].map(printable),
    ),
  ];
  return alignedLines(rows);
}

/** The monitoring response as text: version, brokers, the last change and the running one. */
export function formatClusterStatus(status: ClusterStatus): string {
  const lines = [`configuration version ${status.version}`, "", ...formatBrokerRows(status.brokers), ""];
  const last = status.lastChange;
  lines.push(
    last === undefined
      ? "last change: none"
      : printable(`last change: ${last.id} ${last.status} (started ${last.startedAt}, ended ${last.completedAt})`),
  );
  for (const earlier of status.earlierChanges ?? []) {
    lines.push(
      printable(
        `  earlier: ${earlier.id} ${earlier.status} (started ${earlier.startedAt}, ended ${earlier.completedAt})`,
      ),
    );
  }
  const pending = status.pendingChange;
  if (pending === undefined) {
    lines.push("no change in progress");
  } else {
    lines.push(`change ${pending.id} in progress since ${printable(pending.startedAt)}: ${formatProgressLine(status)}`);
    for (const operation of pending.completed) {
      lines.push(
        `  done     ${describeOperationEntry(operation)}${operation.completedAt === undefined ? "" : ` at ${printable(operation.completedAt)}`}`,
      );
    }
    for (const [position, operation] of pending.pending.entries()) {
      lines.push(`  ${position === 0 ? "running" : "pending"}  ${describeOperationEntry(operation)}`);
    }
  }
  return `${lines.join("\n")}\n`;
}

/** "1 operation", "2 operations". */
function operationCount(count: number): string {
  return `${count} ${count === 1 ? "operation" : "operations"}`;
}

/** A plan as text: the operations in order and the brokers of the expected topology. */
export function formatPlan(response: ScaleResponse, dryRun: boolean): string {
  const lines = [
    response.plannedChanges.length === 0
      ? "Nothing to change: the cluster already has that shape."
      : `${dryRun ? "Dry run, nothing recorded. Planned" : `Change ${response.changeId} started`}: ${operationCount(response.plannedChanges.length)}`,
  ];
  for (const [position, operation] of response.plannedChanges.entries()) {
    lines.push(`  ${String(position + 1).padStart(3)}. ${describeOperationEntry(operation)}`);
  }
  if (response.plannedChanges.length > 0) {
    lines.push("", "expected topology:", ...formatBrokerRows(response.expectedTopology).map((row) => `  ${row}`));
  }
  return `${lines.join("\n")}\n`;
}

/**
 * The running change in one line: operations done of all, the running operation, and for operations that move
 * data the bytes moved of the bytes to move and the estimated time left; the last error of a retried operation;
 * what the change waits for when the running operation's broker does not answer.
 */
export function formatProgressLine(status: ClusterStatus): string {
  const pending = status.pendingChange;
  if (pending === undefined) {
    const last = status.lastChange;
    return last === undefined ? "no change" : `change ${last.id} ${printable(last.status)}`;
  }
  const done = pending.completed.length;
  const total = done + pending.pending.length;
  const parts = [`${done}/${total} operations done`];
  const running = pending.pending[0];
  if (running !== undefined) parts.push(`now ${describeOperationEntry(running)}`);
  const progress = pending.progress;
  if (progress !== undefined) {
    if (progress.bytesMoved !== null && progress.bytesTotal !== null && progress.bytesTotal > 0) {
      parts.push(`${formatBytes(progress.bytesMoved)} of ${formatBytes(progress.bytesTotal)}`);
    }
    if (progress.estimatedSecondsLeft !== null)
      parts.push(`about ${formatDuration(progress.estimatedSecondsLeft)} left`);
    if (progress.attempts > 1 && progress.lastError !== null) {
      parts.push(`attempt ${progress.attempts}, last error: ${printable(progress.lastError)}`);
    }
  }
  if (pending.waitingFor !== undefined) parts.push(printable(pending.waitingFor));
  return parts.join(" · ");
}
