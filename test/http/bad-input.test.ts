import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { maxJsonNestingLevels } from "../../src/http/limits.js";
import { fileBodyLimitBytes } from "../../src/platform/modeler/content.js";
import { startTestPlatform, type TestPlatform } from "../support/platform.js";
import { requestToken } from "../support/tokens.js";

/**
 * Sends hostile input to every route of every OpenAPI document the platform serves and asserts a 4xx answer in the
 * route's error format (problem document, or RFC 6749 body for the token endpoint), never a 5xx.
 */

interface Operation {
  method: string;
  path: string;
  /** The documented path, parameters in braces, with the API's prefix. */
  template: string;
  audience: string | null;
  hasBody: boolean;
  /** Every method the path serves, so a wrong method can be chosen. */
  pathMethods: string[];
}

const bodyLimitBytes = 4096;
const documents = [
  { url: "/oauth/openapi.json", prefix: "", audience: null },
  { url: "/admin/openapi.json", prefix: "/admin", audience: "admin-api" },
  { url: "/modeler/api/v1/openapi.json", prefix: "/modeler", audience: "modeler-api" },
] as const;

const sampleUuid = "00000000-0000-4000-8000-000000000000";
const samplePathValues: Record<string, string> = {
  email: "someone@example.com",
  id: sampleUuid,
  comparison: `${sampleUuid}...${sampleUuid}`,
  clusterId: sampleUuid,
  clientId: "some-client",
  uuid: sampleUuid,
  secretName: "SOME_SECRET",
};

/** Routes whose documented body limit is above the platform's (file content up to 10 MiB): their limit. */
function documentedBodyLimit(operation: Operation): number {
  const carriesFileContent =
    (operation.method === "POST" && operation.path === "/modeler/api/v1/files") ||
    (operation.method === "PATCH" && operation.path.startsWith("/modeler/api/v1/files/"));
  return carriesFileContent ? fileBodyLimitBytes : bodyLimitBytes;
}

function concretePath(template: string): string {
  return template.replace(/\{([^}]+)\}/g, (_match, name: string) => encodeURIComponent(samplePathValues[name] ?? "1"));
}

