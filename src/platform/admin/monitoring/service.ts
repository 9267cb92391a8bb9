import { createHash, randomBytes, randomUUID } from "node:crypto";
import type { Kysely, Transaction } from "kysely";
import { conflict, invalidRequest, notFound } from "../../../http/errors.js";
import type { PlatformDatabase } from "../../store/schema.js";
import { type AccessPolicyChangedListener, type ClusterDirectory, requireCluster } from "../cluster-directory.js";

/** Most monitoring clients one cluster holds. */
export const MAX_MONITORING_CLIENTS = 100;

/**
 * A monitoring client's username: it travels in HTTP Basic credentials, where a colon would end it, and it is
 * printed by the CLI and repeated in messages, so it is kept to a plain, bounded alphabet.
 */
export const MONITORING_USERNAME_PATTERN = "^[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}$";

const monitoringUsername = new RegExp(MONITORING_USERNAME_PATTERN);

/** A monitoring client as listed: never with its password. */
export interface MonitoringClient {
  uuid: string;
  username: string;
  /** When it was created, ISO-8601. */
  created: string;
}

/** A monitoring client with its password, answered only when the password is created or rotated. */
export interface MonitoringCredentials {
  uuid: string;
  username: string;
  password: string;
}

/** The monitoring part of a cluster's access policy (`AccessPolicy["monitoring"]`). */
export interface MonitoringPolicy {
  enabled: boolean;
  clients: { username: string; passwordSha256: string }[];
}

/** Options of `MonitoringService`. */
export interface MonitoringServiceOptions {
  database: Kysely<PlatformDatabase>;
  clusters: ClusterDirectory;
  onAccessPolicyChanged: AccessPolicyChangedListener;
  now?: () => Date;
}

/**
 * A new password: 256 bits from the system's secure random source, base64url. Only its SHA-256 is stored. A slow
 * password hash exists to make guessing a human-chosen password from its hash expensive; a password with 256 bits
 * of entropy cannot be guessed from a fast hash either, and the gateway checks it on every scrape.
 */
function generatePassword(): { password: string; passwordSha256: string } {
  const password = randomBytes(32).toString("base64url");
  return { password, passwordSha256: createHash("sha256").update(password).digest("hex") };
}

/**
 * Activates and deactivates protected metrics of clusters and manages their monitoring clients: while monitoring
 * is active, the cluster's `/actuator/prometheus` requires HTTP Basic credentials of one of its clients.
 */
export class MonitoringService {
  private readonly database: Kysely<PlatformDatabase>;
  private readonly clusters: ClusterDirectory;
  private readonly onAccessPolicyChanged: AccessPolicyChangedListener;
  private readonly now: () => Date;

  constructor(options: MonitoringServiceOptions) {
    this.database = options.database;
    this.clusters = options.clusters;
    this.onAccessPolicyChanged = options.onAccessPolicyChanged;
    this.now = options.now ?? (() => new Date());
  }

  /** Whether the cluster's metrics are protected. */
  async isActive(organizationId: string, clusterId: string): Promise<boolean> {
    await requireCluster(this.clusters, organizationId, clusterId);
    return (await this.monitoringPolicyOf(clusterId)).enabled;
  }

  /**
   * Activates or deactivates protected metrics. Deactivating keeps the clients: while inactive the metrics are open
   * to every allowed address anyway, and activating again restores the credentials the monitoring systems hold.
   */
  async setActive(organizationId: string, clusterId: string, active: boolean): Promise<void> {
    await requireCluster(this.clusters, organizationId, clusterId);
    const enabled = active ? 1 : 0;
    const timestamp = this.now().toISOString();
    await this.database
      .insertInto("cluster_monitoring")
      .values({ cluster_id: clusterId, enabled, updated_at: timestamp })
      .onConflict((conflict) => conflict.column("cluster_id").doUpdateSet({ enabled, updated_at: timestamp }))
      .execute();
    await this.onAccessPolicyChanged(clusterId);
  }

  /** Lists the cluster's monitoring clients, oldest first, without passwords. */
  async listClients(organizationId: string, clusterId: string): Promise<MonitoringClient[]> {
    await requireCluster(this.clusters, organizationId, clusterId);
    const rows = await this.database
      .selectFrom("monitoring_clients")
      .select(["id", "username", "created_at"])
      .where("cluster_id", "=", clusterId)
      .orderBy("created_at")
      .orderBy("id")
      .execute();
    return rows.map((row) => ({ uuid: row.id, username: row.username, created: row.created_at }));
  }

