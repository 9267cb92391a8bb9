import { type RawBuilder, sql } from "kysely";
import { invalidRequest } from "../../http/errors.js";
import { assertStorableText } from "./content.js";
import { DateFilterError, parseDateFilter } from "./date-math.js";
import { type Executor, foldName } from "./records.js";

/**
 * How a filter field matches: `exact` compares the value as is (null matches a missing value), `name` matches a
 * case-insensitive substring of the name, `date` takes the date filter syntax of `date-math.ts`, and `person`
 * compares the name and/or email of `createdBy` / `updatedBy` exactly.
 */
export type FilterKind = "exact" | "name" | "date" | "person";

/** One searchable field of a resource. */
export interface SearchField {
  /** Column holding the value (`person`: the column prefix, e.g. `created_by`). */
  column: string;
  kind: FilterKind;
  /**
   * Column results are sorted by when the field is a sort key; absent when the field cannot be one (nullable columns
   * are never sort keys, since the dialects order nulls differently).
   */
  sortColumn?: string;
  /** SQL type of the sort column (default text); decides how its index order is set aside, see `searchRows`. */
  sortType?: "text" | "integer";
}

/** Describes how one resource is searched. */
export interface SearchDefinition {
  table: string;
  /** The resource's API field names and how each is searched. */
  fields: Readonly<Record<string, SearchField>>;
  /** Columns selected for each result (never large content). */
  columns: readonly string[];
  /** Unique key columns appended to every order so that equal sort keys keep a stable order. */
  tieBreak: readonly string[];
  /** Order used when the request gives none. */
  defaultSort: readonly SortOrder[];
}

/** One sort key of a search request. */
export interface SortOrder {
  field: string;
  direction: "ASC" | "DESC";
}

/** A search request as the API receives it (already schema-validated). */
export interface SearchRequest {
  filter?: Record<string, unknown> | undefined;
  sort?: readonly SortOrder[] | undefined;
  page?: number | undefined;
  size?: number | undefined;
}

/** One page of results and the number of results on all pages. */
export interface SearchPage<Item> {
  items: Item[];
  total: number;
}

/** The search fields of the audit columns every resource has. */
export const auditSearchFields: Readonly<Record<string, SearchField>> = {
  created: { column: "created_at", kind: "date", sortColumn: "created_at" },
  createdBy: { column: "created_by", kind: "person" },
  updated: { column: "updated_at", kind: "date", sortColumn: "updated_at" },
  updatedBy: { column: "updated_by", kind: "person" },
};

/** Page size when the request gives none. */
export const defaultPageSize = 10;
/** Largest page size. */
export const maximumPageSize = 50;

/** Escapes the LIKE wildcards (and the escape character itself) in user input. */
export function escapeLike(text: string): string {
  return text.replace(/[\\%_]/g, (character) => `\\${character}`);
}

/** The first and last instants an ISO-8601 text column can hold and compare correctly as text (years 0000–9999). */
const earliestStorableMs = new Date("0000-01-01T00:00:00.000Z").getTime();
const latestStorableExclusiveMs = new Date("9999-12-31T23:59:59.999Z").getTime() + 1;
const alwaysFalse = sql<boolean>`1 = 0`;

function dateConditions(column: string, value: string, field: string): RawBuilder<boolean>[] {
  let range: ReturnType<typeof parseDateFilter>;
  try {
    range = parseDateFilter(value);
  } catch (error) {
    if (error instanceof DateFilterError) throw invalidRequest(`filter.${field}: ${error.message}.`);
    throw error;
  }
  // Timestamps are stored as ISO-8601 text with millisecond precision, which sorts chronologically as text.
  const conditions: RawBuilder<boolean>[] = [];
  const { fromInclusiveMs, toExclusiveMs } = range;
  if (fromInclusiveMs !== undefined) {
    if (fromInclusiveMs >= latestStorableExclusiveMs) return [alwaysFalse];
    if (fromInclusiveMs > earliestStorableMs) {
      conditions.push(sql<boolean>`${sql.ref(column)} >= ${new Date(fromInclusiveMs).toISOString()}`);
    }
  }
  if (toExclusiveMs !== undefined) {
    if (toExclusiveMs <= earliestStorableMs) return [alwaysFalse];
    if (toExclusiveMs < latestStorableExclusiveMs) {
      conditions.push(sql<boolean>`${sql.ref(column)} < ${new Date(toExclusiveMs).toISOString()}`);
    }
  }
  return conditions;
}

