import { randomUUID } from "node:crypto";
import { type Kysely, type RawBuilder, sql } from "kysely";
import type { Clock } from "../../auth/clock.js";
import {
  type ClusterClientPermission,
  canonicalPermissions,
  canonicalScopes,
  isClusterClientPermission,
  isScopeValue,
  type ScopeValue,
} from "../../auth/scopes.js";
import { invalidRequest } from "../../http/errors.js";
import type { PlatformDatabase } from "../store/schema.js";
import { type ClientSecretHasher, generateClientId, generateClientSecret } from "./client-secrets.js";

/** A client as callers see it: everything except its secret, which is never retrievable after creation. */
export interface ClientRecord {
  clientId: string;
  organizationId: string;
  name: string;
  /** Scope values the client may be granted, in canonical order (none for a cluster API client). */
  scopes: ScopeValue[];
  /** ISO-8601 instant of creation. */
  createdAt: string;
  /** Present for a cluster API client: the one cluster its tokens reach, and what they may do there. */
  cluster?: ClusterMembership;
}

/** What makes a client a cluster API client. */
export interface ClusterMembership {
  clusterId: string;
  /** Permissions in canonical order; its tokens carry them as scope values. */
  permissions: ClusterClientPermission[];
  /** The id the Administration API shows besides the client id. */
  uuid: string;
}

/** What `ClientService.createClusterClient` needs. */
export interface NewClusterClient {
  organizationId: string;
  clusterId: string;
  name: string;
  permissions: readonly ClusterClientPermission[];
  /** Largest number of clients the cluster may hold; creating one more is refused. */
  maximumClientsPerCluster: number;
}

/** What became of a `createClusterClient` call. */
export type NewClusterClientOutcome =
  | { outcome: "created"; client: ClientRecord; secret: string }
  /** The cluster already has a client of that name. */
  | { outcome: "name-taken" }
  /** The cluster already holds `maximumClientsPerCluster` clients. */
  | { outcome: "cluster-full" };

/** What `ClientService.createOrganizationClient` needs. */
export interface NewOrganizationClient {
  organizationId: string;
  /** The client asking for it: the client is created only while this one exists (checked in the same statement). */
  callerClientId: string;
  name: string;
  scopes: readonly ScopeValue[];
  /** Largest number of organization clients the organization may hold; creating one more is refused. */
  maximumClientsPerOrganization: number;
}

/** What became of a `createOrganizationClient` call. */
export type NewOrganizationClientOutcome =
  | { outcome: "created"; client: ClientRecord; secret: string }
  /** The organization already has a client of that name. */
  | { outcome: "name-taken" }
  /** The organization already holds `maximumClientsPerOrganization` clients. */
  | { outcome: "organization-full" }
  /** The client asking for it was deleted meanwhile. */
  | { outcome: "caller-deleted" };

/** What became of a `deleteOrganizationClient` call. */
export type OrganizationClientDeletion =
  | "deleted"
  /** The organization has no such client (of its own, not of a cluster). */
  | "not-found"
  /** The client asking for the deletion was deleted itself meanwhile. */
  | "caller-deleted";

/** A deleted cluster API client whose tokens the cluster's gateway must refuse. */
export interface RevokedClusterClient {
  clientId: string;
  /** ISO-8601 instant of the deletion. */
  revokedAt: string;
}

/** What `ClientService.create` needs. */
export interface NewClient {
  organizationId: string;
  name: string;
  scopes: readonly string[];
  /** Preset id (bootstrap of automated deployments); generated when absent. */
  clientId?: string;
  /** Preset secret (bootstrap of automated deployments); generated with 256 bits when absent. */
  secret?: string;
}

/** Options of `ClientService`. */
export interface ClientServiceOptions {
  database: Kysely<PlatformDatabase>;
  hasher: ClientSecretHasher;
  clock: Clock;
  /**
   * How long a client lookup made for authentication is reused without asking the database. A client deleted
   * through another replica keeps working on this one for at most this long; a client created through another
   * replica may be refused here for at most this long if its id was tried (and found unknown) just before.
   */
  cacheTtlMs?: number;
  /** Largest number of cached client records; the oldest entry is dropped first. */
  cacheMaxEntries?: number;
}

/** Default lifetime of a cached client record. */
export const defaultClientCacheTtlMs = 5_000;