  /**
   * Creates a monitoring client with a generated password, which this answer is the only one to show. A username
   * already used in the cluster is a 409, like any other name that exists; more than the maximum of clients a 400.
   */
  async createClient(organizationId: string, clusterId: string, username: string): Promise<MonitoringCredentials> {
    if (!monitoringUsername.test(username)) {
      throw invalidRequest(
        "body/username must be 1 to 128 letters, digits or . _ @ + - (starting with a letter or digit)",
      );
    }
    await requireCluster(this.clusters, organizationId, clusterId);
    const { password, passwordSha256 } = generatePassword();
    const id = randomUUID();
    const timestamp = this.now().toISOString();
    await this.database.transaction().execute(async (transaction) => {
      await lockClusterMonitoring(transaction, clusterId, timestamp);
      const taken = await transaction
        .selectFrom("monitoring_clients")
        .select("id")
        .where("cluster_id", "=", clusterId)
        .where("username", "=", username)
        .executeTakeFirst();
      if (taken !== undefined) throw conflict(`The cluster already has a monitoring client named '${username}'.`);
      const { count } = await transaction
        .selectFrom("monitoring_clients")
        .select((expression) => expression.fn.countAll<number | string>().as("count"))
        .where("cluster_id", "=", clusterId)
        .executeTakeFirstOrThrow();
      if (Number(count) >= MAX_MONITORING_CLIENTS) {
        throw conflict(`A cluster holds at most ${MAX_MONITORING_CLIENTS} monitoring clients; delete one first.`);
      }
      await transaction
        .insertInto("monitoring_clients")
        .values({
          id,
          cluster_id: clusterId,
          username,
          password_sha256: passwordSha256,
          created_at: timestamp,
        })
        .execute();
    });
    await this.onAccessPolicyChanged(clusterId);
    return { uuid: id, username, password };
  }

  /** Replaces a client's password with a new generated one; the old one stops working once the change is delivered. */
  async rotatePassword(organizationId: string, clusterId: string, clientId: string): Promise<MonitoringCredentials> {
    await requireCluster(this.clusters, organizationId, clusterId);
    const { password, passwordSha256 } = generatePassword();
    const row = await this.database
      .updateTable("monitoring_clients")
      .set({ password_sha256: passwordSha256 })
      .where("cluster_id", "=", clusterId)
      .where("id", "=", clientId)
      .returning("username")
      .executeTakeFirst();
    if (row === undefined) throw notFound("monitoring client", clientId);
    await this.onAccessPolicyChanged(clusterId);
    return { uuid: clientId, username: row.username, password };
  }

  /** Deletes a monitoring client; its credentials stop working once the change is delivered. */
  async deleteClient(organizationId: string, clusterId: string, clientId: string): Promise<void> {
    await requireCluster(this.clusters, organizationId, clusterId);
    const result = await this.database
      .deleteFrom("monitoring_clients")
      .where("cluster_id", "=", clusterId)
      .where("id", "=", clientId)
      .executeTakeFirst();
    if (result.numDeletedRows === 0n) throw notFound("monitoring client", clientId);
    await this.onAccessPolicyChanged(clusterId);
  }

  /** The monitoring part of the cluster's access policy: whether it is active, and the clients' password hashes. */
  async monitoringPolicyOf(clusterId: string): Promise<MonitoringPolicy> {
    const state = await this.database
      .selectFrom("cluster_monitoring")
      .select("enabled")
      .where("cluster_id", "=", clusterId)
      .executeTakeFirst();
    const clients = await this.database
      .selectFrom("monitoring_clients")
      .select(["username", "password_sha256"])
      .where("cluster_id", "=", clusterId)
      .orderBy("created_at")
      .orderBy("id")
      .execute();
    return {
      enabled: state?.enabled === 1,
      clients: clients.map((client) => ({ username: client.username, passwordSha256: client.password_sha256 })),
    };
  }

  /** Removes the cluster's monitoring state and clients, when the cluster itself is deleted. */
  async deleteAllOf(clusterId: string): Promise<void> {
    await this.database.transaction().execute(async (transaction) => {
      await transaction.deleteFrom("monitoring_clients").where("cluster_id", "=", clusterId).execute();
      await transaction.deleteFrom("cluster_monitoring").where("cluster_id", "=", clusterId).execute();
    });
  }
}

/**
 * Writes the cluster's monitoring row (creating it inactive when missing), which holds its lock until the
 * transaction ends: concurrent creations for one cluster then check the name and the count one after another.
 */
async function lockClusterMonitoring(
  transaction: Transaction<PlatformDatabase>,
  clusterId: string,
  timestamp: string,
): Promise<void> {
  await transaction
    .insertInto("cluster_monitoring")
    .values({ cluster_id: clusterId, enabled: 0, updated_at: timestamp })
    .onConflict((conflict) => conflict.column("cluster_id").doUpdateSet({ updated_at: timestamp }))
    .execute();
}
