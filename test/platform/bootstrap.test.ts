import { afterEach, describe, expect, it } from "vitest";
import { type BootstrapOptions, bootstrapOrganization } from "../../src/platform/bootstrap.js";
import { openStore, type Store } from "../../src/platform/store/database.js";
import { createTestDatabase, databaseKinds, type TestDatabase } from "../support/databases.js";

describe.each(databaseKinds)("organization bootstrap on %s", (kind) => {
  let testDatabase: TestDatabase;
  const stores: Store[] = [];

  async function open(): Promise<Store> {
    const store = await openStore({ url: testDatabase.url, dataDirectory: testDatabase.dataDirectory });
    stores.push(store);
    return store;
  }

  afterEach(async () => {
    for (const store of stores.splice(0)) await store.close();
    await testDatabase.drop();
  });

  function options(store: Store, preset: BootstrapOptions["presetClient"] = null): BootstrapOptions {
    return {
      organizationName: "Acme",
      ownerEmail: "Owner@Acme.test",
      presetClient: preset,
      async createAdministrationClient(organizationId, presetClient) {
        const clientId = presetClient?.clientId ?? `generated-${stores.indexOf(store)}`;
        await store.database
          .insertInto("clients")
          .values({
            client_id: clientId,
            organization_id: organizationId,
            name: "admin",
            secret_hash: "hash",
            scopes: "[]",
            created_at: new Date().toISOString(),
          })
          .execute();
        return { clientId, clientSecret: presetClient?.clientSecret ?? "generated-secret" };
      },
    };
  }

  it("creates one organization, its owner and a client on the first start only", async () => {
    testDatabase = await createTestDatabase(kind);
    const store = await open();
    const first = await bootstrapOrganization(store, options(store));
    expect(first.createdClient).toEqual({ clientId: "generated-0", clientSecret: "generated-secret" });
    const second = await bootstrapOrganization(store, options(store));
    expect(second).toEqual({ organizationId: first.organizationId, createdClient: null });
    expect(await store.database.selectFrom("organizations").selectAll().execute()).toHaveLength(1);
    const owner = await store.database.selectFrom("members").selectAll().executeTakeFirstOrThrow();
    expect(owner).toMatchObject({ email: "owner@acme.test", roles: '["owner"]', invite_pending: 0 });
  });

  it("never reports a preset client's secret back", async () => {
    testDatabase = await createTestDatabase(kind);
    const store = await open();
    const preset = { clientId: "ci-admin", clientSecret: "s".repeat(40) };
    const result = await bootstrapOrganization(store, options(store, preset));
    expect(result.createdClient).toBeNull();
    expect(await store.database.selectFrom("clients").select("client_id").execute()).toEqual([
      { client_id: "ci-admin" },
    ]);
  });

  it("creates the administration client on restart when an interrupted first start left none", async () => {
    testDatabase = await createTestDatabase(kind);
    const store = await open();
    const first = await bootstrapOrganization(store, options(store));
    await store.database.deleteFrom("clients").execute();
    const resumed = await bootstrapOrganization(store, options(store));
    expect(resumed.organizationId).toBe(first.organizationId);
    expect(resumed.createdClient).not.toBeNull();
  });

  // Several replicas share state only through PostgreSQL; an embedded SQLite file serves one platform process.
  it.runIf(kind === "postgres")("converges on one organization when several replicas start at once", async () => {
    testDatabase = await createTestDatabase(kind);
    const replicas = [await open(), await open(), await open()];
    const results = await Promise.all(replicas.map((store) => bootstrapOrganization(store, options(store))));
    expect(new Set(results.map((result) => result.organizationId)).size).toBe(1);
    expect(results.filter((result) => result.createdClient !== null)).toHaveLength(1);
    expect(await replicas[0]!.database.selectFrom("organizations").selectAll().execute()).toHaveLength(1);
  });
});
