/**
 * The replicated state machine of the simulation: a key-value map. Commands are JSON `{ key, value }` writes;
 * reads are served locally after a read index confirmation.
 */
import type { Entry } from "../../src/cluster/raft/types.js";

/** A write command. */
export interface WriteCommand {
  readonly key: string;
  readonly value: string;
}

/** Encodes a write command as entry data. */
export function encodeWrite(command: WriteCommand): Uint8Array {
  return new TextEncoder().encode(JSON.stringify(command));
}

/** Decodes a write command from entry data. */
export function decodeWrite(data: Uint8Array): WriteCommand {
  return JSON.parse(new TextDecoder().decode(data)) as WriteCommand;
}

/** Key-value map plus the index of the last applied entry. */
export class KeyValueStateMachine {
  private values = new Map<string, string>();
  appliedIndex = 0;

  /** Applies one committed entry; entries must arrive in index order without gaps. */
  apply(entry: Entry): void {
    if (entry.index !== this.appliedIndex + 1) {
      throw new Error(`state machine: applying ${entry.index} after ${this.appliedIndex}`);
    }
    this.appliedIndex = entry.index;
    if (entry.kind !== "normal") return;
    const command = decodeWrite(entry.data);
    this.values.set(command.key, command.value);
  }

  /** The current value of a key. */
  read(key: string): string | null {
    return this.values.get(key) ?? null;
  }

  /** Serializes the state for a snapshot. */
  serialize(): Uint8Array {
    return new TextEncoder().encode(JSON.stringify([...this.values.entries()]));
  }

  /** Replaces the state with a snapshot's. */
  restore(data: Uint8Array, index: number): void {
    this.values = new Map(JSON.parse(new TextDecoder().decode(data)) as [string, string][]);
    this.appliedIndex = index;
  }
}
