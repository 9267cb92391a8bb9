import { randomUUID } from "node:crypto";
import type { Store } from "./store/database.js";

/** What the first start creates, and whether this start created it. */
export interface BootstrapResult {
  organizationId: string;
  /** Present only on the start that created the organization: the administration client to print once. */
  createdClient: { clientId: string; clientSecret: string } | null;
}

/** Options of `bootstrapOrganization`. */
export interface BootstrapOptions {
  organizationName: string;
  ownerEmail: string;
  /** Preset administration client (automated deployments); when absent one is generated. */
  presetClient: { clientId: string; clientSecret: string } | null;
  /** Creates the administration client holding every scope group; returns its id and secret. */
  createAdministrationClient(
    organizationId: string,
    preset: { clientId: string; clientSecret: string } | null,
  ): Promise<{ clientId: string; clientSecret: string }>;
  now?: () => Date;
}

const organizationSetting = "organization-id";

/**
 * Creates the organization, its owner member and an administration client on the very first start. Idempotent
 * across restarts and safe when several platform replicas start at once against one PostgreSQL database: the
 * `settings` row naming the organization is claimed with insert-if-absent, and only the claimant creates the rest.
 */
export async function bootstrapOrganization(store: Store, options: BootstrapOptions): Promise<BootstrapResult> {
  const existing = await readOrganizationId(store);
  if (existing !== null) {
    // A first start that stopped between creating the organization and its client would otherwise leave nobody
    // able to administer it; finish that step now.
    if (await hasClients(store, existing)) return { organizationId: existing, createdClient: null };
    const client = await options.createAdministrationClient(existing, options.presetClient);
    return { organizationId: existing, createdClient: options.presetClient === null ? client : null };
  }

  const candidateId = randomUUID();
  const timestamp = (options.now?.() ?? new Date()).toISOString();
  const claimed = await store.database.transaction().execute(async (transaction) => {
    const inserted = await transaction
      .insertInto("settings")
      .values({ name: organizationSetting, value: candidateId })
      .onConflict((conflict) => conflict.column("name").doNothing())
      .executeTakeFirst();
    if (Number(inserted.numInsertedOrUpdatedRows ?? 0n) === 0) return false;
    await transaction
      .insertInto("organizations")
      .values({ id: candidateId, name: options.organizationName, created_at: timestamp })
      .execute();
    await transaction
      .insertInto("members")
      .values({
        organization_id: candidateId,
        email: options.ownerEmail.trim().toLowerCase(),
        name: options.ownerEmail.split("@")[0] ?? options.ownerEmail,
        roles: JSON.stringify(["owner"]),
        invite_pending: 0,
        created_at: timestamp,
        updated_at: timestamp,
      })
      .execute();
    return true;
  });
  if (!claimed) {
    const winner = await readOrganizationId(store);
    if (winner === null) throw new Error("bootstrap: another replica claimed the organization but it cannot be read");
    return { organizationId: winner, createdClient: null };
  }
  const client = await options.createAdministrationClient(candidateId, options.presetClient);
  return { organizationId: candidateId, createdClient: options.presetClient === null ? client : null };
}

async function readOrganizationId(store: Store): Promise<string | null> {
  const row = await store.database
    .selectFrom("settings")
    .select("value")
    .where("name", "=", organizationSetting)
    .executeTakeFirst();
  return row?.value ?? null;
}

async function hasClients(store: Store, organizationId: string): Promise<boolean> {
  const row = await store.database
    .selectFrom("clients")
    .select("client_id")
    .where("organization_id", "=", organizationId)
    .limit(1)
    .executeTakeFirst();
  return row !== undefined;
}
