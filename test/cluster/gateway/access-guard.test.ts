/**
 * A real gateway enforcing its cluster's access policy file, in front of fake brokers: the IP allowlist on both
 * ports (health routes exempt), IPv6 and IPv4 peers of a dual-stack listener, X-Forwarded-For from trusted proxies
 * only, live changes of the file, tokens bound to the cluster and its organization, deleted clients, and the
 * monitoring clients' credentials on the metrics route. Tokens are signed by a test key served as the issuer's key
 * set, so that they can carry any `cluster` and `org` claim.
 */
import { createHash } from "node:crypto";
import { mkdtemp, rename, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type AccessPolicy, openAccessPolicy, serializeAccessPolicy } from "../../../src/auth/access-policy.js";
import { type RunningGateway, startGateway } from "../../../src/cluster/gateway/index.js";
import { ConfigurationError } from "../../../src/config/errors.js";
import { loadConfiguration } from "../../../src/config/load.js";
import { createTestKey, serveKeySet, signWith, type TestKey } from "../../auth/support.js";
import { TEST_CLUSTER_SECRET } from "../../support/cluster-secret.js";
import { type RawAnswer, requestFrom } from "../../support/http.js";
import { waitFor } from "../broker/support.js";
import { startFakeCluster } from "./fake-broker.js";

const organizationId = "organization-1";
const clusterId = "cluster-a";
const monitoringPassword = "correct horse battery staple";

let key: TestKey;
let keySet: Awaited<ReturnType<typeof serveKeySet>>;
let issuerUrl: string;
let cluster: Awaited<ReturnType<typeof startFakeCluster>>;
let directory: string;
let fileCounter = 0;
const gateways: RunningGateway[] = [];

interface Problem {
  type: string;
  status: number;
  detail: string;
}

interface TestGateway {
  gateway: RunningGateway;
  policyFile: string;
  /** Replaces the policy file in one step, as the provisioner does. */
  writePolicy(policy: AccessPolicy): Promise<void>;
}

function policyWith(changes: Partial<AccessPolicy> = {}): AccessPolicy {
  return { ...openAccessPolicy(clusterId, organizationId), ...changes };
}

function allowlist(...entries: string[]): AccessPolicy["ipAllowlist"] {
  return entries.map((ip) => ({ ip, description: "test" }));
}

async function startTestGateway(
  policy: AccessPolicy | undefined,
  settings: Record<string, string | number> = {},
): Promise<TestGateway> {
  fileCounter += 1;
  const policyFile = join(directory, `access-policy-${fileCounter}.json`);
  const writePolicy = async (next: AccessPolicy) => {
    await writeFile(`${policyFile}.next`, serializeAccessPolicy(next), { mode: 0o600 });
    await rename(`${policyFile}.next`, policyFile);
  };
  if (policy !== undefined) await writePolicy(policy);
  const configuration = loadConfiguration({
    environment: {},
    flags: {
      "service.gateway.port": 0,
      "service.management.port": 0,
      "service.cluster.secret": TEST_CLUSTER_SECRET,
      "service.gateway.issuerUrl": issuerUrl,
      "service.gateway.contactPoints": cluster.brokers.map((broker) => `127.0.0.1:${broker.address?.port}`).join(","),
      ...(policy === undefined ? {} : { "service.gateway.accessPolicyFile": policyFile }),
      ...settings,
    },
  });
  const gateway = await startGateway(configuration, { logger: pino({ level: "silent" }) });
  gateways.push(gateway);
  return { gateway, policyFile, writePolicy };
}

/** A token of the test issuer for the gateways' audience; `claims` override the defaults. */
async function tokenFor(claims: Record<string, unknown> = {}): Promise<string> {
  const nowSeconds = Math.floor(Date.now() / 1000);
  return await signWith(key, {
    iss: issuerUrl,
    aud: "gateway-api",
    sub: "organization-client",
    org: organizationId,
    scope: "cluster",
    iat: nowSeconds,
    exp: nowSeconds + 600,
    ...claims,
  });
}

