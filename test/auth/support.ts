import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import {
  type CryptoKey,
  calculateJwkThumbprint,
  exportJWK,
  generateKeyPair,
  type JSONWebKeySet,
  type JWK,
  type JWTPayload,
  SignJWT,
} from "jose";

/** Issuer and audience the verifier tests use. */
export const testIssuer = "https://issuer.test";
export const testAudience = "admin-api";

/** A signing key pair as an issuer holds it: private key for signing, public JWK for the key set. */
export interface TestKey {
  keyId: string;
  algorithm: "RS256" | "ES256" | "RS384";
  privateKey: CryptoKey;
  publicKey: CryptoKey;
  publicJwk: JWK;
}

/** Generates a key pair whose `kid` is its thumbprint. */
export async function createTestKey(algorithm: TestKey["algorithm"] = "RS256"): Promise<TestKey> {
  const pair = await generateKeyPair(algorithm, { extractable: true });
  const jwk = await exportJWK(pair.publicKey);
  const keyId = await calculateJwkThumbprint(jwk);
  return {
    keyId,
    algorithm,
    privateKey: pair.privateKey,
    publicKey: pair.publicKey,
    publicJwk: { ...jwk, kid: keyId, alg: algorithm, use: "sig" },
  };
}

/** Claims of a valid token at `nowMs`, for tests to override. */
export function validClaims(nowMs: number, overrides: JWTPayload = {}): JWTPayload {
  const nowSeconds = Math.floor(nowMs / 1000);
  return {
    iss: testIssuer,
    sub: "client-1",
    azp: "client-1",
    aud: testAudience,
    iat: nowSeconds,
    exp: nowSeconds + 600,
    jti: "token-1",
    scope: "members cluster",
    org: "organization-1",
    ...overrides,
  };
}

/** Signs `claims` with `key` the way the issuer does. */
export async function signWith(key: TestKey, claims: JWTPayload): Promise<string> {
  return await new SignJWT(claims)
    .setProtectedHeader({ alg: key.algorithm, kid: key.keyId, typ: "JWT" })
    .sign(key.privateKey);
}

/** Base64url of a JSON value, as JWS segments are encoded. */
export function segment(value: unknown): string {
  return Buffer.from(JSON.stringify(value)).toString("base64url");
}

/** How a served key set answers: with the set, with a 503, or not at all (the request is held until `close`). */
export type KeySetAnswer = "keys" | "error" | "silence";

/** Serves a key set that the test may change, counting the fetches (every request, whatever it is answered). */
export async function serveKeySet(initial: JSONWebKeySet): Promise<{
  url: URL;
  fetches: () => number;
  replace(keySet: JSONWebKeySet): void;
  answerWith(answer: KeySetAnswer): void;
  close(): Promise<void>;
}> {
  let keySet = initial;
  let fetches = 0;
  let answer: KeySetAnswer = "keys";
  const server = createServer((_request, response) => {
    fetches += 1;
    if (answer === "silence") return;
    if (answer === "error") {
      response.writeHead(503, { "content-type": "text/plain" }).end("unavailable");
      return;
    }
    response.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(keySet));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: new URL(`http://127.0.0.1:${port}/.well-known/jwks.json`),
    fetches: () => fetches,
    replace: (next) => {
      keySet = next;
    },
    answerWith: (next) => {
      answer = next;
    },
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.closeAllConnections();
        server.close((error) => (error === undefined ? resolve() : reject(error)));
      }),
  };
}
