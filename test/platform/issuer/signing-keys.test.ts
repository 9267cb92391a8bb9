import { calculateJwkThumbprint, createLocalJWKSet, decodeProtectedHeader, jwtVerify } from "jose";
import { afterEach, describe, expect, it } from "vitest";
import { SigningKeyService, type SigningKeyServiceOptions } from "../../../src/platform/issuer/signing-keys.js";
import { databaseKinds } from "../../support/databases.js";
import { manualClock, openSecondHandle, openTestStore } from "./support.js";

const lifetimeSeconds = 3_600;
const refreshIntervalMs = 60_000;

describe.each(databaseKinds)("signing keys (%s)", (kind) => {
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });

  async function setup() {
    const opened = await openTestStore(kind);
    cleanups.push(() => opened.close());
    const clock = manualClock();
    const open = (overrides: Partial<SigningKeyServiceOptions> = {}) =>
      SigningKeyService.open({
        database: opened.store.database,
        secrets: opened.store.secrets,
        algorithm: "RS256",
        tokenLifetimeSeconds: lifetimeSeconds,
        clock: clock.now,
        refreshIntervalMs,
        ...overrides,
      });
    return { ...opened, clock, open };
  }

  async function verifies(token: string, keys: SigningKeyService): Promise<boolean> {
    try {
      await jwtVerify(token, createLocalJWKSet(await keys.publicKeySet()), { algorithms: ["RS256", "ES256"] });
      return true;
    } catch {
      return false;
    }
  }

  it("creates an RS256 key on first start, names it by its RFC 7638 thumbprint and keeps it across restarts", async () => {
    const { open } = await setup();
    const first = await open();
    const keySet = await first.publicKeySet();
    expect(keySet.keys).toHaveLength(1);
    const publicKey = keySet.keys[0]!;
    expect(publicKey).toMatchObject({ kty: "RSA", alg: "RS256", use: "sig", kid: first.currentKeyId });
    expect(publicKey).not.toHaveProperty("d");
    const { kid: _kid, alg: _alg, use: _use, ...bare } = publicKey;
    expect(await calculateJwkThumbprint(bare)).toBe(first.currentKeyId);
    expect(Buffer.from(String(publicKey.n), "base64url").length * 8).toBe(2048);

    const token = await first.sign({ sub: "client" });
    expect(decodeProtectedHeader(token)).toEqual({ alg: "RS256", kid: first.currentKeyId, typ: "JWT" });

    const restarted = await open();
    expect(restarted.currentKeyId).toBe(first.currentKeyId);
    expect(await verifies(await restarted.sign({ sub: "client" }), first)).toBe(true);
  });

  it("signs with ES256 when configured", async () => {
    const { open } = await setup();
    const keys = await open({ algorithm: "ES256" });
    const token = await keys.sign({ sub: "client" });
    expect(decodeProtectedHeader(token).alg).toBe("ES256");
    expect((await keys.publicKeySet()).keys[0]).toMatchObject({ kty: "EC", crv: "P-256", alg: "ES256" });
    expect(await verifies(token, keys)).toBe(true);
  });

  it.each(["RS256", "ES256"] as const)(
    "builds a compact JWS (%s) that jose verifies, with the claims unchanged and a fresh signature each time",
    async (algorithm) => {
      const { open } = await setup();
      const keys = await open({ algorithm });
      const claims = { iss: "https://issuer.test", sub: "client", aud: "admin-api", iat: 1, exp: 4_102_444_800 };
      const first = await keys.sign({ ...claims, jti: "first", scope: "members 🙂" });
      const second = await keys.sign({ ...claims, jti: "second", scope: "members 🙂" });
      const verified = await jwtVerify(first, createLocalJWKSet(await keys.publicKeySet()), {
        algorithms: [algorithm],
      });
      expect(verified.protectedHeader).toEqual({ alg: algorithm, kid: keys.currentKeyId, typ: "JWT" });
      expect(verified.payload).toEqual({ ...claims, jti: "first", scope: "members 🙂" });
      expect(await verifies(second, keys)).toBe(true);
      // The header is shared; payload and signature are not, so no token can be replayed as another.
      const [firstHeader, firstPayload, firstSignature] = first.split(".");
      const [secondHeader, secondPayload, secondSignature] = second.split(".");
      expect(secondHeader).toBe(firstHeader);
      expect(secondPayload).not.toBe(firstPayload);
      expect(secondSignature).not.toBe(firstSignature);
      // RFC 7518 §3.4: an ES256 signature is r || s, 64 bytes, not DER; an RS256 one is as long as the modulus.
      expect(Buffer.from(firstSignature ?? "", "base64url")).toHaveLength(algorithm === "ES256" ? 64 : 256);
      // A tampered payload must fail verification.
      const tampered = `${firstHeader}.${secondPayload}.${firstSignature}`;
      expect(await verifies(tampered, keys)).toBe(false);
    },
  );

  it("converges on one key when several replicas start at once, and no replica ever publishes a losing proposal", async () => {
    const { open, database, store } = await setup();
    const handles = await Promise.all([1, 2, 3].map(() => openSecondHandle(database)));
    for (const handle of handles) cleanups.push(() => handle.close());
    const services = await Promise.all([open(), ...handles.map((handle) => open({ database: handle.database }))]);
    const keyIds = new Set(services.map((service) => service.currentKeyId));
    expect(keyIds.size).toBe(1);
    // Each replica's set, as loaded at its start, holds only the winning key: a losing proposal was never visible.
    for (const service of services) {
      expect((await service.publicKeySet()).keys.map((key) => key.kid)).toEqual([...keyIds]);
    }
    const rows = await store.database.selectFrom("signing_keys").select("key_id").execute();
    expect(rows.map((row) => row.key_id)).toEqual([...keyIds]);
  });

  it("converges on one new key when several replicas rotate at once", async () => {
    const { open, database, store } = await setup();
    const handles = await Promise.all([1, 2].map(() => openSecondHandle(database)));
    for (const handle of handles) cleanups.push(() => handle.close());
    const services = [
      await open(),
      ...(await Promise.all(handles.map((handle) => open({ database: handle.database })))),
    ];
    const oldKeyId = services[0]!.currentKeyId;
    const rotated = await Promise.all(services.map((service) => service.rotate()));
    expect(new Set(rotated).size).toBe(1);
    expect(rotated[0]).not.toBe(oldKeyId);
    for (const service of services) {
      expect((await service.publicKeySet()).keys.map((key) => key.kid)).toEqual([rotated[0], oldKeyId]);
    }
    expect(await store.database.selectFrom("signing_keys").select("key_id").execute()).toHaveLength(2);
  });

  it("rotates: the new key signs, the old one stays published until its tokens have expired", async () => {
    const { open, clock } = await setup();
    const keys = await open();
    const oldKeyId = keys.currentKeyId;
    const oldToken = await keys.sign({ sub: "client" });
    const newKeyId = await keys.rotate();
    expect(newKeyId).not.toBe(oldKeyId);
    expect(decodeProtectedHeader(await keys.sign({ sub: "client" })).kid).toBe(newKeyId);
    expect((await keys.publicKeySet()).keys.map((key) => key.kid)).toEqual([newKeyId, oldKeyId]);
    expect(await verifies(oldToken, keys)).toBe(true);

    // Published for the token lifetime plus one refresh interval (replicas may sign with it until they re-read).
    clock.advance(lifetimeSeconds * 1000 + refreshIntervalMs - 1);
    await keys.refresh();
    expect((await keys.publicKeySet()).keys.map((key) => key.kid)).toEqual([newKeyId, oldKeyId]);
    clock.advance(2);
    await keys.refresh();
    expect((await keys.publicKeySet()).keys.map((key) => key.kid)).toEqual([newKeyId]);

    const restarted = await open();
    expect(restarted.currentKeyId).toBe(newKeyId);
  });

  it("lets another replica adopt a rotation when it next re-reads the keys", async () => {
    const { open, database, clock } = await setup();
    const handle = await openSecondHandle(database);
    cleanups.push(() => handle.close());
    const first = await open();
    const replica = await open({ database: handle.database });
    const rotated = await first.rotate();
    expect(replica.currentKeyId).not.toBe(rotated);
    clock.advance(refreshIntervalMs);
    expect(decodeProtectedHeader(await replica.sign({ sub: "client" })).kid).toBe(rotated);
    expect(replica.currentKeyId).toBe(rotated);
  });

  it("rotates to the configured algorithm when it changed since the key was made", async () => {
    const { open } = await setup();
    const rsa = await open();
    const ec = await open({ algorithm: "ES256" });
    expect(ec.currentKeyId).not.toBe(rsa.currentKeyId);
    expect(decodeProtectedHeader(await ec.sign({ sub: "client" })).alg).toBe("ES256");
    expect((await ec.publicKeySet()).keys.map((key) => key.kid)).toEqual([ec.currentKeyId, rsa.currentKeyId]);
  });
});
