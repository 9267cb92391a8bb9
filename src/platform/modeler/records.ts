import type { Kysely, Transaction } from "kysely";
import type { Principal } from "../../auth/verifier.js";
import { ServiceError } from "../../http/errors.js";
import type { ClientService } from "../issuer/clients.js";
import type { PlatformDatabase } from "../store/schema.js";

/**
 * Who created or changed a resource. Access tokens identify API clients, not people, so the person is the client:
 * `name` is the client's name and `email` is `<client id>@clients.invalid` — an address in the reserved `.invalid`
 * domain, well-formed for consumers that expect an email, that can never be mistaken for a member's.
 */
export interface Person {
  name: string;
  email: string;
}

/** The `Person` of the client a token was issued to; a client deleted since shows its id as its name. */
export async function actorOf(principal: Principal, clients: Pick<ClientService, "find">): Promise<Person> {
  const client = await clients.find(principal.clientId);
  return { name: client?.name ?? principal.clientId, email: clientEmail(principal.clientId) };
}

/** The email standing for an API client in `createdBy` / `updatedBy`. */
export function clientEmail(clientId: string): string {
  return `${clientId}@clients.invalid`;
}

/** Creation and change fields every Modeler resource carries. */
export interface AuditFields {
  /** ISO-8601 instant of creation. */
  created: string;
  createdBy: Person;
  /** ISO-8601 instant of the last change. */
  updated: string;
  updatedBy: Person;
}

/** The audit columns as stored. */
export interface AuditRow {
  created_at: string;
  created_by_name: string;
  created_by_email: string;
  updated_at: string;
  updated_by_name: string;
  updated_by_email: string;
}

/** Maps stored audit columns to their API fields. */
export function auditFields(row: AuditRow): AuditFields {
  return {
    created: row.created_at,
    createdBy: { name: row.created_by_name, email: row.created_by_email },
    updated: row.updated_at,
    updatedBy: { name: row.updated_by_name, email: row.updated_by_email },
  };
}

/** Audit columns of a new row: created and updated now, by `actor`. */
export function creationColumns(actor: Person, timestamp: string): AuditRow {
  return {
    created_at: timestamp,
    created_by_name: actor.name,
    created_by_email: actor.email,
    updated_at: timestamp,
    updated_by_name: actor.name,
    updated_by_email: actor.email,
  };
}

/** Audit columns of a change: updated now, by `actor`. */
export function changeColumns(
  actor: Person,
  timestamp: string,
): Pick<AuditRow, "updated_at" | "updated_by_name" | "updated_by_email"> {
  return { updated_at: timestamp, updated_by_name: actor.name, updated_by_email: actor.email };
}

/** The audit columns, for selecting them. */
export const auditColumns = [
  "created_at",
  "created_by_name",
  "created_by_email",
  "updated_at",
  "updated_by_name",
  "updated_by_email",
] as const;

/** The case-folded form of a name that substring search compares against (Unicode-aware, locale-independent). */
export function foldName(name: string): string {
  return name.toLowerCase();
}

/**
 * Most values one statement binds in an `in` list. SQLite refuses a statement with more than 32,766 bound parameters
 * and PostgreSQL one with more than 65,535: a folder with 33,000 subfolders could not be moved (a 500 on SQLite).
 */
export const MAX_IN_LIST_VALUES = 10_000;

/** `values` in consecutive slices of at most `MAX_IN_LIST_VALUES`, one `in` list per statement each. */
export function inListSlices<T>(values: readonly T[]): T[][] {
  const slices: T[][] = [];
  for (let start = 0; start < values.length; start += MAX_IN_LIST_VALUES) {
    slices.push(values.slice(start, start + MAX_IN_LIST_VALUES));
  }
  return slices;
}

/** A database handle or an open transaction on it. */
export type Executor = Kysely<PlatformDatabase> | Transaction<PlatformDatabase>;

/**
 * Whether a database error is a constraint violation: PostgreSQL SQLSTATE class 23, or SQLite's SQLITE_CONSTRAINT
 * family. They arise when concurrent requests race (a file created in a folder being deleted), and mean the request
 * conflicts with the state another request has just created.
 */
function isConstraintViolation(error: unknown): boolean {
  const code = (error as { code?: unknown }).code;
  return typeof code === "string" && (/^23\d{3}$/.test(code) || code.startsWith("SQLITE_CONSTRAINT"));
}

/** Runs `work` in a transaction; a constraint violation raised by a concurrent change becomes a 409. */
export async function inTransaction<T>(
  database: Kysely<PlatformDatabase>,
  work: (transaction: Transaction<PlatformDatabase>) => Promise<T>,
): Promise<T> {
  try {
    return await database.transaction().execute(work);
  } catch (error) {
    if (isConstraintViolation(error)) {
      throw new ServiceError(
        "conflict",
        "A concurrent change conflicts with this request; read the resource and retry.",
        {
          cause: error,
        },
      );
    }
    throw error;
  }
}