/** Shortest preset secret accepted; generated secrets have 43 characters. */
export const minimumPresetSecretLength = 32;

const clientIdPattern = /^[A-Za-z0-9._~-]{1,128}$/;

/** Whether `clientId` has the shape every client id has (1 to 128 characters among letters, digits, `._~-`). */
export function isWellFormedClientId(clientId: string): boolean {
  return clientIdPattern.test(clientId);
}

/** A cached lookup; `found` is absent for an unknown id, which is cached too (see `authenticate`). */
interface CachedClient {
  found: { record: ClientRecord; secretHash: string } | undefined;
  expiresAtMs: number;
}

type ClientRow = PlatformDatabase["clients"];

function toRecord(row: Omit<ClientRow, "secret_hash">): ClientRecord {
  const scopes = JSON.parse(row.scopes) as unknown;
  if (!Array.isArray(scopes) || !scopes.every((scope): scope is ScopeValue => isScopeValue(String(scope)))) {
    throw new Error(`client ${row.client_id} has an invalid scope list in the database: ${row.scopes}`);
  }
  const record: ClientRecord = {
    clientId: row.client_id,
    organizationId: row.organization_id,
    name: row.name,
    scopes: canonicalScopes(scopes),
    createdAt: row.created_at,
  };
  if (row.cluster_id === null) return record;
  const permissions = JSON.parse(row.permissions ?? "null") as unknown;
  if (
    !Array.isArray(permissions) ||
    !permissions.every((permission): permission is ClusterClientPermission =>
      isClusterClientPermission(String(permission)),
    )
  ) {
    throw new Error(`client ${row.client_id} has an invalid permission list in the database: ${row.permissions}`);
  }
  return {
    ...record,
    cluster: { clusterId: row.cluster_id, permissions: canonicalPermissions(permissions), uuid: row.uuid ?? "" },
  };
}

const publicColumns = [
  "client_id",
  "organization_id",
  "name",
  "scopes",
  "created_at",
  "cluster_id",
  "permissions",
  "uuid",
] as const;

/**
 * Whether a database error is a constraint violation: PostgreSQL SQLSTATE class 23, or SQLite's SQLITE_CONSTRAINT
 * family. Here it means a concurrent request has just taken the same name.
 */
function isConstraintViolation(error: unknown): boolean {
  const code = (error as { code?: unknown }).code;
  return typeof code === "string" && (/^23\d{3}$/.test(code) || code.startsWith("SQLITE_CONSTRAINT"));
}

/**
 * Creates, finds, lists, deletes and authenticates API clients. The `clients` table keeps only a keyed hash of
 * each secret; the secret itself leaves this service exactly once, in the result of `create`.
 */
export class ClientService {
  private readonly database: Kysely<PlatformDatabase>;
  private readonly hasher: ClientSecretHasher;
  private readonly clock: Clock;
  private readonly cacheTtlMs: number;
  private readonly cacheMaxEntries: number;
  private readonly cache = new Map<string, CachedClient>();

  constructor(options: ClientServiceOptions) {
    this.database = options.database;
    this.hasher = options.hasher;
    this.clock = options.clock;
    this.cacheTtlMs = options.cacheTtlMs ?? defaultClientCacheTtlMs;
    this.cacheMaxEntries = options.cacheMaxEntries ?? 10_000;
  }

  /** Creates a client; the returned secret is the only copy there will ever be. */
  async create(input: NewClient): Promise<{ client: ClientRecord; secret: string }> {
    const unknown = input.scopes.filter((scope) => !isScopeValue(scope));
    if (unknown.length > 0) {
      throw invalidRequest(`Unknown scope ${unknown.map((scope) => `'${scope}'`).join(", ")}.`);
    }
    if (input.scopes.length === 0) throw invalidRequest("A client needs at least one scope.");
    const clientId = input.clientId ?? generateClientId();
    if (!isWellFormedClientId(clientId)) {
      throw invalidRequest("A client id has 1 to 128 characters among letters, digits and . _ ~ -.");
    }
    const secret = input.secret ?? generateClientSecret();
    if (secret.length < minimumPresetSecretLength) {
      throw invalidRequest(`A client secret needs at least ${minimumPresetSecretLength} characters.`);
    }
    const row: ClientRow = {
      client_id: clientId,
      organization_id: input.organizationId,
      name: input.name,
      secret_hash: this.hasher.hash(secret),
      scopes: JSON.stringify(canonicalScopes(input.scopes.filter(isScopeValue))),
      created_at: new Date(this.clock()).toISOString(),
      cluster_id: null,
      permissions: null,
      uuid: null,
    };
    await this.database.insertInto("clients").values(row).execute();
    this.cache.delete(clientId);
    return { client: toRecord(row), secret };
  }

