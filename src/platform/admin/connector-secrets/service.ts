import { type Kysely, sql } from "kysely";
import { conflict, invalidRequest, ServiceError } from "../../../http/errors.js";
import { connectorSecretPurpose } from "../../store/key-material.js";
import type { PlatformDatabase } from "../../store/schema.js";
import type { SecretsBox } from "../../store/secrets-box.js";
import { type ClusterDirectory, requireCluster } from "../cluster-directory.js";

/** Longest secret name, in characters. */
export const secretNameMaxLength = 49;

/** What a secret name may be: 1 to 49 ASCII letters, digits and underscores. */
export const secretNamePattern = `^[A-Za-z0-9_]{1,${secretNameMaxLength}}$`;

const secretNameExpression = new RegExp(secretNamePattern);

/** Bounds of what one cluster's connector secrets may hold. */
export interface ConnectorSecretLimits {
  /** Largest value, in bytes of UTF-8. */
  valueMaxBytes: number;
  /** Most secrets one cluster may hold. */
  secretsPerCluster: number;
}

/** The limits the Administration API applies. */
export const defaultConnectorSecretLimits: ConnectorSecretLimits = { valueMaxBytes: 65_536, secretsPerCluster: 1_000 };

/** Options of `ConnectorSecretService`. */
export interface ConnectorSecretServiceOptions {
  database: Kysely<PlatformDatabase>;
  /** Seals values before they are written and opens them when they are read. */
  secrets: SecretsBox;
  clusters: ClusterDirectory;
  limits?: ConnectorSecretLimits;
  now?: () => Date;
}

/**
 * Reads and changes the connector secrets of clusters. Values are sealed under the key-encryption key before they
 * reach the database, bound to their cluster and name, and are opened only to answer `list`.
 */
export class ConnectorSecretService {
  private readonly database: Kysely<PlatformDatabase>;
  private readonly secrets: SecretsBox;
  private readonly clusters: ClusterDirectory;
  private readonly limits: ConnectorSecretLimits;
  private readonly now: () => Date;

  constructor(options: ConnectorSecretServiceOptions) {
    this.database = options.database;
    this.secrets = options.secrets;
    this.clusters = options.clusters;
    this.limits = options.limits ?? defaultConnectorSecretLimits;
    this.now = options.now ?? (() => new Date());
  }

  /**
   * Every secret of the cluster as `{name: value}`, names in code-point order. Throws `SealedValueError` when a
   * stored value does not open (altered, or moved from another row): a damaged value is never answered.
   */
  async list(organizationId: string, clusterId: string): Promise<Record<string, string>> {
    await requireCluster(this.clusters, organizationId, clusterId);
    const rows = await this.database
      .selectFrom("connector_secrets")
      .select(["name", "value"])
      .where("organization_id", "=", organizationId)
      .where("cluster_id", "=", clusterId)
      .execute();
    // Sorted here rather than in SQL, where collations differ between SQLite and PostgreSQL.
    rows.sort((left, right) => (left.name < right.name ? -1 : left.name > right.name ? 1 : 0));
    return Object.fromEntries(
      rows.map((row) => [row.name, this.secrets.open(row.value, connectorSecretPurpose(clusterId, row.name))]),
    );
  }

