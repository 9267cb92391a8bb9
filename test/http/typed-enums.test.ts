/**
 * Untyped enums of strings get their type before Ajv compiles them, so that the uniqueness of an array of them is
 * checked in one pass rather than pair by pair.
 */
import { Ajv } from "ajv";
import { Type } from "typebox";
import { describe, expect, it } from "vitest";
import { withTypedEnums } from "../../src/http/typed-enums.js";
import { createQuietHttpServer } from "../support/http.js";

const scopes = Type.Array(Type.Enum(["backups", "clients", "members"]), { uniqueItems: true, maxItems: 3 });

describe("withTypedEnums", () => {
  it("types an enum of strings wherever it stands, and leaves other enums and the input alone", () => {
    const schema = Type.Object({ scopes, level: Type.Optional(Type.Enum(["info", "warn"])) });
    const typed = withTypedEnums(schema) as { properties: Record<string, Record<string, unknown>> };
    expect(typed.properties.scopes?.items).toEqual({ type: "string", enum: ["backups", "clients", "members"] });
    expect(typed.properties.level).toMatchObject({ type: "string", enum: ["info", "warn"] });
    // Numbers are coerced from a parameter's text by their type, so an enum of them is not given one.
    expect(withTypedEnums({ enum: [1, 2] })).toEqual({ enum: [1, 2] });
    expect(withTypedEnums({ enum: ["a", 1] })).toEqual({ enum: ["a", 1] });
    expect((scopes as unknown as { items: Record<string, unknown> }).items.type).toBeUndefined();
  });

  it("accepts and refuses exactly what the enum did", () => {
    const validate = new Ajv({ allErrors: true }).compile(withTypedEnums(scopes) as object);
    expect(validate(["backups", "members"])).toBe(true);
    expect(validate(["backups", "backups"])).toBe(false);
    expect(validate(["backups", "nothing"])).toBe(false);
    expect(validate([1])).toBe(false);
  });

  it("checks the uniqueness of many items in one pass", () => {
    // Ajv's pair-by-pair check names the pair it found, counting from the end; its one-pass check stops at the first
    // repeat of a value seen later in the array. A long array whose first two items repeat tells them apart.
    const validate = new Ajv({ allErrors: true }).compile(withTypedEnums(scopes) as object);
    const items = [
      "members",
      "members",
      ...Array.from({ length: 1_000 }, (_, index) => (index % 2 ? "backups" : "clients")),
    ];
    expect(validate(items)).toBe(false);
    const unique = validate.errors?.find((error) => error.keyword === "uniqueItems");
    expect(unique?.params).toEqual({ i: 999, j: 1001 });
  });

  it("is how a server validates its bodies", async () => {
    const server = createQuietHttpServer();
    const body = Type.Array(Type.Enum(["a", "b", "c"]), { uniqueItems: true });
    server.post("/letters", { schema: { body } }, async () => ({ ok: true }));
    try {
      const letters = ["c", "c", ...Array.from({ length: 398 }, (_, index) => (index % 2 ? "b" : "a"))];
      const response = await server.inject({ method: "POST", url: "/letters", payload: letters });
      expect(response.statusCode).toBe(400);
      // The one-pass check names the repeat nearest the end first (the pair-by-pair one would say "397 and 399").
      expect(response.body).toContain("items ## 399 and 397 are identical");
    } finally {
      await server.close();
    }
  });
});
