import type { AddressInfo, Socket } from "node:net";
import { connect } from "node:net";
import { pino } from "pino";
import { Type } from "typebox";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AddressRangeSet } from "../../src/auth/address-ranges.js";
import { OAuthError, ServiceError } from "../../src/http/errors.js";
import { maxHeaderBytes, maxJsonNestingLevels, maxJsonValues } from "../../src/http/limits.js";
import { registerApiDocuments } from "../../src/http/openapi.js";
import { problemMediaType } from "../../src/http/problem.js";
import { describedPattern } from "../../src/http/schemas.js";
import { createHttpServer, type HttpServer } from "../../src/http/server.js";
import { createQuietHttpServer, defaultHttpServerLimits, openConnectionFrom, requestFrom } from "../support/http.js";

/** The answer to `GET path` sent byte for byte on a new connection to `port`. */
async function rawGet(port: number, path: string): Promise<string> {
  return await new Promise((resolve, reject) => {
    const socket = connect({ host: "127.0.0.1", port });
    let received = "";
    socket.setEncoding("utf8");
    socket.on("data", (chunk: string) => {
      received += chunk;
    });
    socket.on("error", reject);
    socket.on("close", () => resolve(received));
    socket.write(`GET ${path} HTTP/1.1\r\nHost: flowplane.test\r\nConnection: close\r\n\r\n`);
  });
}

