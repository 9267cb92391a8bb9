/**
 * Query parameters given more than once. The query-string parser turns `?dryRun=true&dryRun=false` into an array,
 * which a parameter's schema then refuses as being of the wrong type ("must be boolean"), a misleading answer for a
 * value that is right but repeated. A parameter a route does not declare as an array is refused for the repetition.
 */
import { invalidRequest, type ServiceError } from "./errors.js";

/** What the check reads of a parameter's schema. */
interface ParameterSchemaView {
  type?: unknown;
  anyOf?: unknown;
  oneOf?: unknown;
}

/** What the check reads of a route's querystring schema. */
interface QuerySchemaView {
  properties?: Record<string, ParameterSchemaView | undefined>;
}

/** Whether a parameter's schema accepts an array: its type, one of its types, or one of its alternatives. */
function acceptsArray(schema: ParameterSchemaView | undefined): boolean {
  if (schema === undefined) return false;
  if (schema.type === "array" || (Array.isArray(schema.type) && schema.type.includes("array"))) return true;
  const alternatives = [schema.anyOf, schema.oneOf].filter(Array.isArray).flat() as ParameterSchemaView[];
  return alternatives.some(acceptsArray);
}

/** The 400 for the first parameter given more than once that the route takes once, or undefined when there is none. */
export function repeatedQueryParameter(query: unknown, schema: unknown): ServiceError | undefined {
  if (typeof query !== "object" || query === null) return undefined;
  const properties = (schema as QuerySchemaView | undefined)?.properties;
  for (const [name, value] of Object.entries(query)) {
    // Undeclared parameters are left to the schema, which names them as unknown: a name echoed here is always ours.
    if (!Array.isArray(value) || properties === undefined || !Object.hasOwn(properties, name)) continue;
    if (acceptsArray(properties[name])) continue;
    return invalidRequest(`querystring/${name} is given ${value.length} times; give it once`);
  }
  return undefined;
}
