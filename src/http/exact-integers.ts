/**
 * Exact 64-bit integers in route schemas (`int64Schema`: `type: "integer", format: "int64"`). Ajv knows no bigint and
 * `JSON.parse` rounds integers beyond 2^53 − 1, so such a field takes another path than other integers:
 * - a JSON body whose schema has one is parsed again with `parseJsonExactly`, so an integer beyond the safe range
 *   arrives as the exact bigint (other bodies parse as before);
 * - the validators check it with the `exactInteger` keyword instead of `type: "integer"` (bodies: a safe integer or
 *   such a bigint; path and query parameters: decimal digits) and hand it to the route as a bigint;
 * - a response writes a bigint as its digits (fast-json-stringify does so for `type: "integer"`).
 */
import type { Ajv, FuncKeywordDefinition, SchemaValidateFunction } from "ajv";
import { exactInteger } from "../json/exact-json.js";
import { MAX_INT64 } from "../json/int64.js";

/** The format that marks an exact 64-bit integer field. */
export const INT64_FORMAT = "int64";

/** The keyword the validators check such a field with. */
const KEYWORD = "exactInteger";

/** What the keyword's schema holds: the bounds as decimal text (JSON schemas hold no bigints). */
interface IntegerRange {
  readonly minimum: string;
  readonly maximum: string;
}

/** Decimal digits of a 64-bit integer, as a path or query parameter writes it. */
const INTEGER_TEXT = /^-?[0-9]{1,19}$/;

function isInt64Field(node: Record<string, unknown>): boolean {
  return node.format === INT64_FORMAT && node.type === "integer";
}

/** `schema` with every int64 field checked by the `exactInteger` keyword instead of `type` and the bounds. */
export function withExactIntegers(schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(withExactIntegers);
  if (typeof schema !== "object" || schema === null) return schema;
  const node = schema as Record<string, unknown>;
  if (isInt64Field(node)) {
    const range: IntegerRange = {
      minimum: typeof node.minimum === "number" ? String(node.minimum) : String(-MAX_INT64 - 1n),
      maximum: String(MAX_INT64),
    };
    return { [KEYWORD]: range };
  }
  return Object.fromEntries(Object.entries(node).map(([key, value]) => [key, withExactIntegers(value)]));
}

const int64FieldsBySchema = new WeakMap<object, boolean>();

/** Whether `schema` (a body schema, once per schema) has an int64 field anywhere. */
export function hasInt64Field(schema: unknown): boolean {
  if (typeof schema !== "object" || schema === null) return false;
  const known = int64FieldsBySchema.get(schema);
  if (known !== undefined) return known;
  const found = isInt64Field(schema as Record<string, unknown>) || Object.values(schema).some(hasInt64Field);
  int64FieldsBySchema.set(schema, found);
  return found;
}

/**
 * Adds the `exactInteger` keyword to `ajv`: the value must be an integer within the range (from text too when
 * `fromText`, for parameters), and is replaced by its bigint.
 */
export function addExactIntegerKeyword(ajv: Ajv, fromText: boolean): Ajv {
  const validate: SchemaValidateFunction = (range: IntegerRange, data: unknown, _schema, context) => {
    const value =
      typeof data === "string" ? (fromText && INTEGER_TEXT.test(data) ? BigInt(data) : null) : exactInteger(data);
    if (value === null || value < BigInt(range.minimum) || value > BigInt(range.maximum)) {
      validate.errors = [
        { keyword: KEYWORD, message: `must be an integer from ${range.minimum} to ${range.maximum}`, params: {} },
      ];
      return false;
    }
    if (context?.parentData !== undefined) context.parentData[context.parentDataProperty] = value;
    return true;
  };
  const definition: FuncKeywordDefinition = {
    keyword: KEYWORD,
    schemaType: "object",
    modifying: true,
    errors: true,
    validate,
  };
  ajv.addKeyword(definition);
  return ajv;
}