describe("createHttpServer conventions", () => {
  let server: HttpServer;
  /** What the server logged, one parsed JSON line each. */
  const logged: { level: number; msg: string; err?: unknown; code?: string }[] = [];

  beforeAll(async () => {
    const destination = { write: (line: string) => logged.push(JSON.parse(line)) };
    server = createHttpServer({
      logger: pino({ level: "info" }, destination),
      bodyLimitBytes: 2048,
      trustProxy: false,
      limits: defaultHttpServerLimits,
    });
    server.get("/boom", async () => {
      throw new Error("database password is hunter2");
    });
    server.get("/busy", async () => {
      throw new ServiceError("unavailable", "Partition 2 is changing leaders.", { headers: { "retry-after": "1" } });
    });
    server.get("/not-here", async () => {
      throw new ServiceError("notApplicable", "Private links do not exist outside the hosted product.");
    });
    server.get("/conflict", async () => {
      throw new ServiceError("conflict", "The thing changed.", {
        extensions: { currentRevision: 3 },
        headers: { "retry-after": "2" },
      });
    });
    server.post(
      "/typed",
      { schema: { body: Type.Object({ count: Type.Integer() }, { additionalProperties: false }) } },
      async (request) => request.body,
    );
    server.get(
      "/query",
      { schema: { querystring: Type.Object({ dryRun: Type.Boolean({ default: false }) }) } },
      async (request) => request.query,
    );
    server.get(
      "/query-tags",
      { schema: { querystring: Type.Object({ tag: Type.Union([Type.String(), Type.Array(Type.String())]) }) } },
      async (request) => request.query,
    );
    server.post(
      "/choices",
      {
        schema: {
          body: Type.Object(
            {
              stage: Type.Optional(Type.String({ enum: ["dev", "test", "prod"] })),
              kind: Type.Optional(Type.Union([Type.Literal("bpmn"), Type.Literal("dmn")])),
              since: Type.Optional(
                Type.Union([Type.String({ format: "date-time" }), Type.String({ pattern: "^[0-9]{1,15}$" })]),
              ),
              // Patterns of this test's own: test files share registered patterns when they share a process.
              code: Type.Optional(
                Type.String({
                  pattern: describedPattern("^[a-z]{3}-[0-9]{2}$", "be three letters, a dash and two digits"),
                }),
              ),
            },
            { additionalProperties: false },
          ),
        },
      },
      async (request) => request.body,
    );
    server.delete("/thing", async (request) => ({ deleted: true, body: request.body ?? null }));
    server.get("/things/:id", async (request) => request.params);
    server.post("/any", async (request) => ({ received: request.body }));
    server.post("/large", { bodyLimit: 4 * 1024 * 1024 }, async () => ({ received: true }));
    server.post(
      "/list",
      { schema: { body: Type.Object({ items: Type.Array(Type.Integer()) }, { additionalProperties: false }) } },
      async (request) => request.body,
    );
    await server.register(
      async (context) => {
        await registerApiDocuments(context as HttpServer, {
          title: "test",
          description: "test",
          version: "1",
          serverUrl: "http://localhost/api",
          bearerAuth: false,
          documentPath: "/openapi.json",
          docsPath: "/docs",
        });
      },
      { prefix: "/api" },
    );
    server.post("/oauth-style", { config: { errorFormat: "oauth" } }, async () => {
      throw new OAuthError("invalid_scope", "Scope 'x' is not held.");
    });
    server.post("/oauth-style-unicode", { config: { errorFormat: "oauth" } }, async () => {
      throw new ServiceError("invalidRequest", 'The name “x” — or "y\\z" — is refused 😀.');
    });
    await server.ready();
  });
  afterAll(async () => await server.close());

  it("takes an empty body with a JSON content type as no body where the route takes none, and refuses it where one is needed", async () => {
    const deleted = await server.inject({
      method: "DELETE",
      url: "/thing",
      headers: { "content-type": "application/json" },
      payload: "",
    });
    expect(deleted.statusCode).toBe(200);
    expect(deleted.json()).toEqual({ deleted: true, body: null });
    const typed = await server.inject({
      method: "POST",
      url: "/typed",
      headers: { "content-type": "application/json" },
      payload: "",
    });
    expect(typed.statusCode).toBe(400);
    expect(typed.json()).toMatchObject({ type: "urn:flowplane:problem:malformed-body" });
    const malformed = await server.inject({
      method: "DELETE",
      url: "/thing",
      headers: { "content-type": "application/json" },
      payload: "{",
    });
    expect(malformed.statusCode).toBe(400);
  });

  it("takes an empty body of any content type as no body where the route takes none", async () => {
    for (const contentType of ["text/plain", "application/xml; charset=utf-8", "application/octet-stream"]) {
      for (const [method, url] of [
        ["DELETE", "/thing"],
        ["POST", "/any"],
      ] as const) {
        const response = await server.inject({ method, url, headers: { "content-type": contentType }, payload: "" });
        expect(response.statusCode, `${method} ${url} with ${contentType}`).toBe(200);
      }
    }
    // A body that is not JSON is still refused, and so is an empty one where the route needs a body.
    const textBody = await server.inject({
      method: "DELETE",
      url: "/thing",
      headers: { "content-type": "text/plain" },
      payload: "x",
    });
    expect(textBody.statusCode).toBe(415);
    expect(textBody.json()).toMatchObject({ type: "urn:flowplane:problem:unsupported-media-type" });
    const typed = await server.inject({
      method: "POST",
      url: "/typed",
      headers: { "content-type": "text/plain" },
      payload: "",
    });
    expect(typed.statusCode).toBe(415);
  });

  it("maps an unexpected error to a 500 problem document without leaking its message", async () => {
    const response = await server.inject({ method: "GET", url: "/boom" });
    expect(response.statusCode).toBe(500);
    expect(response.headers["content-type"]).toContain(problemMediaType);
    expect(response.body).not.toContain("hunter2");
    expect(response.json()).toMatchObject({ type: "urn:flowplane:problem:internal", status: 500, instance: "/boom" });
  });

  it("logs an unexpected error with its stack, and an upstream's expected unavailability as a warning without one", async () => {
    logged.length = 0;
    expect((await server.inject({ method: "GET", url: "/boom" })).statusCode).toBe(500);
    expect((await server.inject({ method: "GET", url: "/busy" })).statusCode).toBe(503);
    const failures = logged.filter((line) => line.level >= 40);
    expect(failures).toHaveLength(2);
    expect(failures[0]).toMatchObject({ level: 50, msg: "request failed" });
    expect(failures[0]?.err).toBeDefined();
    expect(failures[1]).toMatchObject({ level: 40, msg: "request not served", code: "unavailable" });
    expect(failures[1]?.err).toBeUndefined();
  });

  it("logs one warning for a burst of answers it could not serve, per kind, and every unexpected error", async () => {
    const lines: { level: number; msg: string; code?: string; repeatsNotLogged?: number }[] = [];
    const busy = createHttpServer({
      logger: pino({ level: "info" }, { write: (line: string) => lines.push(JSON.parse(line)) }),
      bodyLimitBytes: 2048,
      trustProxy: false,
      limits: defaultHttpServerLimits,
    });
    busy.get("/busy", async () => {
      throw new ServiceError("unavailable", "Partition 2 is changing leaders.");
    });
    busy.get("/slow", async () => {
      throw new ServiceError("gatewayTimeout", "The coordinator did not answer.");
    });
    busy.get("/boom", async () => {
      throw new Error("a defect");
    });
    try {
      for (let round = 0; round < 50; round += 1) {
        for (const url of ["/busy", "/slow", "/boom"]) await busy.inject({ method: "GET", url });
      }
      const warnings = lines.filter((line) => line.level === 40);
      // One line per kind within the window (REPEATED_WARNING_WINDOW_MS, far longer than this burst), not 50.
      expect(warnings.map((line) => line.code)).toEqual(["unavailable", "gateway-timeout"]);
      expect(warnings.every((line) => line.msg === "request not served" && line.repeatsNotLogged === undefined)).toBe(
        true,
      );
      expect(lines.filter((line) => line.level === 50 && line.msg === "request failed")).toHaveLength(50);
    } finally {
      await busy.close();
    }
  });

  it("logs a 501 for what a self-hosted installation never offers as a refusal, not as a warning", async () => {
    logged.length = 0;
    expect((await server.inject({ method: "GET", url: "/not-here" })).statusCode).toBe(501);
    expect(logged.filter((line) => line.level >= 40)).toEqual([]);
  });

  it("renders a typed error with its status, stable type, extensions and headers", async () => {
    const response = await server.inject({ method: "GET", url: "/conflict?x=1" });
    expect(response.statusCode).toBe(409);
    expect(response.headers["retry-after"]).toBe("2");
    expect(response.json()).toEqual({
      type: "urn:flowplane:problem:conflict",
      title: "The request conflicts with the current state",
      status: 409,
      detail: "The thing changed.",
      instance: "/conflict",
      currentRevision: 3,
    });
  });

  it("validates bodies strictly: a number sent as text is a 400 naming the field", async () => {
    const response = await server.inject({ method: "POST", url: "/typed", payload: { count: "3" } });
    expect(response.statusCode).toBe(400);
    expect(response.json().errors).toEqual([{ location: "body/count", message: "must be integer" }]);
    expect((await server.inject({ method: "POST", url: "/typed", payload: { count: 3 } })).json()).toEqual({
      count: 3,
    });
  });

  it("names the allowed values of a field that takes one of a set, and a field's alternatives in one sentence", async () => {
    const errorsOf = async (payload: object) =>
      (await server.inject({ method: "POST", url: "/choices", payload })).json().errors;
    expect(await errorsOf({ stage: "qa" })).toEqual([
      { location: "body/stage", message: 'must be one of "dev", "test", "prod"' },
    ]);
    expect(await errorsOf({ kind: "form" })).toEqual([
      { location: "body/kind", message: 'must be "bpmn", or must be "dmn"' },
    ]);
    // Each alternative's failure, not three sentences ending in "must match a schema in anyOf".
    expect(await errorsOf({ since: "yesterday" })).toEqual([
      { location: "body/since", message: 'must match format "date-time", or must match pattern "^[0-9]{1,15}$"' },
    ]);
    // A pattern registered with words is refused in those words rather than as a regular expression.
    expect(await errorsOf({ code: "ab-1" })).toEqual([
      { location: "body/code", message: "must be three letters, a dash and two digits" },
    ]);
    expect(await errorsOf({ stage: "qa", since: "yesterday" })).toHaveLength(2);
  });

  it("coerces query parameters, which arrive as text, to their declared types", async () => {
    expect((await server.inject({ method: "GET", url: "/query?dryRun=true" })).json()).toEqual({ dryRun: true });
    expect((await server.inject({ method: "GET", url: "/query?dryRun=perhaps" })).statusCode).toBe(400);
    // A repeated parameter is refused for the repetition, not for a type its values each have.
    const repeated = await server.inject({ method: "GET", url: "/query?dryRun=true&dryRun=false" });
    expect(repeated.statusCode).toBe(400);
    expect(repeated.json().detail).toBe("querystring/dryRun is given 2 times; give it once");
    // A parameter declared to take several values takes them.
    const tags = await server.inject({ method: "GET", url: "/query-tags?tag=a&tag=b" });
    expect(tags.json()).toEqual({ tag: ["a", "b"] });
  });

  it("answers 404 for an unknown route and 405 with Allow for a known one", async () => {
    const unknown = await server.inject({ method: "GET", url: "/nowhere" });
    expect(unknown.statusCode).toBe(404);
    expect(unknown.json().type).toBe("urn:flowplane:problem:route-not-found");
    const wrongMethod = await server.inject({ method: "DELETE", url: "/typed" });
    expect(wrongMethod.statusCode).toBe(405);
    expect(wrongMethod.headers.allow).toBe("POST");
    // A GET route answers HEAD too, and says so.
    const notGet = await server.inject({ method: "POST", url: "/boom" });
    expect(notGet.statusCode).toBe(405);
    expect(notGet.headers.allow).toBe("GET, HEAD");
    expect((await server.inject({ method: "HEAD", url: "/not-here" })).statusCode).not.toBe(405);
  });

  it("lists at most 20 issues of a body and counts the rest, however many it has", async () => {
    const response = await server.inject({
      method: "POST",
      url: "/list",
      payload: { items: Array.from({ length: 100 }, () => "a") },
    });
    expect(response.statusCode).toBe(400);
    const problem = response.json();
    expect(problem.errors).toHaveLength(20);
    expect(problem.errors[19]).toEqual({ location: "body/items/19", message: "must be integer" });
    expect(problem.unlistedErrorCount).toBe(80);
    expect(problem.detail).toMatch(
      /^body\/items\/0 must be integer; .*body\/items\/19 must be integer; and 80 more issues$/,
    );
    // A client's own field names are repeated at most 200 characters long: 20 keys of 45 KB were answered with 1.8 MB.
    const longKey = (
      await server.inject({ method: "POST", url: "/list", payload: { items: [], ["k".repeat(1_000)]: 1 } })
    ).json();
    expect(longKey.errors).toEqual([{ location: `body/${"k".repeat(195)}…`, message: "is not a known field" }]);
    const few = (await server.inject({ method: "POST", url: "/list", payload: { items: ["a"] } })).json();
    expect(few.errors).toHaveLength(1);
    expect(few.unlistedErrorCount).toBeUndefined();
  });

  it("answers 404 for a docs file that does not exist or lies outside the docs, logging no error", async () => {
    expect((await server.inject({ method: "GET", url: "/api/docs/static/index.css" })).statusCode).toBe(200);
    logged.length = 0;
    // Sent as written on a real connection: a client library would resolve the dots before sending.
    await server.listen({ host: "127.0.0.1", port: 0 });
    const port = (server.server.address() as AddressInfo).port;
    for (const path of [
      "/api/docs/static/nonexistent.js",
      "/api/docs/static/../../../package.json",
      "/api/docs/static/%2e%2e/%2e%2e/%2e%2e/package.json",
    ]) {
      const answer = await rawGet(port, path);
      expect(answer, path).toMatch(/^HTTP\/1\.1 404 /);
      expect(answer, path).toContain("application/problem+json");
    }
    expect(logged.filter((line) => line.level >= 40)).toEqual([]);
  });

  it("answers oversized bodies with 413 and non-JSON bodies with 415", async () => {
    const huge = await server.inject({ method: "POST", url: "/typed", payload: { count: 1, pad: "x".repeat(4096) } });
    expect(huge.statusCode).toBe(413);
    const text = await server.inject({
      method: "POST",
      url: "/typed",
      headers: { "content-type": "text/plain" },
      payload: "count=1",
    });
    expect(text.statusCode).toBe(415);
  });

  it("renders RFC 6749 error bodies on routes configured for them", async () => {
    const response = await server.inject({ method: "POST", url: "/oauth-style" });
    expect(response.statusCode).toBe(400);
    expect(response.headers["cache-control"]).toBe("no-store");
    expect(response.json()).toEqual({ error: "invalid_scope", error_description: "Scope 'x' is not held." });
  });

  it("keeps an RFC 6749 error description within the characters the RFC allows", async () => {
    const response = await server.inject({ method: "POST", url: "/oauth-style-unicode" });
    expect(response.statusCode).toBe(400);
    expect(response.json()).toEqual({
      error: "invalid_request",
      error_description: "The name ?x? ? or ?y?z? ? is refused ?.",
    });
  });

  it("refuses a JSON body that is not valid UTF-8 with 400 instead of storing replacement characters", async () => {
    const invalid = Buffer.concat([Buffer.from('{"text":"caf'), Buffer.from([0xe9]), Buffer.from('"}')]);
    const refused = await server.inject({
      method: "POST",
      url: "/any",
      headers: { "content-type": "application/json" },
      payload: invalid,
    });
    expect(refused.statusCode).toBe(400);
    expect(refused.json()).toMatchObject({
      type: "urn:flowplane:problem:malformed-body",
      detail: "The body is not valid UTF-8.",
    });
    const valid = await server.inject({
      method: "POST",
      url: "/any",
      headers: { "content-type": "application/json" },
      payload: Buffer.from('{"text":"café ✓ 𝄞"}', "utf8"),
    });
    expect(valid.json()).toEqual({ received: { text: "café ✓ 𝄞" } });
  });

  it("refuses a JSON body nested deeper than the documented depth with 400", async () => {
    const nested = (levels: number) => `${"[".repeat(levels)}1${"]".repeat(levels)}`;
    const post = (payload: string) =>
      server.inject({ method: "POST", url: "/any", headers: { "content-type": "application/json" }, payload });
    expect((await post(nested(maxJsonNestingLevels))).statusCode).toBe(200);
    for (const levels of [maxJsonNestingLevels + 1, 1_000]) {
      const response = await post(nested(levels));
      expect(response.statusCode).toBe(400);
      expect(response.json().type).toBe("urn:flowplane:problem:invalid-request");
    }
  });

  it("refuses a JSON body of more values than the documented count with 400, before parsing or validating it", async () => {
    const post = (payload: string) =>
      server.inject({ method: "POST", url: "/large", headers: { "content-type": "application/json" }, payload });
    const members = (count: number) => `{${Array.from({ length: count }, (_, index) => `"k${index}":0`).join(",")}}`;
    expect((await post(`[${Array.from({ length: maxJsonValues }, () => "0").join(",")}]`)).statusCode).toBe(200);
    for (const payload of [members(maxJsonValues + 1), `{"nested":[${"[0,0],".repeat(maxJsonValues / 2)}0]}`]) {
      const response = await post(payload);
      expect(response.statusCode).toBe(400);
      expect(response.json()).toMatchObject({
        type: "urn:flowplane:problem:invalid-request",
        detail: `The body holds more than ${maxJsonValues} values (array items and object members, counted at every level).`,
      });
    }
  });

  it("answers over-long path parameters and URLs with 414, logging at most a short line at debug level", async () => {
    logged.length = 0;
    const longParameter = await server.inject({ method: "GET", url: `/things/${"x".repeat(600)}` });
    expect(longParameter.statusCode).toBe(414);
    expect(longParameter.json()).toMatchObject({ type: "urn:flowplane:problem:uri-too-long", status: 414 });
    // No route has a segment that long, so an unmatched path with one is the same mistake.
    expect((await server.inject({ method: "GET", url: `/nowhere/${"x".repeat(600)}` })).statusCode).toBe(414);
    const longUrl = await server.inject({ method: "GET", url: `/query?dryRun=true&padding=${"x".repeat(9_000)}` });
    expect(longUrl.statusCode).toBe(414);
    expect(longUrl.json().instance).toBe("/query");
    expect((await server.inject({ method: "GET", url: `/things/${"x".repeat(400)}` })).statusCode).toBe(200);
    expect(logged.filter((line) => line.level >= 40)).toEqual([]);
  });
});

