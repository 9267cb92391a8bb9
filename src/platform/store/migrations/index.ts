import type { Migration, MigrationProvider } from "kysely";
import { foundationMigration } from "./001-foundation.js";
import { modelerMigration } from "./010-modeler.js";
import { clientFailuresPerAddressMigration } from "./020-client-failures-per-address.js";
import { clustersMigration } from "./030-clusters.js";
import { clusterClientsMigration } from "./031-cluster-clients.js";
import { connectorSecretsMigration } from "./032-connector-secrets.js";
import { allowlistMonitoringMigration } from "./033-allowlist-monitoring.js";
import { activityMigration } from "./034-activity.js";
import { backupsMigration } from "./035-backups.js";
import { organizationClientsMigration } from "./036-organization-clients.js";
import { backupScheduleFailuresMigration } from "./037-backup-schedule-failures.js";
import { backupScheduleRetriesMigration } from "./038-backup-schedule-retries.js";
import { backupScheduleEndedRunsMigration } from "./039-backup-schedule-ended-runs.js";
import { rateLimitScopeSeparatorMigration } from "./040-rate-limit-scope-separator.js";

/**
 * Every migration, in order. Names sort lexically and are never renamed once released: the database records
 * which names have run.
 */
const migrations: Record<string, Migration> = {
  "001-foundation": foundationMigration,
  "010-modeler": modelerMigration,
  "020-client-failures-per-address": clientFailuresPerAddressMigration,
  "030-clusters": clustersMigration,
  "031-cluster-clients": clusterClientsMigration,
  "032-connector-secrets": connectorSecretsMigration,
  "033-allowlist-monitoring": allowlistMonitoringMigration,
  "034-activity": activityMigration,
  "035-backups": backupsMigration,
  "036-organization-clients": organizationClientsMigration,
  "037-backup-schedule-failures": backupScheduleFailuresMigration,
  "038-backup-schedule-retries": backupScheduleRetriesMigration,
  "039-backup-schedule-ended-runs": backupScheduleEndedRunsMigration,
  "040-rate-limit-scope-separator": rateLimitScopeSeparatorMigration,
};

/** Supplies the migrations compiled into the program (no directory scanning, so bundling cannot lose one). */
export const migrationProvider: MigrationProvider = {
  async getMigrations() {
    return migrations;
  },
};
