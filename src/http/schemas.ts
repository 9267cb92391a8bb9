import { type TUnsafe, Type } from "typebox";
import { INT64_FORMAT } from "./exact-integers.js";

/**
 * An exact 64-bit integer field (OpenAPI `type: integer, format: int64`) within the bounds given (JSON schema numbers,
 * so at most 2^53 − 1 in size; the field itself reaches ±2^63): parsed and validated exactly beyond 2^53 − 1 (see
 * exact-integers.ts), handed to the route as a bigint, and answered, from a bigint, as its digits.
 */
export function int64Schema(
  options: {
    minimum?: number;
    maximum?: number;
    exclusiveMinimum?: number;
    exclusiveMaximum?: number;
    description?: string;
  } = {},
): TUnsafe<bigint> {
  return Type.Unsafe<bigint>({ type: "integer", format: INT64_FORMAT, ...options });
}

/** What each pattern registered with `describedPattern` asks of a value, in words. */
const patternDescriptions = new Map<string, string>();

/**
 * Registers `description`, the words that complete "must …" (e.g. "have no blank at either end"), as what `pattern`
 * asks of a value, and returns the pattern for the schema: a 400 refusing a value then says so in words, where Ajv
 * would quote the regular expression.
 */
export function describedPattern(pattern: string, description: string): string {
  const known = patternDescriptions.get(pattern);
  if (known !== undefined && known !== description) {
    throw new Error(`invariant violated: the pattern ${pattern} is described twice, differently`);
  }
  patternDescriptions.set(pattern, description);
  return pattern;
}

/** The words `describedPattern` registered for `pattern`, if any. */
export function patternDescription(pattern: string): string | undefined {
  return patternDescriptions.get(pattern);
}

/** JSON schema of a problem document, referenced by every route's error responses in the OpenAPI documents. */
export const problemSchema = Type.Object(
  {
    type: Type.String({ description: "Stable identifier of the kind of error (urn:flowplane:problem:<code>)." }),
    title: Type.String(),
    status: Type.Integer(),
    detail: Type.String({ description: "What went wrong and what to change." }),
    instance: Type.String({ description: "The path of the request." }),
    errors: Type.Optional(
      Type.Array(Type.Object({ location: Type.String(), message: Type.String() }), {
        description: "For a 400 about the request's content: each issue found, at most 20.",
      }),
    ),
    unlistedErrorCount: Type.Optional(
      Type.Integer({ description: "Issues found beyond the 20 that `errors` lists; absent when it lists them all." }),
    ),
    uncountedErrors: Type.Optional(
      Type.Boolean({
        description: "True when there are more issues than `errors` lists and checking stopped before counting them.",
      }),
    ),
  },
  { additionalProperties: true, description: "RFC 9457 problem document" },
);

/**
 * Error responses shared by every authenticated JSON route, for the OpenAPI documents. A 503 (with `Retry-After`)
 * says a dependency cannot serve now: the platform's database, a cluster's leader, a full work queue.
 */
export const standardErrorResponses = {
  400: problemSchema,
  401: problemSchema,
  403: problemSchema,
  404: problemSchema,
  413: problemSchema,
  415: problemSchema,
  503: problemSchema,
} as const;