function get(
  base: string,
  path: string,
  options: { from?: string; bearer?: string; headers?: Record<string, string> } = {},
): Promise<RawAnswer> {
  return requestFrom(options.from ?? "127.0.0.1", `${base}${path}`, {
    headers: {
      ...(options.bearer === undefined ? {} : { authorization: `Bearer ${options.bearer}` }),
      ...options.headers,
    },
  });
}

function problemOf(answer: RawAnswer): Problem {
  expect(answer.headers["content-type"]).toContain("application/problem+json");
  return JSON.parse(answer.body) as Problem;
}

function basic(username: string, password: string): string {
  return `Basic ${Buffer.from(`${username}:${password}`).toString("base64")}`;
}

beforeAll(async () => {
  key = await createTestKey();
  keySet = await serveKeySet({ keys: [key.publicJwk] });
  issuerUrl = keySet.url.origin;
  cluster = await startFakeCluster();
  directory = await mkdtemp(join(tmpdir(), "flowplane-gateway-access-"));
});

afterAll(async () => {
  await Promise.all(gateways.map((gateway) => gateway.close()));
  await cluster?.close();
  await keySet?.close();
  if (directory !== undefined) await rm(directory, { recursive: true, force: true });
});

describe("gateway without an access policy file", () => {
  it("lets every address in and accepts tokens naming any cluster, as before", async () => {
    const { gateway } = await startTestGateway(undefined);
    const foreign = await tokenFor({ cluster: "cluster-b", org: "organization-2" });
    expect((await get(gateway.url, "/v2/topology", { bearer: foreign })).status).toBe(200);
    expect((await get(gateway.url, "/v2/topology", { from: "127.0.0.2", bearer: foreign })).status).toBe(200);
    expect((await get(gateway.managementUrl, "/actuator/prometheus")).status).toBe(200);
  });
});