  /**
   * Creates an organization client through the Administration API. Names are unique per organization: of concurrent
   * creations with one name exactly one succeeds (the unique index decides) and the others answer `name-taken`. The
   * returned secret is the only copy there will ever be.
   */
  async createOrganizationClient(input: NewOrganizationClient): Promise<NewOrganizationClientOutcome> {
    if (input.scopes.length === 0) throw invalidRequest("A client needs at least one scope.");
    const clientId = generateClientId();
    const secret = generateClientSecret();
    const row: ClientRow = {
      client_id: clientId,
      organization_id: input.organizationId,
      name: input.name,
      secret_hash: this.hasher.hash(secret),
      scopes: JSON.stringify(canonicalScopes(input.scopes)),
      created_at: new Date(this.clock()).toISOString(),
      cluster_id: null,
      permissions: null,
      uuid: null,
    };
    const inserted = await this.insertWithinBound(
      row,
      sql`organization_id = ${input.organizationId} AND cluster_id IS NULL`,
      input.maximumClientsPerOrganization,
      // Looked up in the statement, not in the cache: a client deleted a moment ago must not leave a successor.
      sql`EXISTS (SELECT 1 FROM clients WHERE client_id = ${input.callerClientId} AND organization_id = ${input.organizationId})`,
    );
    if (inserted === "name-taken") return { outcome: "name-taken" };
    if (inserted === "not-inserted") {
      const caller = await this.database
        .selectFrom("clients")
        .select("client_id")
        .where("client_id", "=", input.callerClientId)
        .executeTakeFirst();
      return { outcome: caller === undefined ? "caller-deleted" : "organization-full" };
    }
    return { outcome: "created", client: toRecord(row), secret };
  }

  /** The client with this id, or undefined. */
  async find(clientId: string): Promise<ClientRecord | undefined> {
    const row = await this.database
      .selectFrom("clients")
      .select(publicColumns)
      .where("client_id", "=", clientId)
      .executeTakeFirst();
    return row === undefined ? undefined : toRecord(row);
  }

  /** Every organization client (not the cluster API clients) of an organization, oldest first. */
  async list(organizationId: string): Promise<ClientRecord[]> {
    const rows = await this.database
      .selectFrom("clients")
      .select(publicColumns)
      .where("organization_id", "=", organizationId)
      .where("cluster_id", "is", null)
      .orderBy("created_at")
      .orderBy("client_id")
      .execute();
    return rows.map(toRecord);
  }

  /**
   * Creates a client of one cluster, whose tokens reach only that cluster's gateway. Names are unique per cluster:
   * of concurrent creations with one name exactly one succeeds (the unique index decides) and the others answer
   * `name-taken`. The returned secret is the only copy there will ever be.
   */
  async createClusterClient(input: NewClusterClient): Promise<NewClusterClientOutcome> {
    if (input.permissions.length === 0) throw invalidRequest("A cluster API client needs at least one permission.");
    const clientId = generateClientId();
    const secret = generateClientSecret();
    const row: ClientRow = {
      client_id: clientId,
      organization_id: input.organizationId,
      name: input.name,
      secret_hash: this.hasher.hash(secret),
      scopes: "[]",
      created_at: new Date(this.clock()).toISOString(),
      cluster_id: input.clusterId,
      permissions: JSON.stringify(canonicalPermissions(input.permissions)),
      uuid: randomUUID(),
    };
    const inserted = await this.insertWithinBound(
      row,
      sql`cluster_id = ${input.clusterId}`,
      input.maximumClientsPerCluster,
    );
    if (inserted !== "inserted") return { outcome: inserted === "not-inserted" ? "cluster-full" : "name-taken" };
    return { outcome: "created", client: toRecord(row), secret };
  }

