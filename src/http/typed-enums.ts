/**
 * Typed enums in validation schemas. TypeBox writes an enum of strings as `{ enum: [...] }`, without a `type`, and Ajv
 * then checks the `uniqueItems` of an array of them by comparing every pair of items, in time quadratic in a length
 * the sender chooses (within the body and value limits, `maxItems` does not stop it, since every error is collected).
 * Given the items' type, Ajv checks uniqueness in one pass. An enum of strings is given the type string; what it
 * accepts does not change.
 */

/** `schema` with every untyped enum of strings given the type string (see the module comment). */
export function withTypedEnums(schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(withTypedEnums);
  if (typeof schema !== "object" || schema === null) return schema;
  const node = schema as Record<string, unknown>;
  const typed = Object.fromEntries(Object.entries(node).map(([key, value]) => [key, withTypedEnums(value)]));
  // Strings only: a path or query parameter's number is coerced from its text by its type, and giving an enum of
  // numbers a type would change what such a parameter accepts.
  if (Array.isArray(node.enum) && node.type === undefined && node.enum.every((value) => typeof value === "string")) {
    typed.type = "string";
  }
  return typed;
}
