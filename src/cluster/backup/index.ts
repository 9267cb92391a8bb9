/** Backups of a cluster's partitions: the backup store, writing a partition's part, and reading parts back. */
export { BackupActivity } from "./backup-activity.js";
export { FilesystemBackupStore } from "./filesystem-store.js";
export {
  admitPart,
  BACKUP_CHUNK_BYTES,
  copyLogFrames,
  type PartAdmission,
  type PartitionBackupRequest,
  type PartitionBackupSource,
  writePartitionBackup,
} from "./partition-backup.js";
export { BackupPartDamagedError, readPartEntries, readPartSnapshot, rebuildEngine, verifyPart } from "./read-part.js";
export { type RestoreOptions, RestoreRefusedError, type RestoreReport, restoreBroker } from "./restore.js";
export {
  BACKUP_FILE_NAMES,
  type BackupFileEntry,
  type BackupFileWriter,
  type BackupPartId,
  type BackupPartManifest,
  type BackupPartState,
  type BackupRecord,
  type BackupStore,
  backupPartitionCount,
  parseBackupRecord,
  parseManifest,
  type StoredBackupRecord,
} from "./store.js";
