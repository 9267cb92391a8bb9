import type { Kysely } from "kysely";
import { InvalidAddressRangeError, parseAddressRangeEntry } from "../../../auth/address-ranges.js";
import { invalidRequest } from "../../../http/errors.js";
import type { PlatformDatabase } from "../../store/schema.js";
import { type AccessPolicyChangedListener, type ClusterDirectory, requireCluster } from "../cluster-directory.js";

/** One allowlist entry: one or more IPv4 or IPv6 addresses or CIDR blocks (`CIDR[,CIDR…]`) and what they are. */
export interface AllowlistEntry {
  ip: string;
  description: string;
}

/** Most entries one allowlist holds (the access policy document accepts no more). */
export const MAX_ALLOWLIST_ENTRIES = 1_000;

/** Longest description of an entry, in characters (the access policy document accepts no longer). */
export const MAX_ALLOWLIST_DESCRIPTION_LENGTH = 1_024;

/** Options of `IpAllowlistService`. */
export interface IpAllowlistServiceOptions {
  database: Kysely<PlatformDatabase>;
  clusters: ClusterDirectory;
  onAccessPolicyChanged: AccessPolicyChangedListener;
  now?: () => Date;
}

/** Reads and replaces the IP allowlists of clusters; the cluster's gateway enforces them. */
export class IpAllowlistService {
  private readonly database: Kysely<PlatformDatabase>;
  private readonly clusters: ClusterDirectory;
  private readonly onAccessPolicyChanged: AccessPolicyChangedListener;
  private readonly now: () => Date;

  constructor(options: IpAllowlistServiceOptions) {
    this.database = options.database;
    this.clusters = options.clusters;
    this.onAccessPolicyChanged = options.onAccessPolicyChanged;
    this.now = options.now ?? (() => new Date());
  }

  /** The organization's cluster's allowlist; 404 for a cluster the organization does not have. */
  async get(organizationId: string, clusterId: string): Promise<AllowlistEntry[]> {
    await requireCluster(this.clusters, organizationId, clusterId);
    return await this.allowlistOf(clusterId);
  }

  /**
   * Replaces the cluster's allowlist with `entries` (an empty list allows everyone) and has the change delivered
   * to the cluster. `field` names the body's list in errors (`ipallowlist` or its older spelling `ipwhitelist`).
   */
  async replace(
    organizationId: string,
    clusterId: string,
    entries: readonly AllowlistEntry[],
    field = "ipallowlist",
  ): Promise<void> {
    checkEntries(entries, field);
    await requireCluster(this.clusters, organizationId, clusterId);
    const stored = JSON.stringify(entries.map((entry) => ({ ip: entry.ip, description: entry.description })));
    const timestamp = this.now().toISOString();
    await this.database
      .insertInto("cluster_ip_allowlists")
      .values({ cluster_id: clusterId, entries: stored, updated_at: timestamp })
      .onConflict((conflict) => conflict.column("cluster_id").doUpdateSet({ entries: stored, updated_at: timestamp }))
      .execute();
    await this.onAccessPolicyChanged(clusterId);
  }

  /** The cluster's allowlist as its access policy and the Cluster object carry it; empty when none was set. */
  async allowlistOf(clusterId: string): Promise<AllowlistEntry[]> {
    const row = await this.database
      .selectFrom("cluster_ip_allowlists")
      .select("entries")
      .where("cluster_id", "=", clusterId)
      .executeTakeFirst();
    return row === undefined ? [] : (JSON.parse(row.entries) as AllowlistEntry[]);
  }

  /** Removes the cluster's allowlist, when the cluster itself is deleted. */
  async deleteAllOf(clusterId: string): Promise<void> {
    await this.database.deleteFrom("cluster_ip_allowlists").where("cluster_id", "=", clusterId).execute();
  }
}

/** Checks every entry as the gateway will parse it; the 400 names the entry's field and the range at fault. */
function checkEntries(entries: readonly AllowlistEntry[], field: string): void {
  if (entries.length > MAX_ALLOWLIST_ENTRIES) {
    throw invalidRequest(`body/${field} holds more than ${MAX_ALLOWLIST_ENTRIES} entries`);
  }
  entries.forEach((entry, index) => {
    const location = `body/${field}/${index}/ip`;
    try {
      parseAddressRangeEntry(entry.ip);
    } catch (error) {
      if (!(error instanceof InvalidAddressRangeError)) throw error;
      throw invalidRequest(`${location} ${error.message}`, { errors: [{ location, message: error.message }] });
    }
  });
}