describe("createHttpServer on a real socket", () => {
  let server: HttpServer;
  let port: number;

  beforeAll(async () => {
    server = createQuietHttpServer();
    server.get("/ping", async () => ({ pong: true }));
    server.post("/echo", async (request) => ({ echoed: request.body }));
    // A body type only this context parses, as the token endpoint's form bodies.
    await server.register(async (context) => {
      context.addContentTypeParser("application/x-www-form-urlencoded", { parseAs: "string" }, (_request, body, done) =>
        done(null, { form: body }),
      );
      context.post("/form", async (request) => request.body);
    });
    // Refused before its body is read, as a route behind a token check refuses a request without one.
    server.post(
      "/guarded",
      {
        onRequest: async () => {
          throw new ServiceError("unauthorized", "Send a token.");
        },
      },
      async () => ({ never: true }),
    );
    await server.listen({ host: "127.0.0.1", port: 0 });
    port = (server.server.address() as AddressInfo).port;
  });
  const opened: Socket[] = [];
  afterAll(async () => {
    for (const socket of opened.splice(0)) socket.destroy();
    await server.close();
  });

  it("answers headers over the size limit with a 431 problem document", async () => {
    const response = await requestFrom("127.0.0.1", `http://127.0.0.1:${port}/ping`, {
      headers: { "x-padding": "x".repeat(maxHeaderBytes + 1024) },
    });
    expect(response.status).toBe(431);
    expect(response.headers["content-type"]).toBe(problemMediaType);
    expect(JSON.parse(response.body)).toMatchObject({
      type: "urn:flowplane:problem:headers-too-large",
      status: 431,
      title: "The request headers are too large",
    });
  });

  it("closes the connection after refusing a request whose body is larger than the route accepts, without reading it", async () => {
    const accepted = new Promise<Socket>((resolve) => server.server.once("connection", resolve));
    const client = await openConnectionFrom(port, "127.0.0.1", opened);
    const { socket } = client;
    const serverSide = await accepted;
    const startedMs = performance.now();
    const closed = new Promise<number>((resolve) => serverSide.once("close", () => resolve(performance.now())));
    socket.write(
      "POST /guarded HTTP/1.1\r\nHost: flowplane.test\r\nContent-Type: application/json\r\nContent-Length: 100000000000\r\n\r\n",
    );
    // The client streams its body as fast as the server takes it.
    const piece = Buffer.alloc(1024 * 1024, 0x20);
    const stream = () => {
      while (!socket.destroyed && socket.write(piece));
    };
    socket.on("drain", stream);
    stream();
    const closedAtMs = await Promise.race([
      closed,
      new Promise<number>((resolve) => setTimeout(() => resolve(Number.POSITIVE_INFINITY), 5_000)),
    ]);
    expect(closedAtMs - startedMs).toBeLessThan(5_000);
    expect(serverSide.bytesRead).toBeLessThan(256 * 1024 * 1024);
    expect(client.received).toMatch(/^HTTP\/1\.1 401 /);
    expect(client.received.toLowerCase()).toContain("connection: close");
  });

  it("answers a request for no route before reading its body, and closes a connection whose body has no end", async () => {
    const accepted = new Promise<Socket>((resolve) => server.server.once("connection", resolve));
    const client = await openConnectionFrom(port, "127.0.0.1", opened);
    const serverSide = await accepted;
    const closed = new Promise<void>((resolve) => serverSide.once("close", () => resolve()));
    // No token is needed to reach a route that does not exist: its body was read up to the limit (and a body with no
    // end held the connection until the request deadline) only to answer 404.
    client.socket.write(
      "POST /nowhere HTTP/1.1\r\nHost: flowplane.test\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
    );
    client.socket.write(`400\r\n${" ".repeat(1024)}\r\n`);
    await expect.poll(() => client.received, { timeout: 2_000 }).toMatch(/^HTTP\/1\.1 404 /);
    expect(client.received).toContain("urn:flowplane:problem:route-not-found");
    expect(client.received.toLowerCase()).toContain("connection: close");
    await closed;
    expect(serverSide.bytesRead).toBeLessThan(64 * 1024);
  });

  it("keeps the connection after refusing a request whose body is within the limit, reading that body", async () => {
    const client = await openConnectionFrom(port, "127.0.0.1", opened);
    const { socket } = client;
    const body = JSON.stringify({ text: "x".repeat(90) });
    socket.write(
      `POST /guarded HTTP/1.1\r\nHost: flowplane.test\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`,
    );
    await expect.poll(() => client.received).toMatch(/^HTTP\/1\.1 401 /);
    // The body arrives after the answer, and the next request on the same connection is served.
    socket.write(body);
    socket.write("GET /ping HTTP/1.1\r\nHost: flowplane.test\r\n\r\n");
    await expect.poll(() => client.received).toContain('{"pong":true}');
    expect(client.received.toLowerCase()).toContain("connection: keep-alive");
  });

  it("tells a client expecting 100-continue to send its body only once the request was admitted and the body will be read", async () => {
    const expecting = (path: string, length: number, type = "application/json") =>
      `POST ${path} HTTP/1.1\r\nHost: flowplane.test\r\nContent-Type: ${type}\r\nContent-Length: ${length}\r\nExpect: 100-continue\r\n\r\n`;
    // Refused before the body would be read: a token check, no route, a body larger than the route takes, a type no
    // parser of the route takes. The final answer comes first, with no invitation to send.
    for (const [request, status] of [
      [expecting("/guarded", 2), 401],
      [expecting("/nowhere", 2), 404],
      [expecting("/echo", 10 * 1024 * 1024), 413],
      [expecting("/echo", 2, "text/plain"), 415],
    ] as const) {
      const refused = await openConnectionFrom(port, "127.0.0.1", opened);
      refused.socket.write(request);
      await expect.poll(() => refused.received).toMatch(new RegExp(`^HTTP/1\\.1 ${status} `));
      expect(refused.received, request).not.toContain("100 Continue");
    }
    // Admitted: `100 Continue` first, then the answer to the body the client sent after it, JSON or a type only the
    // route's own context parses.
    for (const [path, type, body, answer] of [
      ["/echo", "application/json", '{"sent":"after the invitation"}', '{"echoed":{"sent":"after the invitation"}}'],
      ["/form", "application/x-www-form-urlencoded", "sent=after", '{"form":"sent=after"}'],
    ] as const) {
      const admitted = await openConnectionFrom(port, "127.0.0.1", opened);
      admitted.socket.write(expecting(path, body.length, type));
      await expect.poll(() => admitted.received).toMatch(/^HTTP\/1\.1 100 Continue\r\n\r\n$/);
      admitted.socket.write(body);
      await expect.poll(() => admitted.received).toContain(answer);
      expect(admitted.received.match(/100 Continue/g)).toHaveLength(1);
    }
  });

  /** What the server sends back for `request`, written byte for byte on a new connection, until it closes. */
  async function rawExchange(request: string): Promise<string> {
    return await new Promise<string>((resolve) => {
      let received = "";
      const socket = connect({ host: "127.0.0.1", port }, () => socket.write(request));
      socket.setEncoding("utf8");
      socket.on("data", (chunk: string) => {
        received += chunk;
        // A keep-alive answer leaves the connection open: the first complete answer is all this reads.
        if (/\r\n\r\n[\s\S]*\}$/.test(received)) socket.end();
      });
      socket.on("error", () => undefined);
      socket.on("close", () => resolve(received));
    });
  }

  it("answers an HTTP/1.1 request without a Host header with a 400 problem document, and HTTP/1.0 without one", async () => {
    const missing = await rawExchange("GET /ping HTTP/1.1\r\n\r\n");
    expect(missing).toMatch(/^HTTP\/1\.1 400 /);
    expect(missing).toContain(`content-type: ${problemMediaType}`);
    expect(missing).toContain('"detail":"An HTTP/1.1 request must carry a Host header."');
    // HTTP/1.0 has no Host header to require.
    expect(await rawExchange("GET /ping HTTP/1.0\r\n\r\n")).toMatch(/^HTTP\/1\.1 200 /);
  });

  it("answers CONNECT with a 405 problem document and closes the connection", async () => {
    const answer = await rawExchange("CONNECT 127.0.0.1:443 HTTP/1.1\r\nHost: 127.0.0.1:443\r\n\r\n");
    expect(answer).toMatch(/^HTTP\/1\.1 405 /);
    expect(answer).toContain(`Content-Type: ${problemMediaType}`);
    expect(answer).toContain('"type":"urn:flowplane:problem:method-not-allowed"');
  });

  it("answers a request Node's parser cannot read with a 400 problem document", async () => {
    const answer = await new Promise<string>((resolve) => {
      let received = "";
      const socket = connect({ host: "127.0.0.1", port }, () => socket.write("NOT HTTP AT ALL\r\n\r\n"));
      socket.setEncoding("utf8");
      socket.on("data", (chunk: string) => {
        received += chunk;
      });
      socket.on("error", () => undefined);
      socket.on("close", () => resolve(received));
    });
    expect(answer).toMatch(/^HTTP\/1\.1 400 /);
    expect(answer).toContain(`Content-Type: ${problemMediaType}`);
    expect(answer).toContain('"type":"urn:flowplane:problem:invalid-request"');
  });
});