  /** Creates the secret `name`; a conflict when the name exists or the cluster holds the most secrets allowed. */
  async create(organizationId: string, clusterId: string, name: string, value: string): Promise<void> {
    this.checkName(name);
    this.checkValue(value);
    await requireCluster(this.clusters, organizationId, clusterId);
    const timestamp = this.now().toISOString();
    const sealed = this.secrets.seal(value, connectorSecretPurpose(clusterId, name));
    // One statement counts and inserts, so the limit holds against concurrent creations on SQLite (one writer)
    // and is exceeded on PostgreSQL by at most the creations running at the same moment.
    const text = (parameter: string) => sql<string>`cast(${parameter} as text)`;
    const row = this.database
      .selectNoFrom([
        text(organizationId).as("organization_id"),
        text(clusterId).as("cluster_id"),
        text(name).as("name"),
        text(sealed).as("value"),
        text(timestamp).as("created_at"),
        text(timestamp).as("updated_at"),
      ])
      .where(
        (builder) =>
          builder
            .selectFrom("connector_secrets")
            .select((count) => count.fn.countAll<number>().as("secrets"))
            .where("cluster_id", "=", clusterId),
        "<",
        this.limits.secretsPerCluster,
      );
    const result = await this.database
      .insertInto("connector_secrets")
      .columns(["organization_id", "cluster_id", "name", "value", "created_at", "updated_at"])
      .expression(row)
      .onConflict((onConflict) => onConflict.columns(["cluster_id", "name"]).doNothing())
      .executeTakeFirst();
    if (Number(result.numInsertedOrUpdatedRows ?? 0) === 1) return;
    if (await this.exists(clusterId, name)) {
      throw conflict(`The cluster '${clusterId}' already has a secret named '${name}'; change it with PUT instead.`);
    }
    throw conflict(
      `The cluster '${clusterId}' holds ${this.limits.secretsPerCluster} secrets, the most a cluster may hold; ` +
        "delete one before creating another.",
    );
  }

  /** Replaces the value of the existing secret `name`; not found when the cluster has no secret by that name. */
  async update(organizationId: string, clusterId: string, name: string, value: string): Promise<void> {
    this.checkName(name);
    this.checkValue(value);
    await requireCluster(this.clusters, organizationId, clusterId);
    const result = await this.database
      .updateTable("connector_secrets")
      .set({
        value: this.secrets.seal(value, connectorSecretPurpose(clusterId, name)),
        updated_at: this.now().toISOString(),
      })
      .where("organization_id", "=", organizationId)
      .where("cluster_id", "=", clusterId)
      .where("name", "=", name)
      .executeTakeFirst();
    if (Number(result.numUpdatedRows) === 0) throw secretNotFound(clusterId, name);
  }

  /** Deletes the secret `name`; not found when the cluster has no secret by that name. */
  async remove(organizationId: string, clusterId: string, name: string): Promise<void> {
    this.checkName(name);
    await requireCluster(this.clusters, organizationId, clusterId);
    const result = await this.database
      .deleteFrom("connector_secrets")
      .where("organization_id", "=", organizationId)
      .where("cluster_id", "=", clusterId)
      .where("name", "=", name)
      .executeTakeFirst();
    if (Number(result.numDeletedRows) === 0) throw secretNotFound(clusterId, name);
  }

  /** Deletes every secret of the cluster (when the cluster itself is deleted); answers how many there were. */
  async deleteAllOf(clusterId: string): Promise<number> {
    const result = await this.database
      .deleteFrom("connector_secrets")
      .where("cluster_id", "=", clusterId)
      .executeTakeFirst();
    return Number(result.numDeletedRows);
  }

  private async exists(clusterId: string, name: string): Promise<boolean> {
    const row = await this.database
      .selectFrom("connector_secrets")
      .select("name")
      .where("cluster_id", "=", clusterId)
      .where("name", "=", name)
      .executeTakeFirst();
    return row !== undefined;
  }

  private checkName(name: string): void {
    if (!secretNameExpression.test(name)) {
      throw invalidRequest(
        `secretName must be 1 to ${secretNameMaxLength} characters of A-Z, a-z, 0-9 and _ (got ${name.length} characters).`,
      );
    }
  }

  private checkValue(value: string): void {
    // An empty value is most often an unset variable in the caller's script rather than an intended secret.
    if (value === "") throw invalidRequest("secretValue must not be empty.");
    const sizeBytes = Buffer.byteLength(value, "utf8");
    if (sizeBytes > this.limits.valueMaxBytes) {
      throw invalidRequest(
        `secretValue is ${sizeBytes} bytes of UTF-8; a secret value may hold at most ${this.limits.valueMaxBytes}.`,
      );
    }
  }
}

function secretNotFound(clusterId: string, name: string): ServiceError {
  return new ServiceError("notFound", `The cluster '${clusterId}' has no secret named '${name}'.`);
}
