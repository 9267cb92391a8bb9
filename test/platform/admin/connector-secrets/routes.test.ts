import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestPlatform, type TestPlatform } from "../../../support/platform.js";
import { createTestClient, requestToken } from "../../../support/tokens.js";
import { captureLogger, createClusterAccessFixture } from "../cluster-access-support.js";

describe("Administration API /clusters/{clusterId}/secrets over HTTP", () => {
  let platform: TestPlatform;
  let token: string;
  const log = captureLogger();
  const clusterId = randomUUID();
  const foreignClusterId = randomUUID();
  /** Every body the server answered, to check that values appear only in GET answers. */
  const answeredBodies: { method: string; body: string }[] = [];

  beforeAll(async () => {
    const access = createClusterAccessFixture();
    platform = await startTestPlatform({}, { clusterAccess: access.options, logger: log.logger });
    access.addCluster(platform.organizationId, clusterId);
    access.addCluster(randomUUID(), foreignClusterId);
    token = await requestToken(platform, platform.adminClient, "admin-api");
  });
  afterAll(async () => await platform.close());

  async function call(
    method: string,
    path: string,
    body?: unknown,
    bearer: string | null = token,
  ): Promise<{ status: number; headers: Headers; text: string; json: () => unknown }> {
    const response = await fetch(`${platform.url}/admin${path}`, {
      method,
      headers: {
        ...(bearer === null ? {} : { authorization: `Bearer ${bearer}` }),
        ...(body === undefined ? {} : { "content-type": "application/json" }),
      },
      ...(body === undefined ? {} : { body: typeof body === "string" ? body : JSON.stringify(body) }),
    });
    const text = await response.text();
    answeredBodies.push({ method, body: text });
    return { status: response.status, headers: response.headers, text, json: () => JSON.parse(text) };
  }

  const secretsOf = (clusterId: string) => `/clusters/${clusterId}/secrets`;

  it("creates, lists, replaces and deletes secrets as the spec says", async () => {
    const path = secretsOf(clusterId);
    expect((await call("GET", path)).json()).toEqual({});
    const created = await call("POST", path, { secretName: "SMTP_PASSWORD", secretValue: "first-value-7Hq" });
    expect(created).toMatchObject({ status: 204, text: "" });
    expect((await call("POST", path, { secretName: "api_key_2", secretValue: "second-value-Zp4" })).status).toBe(204);

    const listed = await call("GET", path);
    expect(listed.status).toBe(200);
    expect(listed.headers.get("cache-control")).toBe("no-store");
    expect(listed.json()).toEqual({ SMTP_PASSWORD: "first-value-7Hq", api_key_2: "second-value-Zp4" });

    const replaced = await call("PUT", `${path}/SMTP_PASSWORD`, { secretValue: "replaced-value-Kx9" });
    expect(replaced).toMatchObject({ status: 204, text: "" });
    expect(((await call("GET", path)).json() as Record<string, string>).SMTP_PASSWORD).toBe("replaced-value-Kx9");

    expect(await call("DELETE", `${path}/SMTP_PASSWORD`)).toMatchObject({ status: 204, text: "" });
    expect((await call("GET", path)).json()).toEqual({ api_key_2: "second-value-Zp4" });
    const again = await call("DELETE", `${path}/SMTP_PASSWORD`);
    expect(again.status).toBe(404);
    expect(again.headers.get("content-type")).toContain("application/problem+json");
    expect((await call("PUT", `${path}/SMTP_PASSWORD`, { secretValue: "x" })).status).toBe(404);
  });

  it("answers names that are also JavaScript property names like any other", async () => {
    const path = secretsOf(clusterId);
    expect((await call("POST", path, { secretName: "__proto__", secretValue: "proto-value" })).status).toBe(204);
    expect((await call("POST", path, { secretName: "constructor", secretValue: "constructor-value" })).status).toBe(
      204,
    );
    const listed = (await call("GET", path)).text;
    expect(listed).toContain('"__proto__":"proto-value"');
    expect(listed).toContain('"constructor":"constructor-value"');
    expect((await call("DELETE", `${path}/__proto__`)).status).toBe(204);
    expect((await call("DELETE", `${path}/constructor`)).status).toBe(204);
  });

  it("answers 409 for an existing name without changing its value", async () => {
    const path = secretsOf(clusterId);
    expect((await call("POST", path, { secretName: "TAKEN", secretValue: "kept-value-Mn2" })).status).toBe(204);
    const duplicate = await call("POST", path, { secretName: "TAKEN", secretValue: "refused-value-Qw8" });
    expect(duplicate.status).toBe(409);
    expect((duplicate.json() as { detail: string }).detail).toContain("TAKEN");
    expect(((await call("GET", path)).json() as Record<string, string>).TAKEN).toBe("kept-value-Mn2");
  });

  it.each([
    ["a name with a dash", { secretName: "has-dash", secretValue: "v" }, "body/secretName"],
    ["an empty name", { secretName: "", secretValue: "v" }, "body/secretName"],
    ["a name of 50 characters", { secretName: "N".repeat(50), secretValue: "v" }, "body/secretName"],
    ["a name that is not a string", { secretName: 42, secretValue: "v" }, "body/secretName"],
    ["a missing value", { secretName: "OK" }, "secretValue"],
    ["an empty value", { secretName: "OK", secretValue: "" }, "body/secretValue"],
    ["a value that is not a string", { secretName: "OK", secretValue: { nested: true } }, "body/secretValue"],
    ["a value over 64 KiB", { secretName: "OK", secretValue: "v".repeat(65_537) }, "body/secretValue"],
    ["an unknown field", { secretName: "OK", secretValue: "v", secretType: "x" }, "secretType"],
  ])("answers 400 naming the field for %s", async (_, body, field) => {
    const response = await call("POST", secretsOf(clusterId), body);
    expect(response.status).toBe(400);
    expect(response.headers.get("content-type")).toContain("application/problem+json");
    expect(response.text).toContain(field);
  });

  it("counts the value limit in bytes of UTF-8, not in characters", async () => {
    const path = secretsOf(clusterId);
    // 32,768 two-byte characters fit exactly; one more does not, though it is far fewer characters than the limit.
    expect((await call("POST", path, { secretName: "WIDE", secretValue: "é".repeat(32_768) })).status).toBe(204);
    const over = await call("PUT", `${path}/WIDE`, { secretValue: "é".repeat(32_769) });
    expect(over.status).toBe(400);
    expect((over.json() as { detail: string }).detail).toContain("65538 bytes");
    expect((over.json() as { detail: string }).detail).toContain("65536");
  });

  it("answers 400 for bad names in the path and for an unknown field on PUT", async () => {
    const path = secretsOf(clusterId);
    expect((await call("PUT", `${path}/bad-name`, { secretValue: "v" })).status).toBe(400);
    expect((await call("DELETE", `${path}/${"N".repeat(50)}`)).status).toBe(400);
    const unknownField = await call("PUT", `${path}/TAKEN`, { secretValue: "v", secretName: "TAKEN" });
    expect(unknownField.status).toBe(400);
    expect(unknownField.text).toContain("secretName");
    expect((await call("GET", "/clusters/not%20an%20id/secrets")).status).toBe(400);
  });

  it("answers 404 for an unknown cluster and for another organization's cluster", async () => {
    for (const clusterId of [randomUUID(), foreignClusterId]) {
      const path = secretsOf(clusterId);
      expect((await call("GET", path)).status).toBe(404);
      expect((await call("POST", path, { secretName: "X", secretValue: "v" })).status).toBe(404);
      expect((await call("PUT", `${path}/X`, { secretValue: "v" })).status).toBe(404);
      expect((await call("DELETE", `${path}/X`)).status).toBe(404);
    }
  });

  it("requires a token (401) and the secrets scope (403 naming it)", async () => {
    expect((await call("GET", secretsOf(clusterId), undefined, null)).status).toBe(401);
    const membersOnly = await createTestClient(platform, ["members", "cluster"]);
    const membersToken = await requestToken(platform, membersOnly, "admin-api");
    for (const [method, suffix, body] of [
      ["GET", "", undefined],
      ["POST", "", { secretName: "NOPE", secretValue: "v" }],
      ["PUT", "/TAKEN", { secretValue: "v" }],
      ["DELETE", "/TAKEN", undefined],
    ] as const) {
      const response = await call(method, `${secretsOf(clusterId)}${suffix}`, body, membersToken);
      expect(response.status).toBe(403);
      expect((response.json() as { detail: string }).detail).toContain("'secrets'");
    }
    const secretsOnly = await createTestClient(platform, ["secrets"]);
    const secretsToken = await requestToken(platform, secretsOnly, "admin-api");
    expect((await call("GET", secretsOf(clusterId), undefined, secretsToken)).status).toBe(200);
  });

  it("shows values only in GET answers and never in a log line", async () => {
    const values = ["first-value-7Hq", "second-value-Zp4", "replaced-value-Kx9", "kept-value-Mn2", "refused-value-Qw8"];
    for (const { method, body } of answeredBodies) {
      if (method === "GET") continue;
      for (const value of values) expect(body).not.toContain(value);
    }
    const logs = log.lines();
    expect(logs.length).toBeGreaterThan(0);
    for (const value of [...values, "é".repeat(100), "v".repeat(1000)]) expect(logs).not.toContain(value);
  });

  it("records every change in the activity log by cluster and name, never with a value", async () => {
    const entries = (await call("GET", "/activity/json?limit=1000")).json() as {
      auditType: string;
      entity: string;
      entityId: string;
    }[];
    const secretEntries = entries.filter((entry) => entry.entity === "connector-secret");
    for (const auditType of ["c", "u", "d"]) {
      expect(secretEntries).toContainEqual(
        expect.objectContaining({ auditType, entityId: `${clusterId}/SMTP_PASSWORD` }),
      );
    }
    // Refused requests change nothing and are not recorded: TAKEN was created once, its duplicate refused.
    expect(secretEntries.filter((entry) => entry.entityId === `${clusterId}/TAKEN`)).toHaveLength(1);
    const everything = `${JSON.stringify(entries)}${(await call("GET", "/activity/csv?limit=1000")).text}`;
    for (const value of ["first-value-7Hq", "replaced-value-Kx9", "kept-value-Mn2", "refused-value-Qw8"]) {
      expect(everything).not.toContain(value);
    }
  });

  it("documents the routes in the Administration API's OpenAPI document", async () => {
    const document = (await (await fetch(`${platform.url}/admin/openapi.json`)).json()) as {
      paths: Record<string, unknown>;
    };
    expect(Object.keys(document.paths)).toEqual(
      expect.arrayContaining(["/clusters/{clusterId}/secrets", "/clusters/{clusterId}/secrets/{secretName}"]),
    );
  });
});