describe("IP allowlist", () => {
  it("refuses other addresses on both ports before authentication, and leaves the health routes open", async () => {
    const { gateway } = await startTestGateway(policyWith({ ipAllowlist: allowlist("127.0.0.2") }));
    const token = await tokenFor();
    for (const [base, path, bearer] of [
      [gateway.url, "/v2/topology", token],
      [gateway.url, "/v2/topology", undefined],
      [gateway.url, "/v2/no-such-route", undefined],
      [gateway.managementUrl, "/actuator/cluster", token],
      [gateway.managementUrl, "/actuator/cluster", undefined],
      [gateway.managementUrl, "/actuator/prometheus", undefined],
    ] as const) {
      const answer = await get(base, path, bearer === undefined ? {} : { bearer });
      expect(answer.status, path).toBe(403);
      expect(answer.headers["www-authenticate"]).toBeUndefined();
      const problem = problemOf(answer);
      expect(problem.type).toBe("urn:flowplane:problem:address-not-allowed");
      expect(problem.detail).toBe("Requests from 127.0.0.1 are refused by the cluster's IP allowlist.");
    }
    for (const path of ["/actuator/health", "/actuator/health/liveness", "/actuator/health/readiness"]) {
      expect((await get(gateway.managementUrl, path)).status, path).toBe(200);
    }

    expect((await get(gateway.url, "/v2/topology", { from: "127.0.0.2", bearer: token })).status).toBe(200);
    expect((await get(gateway.url, "/v2/topology", { from: "127.0.0.2" })).status).toBe(401);
    expect((await get(gateway.managementUrl, "/actuator/cluster", { from: "127.0.0.2", bearer: token })).status).toBe(
      200,
    );
    const metrics = await get(gateway.managementUrl, "/actuator/prometheus", { from: "127.0.0.2" });
    expect(metrics.status).toBe(200);
    expect(metrics.body).toContain('flowplane_gateway_access_refusals_total{reason="address-not-allowed"} 6');
  });

  it("allows everyone when the list is empty", async () => {
    const { gateway } = await startTestGateway(policyWith({ ipAllowlist: [] }));
    const token = await tokenFor();
    for (const from of ["127.0.0.1", "127.0.0.2"]) {
      expect((await get(gateway.url, "/v2/topology", { from, bearer: token })).status).toBe(200);
      expect((await get(gateway.managementUrl, "/actuator/prometheus", { from })).status).toBe(200);
    }
  });

  it("tells IPv6 loopback from IPv4 loopback on a dual-stack listener", async () => {
    const { gateway, writePolicy } = await startTestGateway(policyWith({ ipAllowlist: allowlist("::1/128") }), {
      "service.gateway.host": "::",
      "service.management.host": "::",
    });
    const port = new URL(gateway.url).port;
    const token = await tokenFor();
    const overIpv6 = () => get(`http://[::1]:${port}`, "/v2/topology", { from: "::1", bearer: token });
    const overIpv4 = () => get(`http://127.0.0.1:${port}`, "/v2/topology", { bearer: token });
    expect((await overIpv6()).status).toBe(200);
    const refused = await overIpv4();
    expect(refused.status).toBe(403);
    // The socket reports the IPv4 peer in its IPv4-mapped IPv6 form.
    expect(problemOf(refused).detail).toContain("::ffff:127.0.0.1");

    await writePolicy(policyWith({ ipAllowlist: allowlist("127.0.0.0/8") }));
    await waitFor(async () => (await overIpv4()).status === 200, "IPv4 loopback is allowed", 500);
    expect((await overIpv6()).status).toBe(403);
  });

  it("believes X-Forwarded-For only from trusted proxies", async () => {
    const { gateway } = await startTestGateway(policyWith({ ipAllowlist: allowlist("198.51.100.0/24") }), {
      "service.gateway.trustedProxies": "127.0.0.3",
    });
    const token = await tokenFor();
    const forwarded = (from: string, header: string) =>
      get(gateway.url, "/v2/topology", { from, bearer: token, headers: { "x-forwarded-for": header } });

    expect((await forwarded("127.0.0.3", "198.51.100.7")).status).toBe(200);
    const spoofed = await forwarded("127.0.0.4", "198.51.100.7");
    expect(spoofed.status).toBe(403);
    expect(problemOf(spoofed).detail).toContain("127.0.0.4");
    // What the client wrote left of the address the proxy saw proves nothing.
    const prefixed = await forwarded("127.0.0.3", "198.51.100.7, 203.0.113.9");
    expect(prefixed.status).toBe(403);
    expect(problemOf(prefixed).detail).toContain("203.0.113.9");
    const malformed = await forwarded("127.0.0.3", "198.51.100.7-4711");
    expect(malformed.status).toBe(403);
    expect(problemOf(malformed).detail).toContain("127.0.0.3");
    // A proxy that writes the client's port beside its address names the client all the same.
    const withPort = await forwarded("127.0.0.3", "198.51.100.7:4711");
    expect(withPort.status).not.toBe(403);
    const metrics = await get(gateway.managementUrl, "/actuator/prometheus", {
      from: "127.0.0.3",
      headers: { "x-forwarded-for": "198.51.100.20" },
    });
    expect(metrics.status).toBe(200);
  });

  it("follows changes of the policy file without a restart, and keeps the last valid policy", async () => {
    const { gateway, writePolicy, policyFile } = await startTestGateway(
      policyWith({ ipAllowlist: allowlist("127.0.0.2") }),
    );
    const token = await tokenFor();
    const restStatus = async () => (await get(gateway.url, "/v2/topology", { bearer: token })).status;
    const managementStatus = async () =>
      (await get(gateway.managementUrl, "/actuator/cluster", { bearer: token })).status;
    expect(await restStatus()).toBe(403);

    await writePolicy(policyWith({ ipAllowlist: allowlist("127.0.0.1, 127.0.0.2") }));
    await waitFor(async () => (await restStatus()) === 200, "the new allowlist admits 127.0.0.1", 500);
    expect(await managementStatus()).toBe(200);

    await writeFile(`${policyFile}.next`, "{ not a policy", { mode: 0o600 });
    await rename(`${policyFile}.next`, policyFile);
    const rejected = 'flowplane_gateway_access_policy_updates_total{outcome="rejected"} 1';
    await waitFor(
      async () => (await get(gateway.managementUrl, "/actuator/prometheus")).body.includes(rejected),
      "the invalid file is rejected",
      500,
    );
    expect(await restStatus()).toBe(200);

    await writePolicy(policyWith({ ipAllowlist: allowlist("127.0.0.2") }));
    await waitFor(async () => (await managementStatus()) === 403, "the allowlist refuses 127.0.0.1 again", 500);
    expect(await restStatus()).toBe(403);
    const metrics = await get(gateway.managementUrl, "/actuator/prometheus", { from: "127.0.0.2" });
    expect(metrics.body).toContain('flowplane_gateway_access_policy_updates_total{outcome="applied"} 2');
  });

  it("refuses to start without a valid policy file, naming the file", async () => {
    const missing = join(directory, "missing-policy.json");
    await expect(startTestGateway(undefined, { "service.gateway.accessPolicyFile": missing })).rejects.toThrow(
      `the access policy file "${missing}" cannot be used`,
    );
    await expect(startTestGateway(undefined, { "service.gateway.trustedProxies": "proxy.internal" })).rejects.toThrow(
      ConfigurationError,
    );
  });
});