/** Turns one filter entry into SQL conditions. */
function filterConditions(name: string, definition: SearchField, value: unknown): RawBuilder<boolean>[] {
  if (typeof value === "string") assertStorableText(`filter.${name}`, value);
  if (typeof value === "object" && value !== null) {
    for (const [key, part] of Object.entries(value)) {
      if (typeof part === "string") assertStorableText(`filter.${name}.${key}`, part);
    }
  }
  switch (definition.kind) {
    case "exact":
      return value === null
        ? [sql<boolean>`${sql.ref(definition.column)} is null`]
        : [sql<boolean>`${sql.ref(definition.column)} = ${value}`];
    case "name":
      return [
        sql<boolean>`${sql.ref(definition.column)} like ${`%${escapeLike(foldName(String(value)))}%`} escape '\\'`,
      ];
    case "date":
      return dateConditions(definition.column, String(value), name);
    case "person": {
      const person = value as { name?: string; email?: string };
      const conditions: RawBuilder<boolean>[] = [];
      if (person.name !== undefined)
        conditions.push(sql<boolean>`${sql.ref(`${definition.column}_name`)} = ${person.name}`);
      if (person.email !== undefined) {
        conditions.push(sql<boolean>`${sql.ref(`${definition.column}_email`)} = ${person.email}`);
      }
      return conditions;
    }
  }
}

/**
 * Runs a search as SQL over the organization's rows — a count and one page — with filters, sort keys and paging all
 * evaluated by the database. Unknown filter or sort fields are rejected (schemas reject them first;
 * this guards direct callers).
 */
export async function searchRows<Row>(
  executor: Executor,
  definition: SearchDefinition,
  organizationId: string,
  request: SearchRequest,
): Promise<SearchPage<Row>> {
  const conditions: RawBuilder<boolean>[] = [sql<boolean>`${sql.ref("organization_id")} = ${organizationId}`];
  for (const [name, value] of Object.entries(request.filter ?? {})) {
    if (value === undefined) continue;
    const field = definition.fields[name];
    if (field === undefined) throw invalidRequest(`filter.${name} is not a known field.`);
    conditions.push(...filterConditions(name, field, value));
  }
  // A name filter is a substring match, which no B-tree index can seek: the database must read every name of the
  // organization anyway, best from the small (organization, folded name, id) index. Left to itself a planner may
  // instead walk another index of the organization and fetch every row to test its name (ten times slower), so
  // with a name filter the matching keys are selected first in a subquery that the name index covers, and the sort
  // keys are written as no-op expressions that no index provides: the few matches are fetched, then sorted.
  const filtersByName = Object.entries(request.filter ?? {}).some(
    ([name, value]) => value !== undefined && definition.fields[name]?.kind === "name",
  );
  const orders: RawBuilder<unknown>[] = [];
  const sort = request.sort === undefined || request.sort.length === 0 ? definition.defaultSort : request.sort;
  for (const order of sort) {
    const field = definition.fields[order.field];
    if (field?.sortColumn === undefined) throw invalidRequest(`sort field '${order.field}' is not sortable.`);
    const column = sql.ref(field.sortColumn);
    const key = !filtersByName ? column : field.sortType === "integer" ? sql`(${column} + 0)` : sql`(${column} || '')`;
    orders.push(sql`${key} ${sql.raw(order.direction === "DESC" ? "desc" : "asc")}`);
  }
  for (const column of definition.tieBreak) orders.push(sql`${sql.ref(column)} asc`);

  const size = request.size ?? defaultPageSize;
  const page = request.page ?? 0;
  if (!Number.isInteger(size) || size < 0 || size > maximumPageSize) {
    throw invalidRequest(`size must be an integer from 0 to ${maximumPageSize}.`);
  }
  if (!Number.isInteger(page) || page < 0) throw invalidRequest("page must be an integer of at least 0.");
  const where = sql.join(conditions, sql` and `);
  const table = sql.table(definition.table);
  const countMatches = async () => {
    const counted = await sql<{
      total: number | string;
    }>`select count(*) as total from ${table} where ${where}`.execute(executor);
    return Number(counted.rows[0]?.total ?? 0);
  };
  if (size === 0) return { items: [], total: await countMatches() };
  const columns = sql.join(definition.columns.map((column) => sql.ref(column)));
  const pageClause = sql`order by ${sql.join(orders)} limit ${size} offset ${page * size}`;
  if (filtersByName) {
    // Every match is read and sorted anyway, so the same statement counts them (a window over all matches, taken
    // before the limit) instead of scanning the names a second time.
    const keys = sql.join(definition.tieBreak.map((column) => sql.ref(column)));
    const result = await sql<
      Row & { search_total: number | string }
    >`select ${columns}, count(*) over () as search_total from ${table} where (${keys}) in (select ${keys} from ${table} where ${where}) ${pageClause}`.execute(
      executor,
    );
    const first = result.rows[0];
    if (first === undefined) return { items: [], total: page === 0 ? 0 : await countMatches() };
    const items = result.rows.map(({ search_total: _total, ...row }) => row as unknown as Row);
    return { items, total: Number(first.search_total) };
  }
  const total = await countMatches();
  if (page * size >= total) return { items: [], total };
  const rows = await sql<Row>`select ${columns} from ${table} where ${where} ${pageClause}`.execute(executor);
  return { items: rows.rows, total };
}
