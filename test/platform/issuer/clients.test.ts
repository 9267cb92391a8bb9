import { sql } from "kysely";
import { afterEach, describe, expect, it } from "vitest";
import { ServiceError } from "../../../src/http/errors.js";
import { ClientSecretHasher } from "../../../src/platform/issuer/client-secrets.js";
import { ClientService } from "../../../src/platform/issuer/clients.js";
import type { Store } from "../../../src/platform/store/database.js";
import { databaseKinds } from "../../support/databases.js";
import { manualClock, openSecondHandle, openTestStore } from "./support.js";

/** Every value of every column of every platform table, as text. */
async function everyStoredValue(store: Store): Promise<string[]> {
  const tables = ["organizations", "members", "clients", "signing_keys", "rate_limits", "client_failures", "settings"];
  const values: string[] = [];
  for (const table of tables) {
    const rows = await sql<Record<string, unknown>>`SELECT * FROM ${sql.table(table)}`.execute(store.database);
    for (const row of rows.rows) values.push(...Object.values(row).map((value) => String(value)));
  }
  return values;
}

describe.each(databaseKinds)("client service (%s)", (kind) => {
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });

  async function service(cacheTtlMs?: number) {
    const opened = await openTestStore(kind);
    cleanups.push(() => opened.close());
    const clock = manualClock();
    const hasher = await ClientSecretHasher.open(opened.store.database, opened.store.secrets);
    const clients = new ClientService({
      database: opened.store.database,
      hasher,
      clock: clock.now,
      ...(cacheTtlMs === undefined ? {} : { cacheTtlMs }),
    });
    return { ...opened, clients, clock, hasher };
  }

  it("returns the secret once and never again: not in any table, not in find or list", async () => {
    const { clients, store, organizationId } = await service();
    const { client, secret } = await clients.create({
      organizationId,
      name: "ci",
      scopes: ["members", "cluster", "modeler:read"],
    });
    expect(client.scopes).toEqual(["cluster", "modeler:read", "members"]);
    expect(secret.length).toBeGreaterThanOrEqual(43);

    for (const value of await everyStoredValue(store)) expect(value).not.toContain(secret);
    const found = await clients.find(client.clientId);
    const listed = await clients.list(organizationId);
    expect(found).toEqual(client);
    expect(listed).toEqual([client]);
    for (const exposed of [JSON.stringify(found), JSON.stringify(listed), JSON.stringify(client)]) {
      expect(exposed).not.toContain(secret);
      expect(exposed).not.toMatch(/secret|hash/i);
    }
    expect(await clients.authenticate(client.clientId, secret)).toEqual(client);
  });

  it("authenticates only the right secret, with the same answer for an unknown id", async () => {
    const { clients, organizationId } = await service();
    const { client, secret } = await clients.create({ organizationId, name: "a", scopes: ["members"] });
    expect(await clients.authenticate(client.clientId, `${secret}x`)).toBeUndefined();
    expect(await clients.authenticate("no-such-client", secret)).toBeUndefined();
    expect(await clients.authenticate(client.clientId, secret)).toEqual(client);
  });

  it("accepts a preset id and secret (bootstrap) and refuses unknown scopes, no scope, short secrets", async () => {
    const { clients, organizationId } = await service();
    const secret = "preset-secret-of-at-least-32-characters";
    const { client } = await clients.create({
      organizationId,
      name: "boot",
      scopes: ["members"],
      clientId: "boot",
      secret,
    });
    expect(client.clientId).toBe("boot");
    expect(await clients.authenticate("boot", secret)).toEqual(client);
    const attempts = [
      clients.create({ organizationId, name: "x", scopes: ["root"] }),
      clients.create({ organizationId, name: "x", scopes: [] }),
      clients.create({ organizationId, name: "x", scopes: ["members"], secret: "short" }),
      clients.create({ organizationId, name: "x", scopes: ["members"], clientId: "with:colon" }),
    ];
    for (const attempt of attempts) await expect(attempt).rejects.toBeInstanceOf(ServiceError);
  });

  it("deletes a client; another replica's cached record keeps working for at most the cache lifetime", async () => {
    const { clients, organizationId, database, hasher, clock } = await service(5_000);
    const second = await openSecondHandle(database);
    cleanups.push(() => second.close());
    const replica = new ClientService({ database: second.database, hasher, clock: clock.now, cacheTtlMs: 5_000 });
    const { client, secret } = await clients.create({ organizationId, name: "a", scopes: ["members"] });
    const { client: caller } = await clients.create({ organizationId, name: "caller", scopes: ["members"] });
    expect(await replica.authenticate(client.clientId, secret)).toEqual(client);

    expect(await clients.deleteOrganizationClient(organizationId, client.clientId, caller.clientId, 0)).toBe("deleted");
    expect(await clients.deleteOrganizationClient(organizationId, client.clientId, caller.clientId, 0)).toBe(
      "not-found",
    );
    expect(await clients.find(client.clientId)).toBeUndefined();
    expect(await clients.authenticate(client.clientId, secret)).toBeUndefined();

    clock.advance(4_999);
    expect(await replica.authenticate(client.clientId, secret)).toEqual(client);
    clock.advance(1);
    expect(await replica.authenticate(client.clientId, secret)).toBeUndefined();
  });

  it("caches unknown ids too, so a new client reaches a replica that was just asked for it within the cache lifetime", async () => {
    const { clients, organizationId, database, hasher, clock } = await service(5_000);
    const second = await openSecondHandle(database);
    cleanups.push(() => second.close());
    const replica = new ClientService({ database: second.database, hasher, clock: clock.now, cacheTtlMs: 5_000 });
    const secret = "preset-secret-of-at-least-32-characters";
    expect(await replica.authenticate("preset", secret)).toBeUndefined();
    const { client } = await clients.create({
      organizationId,
      name: "p",
      scopes: ["members"],
      clientId: "preset",
      secret,
    });
    expect(await clients.authenticate("preset", secret)).toEqual(client);
    expect(await replica.authenticate("preset", secret)).toBeUndefined();
    clock.advance(5_000);
    expect(await replica.authenticate("preset", secret)).toEqual(client);
  });

  it("creates organization clients with unique names up to a bound, the concurrent one of a name answered name-taken", async () => {
    const { clients, organizationId } = await service();
    const { client: caller } = await clients.create({ organizationId, name: "caller", scopes: ["members"] });
    const attempts = await Promise.all(
      [1, 2, 3].map(() =>
        clients.createOrganizationClient({
          organizationId,
          callerClientId: caller.clientId,
          name: "ci",
          scopes: ["modeler:read"],
          maximumClientsPerOrganization: 10,
        }),
      ),
    );
    expect(attempts.map((attempt) => attempt.outcome).sort()).toEqual(["created", "name-taken", "name-taken"]);
    // A cluster client may share the name: cluster clients are named per cluster.
    expect(
      (
        await clients.createClusterClient({
          organizationId,
          clusterId: "cluster-a",
          name: "ci",
          permissions: ["gateway"],
          maximumClientsPerCluster: 10,
        })
      ).outcome,
    ).toBe("created");
    // The bound counts the organization's clients (the caller and the one above), not the clients of its clusters.
    const full = await clients.createOrganizationClient({
      organizationId,
      callerClientId: caller.clientId,
      name: "second",
      scopes: ["members"],
      maximumClientsPerOrganization: 2,
    });
    expect(full.outcome).toBe("organization-full");
  });

  it("records a deleted organization client as revoked for every cluster of its organization, with the cluster's own", async () => {
    const { clients, organizationId, clock } = await service();
    const { client: caller } = await clients.create({ organizationId, name: "caller", scopes: ["members"] });
    const created = await clients.createOrganizationClient({
      organizationId,
      callerClientId: caller.clientId,
      name: "ci",
      scopes: ["cluster"],
      maximumClientsPerOrganization: 10,
    });
    const clusterClient = await clients.createClusterClient({
      organizationId,
      clusterId: "cluster-a",
      name: "worker",
      permissions: ["gateway"],
      maximumClientsPerCluster: 10,
    });
    if (created.outcome !== "created" || clusterClient.outcome !== "created") throw new Error("not created");
    expect(await clients.exists(created.client.clientId)).toBe(true);
    await clients.deleteClusterClient(organizationId, "cluster-a", clusterClient.client.clientId, 0);
    clock.advance(1_000);
    expect(await clients.deleteOrganizationClient(organizationId, created.client.clientId, caller.clientId, 0)).toBe(
      "deleted",
    );
    expect(await clients.exists(created.client.clientId)).toBe(false);
    const revokedAt = (offsetMs: number) => new Date(clock.now() - offsetMs).toISOString();
    // Newest first: the organization client, then the cluster's own.
    expect(await clients.revokedClientsOfCluster(organizationId, "cluster-a", 0, 10)).toEqual([
      { clientId: created.client.clientId, revokedAt: revokedAt(0) },
      { clientId: clusterClient.client.clientId, revokedAt: revokedAt(1_000) },
    ]);
    expect(await clients.revokedClientsOfCluster(organizationId, "cluster-b", 0, 10)).toEqual([
      { clientId: created.client.clientId, revokedAt: revokedAt(0) },
    ]);
    expect(await clients.revokedClientsOfCluster("other", "cluster-c", 0, 10)).toEqual([]);
    expect(await clients.revokedClientsOfCluster(organizationId, "cluster-a", clock.now() - 500, 10)).toHaveLength(1);
    // A later deletion drops revocations older than its bound.
    const later = await clients.createOrganizationClient({
      organizationId,
      callerClientId: caller.clientId,
      name: "later",
      scopes: ["cluster"],
      maximumClientsPerOrganization: 10,
    });
    if (later.outcome !== "created") throw new Error("not created");
    clock.advance(1_000);
    await clients.deleteOrganizationClient(organizationId, later.client.clientId, caller.clientId, clock.now() - 500);
    expect(
      (await clients.revokedClientsOfCluster(organizationId, "cluster-b", 0, 10)).map((entry) => entry.clientId),
    ).toEqual([later.client.clientId]);
  });

  it("deletes an organization client only for a caller that still exists, so two deleting each other leave one", async () => {
    const { clients, organizationId } = await service();
    const administrators = [];
    for (const name of ["a", "b", "c", "d"]) {
      administrators.push((await clients.create({ organizationId, name, scopes: ["members"] })).client.clientId);
    }
    const [a, b, c, d] = administrators as [string, string, string, string];
    // One after the other: the second finds its own client gone.
    expect(await clients.deleteOrganizationClient(organizationId, b, a, 0)).toBe("deleted");
    expect(await clients.deleteOrganizationClient(organizationId, a, b, 0)).toBe("caller-deleted");
    expect(await clients.deleteOrganizationClient(organizationId, b, a, 0)).toBe("not-found");
    // At once: served one after the other all the same.
    const outcomes = await Promise.all([
      clients.deleteOrganizationClient(organizationId, d, c, 0),
      clients.deleteOrganizationClient(organizationId, c, d, 0),
    ]);
    expect([...outcomes].sort()).toEqual(["caller-deleted", "deleted"]);
    const remaining = (await clients.list(organizationId)).map((client) => client.clientId);
    expect(remaining).toHaveLength(2);
    expect(remaining).toContain(a);
    expect([c, d].filter((id) => remaining.includes(id))).toHaveLength(1);
    // Nor does a deleted caller leave a successor.
    const successor = await clients.createOrganizationClient({
      organizationId,
      callerClientId: b,
      name: "successor",
      scopes: ["members"],
      maximumClientsPerOrganization: 10,
    });
    expect(successor.outcome).toBe("caller-deleted");
  });

  it("lists only the organization's clients", async () => {
    const { clients, organizationId, store } = await service();
    await store.database
      .insertInto("organizations")
      .values({ id: "other", name: "Other", created_at: new Date(0).toISOString() })
      .execute();
    const { client } = await clients.create({ organizationId, name: "mine", scopes: ["members"] });
    const { client: theirs } = await clients.create({ organizationId: "other", name: "theirs", scopes: ["members"] });
    expect((await clients.list(organizationId)).map((entry) => entry.clientId)).toEqual([client.clientId]);
    // Another organization's client cannot delete this one's, nor be deleted through it.
    expect(await clients.deleteOrganizationClient("other", client.clientId, theirs.clientId, 0)).toBe("not-found");
    expect(await clients.deleteOrganizationClient(organizationId, client.clientId, theirs.clientId, 0)).toBe(
      "caller-deleted",
    );
  });
});