describe("every route answers bad input with a 4xx in its error format", () => {
  let platform: TestPlatform;
  const operations: Operation[] = [];
  const tokens = new Map<string, string>();

  beforeAll(async () => {
    platform = await startTestPlatform({ "service.platform.bodyLimitBytes": bodyLimitBytes });
    for (const document of documents) {
      const openapi = (await (await fetch(`${platform.url}${document.url}`)).json()) as {
        paths: Record<string, Record<string, { requestBody?: unknown; security?: unknown[] }>>;
      };
      for (const [path, methods] of Object.entries(openapi.paths)) {
        for (const [method, operation] of Object.entries(methods)) {
          operations.push({
            method: method.toUpperCase(),
            path: `${document.prefix}${concretePath(path)}`,
            template: `${document.prefix}${path}`,
            // A route documented with an empty security list (signed links) takes no token.
            audience: Array.isArray(operation.security) && operation.security.length === 0 ? null : document.audience,
            hasBody: operation.requestBody !== undefined,
            pathMethods: Object.keys(methods).map((name) => name.toUpperCase()),
          });
        }
      }
      if (document.audience !== null) {
        tokens.set(document.audience, await requestToken(platform, platform.adminClient, document.audience));
      }
    }
  });
  afterAll(async () => await platform.close());

  async function send(
    operation: Operation,
    headers: Record<string, string>,
    body?: string | Buffer,
  ): Promise<Response> {
    const token = operation.audience === null ? undefined : tokens.get(operation.audience);
    return await fetch(`${platform.url}${operation.path}`, {
      method: operation.method,
      headers: { ...(token === undefined ? {} : { authorization: `Bearer ${token}` }), ...headers },
      ...(body === undefined ? {} : { body }),
    });
  }

  async function expectClientError(operation: Operation, response: Response, label: string): Promise<void> {
    const context = `${operation.method} ${operation.path} with ${label}`;
    expect(response.status, context).toBeGreaterThanOrEqual(400);
    expect(response.status, context).toBeLessThan(500);
    const text = await response.text();
    if (operation.path === "/oauth/token") {
      expect(JSON.parse(text), context).toHaveProperty("error");
      return;
    }
    expect(response.headers.get("content-type"), context).toContain("application/problem+json");
    const problem = JSON.parse(text) as Record<string, unknown>;
    expect(Object.keys(problem), context).toEqual(
      expect.arrayContaining(["type", "title", "status", "detail", "instance"]),
    );
    expect(problem.status, context).toBe(response.status);
  }

  it("discovers the routes of every API from their OpenAPI documents", () => {
    const signatures = operations.map((operation) => `${operation.method} ${operation.path}`);
    expect(signatures).toEqual(
      expect.arrayContaining([
        "POST /oauth/token",
        "GET /.well-known/jwks.json",
        "GET /admin/members",
        "POST /admin/members/someone%40example.com",
        "DELETE /admin/members/someone%40example.com",
        "GET /modeler/api/v1/info",
        "POST /modeler/api/v1/projects",
        `PATCH /modeler/api/v1/files/${sampleUuid}`,
        "POST /modeler/api/v1/collaborators/search",
        `GET /modeler/api/v1/milestones/compare/${sampleUuid}...${sampleUuid}/diff`,
        `DELETE /modeler/api/v1/projects/${sampleUuid}/collaborators/someone%40example.com`,
      ]),
    );
  });

  it("malformed JSON → 400", async () => {
    for (const operation of operations.filter((candidate) => candidate.hasBody)) {
      const response = await send(operation, { "content-type": "application/json" }, '{"unterminated": ');
      expect(response.status, `${operation.method} ${operation.path}`).toBe(400);
      await expectClientError(operation, response, "malformed JSON");
    }
  });

  it("oversized body → 413 (or the token endpoint's invalid_request)", async () => {
    for (const operation of operations.filter((candidate) => candidate.hasBody)) {
      const huge = JSON.stringify({ padding: "x".repeat(documentedBodyLimit(operation) * 2) });
      const response = await send(operation, { "content-type": "application/json" }, huge);
      if (operation.path !== "/oauth/token") expect(response.status, `${operation.method} ${operation.path}`).toBe(413);
      await expectClientError(operation, response, "an oversized body");
    }
  });

  it("wrong content type → 415 (or the token endpoint's invalid_request)", async () => {
    for (const operation of operations.filter((candidate) => candidate.hasBody)) {
      const response = await send(operation, { "content-type": "text/plain" }, "hello");
      if (operation.path !== "/oauth/token") expect(response.status, `${operation.method} ${operation.path}`).toBe(415);
      await expectClientError(operation, response, "a text/plain body");
    }
  });

  it("wrongly typed bodies → 400", async () => {
    for (const operation of operations.filter((candidate) => candidate.hasBody)) {
      for (const body of ["42", "[1,2,3]", '"text"', "null", '{"orgRoles": "admin", "name": 7, "audience": []}']) {
        const response = await send(operation, { "content-type": "application/json" }, body);
        await expectClientError(operation, response, `body ${body}`);
      }
    }
  });

  it("unknown fields → 400 naming the field", async () => {
    for (const operation of operations.filter((candidate) => candidate.hasBody && candidate.path !== "/oauth/token")) {
      const response = await send(operation, { "content-type": "application/json" }, '{"unknownField": 1}');
      expect(response.status, `${operation.method} ${operation.path}`).toBe(400);
      const problem = (await response.clone().json()) as { detail: string };
      expect(problem.detail).toContain("unknownField");
      await expectClientError(operation, response, "an unknown field");
    }
  });

  it("bad path parameters, garbage tokens and wrong methods → 4xx", async () => {
    for (const operation of operations) {
      if (operation.audience !== null) {
        const garbage = await send(operation, { authorization: "Bearer not.a.token" });
        expect(garbage.status, `${operation.method} ${operation.path}`).toBe(401);
        await expectClientError(operation, garbage, "a garbage token");
      }
      const weirdPath = operation.path.replace("someone%40example.com", "%E0%A4%A");
      if (weirdPath !== operation.path) {
        const weird = { ...operation, path: weirdPath };
        await expectClientError(weird, await send(weird, {}), "a percent-encoding error");
      }
      // PUT first: no path has a sibling route (like /projects/{id} beside /projects/search) that serves PUT.
      const unserved = ["PUT", "PATCH", "DELETE", "POST"].find((method) => !operation.pathMethods.includes(method));
      if (unserved === undefined) continue;
      const wrongMethod = await send({ ...operation, method: unserved }, { "content-type": "application/json" }, "{}");
      expect(wrongMethod.status, `${unserved} ${operation.path}`).toBe(405);
      expect(wrongMethod.headers.get("allow")).toContain(operation.method);
      expect(wrongMethod.headers.get("content-type")).toContain("application/problem+json");
    }
  });

  it("path parameters over the length limit → 414", async () => {
    const withParameters = operations.filter((operation) => operation.template.includes("{"));
    expect(withParameters.length).toBeGreaterThan(5);
    for (const operation of withParameters) {
      const long = { ...operation, path: operation.template.replace(/\{[^}]+\}/g, "a".repeat(600)) };
      const response = await send(long, {});
      expect(response.status, `${long.method} ${operation.template}`).toBe(414);
      await expectClientError(long, response, "a 600-character path parameter");
    }
  });

  it("JSON bodies that are not UTF-8 or nest too deep → 400", async () => {
    const invalidUtf8 = Buffer.concat([Buffer.from('{"name":"'), Buffer.from([0xff, 0xfe]), Buffer.from('"}')]);
    const tooDeep = `{"name":${"[".repeat(maxJsonNestingLevels)}1${"]".repeat(maxJsonNestingLevels)}}`;
    for (const operation of operations.filter((candidate) => candidate.hasBody)) {
      for (const [label, body] of [
        ["invalid UTF-8", invalidUtf8],
        ["too deep a nesting", tooDeep],
      ] as const) {
        const response = await send(operation, { "content-type": "application/json" }, body);
        expect(response.status, `${operation.method} ${operation.path} with ${label}`).toBe(400);
        await expectClientError(operation, response, label);
      }
    }
  });

  it("URLs over the length limit → 414 and headers over the size limit → 431, both problem documents", async () => {
    const longUrl = await fetch(`${platform.url}/admin/members?padding=${"x".repeat(9_000)}`);
    expect(longUrl.status).toBe(414);
    expect(await longUrl.json()).toMatchObject({
      type: "urn:flowplane:problem:uri-too-long",
      instance: "/admin/members",
    });
    const largeHeaders = await fetch(`${platform.url}/admin/members`, { headers: { "x-padding": "x".repeat(20_000) } });
    expect(largeHeaders.status).toBe(431);
    expect(largeHeaders.headers.get("content-type")).toBe("application/problem+json");
    expect(await largeHeaders.json()).toMatchObject({ type: "urn:flowplane:problem:headers-too-large", status: 431 });
  });
});