describe("tokens at a gateway with an access policy", () => {
  it("accepts its organization's clients and this cluster's clients, and refuses other clusters and organizations", async () => {
    const { gateway } = await startTestGateway(policyWith());
    const organizationClient = await tokenFor();
    const thisClustersClient = await tokenFor({ sub: "cluster-client", cluster: clusterId });
    const otherClustersClient = await tokenFor({ sub: "other-cluster-client", cluster: "cluster-b" });
    const otherOrganization = await tokenFor({ sub: "foreign-client", org: "organization-2" });
    const otherOrganizationSameCluster = await tokenFor({ org: "organization-2", cluster: clusterId });
    for (const [base, path] of [
      [gateway.url, "/v2/topology"],
      [gateway.managementUrl, "/actuator/cluster"],
    ] as const) {
      expect((await get(base, path, { bearer: organizationClient })).status, path).toBe(200);
      expect((await get(base, path, { bearer: thisClustersClient })).status, path).toBe(200);
      const wrongCluster = await get(base, path, { bearer: otherClustersClient });
      expect(wrongCluster.status, path).toBe(403);
      expect(problemOf(wrongCluster)).toMatchObject({
        type: "urn:flowplane:problem:token-for-another-cluster",
        detail: "The access token was issued for another cluster.",
      });
      for (const bearer of [otherOrganization, otherOrganizationSameCluster]) {
        const wrongOrganization = await get(base, path, { bearer });
        expect(wrongOrganization.status, path).toBe(403);
        expect(problemOf(wrongOrganization).detail).toContain("another organization");
      }
    }
  });

  it("stops honouring a deleted client's tokens once the policy lists it, cached ones included", async () => {
    const { gateway, writePolicy } = await startTestGateway(policyWith());
    const token = await tokenFor({ sub: "doomed-client", cluster: clusterId });
    const survivor = await tokenFor({ sub: "surviving-client", cluster: clusterId });
    expect((await get(gateway.url, "/v2/topology", { bearer: token })).status).toBe(200);
    expect((await get(gateway.managementUrl, "/actuator/cluster", { bearer: token })).status).toBe(200);

    await writePolicy(
      policyWith({ revokedClients: [{ clientId: "doomed-client", revokedAt: new Date().toISOString() }] }),
    );
    await waitFor(
      async () => (await get(gateway.url, "/v2/topology", { bearer: token })).status === 401,
      "the deleted client's token is refused",
      500,
    );
    for (const base of [gateway.url, gateway.managementUrl]) {
      const path = base === gateway.url ? "/v2/topology" : "/actuator/cluster";
      const refused = await get(base, path, { bearer: token });
      expect(refused.status).toBe(401);
      expect(refused.headers["www-authenticate"]).toContain('error="invalid_token"');
      expect(problemOf(refused).detail).toBe("The access token was issued to a client that has been deleted.");
      expect((await get(base, path, { bearer: survivor })).status).toBe(200);
    }
    const metrics = await get(gateway.managementUrl, "/actuator/prometheus");
    expect(metrics.body).toMatch(/flowplane_gateway_access_refusals_total\{reason="client-deleted"\} [1-9]/);
  });
});

