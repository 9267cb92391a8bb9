/**
 * The parts of backups one broker is writing right now, and the backups' checkpoints its leaders are proposing (each
 * counts as a part until the part itself starts). Every replica of the broker defers its own snapshots meanwhile (see
 * `ReplicaBackup.deferSnapshot`): a snapshot of a partition's whole state is encoded, copied,
 * checksummed and written on the same processors and disk the part's reads, checks and writes use, and the broker's
 * publishers paid for both at once. The count lives in memory only: a broker that restarts writes no part and so
 * defers nothing.
 */
export class BackupActivity {
  private partsBeingWritten = 0;

  /** Whether a part of a backup is being written on this broker. */
  get writing(): boolean {
    return this.partsBeingWritten > 0;
  }

  /**
   * Counts a part as being written until the returned function is called, whatever the part's outcome; calling that
   * function again changes nothing.
   */
  begin(): () => void {
    this.partsBeingWritten += 1;
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      this.partsBeingWritten -= 1;
    };
  }
}
