import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Type } from "typebox";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { AdminClient } from "../../src/client/admin.js";
import { ApiTransport, pathSegment } from "../../src/client/api.js";
import { ClusterManagementClient } from "../../src/client/cluster.js";
import { ApiError, ClientConnectionError } from "../../src/client/errors.js";
import { ModelerClient } from "../../src/client/modeler.js";
import { secretDigest, TokenCacheFile } from "../../src/client/token-cache.js";
import { TokenProvider } from "../../src/client/token-provider.js";
import { startTestPlatform, type TestPlatform } from "../support/platform.js";
import { countingDispatcher, manualClock, scriptedServer, sendJson, unsignedJwt } from "./support.js";

/** The clients whose requests a test sends. */
interface Clients {
  modeler: ModelerClient;
  cluster: ClusterManagementClient;
  admin: AdminClient;
}

let platform: TestPlatform;
let temporaryDirectory: string;

beforeAll(async () => {
  platform = await startTestPlatform();
  temporaryDirectory = await mkdtemp(join(tmpdir(), "flowplane-api-transport-"));
});

afterAll(async () => {
  await platform?.close();
  if (temporaryDirectory !== undefined) await rm(temporaryDirectory, { recursive: true, force: true });
});

/** A token endpoint and an API on one scripted server: token requests get a token, the rest follow `answers`. */
async function scriptedApi(answers: Parameters<typeof scriptedServer>[0]) {
  let apiRequests = 0;
  const server = await scriptedServer([
    (request, response) => {
      if (request.url === "/oauth/token") {
        sendJson(response, 200, { access_token: unsignedJwt(Math.floor(Date.now() / 1000), 3600), expires_in: 3600 });
        return;
      }
      const answer = answers[Math.min(apiRequests, answers.length - 1)];
      apiRequests++;
      answer?.(request, response);
    },
  ]);
  const tokenProvider = new TokenProvider({
    credentials: { oauthUrl: `${server.url}/oauth/token`, clientId: "client", clientSecret: "secret" },
  });
  return { server, tokenProvider, apiRequests: () => apiRequests };
}