  /**
   * Inserts `row` unless the clients `counted` selects number `maximum` already, or `required` (when given) does not
   * hold; a name the unique indexes hold already is `name-taken` (of concurrent inserts of one name, exactly one
   * succeeds). One statement checks and inserts, so the bound needs no read-then-write across awaits.
   */
  private async insertWithinBound(
    row: ClientRow,
    counted: RawBuilder<unknown>,
    maximum: number,
    required: RawBuilder<unknown> = sql`1 = 1`,
  ): Promise<"inserted" | "name-taken" | "not-inserted"> {
    let inserted: bigint | undefined;
    try {
      const result = await sql`
        INSERT INTO clients
          (client_id, organization_id, name, secret_hash, scopes, created_at, cluster_id, permissions, uuid)
        SELECT ${row.client_id}, ${row.organization_id}, ${row.name}, ${row.secret_hash}, ${row.scopes},
          ${row.created_at}, ${row.cluster_id}, ${row.permissions}, ${row.uuid}
        WHERE (SELECT COUNT(*) FROM clients WHERE ${counted}) < ${maximum} AND ${required}
      `.execute(this.database);
      inserted = result.numAffectedRows;
    } catch (error) {
      if (isConstraintViolation(error)) return "name-taken";
      throw error;
    }
    if (inserted === undefined || inserted === 0n) return "not-inserted";
    this.cache.delete(row.client_id);
    return "inserted";
  }

  /** The clients of one cluster of an organization, oldest first. */
  async listClusterClients(organizationId: string, clusterId: string): Promise<ClientRecord[]> {
    const rows = await this.database
      .selectFrom("clients")
      .select(publicColumns)
      .where("organization_id", "=", organizationId)
      .where("cluster_id", "=", clusterId)
      .orderBy("created_at")
      .orderBy("client_id")
      .execute();
    return rows.map(toRecord);
  }

  /**
   * Deletes a client of one cluster and records the revocation in the same transaction, so the cluster's gateway
   * learns of every deletion; answers whether the client existed. Revocations older than `pruneBeforeMs` (of every
   * cluster) are dropped on the way: no token they could refuse is still unexpired.
   */
  async deleteClusterClient(
    organizationId: string,
    clusterId: string,
    clientId: string,
    pruneBeforeMs: number,
  ): Promise<boolean> {
    const nowMs = this.clock();
    const deleted = await this.database.transaction().execute(async (transaction) => {
      const result = await transaction
        .deleteFrom("clients")
        .where("client_id", "=", clientId)
        .where("organization_id", "=", organizationId)
        .where("cluster_id", "=", clusterId)
        .executeTakeFirst();
      if (result.numDeletedRows === 0n) return false;
      await transaction
        .insertInto("revoked_cluster_clients")
        .values({
          client_id: clientId,
          organization_id: organizationId,
          cluster_id: clusterId,
          revoked_at: new Date(nowMs).toISOString(),
          revoked_at_ms: nowMs,
        })
        .execute();
      return true;
    });
    this.cache.delete(clientId);
    await this.database.deleteFrom("revoked_cluster_clients").where("revoked_at_ms", "<", pruneBeforeMs).execute();
    return deleted;
  }

  /** Deletes every client of a cluster that is itself being deleted; answers how many there were. */
  async deleteAllClusterClients(organizationId: string, clusterId: string): Promise<number> {
    const deleted = await this.database
      .deleteFrom("clients")
      .where("organization_id", "=", organizationId)
      .where("cluster_id", "=", clusterId)
      .returning("client_id")
      .execute();
    for (const row of deleted) this.cache.delete(row.client_id);
    return deleted.length;
  }

  /**
   * The clients whose tokens a cluster's gateway must refuse: the cluster's own clients and its organization's
   * clients deleted at or after `sinceMs`, newest deletion first, at most `limit` of them.
   */
  async revokedClientsOfCluster(
    organizationId: string,
    clusterId: string,
    sinceMs: number,
    limit: number,
  ): Promise<RevokedClusterClient[]> {
    const rows = await this.database
      .selectFrom("revoked_cluster_clients")
      .select(["client_id", "revoked_at", "revoked_at_ms"])
      .where("cluster_id", "=", clusterId)
      .where("revoked_at_ms", ">=", sinceMs)
      .unionAll(
        this.database
          .selectFrom("revoked_organization_clients")
          .select(["client_id", "revoked_at", "revoked_at_ms"])
          .where("organization_id", "=", organizationId)
          .where("revoked_at_ms", ">=", sinceMs),
      )
      .orderBy("revoked_at_ms", "desc")
      .orderBy("client_id")
      .limit(limit)
      .execute();
    return rows.map((row) => ({ clientId: row.client_id, revokedAt: row.revoked_at }));
  }

