/**
 * Exact 64-bit integers in route schemas (`int64Schema`): bodies parsed exactly where their schema has such a field,
 * validated and handed over as bigints, parameters read from their digits, answers written as the digits; other
 * routes parse as before.
 */
import { Type } from "typebox";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { withExactIntegers } from "../../src/http/exact-integers.js";
import { int64Schema } from "../../src/http/schemas.js";
import type { HttpServer } from "../../src/http/server.js";
import { createQuietHttpServer } from "../support/http.js";

describe("int64 fields", () => {
  let server: HttpServer;

  beforeAll(async () => {
    server = createQuietHttpServer();
    const answer = Type.Object({ id: int64Schema(), kind: Type.String() });
    server.post(
      "/ids",
      {
        schema: {
          body: Type.Object({ id: int64Schema({ minimum: 0 }), count: Type.Optional(Type.Integer()) }),
          response: { 200: answer },
        },
      },
      async (request) => ({ id: request.body.id, kind: typeof request.body.id }),
    );
    server.get(
      "/ids/:id",
      { schema: { params: Type.Object({ id: int64Schema({ minimum: 0 }) }), response: { 200: answer } } },
      async (request) => ({ id: request.params.id, kind: typeof request.params.id }),
    );
    server.get(
      "/brokers/:brokerId",
      {
        schema: {
          params: Type.Object({ brokerId: Type.Integer({ minimum: 0, maximum: 1023 }) }),
          querystring: Type.Object({
            page: Type.Integer({ minimum: 1, default: 1 }),
            offset: Type.Optional(Type.Integer()),
          }),
        },
      },
      async (request) => ({ ...request.params, ...request.query, kind: typeof request.params.brokerId }),
    );
    server.post("/any", async (request) => ({ received: request.body }));
    server.post(
      "/bounded",
      {
        schema: {
          body: Type.Object({
            inclusive: int64Schema({ minimum: 10, maximum: 20 }),
            exclusive: int64Schema({ exclusiveMinimum: 10, exclusiveMaximum: 20 }),
          }),
        },
      },
      async (request) => ({ sum: String(request.body.inclusive + request.body.exclusive) }),
    );
    await server.ready();
  });
  afterAll(async () => await server.close());

  const post = (payload: string) =>
    server.inject({ method: "POST", url: "/ids", payload, headers: { "content-type": "application/json" } });

  it("takes a body's id exactly up to 2^63 − 1, hands it over as a bigint and answers its digits", async () => {
    for (const id of ["0", "9007199254740993", "9223372036854775807"]) {
      const response = await post(`{"id": ${id}}`);
      expect(response.statusCode, id).toBe(200);
      expect(response.body).toBe(`{"id":${id},"kind":"bigint"}`);
    }
  });

  it("refuses a body's id out of range, inexact or sent as text, naming the field", async () => {
    for (const id of ["-1", "9223372036854775808", "9.2e18", "1.5", '"5"', "null"]) {
      const response = await post(`{"id": ${id}}`);
      expect(response.statusCode, id).toBe(400);
      expect(response.json().errors, id).toEqual([
        { location: "body/id", message: "must be an integer from 0 to 9223372036854775807" },
      ]);
    }
    // Another integer field of such a body refuses what it could not hold exactly.
    expect((await post('{"id": 1, "count": 9007199254740993}')).json().errors).toEqual([
      { location: "body/count", message: "must be integer" },
    ]);
    const duplicate = await post('{"id": 1, "id": 2}');
    expect(duplicate.statusCode).toBe(400);
    expect(duplicate.json().detail).toBe("The body repeats the key 'id' within one object; each key may appear once.");
  });

  it("reads a path parameter from its digits exactly, and refuses anything else", async () => {
    const exact = await server.inject({ method: "GET", url: "/ids/9223372036854775807" });
    expect(exact.body).toBe('{"id":9223372036854775807,"kind":"bigint"}');
    for (const text of ["9223372036854775808", "-1", "1e3", "0x10", "abc"]) {
      const response = await server.inject({ method: "GET", url: `/ids/${text}` });
      expect(response.statusCode, text).toBe(400);
      expect(response.json().detail, text).toBe("params/id must be an integer from 0 to 9223372036854775807");
    }
  });

  it("reads a plain integer parameter from its decimal digits as a number, and refuses any other way to write one", async () => {
    expect((await server.inject({ method: "GET", url: "/brokers/1023?offset=-7" })).json()).toEqual({
      brokerId: 1023,
      page: 1,
      offset: -7,
      kind: "number",
    });
    expect((await server.inject({ method: "GET", url: "/brokers/007?page=2" })).json()).toMatchObject({
      brokerId: 7,
      page: 2,
    });
    // Ajv's own coercion read all of these as numbers: 1000, 16, 0.5e1 = 5, and a rounded 10^20.
    for (const text of ["1e3", "0x10", "0.5e1", "5.0", " 5", "1024", "-1", "99999999999999999999"]) {
      const response = await server.inject({ method: "GET", url: `/brokers/${encodeURIComponent(text)}` });
      expect(response.statusCode, text).toBe(400);
      expect(response.json().detail, text).toBe("params/brokerId must be an integer from 0 to 1023");
    }
    const unbounded = await server.inject({ method: "GET", url: "/brokers/1?offset=9007199254740993" });
    expect(unbounded.json().detail).toBe(
      "querystring/offset must be an integer from -9007199254740991 to 9007199254740991",
    );
    expect((await server.inject({ method: "GET", url: "/brokers/1?page=0" })).statusCode).toBe(400);
  });

  it("accepts a body that starts with a byte order mark, as every other route does", async () => {
    const response = await post('\uFEFF{"id": 9223372036854775807}');
    expect(response.statusCode).toBe(200);
    expect(response.body).toBe('{"id":9223372036854775807,"kind":"bigint"}');
    const other = await server.inject({
      method: "POST",
      url: "/any",
      payload: '\uFEFF{"n": 1}',
      headers: { "content-type": "application/json" },
    });
    expect(other.json()).toEqual({ received: { n: 1 } });
  });

  it("checks every bound of a field: maximum, exclusiveMinimum and exclusiveMaximum as well as minimum", async () => {
    const bounded = (inclusive: number, exclusive: number) =>
      server.inject({
        method: "POST",
        url: "/bounded",
        payload: { inclusive, exclusive },
        headers: { "content-type": "application/json" },
      });
    expect((await bounded(20, 19)).json()).toEqual({ sum: "39" });
    expect((await bounded(10, 11)).json()).toEqual({ sum: "21" });
    expect((await bounded(21, 10)).json().errors).toEqual([
      { location: "body/inclusive", message: "must be an integer from 10 to 20" },
      { location: "body/exclusive", message: "must be an integer from 11 to 19" },
    ]);
    expect((await bounded(9, 20)).statusCode).toBe(400);
  });

  it("refuses to build a validator that would leave out what an int64 field asks", () => {
    const schema = Type.Object({ id: Type.Unsafe<bigint>({ type: "integer", format: "int64", multipleOf: 2 }) });
    expect(() => withExactIntegers(schema)).toThrow(/multipleOf would not be checked/);
    expect(() => withExactIntegers(Type.Object({ id: int64Schema({ minimum: 0.5 }) }))).toThrow(
      /minimum must be a safe integer/,
    );
    expect(() => withExactIntegers(Type.Object({ n: Type.Integer({ multipleOf: 2 }) }), "parameters")).toThrow(
      /multipleOf would not be checked/,
    );
  });

  it("leaves bodies of routes without such a field to JSON.parse, as before", async () => {
    const response = await server.inject({
      method: "POST",
      url: "/any",
      payload: '{"n": 9007199254740993, "n2": 1}',
      headers: { "content-type": "application/json" },
    });
    expect(response.json()).toEqual({ received: { n: 9007199254740992, n2: 1 } });
  });
});
