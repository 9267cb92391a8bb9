import { type Kysely, sql } from "kysely";
import { conflict, invalidRequest, ServiceError } from "../../../http/errors.js";
import { connectorSecretPurpose, holdKeyEncryptionKey, openWhileServing } from "../../store/key-material.js";
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
  /** Most bytes of UTF-8 the values of one cluster's secrets may hold together, which bounds the list's answer. */
  clusterValuesMaxBytes: number;
}

/** The limits the Administration API applies. */
export const defaultConnectorSecretLimits: ConnectorSecretLimits = {
  valueMaxBytes: 65_536,
  secretsPerCluster: 1_000,
  clusterValuesMaxBytes: 4 * 1_048_576,
};

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
      rows.map((row) => [
        row.name,
        openWhileServing(this.secrets, row.value, connectorSecretPurpose(clusterId, row.name)),
      ]),
    );
  }

  /**
   * Creates the secret `name`; a conflict when the name exists or the cluster would hold more secrets, or more bytes
   * of values, than allowed.
   */
  async create(organizationId: string, clusterId: string, name: string, value: string): Promise<void> {
    this.checkName(name);
    const valueBytes = this.checkValue(value);
    await requireCluster(this.clusters, organizationId, clusterId);
    const timestamp = this.now().toISOString();
    const sealed = this.secrets.seal(value, connectorSecretPurpose(clusterId, name));
    // One statement checks the limits and inserts, so they hold against concurrent creations on SQLite (one
    // writer) and are exceeded on PostgreSQL by at most the creations running at the same moment.
    const text = (parameter: string) => sql<string>`cast(${parameter} as text)`;
    const row = this.database
      .selectNoFrom([
        text(organizationId).as("organization_id"),
        text(clusterId).as("cluster_id"),
        text(name).as("name"),
        text(sealed).as("value"),
        sql<number>`cast(${valueBytes} as integer)`.as("value_bytes"),
        text(timestamp).as("created_at"),
        text(timestamp).as("updated_at"),
      ])
      .where((builder) =>
        builder.and([
          builder(
            builder
              .selectFrom("connector_secrets")
              .select((count) => count.fn.countAll<number>().as("secrets"))
              .where("cluster_id", "=", clusterId),
            "<",
            this.limits.secretsPerCluster,
          ),
          builder(this.valueBytesOfOthers(clusterId, name), "<=", this.limits.clusterValuesMaxBytes - valueBytes),
        ]),
      );
    const result = await this.database.transaction().execute(async (transaction) => {
      await holdKeyEncryptionKey(transaction, this.secrets);
      return await transaction
        .insertInto("connector_secrets")
        .columns(["organization_id", "cluster_id", "name", "value", "value_bytes", "created_at", "updated_at"])
        .expression(row)
        .onConflict((onConflict) => onConflict.columns(["cluster_id", "name"]).doNothing())
        .executeTakeFirst();
    });
    if (Number(result.numInsertedOrUpdatedRows ?? 0) === 1) return;
    // What follows only chooses the message: the statement above decided.
    if (await this.exists(clusterId, name)) {
      throw conflict(`The cluster '${clusterId}' already has a secret named '${name}'; change it with PUT instead.`);
    }
    const { secrets } = await this.database
      .selectFrom("connector_secrets")
      .select((count) => count.fn.countAll<number>().as("secrets"))
      .where("cluster_id", "=", clusterId)
      .executeTakeFirstOrThrow();
    if (Number(secrets) >= this.limits.secretsPerCluster) {
      throw conflict(
        `The cluster '${clusterId}' holds ${this.limits.secretsPerCluster} secrets, the most a cluster may hold; ` +
          "delete one before creating another.",
      );
    }
    throw this.clusterFull(clusterId, valueBytes);
  }

  /**
   * Replaces the value of the existing secret `name`; not found when the cluster has no secret by that name, a
   * conflict when the cluster's values would hold more bytes than allowed.
   */
  async update(organizationId: string, clusterId: string, name: string, value: string): Promise<void> {
    this.checkName(name);
    const valueBytes = this.checkValue(value);
    await requireCluster(this.clusters, organizationId, clusterId);
    const sealed = this.secrets.seal(value, connectorSecretPurpose(clusterId, name));
    const result = await this.database.transaction().execute(async (transaction) => {
      await holdKeyEncryptionKey(transaction, this.secrets);
      return await transaction
        .updateTable("connector_secrets")
        .set({ value: sealed, value_bytes: valueBytes, updated_at: this.now().toISOString() })
        .where("organization_id", "=", organizationId)
        .where("cluster_id", "=", clusterId)
        .where("name", "=", name)
        .where(this.valueBytesOfOthers(clusterId, name), "<=", this.limits.clusterValuesMaxBytes - valueBytes)
        .executeTakeFirst();
    });
    if (Number(result.numUpdatedRows) === 1) return;
    if (await this.exists(clusterId, name)) throw this.clusterFull(clusterId, valueBytes);
    throw secretNotFound(clusterId, name);
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

  /** Bytes held by the values of the cluster's secrets other than `name`, as a subquery. */
  private valueBytesOfOthers(clusterId: string, name: string) {
    return this.database
      .selectFrom("connector_secrets as other")
      .select((sum) => sum.fn.coalesce(sum.fn.sum<number>("other.value_bytes"), sql<number>`0`).as("bytes"))
      .where("other.cluster_id", "=", clusterId)
      .where("other.name", "<>", name);
  }

  private clusterFull(clusterId: string, valueBytes: number): ServiceError {
    return conflict(
      `The values of the cluster '${clusterId}' would hold more than ${this.limits.clusterValuesMaxBytes} bytes ` +
        `with this one of ${valueBytes} bytes; delete or shorten others first.`,
    );
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

  /** Checks a value's size and answers it, in bytes of UTF-8. */
  private checkValue(value: string): number {
    // An empty value is most often an unset variable in the caller's script rather than an intended secret.
    if (value === "") throw invalidRequest("secretValue must not be empty.");
    // A lone surrogate has no UTF-8 form: sealing would store a replacement character, another secret than the one sent.
    if (/\p{Cs}/u.test(value))
      throw invalidRequest("secretValue holds a lone surrogate (\\uD800–\\uDFFF); send valid Unicode.");
    const sizeBytes = Buffer.byteLength(value, "utf8");
    if (sizeBytes > this.limits.valueMaxBytes) {
      throw invalidRequest(
        `secretValue is ${sizeBytes} bytes of UTF-8; a secret value may hold at most ${this.limits.valueMaxBytes}.`,
      );
    }
    return sizeBytes;
  }
}

function secretNotFound(clusterId: string, name: string): ServiceError {
  return new ServiceError("notFound", `The cluster '${clusterId}' has no secret named '${name}'.`);
}
