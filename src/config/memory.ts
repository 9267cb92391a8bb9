/**
 * Defaults derived from the memory of the machine a process runs on, shared by the broker (its own default) and the
 * local provisioner (which divides it between the brokers it runs on one machine).
 */
import { totalmem } from "node:os";

/** Memory available to this process: its cgroup's limit when it has one below the machine's memory, else that. */
export function availableMemoryBytes(): number {
  const machine = totalmem();
  const constrained = process.constrainedMemory?.() ?? 0;
  return constrained > 0 && constrained < machine ? constrained : machine;
}

/** The default bound of a broker's buffered messages: a quarter of the memory available, shared by `brokers`. */
export function defaultMaxBufferedMessageBytes(availableBytes: number, brokers = 1): number {
  return Math.floor(availableBytes / 4 / Math.max(1, brokers));
}