describe("createHttpServer behind a proxy", () => {
  it("takes a request's address from the right-most X-Forwarded-For entry, the one its proxy wrote", async () => {
    const server = createHttpServer({
      logger: pino({ level: "silent" }),
      bodyLimitBytes: 1024,
      trustProxy: true,
      limits: defaultHttpServerLimits,
    });
    server.get("/address", async (request) => ({ address: request.ip }));
    await server.ready();
    try {
      const addressOf = async (forwardedFor: string | undefined) =>
        (
          await server.inject({
            method: "GET",
            url: "/address",
            remoteAddress: "10.0.0.2",
            ...(forwardedFor === undefined ? {} : { headers: { "x-forwarded-for": forwardedFor } }),
          })
        ).json().address;
      // The proxy appended the address it saw to whatever the client wrote: the client's own entries count for nothing.
      expect(await addressOf("203.0.113.9, 198.51.100.7")).toBe("198.51.100.7");
      expect(await addressOf("10.9.1.1, 10.9.2.1, 198.51.100.7")).toBe("198.51.100.7");
      expect(await addressOf(undefined)).toBe("10.0.0.2");
    } finally {
      await server.close();
    }
  });

  it("behind a chain of trusted proxies, takes the right-most entry that is none of them", async () => {
    const server = createHttpServer({
      logger: pino({ level: "silent" }),
      bodyLimitBytes: 1024,
      trustProxy: AddressRangeSet.fromEntries(["10.0.0.0/24, 192.0.2.10"]),
      limits: defaultHttpServerLimits,
    });
    server.get("/address", async (request) => ({ address: request.ip }));
    await server.ready();
    try {
      const addressOf = async (remoteAddress: string, forwardedFor: string) =>
        (
          await server.inject({
            method: "GET",
            url: "/address",
            remoteAddress,
            headers: { "x-forwarded-for": forwardedFor },
          })
        ).json().address;
      // The edge proxy (192.0.2.10) wrote the client's address, the inner one (10.0.0.2) the edge's.
      expect(await addressOf("10.0.0.2", "203.0.113.9, 198.51.100.7, 192.0.2.10")).toBe("198.51.100.7");
      // From a peer that is no trusted proxy, the header proves nothing.
      expect(await addressOf("198.51.100.50", "203.0.113.9")).toBe("198.51.100.50");
    } finally {
      await server.close();
    }
  });
});