describe("ApiTransport", () => {
  it("replaces a cached token the API refuses and retries once", async () => {
    const cacheFile = join(temporaryDirectory, "tokens.json");
    const oauthUrl = `${platform.url}/oauth/token`;
    const nowMs = Date.now();
    await new TokenCacheFile(cacheFile).write(
      {
        oauthUrl,
        clientId: platform.adminClient.clientId,
        secretDigest: secretDigest(platform.adminClient.clientSecret),
        audience: "admin-api",
        scope: "",
      },
      {
        accessToken: "a.refused.token",
        tokenType: "Bearer",
        scope: "members",
        audience: "admin-api",
        issuedAtMs: nowMs,
        expiresAtMs: nowMs + 3_600_000,
        refreshAtMs: nowMs + 3_000_000,
      },
      nowMs,
    );
    const counter = countingDispatcher();
    const transport = new ApiTransport(
      {
        baseUrl: `${platform.url}/admin`,
        tokenProvider: new TokenProvider({ credentials: { oauthUrl, ...platform.adminClient }, cacheFile }),
        http: { dispatcher: counter.dispatcher },
      },
      "admin-api",
    );
    const response = await transport.send("GET", "/members");
    expect(response.status).toBe(200);
    // The refused call and the successful one; the token request goes through the provider's own transport.
    expect(counter.count()).toBe(2);
    await counter.close();
  });

  it("turns an answer without a problem document into an ApiError naming the URL and status", async () => {
    const api = await scriptedApi([
      (_request, response) => {
        response.writeHead(502, { "content-type": "text/plain" });
        response.end("bad gateway");
      },
    ]);
    const transport = new ApiTransport(
      { baseUrl: `${api.server.url}/admin`, tokenProvider: api.tokenProvider },
      "admin-api",
    );
    const error = await transport.send("GET", "/members").catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(ApiError);
    expect(error).toMatchObject({ status: 502, type: "about:blank" });
    expect((error as ApiError).detail).toContain(`${api.server.url}/admin/members answered HTTP 502: bad gateway`);
    await api.server.close();
  });

  it("fails on a 3xx, naming where the server redirected, and does not follow it", async () => {
    const other = await scriptedServer([(_request, response) => sendJson(response, 204, {})]);
    const api = await scriptedApi([
      (_request, response) => {
        response.writeHead(301, { location: `${other.url}/admin/clusters/c9` });
        response.end();
      },
      (_request, response) => {
        response.writeHead(304);
        response.end();
      },
    ]);
    const transport = new ApiTransport(
      { baseUrl: `${api.server.url}/admin`, tokenProvider: api.tokenProvider },
      "admin-api",
    );
    const error = await transport.send("DELETE", "/clusters/c9").catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(ApiError);
    expect(error).toMatchObject({ status: 301 });
    expect((error as ApiError).message).toContain(`the server redirected to ${other.url}/admin/clusters/c9`);
    expect((error as ApiError).message).toContain("point the URL setting there");
    const notModified = await transport.send("GET", "/clusters").catch((caught: unknown) => caught);
    expect(notModified).toMatchObject({ status: 304 });
    expect(other.requests()).toBe(0);
    await Promise.all([api.server.close(), other.close()]);
  });

  it("honours Retry-After on 503 from an API", async () => {
    const api = await scriptedApi([
      (_request, response) => sendJson(response, 503, {}, { "retry-after": "2" }),
      (_request, response) => sendJson(response, 200, []),
    ]);
    const clock = manualClock(Date.now());
    const transport = new ApiTransport(
      { baseUrl: `${api.server.url}/admin`, tokenProvider: api.tokenProvider, http: { clock } },
      "admin-api",
    );
    expect(await transport.sendForJson("GET", "/members", Type.Array(Type.Unknown()))).toEqual([]);
    expect(clock.sleeps).toEqual([2000]);
    expect(api.apiRequests()).toBe(2);
    await api.server.close();
  });

  it("sends a search or a dry run again after any 503, and a change only after a 503 that proves it undone", async () => {
    const unavailable = { type: "urn:flowplane:problem:unavailable", title: "Unavailable", status: 503, detail: "x" };
    const page = { items: [], total: 0 };
    const plan = { changeId: 7, currentTopology: [], plannedChanges: [], expectedTopology: [] };
    const cases = [
      { send: (client: Clients) => client.modeler.searchFiles({}), body: page, attempts: 2 },
      { send: (client: Clients) => client.cluster.scaleBrokers([0, 1], { dryRun: true }), body: plan, attempts: 2 },
      { send: (client: Clients) => client.cluster.patch({}, { dryRun: true }), body: plan, attempts: 2 },
      { send: (client: Clients) => client.admin.scaleCluster("c1", {}, { dryRun: true }), body: plan, attempts: 2 },
      // Not read-only: a 503 may come after the change was made, so it is not sent again.
      { send: (client: Clients) => client.cluster.scaleBrokers([0, 1]), body: plan, attempts: 1 },
      { send: (client: Clients) => client.admin.scaleCluster("c1", {}), body: plan, attempts: 1 },
    ];
    for (const [index, example] of cases.entries()) {
      const api = await scriptedApi([
        (_request, response) => sendJson(response, 503, unavailable, { "retry-after": "1" }),
        (_request, response) => sendJson(response, 200, example.body),
      ]);
      const options = { baseUrl: api.server.url, tokenProvider: api.tokenProvider, http: { clock: manualClock(0) } };
      const clients: Clients = {
        modeler: new ModelerClient(options),
        cluster: new ClusterManagementClient(options),
        admin: new AdminClient(options),
      };
      const outcome = await example.send(clients).then(
        () => "answered",
        (error: unknown) => (error instanceof ApiError ? error.status : error),
      );
      expect({ index, outcome, requests: api.apiRequests() }).toEqual({
        index,
        outcome: example.attempts === 2 ? "answered" : 503,
        requests: example.attempts,
      });
      await api.server.close();
    }
  });

  it("rejects a successful answer whose body does not match the schema", async () => {
    const api = await scriptedApi([(_request, response) => sendJson(response, 200, { unexpected: true })]);
    const transport = new ApiTransport(
      { baseUrl: `${api.server.url}/admin`, tokenProvider: api.tokenProvider },
      "admin-api",
    );
    const error = await transport
      .sendForJson("GET", "/members", Type.Array(Type.Unknown()))
      .catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(ClientConnectionError);
    await api.server.close();
  });

  it("writes bodies with JSON.stringify; only sendForExactJson keeps 64-bit integers exact, both ways", async () => {
    const api = await scriptedApi([
      (_request, response) => sendJson(response, 200, { ok: true }),
      (_request, response) => {
        response.writeHead(200, { "content-type": "application/json" });
        response.end('{"backupId":9223372036854775807}');
      },
    ]);
    const transport = new ApiTransport(
      { baseUrl: `${api.server.url}/admin`, tokenProvider: api.tokenProvider },
      "admin-api",
    );
    const stringify = vi.spyOn(JSON, "stringify");
    try {
      const body = { name: "plain" };
      expect(await transport.sendForJson("POST", "/things", Type.Unknown(), body)).toEqual({ ok: true });
      // The plain writer, not the exact one, which is about twice as slow.
      expect(stringify).toHaveBeenCalledWith(body);
    } finally {
      stringify.mockRestore();
    }
    const answered = await transport.sendForExactJson("POST", "/actuator/backups", Type.Unknown(), {
      backupId: 2n ** 63n - 1n,
    });
    expect(answered).toEqual({ backupId: 2n ** 63n - 1n });
    await api.server.close();
  });
});

describe("pathSegment", () => {
  it("encodes a name as one path segment and refuses what URLs take for steps up the path", () => {
    expect(pathSegment("a b/c")).toBe("a%20b%2Fc");
    expect(pathSegment("..x")).toBe("..x");
    for (const name of ["", ".", ".."]) expect(() => pathSegment(name)).toThrow(/cannot name a resource/);
  });
});
