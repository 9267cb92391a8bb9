/** Backup stores for tests that hold, fail or watch some of a store's calls. */
import type { BackupStore } from "../../src/cluster/backup/store.js";

/** A store that passes every call to `store`, except those `overrides` replace. */
export function delegatingStore(store: BackupStore, overrides: Partial<BackupStore> = {}): BackupStore {
  return {
    writeManifest: (manifest) => store.writeManifest(manifest),
    createFile: (part, name) => store.createFile(part, name),
    readFile: (part, name, maxChunkBytes) => store.readFile(part, name, maxChunkBytes),
    manifests: (backupId) => store.manifests(backupId),
    backupIds: () => store.backupIds(),
    deleteBackup: (backupId) => store.deleteBackup(backupId),
    writeBackupRecord: (record) => store.writeBackupRecord(record),
    writeBackupConfiguration: (backupId, configuration) => store.writeBackupConfiguration(backupId, configuration),
    backupConfiguration: (backupId) => store.backupConfiguration(backupId),
    backupRecords: (backupId) => store.backupRecords(backupId),
    highestTakenBackupId: () => store.highestTakenBackupId(),
    ...overrides,
  };
}
