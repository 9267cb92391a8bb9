import { type TProperties, type TSchema, Type } from "typebox";
import { dateFilterSyntax } from "./date-math.js";
import { defaultPageSize, maximumPageSize } from "./search.js";

/**
 * TypeBox schemas shared by the Modeler routes: identifiers, people, audit fields and the search envelope. Request
 * objects say `additionalProperties: false`, so an unknown field is a 400 naming it.
 */

/** A resource id. */
export const identifier = Type.String({ format: "uuid" });

/** Path parameters of routes addressing one resource by id. */
export const idParameters = Type.Object({ id: identifier }, { additionalProperties: false });

/** A resource name. */
export const nameSchema = Type.String({ minLength: 1, maxLength: 255 });

/** Who created or changed a resource: the API client, by name, with `<client id>@clients.invalid` as email. */
export const personSchema = Type.Object(
  {
    name: Type.String({ description: "Name of the API client that made the change." }),
    email: Type.String({ description: "`<client id>@clients.invalid`: tokens identify API clients, not people." }),
  },
  { additionalProperties: false },
);

/** Audit fields of every resource. */
export const auditProperties = {
  created: Type.String({ format: "date-time" }),
  createdBy: personSchema,
  updated: Type.String({ format: "date-time" }),
  updatedBy: personSchema,
};

/** A date filter: ISO instant with optional comparison prefix and rounding suffix. */
export const dateFilterSchema = Type.String({
  minLength: 1,
  maxLength: 64,
  description: `Date filter: ${dateFilterSyntax}. Example: ">=2024-03-01T00:00:00Z||/d".`,
});

/** A name filter: case-insensitive substring. */
export const nameFilterSchema = Type.String({
  maxLength: 255,
  description: "Matches names containing this text, ignoring case.",
});

/** A person filter: exact name and/or email. */
export const personFilterSchema = Type.Object(
  { name: Type.Optional(Type.String({ maxLength: 255 })), email: Type.Optional(Type.String({ maxLength: 320 })) },
  { additionalProperties: false, description: "Matches the client's name and/or email exactly." },
);

/** Filters of the audit fields. */
export const auditFilterProperties = {
  created: Type.Optional(dateFilterSchema),
  createdBy: Type.Optional(personFilterSchema),
  updated: Type.Optional(dateFilterSchema),
  updatedBy: Type.Optional(personFilterSchema),
};

/** Sort fields of the audit fields. */
export const auditSortFields = ["created", "updated"] as const;

/** The body of `POST …/search` with the resource's filter fields and sort fields. */
export function searchRequestSchema<Properties extends TProperties>(
  filterProperties: Properties,
  sortFields: readonly string[],
) {
  return Type.Object(
    {
      filter: Type.Optional(Type.Object(filterProperties, { additionalProperties: false })),
      sort: Type.Optional(
        Type.Array(
          Type.Object(
            {
              field: Type.Enum(sortFields),
              direction: Type.Enum(["ASC", "DESC"]),
            },
            { additionalProperties: false },
          ),
          { maxItems: 5, description: "Sort keys in order; equal keys are ordered by id." },
        ),
      ),
      page: Type.Optional(Type.Integer({ minimum: 0, maximum: 1_000_000, description: "Page number, from 0." })),
      size: Type.Optional(
        Type.Integer({
          minimum: 0,
          maximum: maximumPageSize,
          default: defaultPageSize,
          description: "Items per page.",
        }),
      ),
    },
    { additionalProperties: false },
  );
}

/** The answer of `POST …/search`. */
export function searchResponseSchema<Item extends TSchema>(item: Item) {
  return Type.Object(
    { items: Type.Array(item), total: Type.Integer({ description: "Number of matches on all pages." }) },
    { additionalProperties: false },
  );
}
