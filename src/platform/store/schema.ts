import type { Generated } from "kysely";

/**
 * Table shapes of the platform database. Both dialects store the same values: timestamps as ISO-8601 text,
 * instants used in arithmetic as integer milliseconds, booleans as 0/1 and lists as JSON text, so SQLite and
 * PostgreSQL answer identically.
 */
export interface OrganizationTable {
  id: string;
  name: string;
  created_at: string;
}

export interface MemberTable {
  organization_id: string;
  email: string;
  name: string;
  /** JSON array of role names. */
  roles: string;
  invite_pending: number;
  created_at: string;
  updated_at: string;
}

export interface ClientTable {
  client_id: string;
  organization_id: string;
  name: string;
  /** Keyed hash (HMAC-SHA-256, base64url) of the secret; the secret itself is never stored. */
  secret_hash: string;
  /** JSON array of scope values the client may be granted (empty for a cluster API client). */
  scopes: string;
  created_at: string;
  /** The cluster a cluster API client belongs to; null for an organization client (migration 031). */
  cluster_id: string | null;
  /** JSON array of a cluster API client's permissions; null for an organization client. */
  permissions: string | null;
  /** Id the Administration API shows for a cluster API client besides its client id; null otherwise. */
  uuid: string | null;
}

/** Cluster API clients deleted while tokens issued to them may still be unexpired (migration 031). */
export interface RevokedClusterClientTable {
  client_id: string;
  organization_id: string;
  cluster_id: string;
  revoked_at: string;
  revoked_at_ms: number;
}

/** A deleted organization client whose tokens may be unexpired (migration 036). */
export interface RevokedOrganizationClientTable {
  client_id: string;
  organization_id: string;
  revoked_at: string;
  revoked_at_ms: number;
}

export interface SigningKeyTable {
  key_id: string;
  algorithm: string;
  /** Private key as a JWK (JSON). */
  private_key: string;
  /** Public key as a JWK (JSON), published in the JWKS. */
  public_key: string;
  created_at: string;
  /** When the key stopped signing; it stays published until the last token it signed expires. */
  retired_at_ms: number | null;
}

export interface RateLimitTable {
  address: string;
  tokens: number;
  updated_at_ms: number;
  blocked_until_ms: number;
}

/** Consecutive failed authentications of one client id from one source address (migration 020). */
export interface ClientFailureTable {
  client_id: string;
  address: string;
  consecutive_failures: number;
  delayed_until_ms: number;
}

export interface SettingTable {
  name: string;
  value: string;
}

export interface MigrationLockRow {
  id: Generated<number>;
}

/** The whole platform database, as Kysely sees it. */
export interface PlatformDatabase {
  organizations: OrganizationTable;
  members: MemberTable;
  clients: ClientTable;
  signing_keys: SigningKeyTable;
  rate_limits: RateLimitTable;
  client_failures: ClientFailureTable;
  revoked_cluster_clients: RevokedClusterClientTable;
  revoked_organization_clients: RevokedOrganizationClientTable;
  settings: SettingTable;
}

/** One change made through the Administration API (migration 034). */
export interface ActivityTable {
  sequence: Generated<number>;
  organization_id: string;
  service: string;
  /** `c`, `r`, `u` or `d`: created, read, updated or deleted. */
  audit_type: string;
  entity: string;
  entity_id: string;
  /** The API client that made the change. */
  user_id: string;
  recorded_at: string;
}

/** The platform database including the activity of migration 034. */
export interface PlatformDatabase {
  activity: ActivityTable;
}

/** Columns every Modeler table shares: when and by whom (the acting client's name and email) a row changed. */
export interface ModelerAuditColumns {
  created_at: string;
  created_by_name: string;
  created_by_email: string;
  updated_at: string;
  updated_by_name: string;
  updated_by_email: string;
}

export interface ModelerProjectTable extends ModelerAuditColumns {
  id: string;
  organization_id: string;
  name: string;
  /** `name` in lower case (Unicode-aware, computed by the service) for case-insensitive substring search. */
  name_folded: string;
}

export interface ModelerFolderTable extends ModelerAuditColumns {
  id: string;
  organization_id: string;
  project_id: string;
  /** Null for a folder at the top level of its project. */
  parent_id: string | null;
  name: string;
  name_folded: string;
}

export interface ModelerFileTable extends ModelerAuditColumns {
  id: string;
  organization_id: string;
  project_id: string;
  /** Null for a file at the top level of its project. */
  folder_id: string | null;
  name: string;
  name_folded: string;
  /** One of bpmn, dmn, form, connector_template. */
  file_type: string;
  content: string;
  revision: number;
}

export interface ModelerMilestoneTable extends ModelerAuditColumns {
  id: string;
  organization_id: string;
  file_id: string;
  name: string;
  name_folded: string;
  /** The file's content when the milestone was created; never changed afterwards. */
  content: string;
}

export interface ModelerCollaboratorTable {
  organization_id: string;
  project_id: string;
  /** Lower-case email of an organization member. */
  email: string;
  /** The member's name when they were added. */
  name: string;
  name_folded: string;
  role: string;
  created_at: string;
  updated_at: string;
}

