/**
 * Exact 64-bit integers in route schemas (`int64Schema`: `type: "integer", format: "int64"`). Ajv knows no bigint and
 * `JSON.parse` rounds integers beyond 2^53 − 1, so such a field takes another path than other integers:
 * - a JSON body whose schema has one is parsed again with `parseJsonExactly`, so an integer beyond the safe range
 *   arrives as the exact bigint (other bodies parse as before);
 * - the validators check it with the `exactInteger` keyword instead of `type: "integer"` (bodies: a safe integer or
 *   such a bigint; path and query parameters: decimal digits) and hand it to the route as a bigint;
 * - a response writes a bigint as its digits (fast-json-stringify does so for `type: "integer"`).
 *
 * Plain integer fields of path and query parameters take the same keyword, handing the route a number: Ajv's own
 * coercion reads any text JavaScript reads as a number, so `1e3` and `0x10` would arrive as 1000 and 16, and digits
 * beyond 2^53 − 1 as a rounded number the route would then refuse as if the cluster behind it had failed. A parameter
 * is an integer only when it is written in decimal digits, and within the field's bounds (the safe range without).
 */
import type { Ajv, FuncKeywordDefinition, SchemaValidateFunction } from "ajv";
import { exactInteger } from "../json/exact-json.js";
import { MAX_INT64 } from "../json/int64.js";

/** The format that marks an exact 64-bit integer field. */
export const INT64_FORMAT = "int64";

/** The keyword the validators check such a field with. */
const EXACT_INTEGER_KEYWORD = "exactInteger";

/** Bounds an int64 field may have: JSON schema numbers, turned into the keyword's range. */
const BOUND_KEYWORDS = new Set(["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"]);

/** Keywords of an int64 field that validate nothing, so the keyword that replaces the field may leave them out. */
const ANNOTATION_KEYWORDS = new Set([
  "type",
  "format",
  "title",
  "description",
  "examples",
  "deprecated",
  "readOnly",
  "writeOnly",
  "$comment",
]);

/** What the keyword's schema holds: the bounds as decimal text (JSON schemas hold no bigints). */
interface IntegerRange {
  readonly minimum: string;
  readonly maximum: string;
  /** The route gets a number (a plain integer parameter), not a bigint. */
  readonly asNumber?: true;
}

/** Where a schema validates: bodies arrive as JSON, parameters as text. */
export type SchemaPart = "body" | "parameters";

/** Decimal digits of a 64-bit integer, as a path or query parameter writes it. */
const INTEGER_TEXT = /^-?[0-9]{1,19}$/;

function isInt64Field(node: Record<string, unknown>): boolean {
  return node.format === INT64_FORMAT && node.type === "integer";
}

/** Keywords a plain integer parameter may have besides bounds and annotations: a default, which Ajv fills in. */
const PARAMETER_KEYWORDS = new Set(["default"]);

/** The bound `keyword` of an int64 field as a bigint, or null when the field has none; throws for one not an integer. */
function boundOf(node: Record<string, unknown>, keyword: string): bigint | null {
  const bound = node[keyword];
  if (bound === undefined) return null;
  if (!Number.isSafeInteger(bound)) throw new Error(`an int64 field's ${keyword} must be a safe integer`);
  return BigInt(bound as number);
}

/**
 * The range an int64 field's bounds leave of −2^63..2^63 − 1. Throws for a keyword the `exactInteger` keyword would not
 * check (an enum, a multipleOf, a default), rather than leave it out silently.
 */
function int64Range(node: Record<string, unknown>): IntegerRange {
  for (const keyword of Object.keys(node)) {
    if (!BOUND_KEYWORDS.has(keyword) && !ANNOTATION_KEYWORDS.has(keyword)) {
      throw new Error(`an int64 field takes only bounds and annotations; ${keyword} would not be checked`);
    }
  }
  return boundedRange(node, -MAX_INT64 - 1n, MAX_INT64);
}

/** The range of a plain integer parameter: its bounds within the safe range. */
function parameterRange(node: Record<string, unknown>): IntegerRange {
  for (const keyword of Object.keys(node)) {
    if (!BOUND_KEYWORDS.has(keyword) && !ANNOTATION_KEYWORDS.has(keyword) && !PARAMETER_KEYWORDS.has(keyword)) {
      throw new Error(
        `an integer parameter takes only bounds, a default and annotations; ${keyword} would not be checked`,
      );
    }
  }
  const safe = BigInt(Number.MAX_SAFE_INTEGER);
  return { ...boundedRange(node, -safe, safe), asNumber: true };
}

/** `minimum`..`maximum` narrowed by the bounds of `node`. */
function boundedRange(node: Record<string, unknown>, lowest: bigint, highest: bigint): IntegerRange {
  let minimum = lowest;
  let maximum = highest;
  const inclusiveMinimum = boundOf(node, "minimum");
  const exclusiveMinimum = boundOf(node, "exclusiveMinimum");
  const inclusiveMaximum = boundOf(node, "maximum");
  const exclusiveMaximum = boundOf(node, "exclusiveMaximum");
  if (inclusiveMinimum !== null && inclusiveMinimum > minimum) minimum = inclusiveMinimum;
  if (exclusiveMinimum !== null && exclusiveMinimum + 1n > minimum) minimum = exclusiveMinimum + 1n;
  if (inclusiveMaximum !== null && inclusiveMaximum < maximum) maximum = inclusiveMaximum;
  if (exclusiveMaximum !== null && exclusiveMaximum - 1n < maximum) maximum = exclusiveMaximum - 1n;
  return { minimum: String(minimum), maximum: String(maximum) };
}

/**
 * `schema` with every int64 field checked by the `exactInteger` keyword instead of `type` and the bounds; for
 * parameters, every plain integer field too.
 */
export function withExactIntegers(schema: unknown, part: SchemaPart = "body"): unknown {
  if (Array.isArray(schema)) return schema.map((item) => withExactIntegers(item, part));
  if (typeof schema !== "object" || schema === null) return schema;
  const node = schema as Record<string, unknown>;
  if (isInt64Field(node)) return { [EXACT_INTEGER_KEYWORD]: int64Range(node) };
  if (part === "parameters" && node.type === "integer") {
    const range = parameterRange(node);
    return node.default === undefined
      ? { [EXACT_INTEGER_KEYWORD]: range }
      : { default: node.default, [EXACT_INTEGER_KEYWORD]: range };
  }
  return Object.fromEntries(Object.entries(node).map(([key, value]) => [key, withExactIntegers(value, part)]));
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
        {
          keyword: EXACT_INTEGER_KEYWORD,
          message: `must be an integer from ${range.minimum} to ${range.maximum}`,
          params: {},
        },
      ];
      return false;
    }
    if (context?.parentData !== undefined) {
      context.parentData[context.parentDataProperty] = range.asNumber === true ? Number(value) : value;
    }
    return true;
  };
  const definition: FuncKeywordDefinition = {
    keyword: EXACT_INTEGER_KEYWORD,
    schemaType: "object",
    modifying: true,
    errors: true,
    validate,
  };
  ajv.addKeyword(definition);
  return ajv;
}