describe("writes paused by the access policy", () => {
  it("answers every write 503 with the reason, after authentication, serves reads, and takes writes once the pause ends", async () => {
    const reason = "it is being restored from backup 9";
    const { gateway, writePolicy } = await startTestGateway(policyWith({ writesPaused: { reason } }));
    const token = await tokenFor();
    const publish = (bearer?: string) =>
      requestFrom("127.0.0.1", `${gateway.url}/v2/messages/publication`, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          ...(bearer === undefined ? {} : { authorization: `Bearer ${bearer}` }),
        },
        body: JSON.stringify({ name: "paused-write", correlationKey: "paused-write-key" }),
      });
    const cancel = () =>
      requestFrom("127.0.0.1", `${gateway.managementUrl}/actuator/cluster/changes/1`, {
        method: "DELETE",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      });
    const resize = () =>
      requestFrom("127.0.0.1", `${gateway.managementUrl}/actuator/cluster`, {
        method: "PATCH",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
        body: JSON.stringify({ brokers: { count: 4 } }),
      });
    const writesDetails = async () =>
      (
        JSON.parse((await get(gateway.managementUrl, "/actuator/health")).body) as {
          components: { writes: { status: string; details: Record<string, unknown> } };
        }
      ).components.writes;

    for (const refused of [await publish(token), await cancel(), await resize()]) {
      expect(refused.status).toBe(503);
      expect(refused.headers["retry-after"]).toBe("2");
      expect(problemOf(refused)).toMatchObject({
        type: "urn:flowplane:problem:writes-paused",
        detail: `The cluster takes no writes for the moment: ${reason}. Retry later.`,
      });
    }
    // A caller without a valid token learns nothing of the pause.
    expect((await publish()).status).toBe(401);
    expect((await get(gateway.url, "/v2/topology", { bearer: token })).status).toBe(200);
    const head = await requestFrom("127.0.0.1", `${gateway.url}/v2/topology`, {
      method: "HEAD",
      headers: { authorization: `Bearer ${token}` },
    });
    expect(head.status).toBe(200);
    expect((await get(gateway.managementUrl, "/actuator/cluster", { bearer: token })).status).toBe(200);
    // Anyone may read the health: it says that writes are paused, not why.
    expect(await writesDetails()).toEqual({ status: "UP", details: { paused: true } });

    await writePolicy(policyWith());
    await waitFor(async () => (await publish(token)).status === 200, "the gateway takes writes again", 500);
    expect(await writesDetails()).toEqual({ status: "UP", details: { paused: false } });
  });
});

describe("protected metrics", () => {
  it("require a monitoring client's HTTP Basic credentials while monitoring is on", async () => {
    const passwordSha256 = createHash("sha256").update(monitoringPassword).digest("hex");
    const monitored = policyWith({ monitoring: { enabled: true, clients: [{ username: "scraper", passwordSha256 }] } });
    const { gateway, writePolicy } = await startTestGateway(monitored);
    const scrape = (authorization?: string) =>
      get(gateway.managementUrl, "/actuator/prometheus", {
        headers: authorization === undefined ? {} : { authorization },
      });

    const accepted = await scrape(basic("scraper", monitoringPassword));
    expect(accepted.status).toBe(200);
    expect(accepted.body).toContain("flowplane_gateway_requests_total");
    for (const authorization of [
      undefined,
      basic("scraper", "wrong password"),
      basic("someone", monitoringPassword),
      basic("scraper", `${monitoringPassword} `),
      `Bearer ${await tokenFor()}`,
      "Basic not-base64!",
    ]) {
      const refused = await scrape(authorization);
      expect(refused.status, authorization).toBe(401);
      expect(refused.headers["www-authenticate"]).toBe('Basic realm="flowplane metrics", charset="UTF-8"');
      expect(problemOf(refused).type).toBe("urn:flowplane:problem:unauthorized");
    }
    expect((await get(gateway.managementUrl, "/actuator/health")).status).toBe(200);

    await writePolicy(policyWith({ monitoring: { enabled: false, clients: monitored.monitoring.clients } }));
    await waitFor(async () => (await scrape()).status === 200, "the metrics are open again", 500);
    const metrics = await scrape();
    // Six refusals above, and those the wait saw before the change took effect.
    const refusals = /flowplane_gateway_access_refusals_total\{reason="metrics-credentials"\} (\d+)/.exec(metrics.body);
    expect(Number(refusals?.[1])).toBeGreaterThanOrEqual(6);
  });
});
