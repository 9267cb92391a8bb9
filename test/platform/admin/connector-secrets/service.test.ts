import { randomUUID } from "node:crypto";
import { afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { ConnectorSecretService } from "../../../../src/platform/admin/connector-secrets/service.js";
import { openStore, type Store } from "../../../../src/platform/store/database.js";
import { isSealed, SealedValueError } from "../../../../src/platform/store/secrets-box.js";
import {
  createTestDatabase,
  databaseKinds,
  reportSkippedPostgres,
  type TestDatabase,
} from "../../../support/databases.js";
import { clusterDirectoryOf } from "./support.js";

beforeAll(() => reportSkippedPostgres());

describe.each(databaseKinds)("ConnectorSecretService on %s", (kind) => {
  let testDatabase: TestDatabase;
  let store: Store;
  let secrets: ConnectorSecretService;
  const organizationId = randomUUID();
  const otherOrganizationId = randomUUID();
  const clusterId = randomUUID();
  const otherClusterId = randomUUID();
  const foreignClusterId = randomUUID();

  beforeEach(async () => {
    testDatabase = await createTestDatabase(kind);
    store = await openStore({ url: testDatabase.url, dataDirectory: testDatabase.dataDirectory });
    const timestamp = new Date(0).toISOString();
    await store.database
      .insertInto("organizations")
      .values([
        { id: organizationId, name: "one", created_at: timestamp },
        { id: otherOrganizationId, name: "two", created_at: timestamp },
      ])
      .execute();
    secrets = new ConnectorSecretService({
      database: store.database,
      secrets: store.secrets,
      clusters: clusterDirectoryOf({
        [clusterId]: organizationId,
        [otherClusterId]: organizationId,
        [foreignClusterId]: otherOrganizationId,
      }),
      limits: { valueMaxBytes: 16, secretsPerCluster: 3, clusterValuesMaxBytes: 40 },
    });
  });

  afterEach(async () => {
    await store.close();
    await testDatabase.drop();
  });

  async function storedValues(): Promise<{ cluster_id: string; name: string; value: string }[]> {
    return await store.database.selectFrom("connector_secrets").select(["cluster_id", "name", "value"]).execute();
  }

  it("creates, lists in name order, replaces and deletes secrets, keeping clusters apart", async () => {
    await secrets.create(organizationId, clusterId, "b_TOKEN", "beta");
    await secrets.create(organizationId, clusterId, "A_KEY", "alpha");
    await secrets.create(organizationId, otherClusterId, "A_KEY", "other");
    expect(await secrets.list(organizationId, clusterId)).toEqual({ A_KEY: "alpha", b_TOKEN: "beta" });
    expect(Object.keys(await secrets.list(organizationId, clusterId))).toEqual(["A_KEY", "b_TOKEN"]);

    await secrets.update(organizationId, clusterId, "A_KEY", "gamma ünïcode");
    expect(await secrets.list(organizationId, clusterId)).toEqual({ A_KEY: "gamma ünïcode", b_TOKEN: "beta" });
    await secrets.remove(organizationId, clusterId, "b_TOKEN");
    expect(await secrets.list(organizationId, clusterId)).toEqual({ A_KEY: "gamma ünïcode" });
    expect(await secrets.list(organizationId, otherClusterId)).toEqual({ A_KEY: "other" });
  });

  it("stores only sealed values, none containing the plain value", async () => {
    await secrets.create(organizationId, clusterId, "PASSWORD", "hunter2-plain");
    const [row] = await storedValues();
    expect(row !== undefined && isSealed(row.value)).toBe(true);
    expect(row?.value).not.toContain("hunter2-plain");
    expect(row?.value).not.toContain(Buffer.from("hunter2-plain").toString("base64"));
  });

  it("answers 409 for an existing name, and 409 naming the limit once the cluster is full", async () => {
    await secrets.create(organizationId, clusterId, "ONE", "1");
    await expect(secrets.create(organizationId, clusterId, "ONE", "again")).rejects.toMatchObject({
      kind: "conflict",
      message: expect.stringContaining("already has a secret named 'ONE'"),
    });
    expect(await secrets.list(organizationId, clusterId)).toEqual({ ONE: "1" });
    await secrets.create(organizationId, clusterId, "TWO", "2");
    await secrets.create(organizationId, clusterId, "THREE", "3");
    await expect(secrets.create(organizationId, clusterId, "FOUR", "4")).rejects.toMatchObject({
      kind: "conflict",
      message: expect.stringContaining("holds 3 secrets, the most a cluster may hold"),
    });
    // The limit is per cluster.
    await secrets.create(organizationId, otherClusterId, "FOUR", "4");
  });

  it("answers 409 naming the limit when a cluster's values would hold more bytes than allowed", async () => {
    await secrets.create(organizationId, clusterId, "A", "a".repeat(16));
    await secrets.create(organizationId, clusterId, "B", "b".repeat(16));
    await expect(secrets.create(organizationId, clusterId, "C", "c".repeat(9))).rejects.toMatchObject({
      kind: "conflict",
      message: expect.stringContaining("more than 40 bytes"),
    });
    // Exactly at the limit, counted in bytes of UTF-8: four two-byte characters.
    await secrets.create(organizationId, clusterId, "C", "éééé");
    await expect(secrets.update(organizationId, clusterId, "C", "ééééé")).rejects.toMatchObject({
      kind: "conflict",
      message: expect.stringContaining("more than 40 bytes"),
    });
    // Replacing a value frees its own bytes; a shorter one frees room for others.
    await secrets.update(organizationId, clusterId, "A", "A".repeat(16));
    await secrets.update(organizationId, clusterId, "A", "short");
    await secrets.update(organizationId, clusterId, "C", "c".repeat(16));
    await expect(secrets.update(organizationId, clusterId, "MISSING", "x")).rejects.toMatchObject({ kind: "notFound" });
    // The limit is per cluster, and deleting gives the bytes back.
    await secrets.create(organizationId, otherClusterId, "A", "a".repeat(16));
    await secrets.remove(organizationId, clusterId, "B");
    await secrets.create(organizationId, clusterId, "D", "d".repeat(16));
    expect(await secrets.list(organizationId, clusterId)).toEqual({
      A: "short",
      C: "c".repeat(16),
      D: "d".repeat(16),
    });
  });

  it("lets exactly one of concurrent creations of one name succeed", async () => {
    const attempts = await Promise.allSettled(
      Array.from({ length: 6 }, (_, index) => secrets.create(organizationId, clusterId, "RACED", `value ${index}`)),
    );
    expect(attempts.filter((attempt) => attempt.status === "fulfilled")).toHaveLength(1);
    for (const attempt of attempts) {
      if (attempt.status === "rejected") expect(attempt.reason).toMatchObject({ kind: "conflict" });
    }
    expect(Object.keys(await secrets.list(organizationId, clusterId))).toEqual(["RACED"]);
  });

  it("refuses bad names, empty values and values over the byte limit (counted in UTF-8)", async () => {
    for (const name of ["", "has-dash", "x".repeat(50), "spa ce", "ünï"]) {
      await expect(secrets.create(organizationId, clusterId, name, "v")).rejects.toMatchObject({
        kind: "invalidRequest",
      });
    }
    await secrets.create(organizationId, clusterId, "x".repeat(49), "v");
    await expect(secrets.create(organizationId, clusterId, "EMPTY", "")).rejects.toMatchObject({
      kind: "invalidRequest",
    });
    // A lone surrogate (valid in JSON text) has no UTF-8 form: stored, it would come back another secret.
    await expect(secrets.create(organizationId, clusterId, "LONE", "abc\ud800def")).rejects.toMatchObject({
      kind: "invalidRequest",
      message: expect.stringContaining("lone surrogate"),
    });
    await secrets.create(organizationId, clusterId, "PAIRED", "abc\ud83d\ude00def");
    await secrets.create(organizationId, clusterId, "SIXTEEN", "a".repeat(16));
    // Eight characters of two bytes each fit; nine do not.
    await secrets.update(organizationId, clusterId, "SIXTEEN", "é".repeat(8));
    await expect(secrets.update(organizationId, clusterId, "SIXTEEN", "é".repeat(9))).rejects.toMatchObject({
      kind: "invalidRequest",
      message: expect.stringContaining("18 bytes"),
    });
  });

  it("answers 404 for another organization's cluster, an unknown cluster and an absent secret", async () => {
    await secrets.create(otherOrganizationId, foreignClusterId, "THEIRS", "x");
    await expect(secrets.list(organizationId, foreignClusterId)).rejects.toMatchObject({ kind: "notFound" });
    await expect(secrets.create(organizationId, foreignClusterId, "MINE", "x")).rejects.toMatchObject({
      kind: "notFound",
    });
    await expect(secrets.update(organizationId, foreignClusterId, "THEIRS", "y")).rejects.toMatchObject({
      kind: "notFound",
    });
    await expect(secrets.remove(organizationId, foreignClusterId, "THEIRS")).rejects.toMatchObject({
      kind: "notFound",
    });
    await expect(secrets.list(organizationId, randomUUID())).rejects.toMatchObject({ kind: "notFound" });
    await expect(secrets.update(organizationId, clusterId, "ABSENT", "y")).rejects.toMatchObject({
      kind: "notFound",
    });
    await expect(secrets.remove(organizationId, clusterId, "ABSENT")).rejects.toMatchObject({ kind: "notFound" });
    expect(await secrets.list(otherOrganizationId, foreignClusterId)).toEqual({ THEIRS: "x" });
  });

  it("keeps a name that is also an object property of JavaScript as a plain entry", async () => {
    await secrets.create(organizationId, clusterId, "__proto__", "not a prototype");
    await secrets.create(organizationId, clusterId, "constructor", "c");
    const list = await secrets.list(organizationId, clusterId);
    expect(Object.getPrototypeOf(list)).toBe(Object.prototype);
    expect(Object.entries(list)).toEqual([
      ["__proto__", "not a prototype"],
      ["constructor", "c"],
    ]);
  });

  it("deletes every secret of a deleted cluster and nothing else", async () => {
    await secrets.create(organizationId, clusterId, "A", "1");
    await secrets.create(organizationId, clusterId, "B", "2");
    await secrets.create(organizationId, otherClusterId, "A", "3");
    expect(await secrets.deleteAllOf(clusterId)).toBe(2);
    expect(await secrets.list(organizationId, clusterId)).toEqual({});
    expect(await secrets.list(organizationId, otherClusterId)).toEqual({ A: "3" });
  });

  it("fails with SealedValueError, never garbage, when a stored value was altered or moved to another row", async () => {
    await secrets.create(organizationId, clusterId, "ALTERED", "original");
    const [row] = await storedValues();
    if (row === undefined) throw new Error("the secret was not stored");
    // Flip one character of the ciphertext (the payload's last character is part of the GCM tag).
    const payloadStart = row.value.lastIndexOf(":") + 1;
    const flipped = row.value[payloadStart + 20] === "A" ? "B" : "A";
    const altered = `${row.value.slice(0, payloadStart + 20)}${flipped}${row.value.slice(payloadStart + 21)}`;
    await store.database
      .updateTable("connector_secrets")
      .set({ value: altered })
      .where("name", "=", "ALTERED")
      .execute();
    const failure = await secrets.list(organizationId, clusterId).catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(SealedValueError);
    expect((failure as SealedValueError).problem).toBe("damaged");
    expect((failure as Error).message).not.toContain("original");

    // A value sealed for another secret does not open under this one's name.
    await secrets.deleteAllOf(clusterId);
    await secrets.create(organizationId, clusterId, "SOURCE", "moved value");
    await secrets.create(organizationId, otherClusterId, "TARGET", "kept");
    const source = (await storedValues()).find((stored) => stored.name === "SOURCE");
    await store.database
      .updateTable("connector_secrets")
      .set({ value: source?.value ?? "" })
      .where("name", "=", "TARGET")
      .execute();
    await expect(secrets.list(organizationId, otherClusterId)).rejects.toMatchObject({ problem: "damaged" });
  });
});