/** The platform database including the Modeler tables of migration 010. */
export interface PlatformDatabase {
  modeler_projects: ModelerProjectTable;
  modeler_folders: ModelerFolderTable;
  modeler_files: ModelerFileTable;
  modeler_milestones: ModelerMilestoneTable;
  modeler_collaborators: ModelerCollaboratorTable;
}

/** A cluster of the Administration API (migration 030). */
export interface ClusterTable {
  id: string;
  organization_id: string;
  name: string;
  description: string | null;
  stage_label: string | null;
  plan_type_id: string;
  channel_id: string;
  generation_id: string;
  /** The generation's name when it was recorded: an older generation stays readable after an upgrade. */
  generation_name: string;
  region_id: string;
  auto_update: number;
  /** The client that created the cluster (`system` for the first cluster of `flowplane start`). */
  owner_id: string;
  /** 1 for the cluster `flowplane start` runs at the configured gateway ports, 0 for the others. */
  primary_cluster: number;
  /** Creating, Healthy, Unhealthy or Updating, from the provisioner's health polling. */
  status: string;
  gateway_status: string;
  created_at: string;
  updated_at: string;
}

/** Where the local provisioner runs a cluster (migration 030). */
export interface LocalClusterPlacementTable {
  cluster_id: string;
  directory: string;
  gateway_port: number;
  management_port: number;
}

/** The ports of one broker of a locally provisioned cluster (migration 030). */
export interface LocalClusterBrokerTable {
  cluster_id: string;
  node_id: number;
  cluster_port: number;
  management_port: number;
}

/** The platform database including the cluster tables of migration 030. */
export interface PlatformDatabase {
  clusters: ClusterTable;
  local_cluster_placements: LocalClusterPlacementTable;
  local_cluster_brokers: LocalClusterBrokerTable;
}

/** A connector secret of a cluster (migration 032); `value` is sealed, never plain. */
export interface ConnectorSecretTable {
  organization_id: string;
  cluster_id: string;
  name: string;
  /** The value sealed under the key-encryption key for `connectorSecretPurpose(cluster_id, name)`. */
  value: string;
  /** Bytes of the plain value in UTF-8. */
  value_bytes: number;
  created_at: string;
  updated_at: string;
}

/** The platform database including the connector secrets of migration 032. */
export interface PlatformDatabase {
  connector_secrets: ConnectorSecretTable;
}

/** A cluster's IP allowlist (migration 033): the whole list, replaced at once. */
export interface ClusterIpAllowlistTable {
  cluster_id: string;
  /** JSON array of `{ip, description}`, each `ip` a valid `CIDR[,CIDR…]` entry. */
  entries: string;
  updated_at: string;
}

/** Whether a cluster's metrics are protected (migration 033). */
export interface ClusterMonitoringTable {
  cluster_id: string;
  enabled: number;
  updated_at: string;
}

/** A monitoring client of a cluster (migration 033); the password itself is never stored. */
export interface MonitoringClientTable {
  id: string;
  cluster_id: string;
  username: string;
  /** SHA-256 of the generated password, lowercase hex. */
  password_sha256: string;
  created_at: string;
}

/** The platform database including the allowlist and monitoring tables of migration 033. */
export interface PlatformDatabase {
  cluster_ip_allowlists: ClusterIpAllowlistTable;
  cluster_monitoring: ClusterMonitoringTable;
  monitoring_clients: MonitoringClientTable;
}

/** A restore of a cluster from one of its backups (migration 035). */
export interface ClusterRestoreTable {
  id: string;
  cluster_id: string;
  /** The backup's id on the cluster's management API, in decimal. */
  backup_id: string;
  /** PENDING, VALIDATING, IN_PROGRESS, COMPLETED or FAILED. */
  state: string;
  failure_reason: string | null;
  created_at: string;
  updated_at: string;
}

/** The backup schedule of a cluster (migration 035). */
export interface ClusterBackupScheduleTable {
  cluster_id: string;
  organization_id: string;
  /** A 5-field cron expression in UTC. */
  cron: string;
  /** How many complete backups the schedule keeps; older backups are deleted after each run. */
  keep_count: number;
  updated_at: string;
  /** When the schedule last ran, took a backup or tried to (or null, before its first run), ISO-8601. */
  last_run_at: string | null;
  /** How many runs in a row could not start a backup (migration 037); 0 once one did. */
  consecutive_failures: Generated<number>;
  /** Why the last run could not start a backup, or null when it did. */
  last_failure: string | null;
  /** When a failed run is tried again (ISO-8601), or null: none failed, or the next scheduled run comes first. */
  retry_at: string | null;
  /**
   * How many attempts of the latest scheduled run failed, the run's own and its retries' (migration 038); picks the
   * next retry's pause. 0 once one started a backup.
   */
  run_failures: Generated<number>;
  /** When the last run failed (ISO-8601), or null when it started a backup (migration 038). */
  last_failure_at: string | null;
  /**
   * The `last_run_at` of the latest run that ended, starting a backup or failing (migration 039). Another value than
   * `last_run_at` means a run under way, or one its platform's stop cut short.
   */
  ended_run_at: string | null;
}

/** The platform database including the restores and backup schedules of migration 035. */
export interface PlatformDatabase {
  cluster_restores: ClusterRestoreTable;
  cluster_backup_schedules: ClusterBackupScheduleTable;
}