  /**
   * Deletes an organization client (cluster API clients go through `deleteClusterClient`) and records the revocation
   * in the same transaction, so every gateway of the organization learns of it. Revocations older than
   * `pruneBeforeMs` are dropped on the way: no token they could refuse is still unexpired. It is done on behalf of
   * `callerClientId`, a client of the same organization that must still exist, read in the same transaction rather
   * than from the cache. The transaction first takes the
   * organization's row for itself, so two clients deleting each other at once are served one after the other and
   * the second finds itself deleted: without that, both deletions went through and the organization was left with
   * no client able to manage it (found by a hostile test over two platform replicas, whose caches each still knew
   * the other client).
   */
  async deleteOrganizationClient(
    organizationId: string,
    clientId: string,
    callerClientId: string,
    pruneBeforeMs: number,
  ): Promise<OrganizationClientDeletion> {
    const nowMs = this.clock();
    const outcome = await this.database
      .transaction()
      .execute(async (transaction): Promise<OrganizationClientDeletion> => {
        await sql`UPDATE organizations SET name = name WHERE id = ${organizationId}`.execute(transaction);
        const caller = await transaction
          .selectFrom("clients")
          .select("client_id")
          .where("client_id", "=", callerClientId)
          .where("organization_id", "=", organizationId)
          .executeTakeFirst();
        if (caller === undefined) return "caller-deleted";
        const result = await transaction
          .deleteFrom("clients")
          .where("client_id", "=", clientId)
          .where("organization_id", "=", organizationId)
          .where("cluster_id", "is", null)
          .executeTakeFirst();
        if (result.numDeletedRows === 0n) return "not-found";
        await transaction
          .insertInto("revoked_organization_clients")
          .values({
            client_id: clientId,
            organization_id: organizationId,
            revoked_at: new Date(nowMs).toISOString(),
            revoked_at_ms: nowMs,
          })
          .execute();
        return "deleted";
      });
    this.cache.delete(clientId);
    await this.database.deleteFrom("revoked_organization_clients").where("revoked_at_ms", "<", pruneBeforeMs).execute();
    return outcome;
  }

  /**
   * Whether a client of this id exists, as `authenticate` last looked it up (at most `cacheTtlMs` ago): the platform
   * refuses the tokens of a client deleted since they were issued.
   */
  async exists(clientId: string): Promise<boolean> {
    return (await this.lookup(clientId)).found !== undefined;
  }

  /**
   * The client if `secret` is its secret, otherwise undefined — the same answer, after the same work, whether the
   * id is unknown or the secret wrong. Lookups are cached for `cacheTtlMs` to keep the hot path off the database;
   * unknown ids are cached as well, so a cache hit does not tell an existing id from a made-up one by its speed.
   */
  async authenticate(clientId: string, secret: string): Promise<ClientRecord | undefined> {
    const found = (await this.lookup(clientId)).found;
    return this.hasher.verify(secret, found?.secretHash) ? found?.record : undefined;
  }

  /** The client of this id and its secret's hash, from the cache while it is fresh, else from the database. */
  private async lookup(clientId: string): Promise<CachedClient> {
    const now = this.clock();
    const cached = this.cache.get(clientId);
    if (cached !== undefined && cached.expiresAtMs > now) return cached;
    const row = await this.database
      .selectFrom("clients")
      .selectAll()
      .where("client_id", "=", clientId)
      .executeTakeFirst();
    const fresh: CachedClient = {
      found: row === undefined ? undefined : { record: toRecord(row), secretHash: row.secret_hash },
      expiresAtMs: now + this.cacheTtlMs,
    };
    this.remember(clientId, fresh);
    return fresh;
  }

  private remember(clientId: string, entry: CachedClient): void {
    // Deleting first moves a refreshed entry to the end, so the first key is always the oldest.
    this.cache.delete(clientId);
    this.cache.set(clientId, entry);
    while (this.cache.size > this.cacheMaxEntries) {
      const oldest = this.cache.keys().next().value;
      if (oldest === undefined) break;
      this.cache.delete(oldest);
    }
  }
}
