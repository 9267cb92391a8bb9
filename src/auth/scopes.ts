/**
 * The scope values that appear in access tokens, grouped as the identity contract (spec/identity.md) lists them.
 * Both the token issuer (which grants them) and every resource server (which requires them) read this module, so
 * a scope is spelled in exactly one place.
 */

/** Manage clusters (Administration API `/clusters…`) and reach every cluster's management API and gateway. */
export const clusterScope = "cluster";
/** Manage the API clients of a cluster. */
export const clusterClientsScope = "cluster-clients";
/** Create resources through the Modeler API. */
export const modelerCreateScope = "modeler:create";
/** Read resources through the Modeler API. */
export const modelerReadScope = "modeler:read";
/** Update resources through the Modeler API. */
export const modelerUpdateScope = "modeler:update";
/** Delete resources through the Modeler API. */
export const modelerDeleteScope = "modeler:delete";
/** Configure IP allowlist rules. */
export const ipAllowlistScope = "ipallowlist";
/** Manage connector secrets of clusters. */
export const secretsScope = "secrets";
/** Manage the members of the organization. */
export const membersScope = "members";
/** Manage cluster backups. */
export const backupsScope = "backups";

/** Every scope value a token may carry, in the canonical order tokens list them. */
export const scopeValues = [
  clusterScope,
  clusterClientsScope,
  modelerCreateScope,
  modelerReadScope,
  modelerUpdateScope,
  modelerDeleteScope,
  ipAllowlistScope,
  secretsScope,
  membersScope,
  backupsScope,
] as const;

/** One scope value. */
export type ScopeValue = (typeof scopeValues)[number];

/** The scope groups of the contract and the scope values each group stands for. */
export const scopeGroups = {
  cluster: [clusterScope],
  clusterApiClient: [clusterClientsScope],
  modelerApi: [modelerCreateScope, modelerReadScope, modelerUpdateScope, modelerDeleteScope],
  ipAllowlist: [ipAllowlistScope],
  connectorSecrets: [secretsScope],
  members: [membersScope],
  backups: [backupsScope],
} as const satisfies Record<string, readonly ScopeValue[]>;

/** Name of one scope group. */
export type ScopeGroup = keyof typeof scopeGroups;

/** Scope values whose holders may ask for a token for the Administration API. */
export const administrationScopes: readonly ScopeValue[] = [
  clusterScope,
  clusterClientsScope,
  ipAllowlistScope,
  secretsScope,
  membersScope,
  backupsScope,
];

/** Scope values whose holders may ask for a token for the Modeler API. */
export const modelerScopes: readonly ScopeValue[] = scopeGroups.modelerApi;

/** Scope values whose holders may ask for a token for cluster gateways and management APIs. */
export const gatewayScopes: readonly ScopeValue[] = [clusterScope];

/**
 * Permissions of a cluster API client (spec/identity.md), in canonical order. Such a client gets tokens only for the
 * gateway audience, bound to its one cluster by the `cluster` claim, and each permission is granted as the scope value
 * of the same name: `gateway` to call that cluster's gateway REST API, `secrets` to read its connector secrets. These
 * are not organization scopes: no organization client holds them, so `gateway` never appears in `scopeValues`.
 */
export const clusterClientPermissions = ["gateway", "secrets"] as const;

/** One permission of a cluster API client. */
export type ClusterClientPermission = (typeof clusterClientPermissions)[number];

/** The scope value a cluster API client's token carries for its `gateway` permission. */
export const clusterGatewayScope: ClusterClientPermission = "gateway";

/**
 * Scope values that open a gateway's REST API (`/v2/...`): organization clients' `cluster`, and cluster API clients'
 * `gateway`, whose tokens the gateway's access policy also binds to its own cluster. The management API stays
 * `cluster` only, so a cluster API client can never resize its cluster.
 */
export const gatewayRestScopes: readonly string[] = [clusterScope, clusterGatewayScope];

/** Whether `value` is a permission of cluster API clients. */
export function isClusterClientPermission(value: string): value is ClusterClientPermission {
  return (clusterClientPermissions as readonly string[]).includes(value);
}

/** Sorts cluster client permissions into the canonical order and removes duplicates. */
export function canonicalPermissions(permissions: Iterable<ClusterClientPermission>): ClusterClientPermission[] {
  const present = new Set(permissions);
  return clusterClientPermissions.filter((permission) => present.has(permission));
}

const knownScopes: ReadonlySet<string> = new Set(scopeValues);

/** Whether `value` is one of the scope values of the contract. */
export function isScopeValue(value: string): value is ScopeValue {
  return knownScopes.has(value);
}

/** Sorts scope values into the canonical order and removes duplicates. */
export function canonicalScopes(scopes: Iterable<ScopeValue>): ScopeValue[] {
  const present = new Set(scopes);
  return scopeValues.filter((scope) => present.has(scope));
}

/** The configured audience of each API (configuration `audiences.*`). */
export interface AudienceNames {
  admin: string;
  modeler: string;
  gateway: string;
}

/** The audiences a client holding `scopes` may request tokens for. */
export function audiencesForScopes(scopes: Iterable<string>, audiences: AudienceNames): Set<string> {
  const held = new Set(scopes);
  const allowed = new Set<string>();
  if (administrationScopes.some((scope) => held.has(scope))) allowed.add(audiences.admin);
  if (modelerScopes.some((scope) => held.has(scope))) allowed.add(audiences.modeler);
  if (gatewayScopes.some((scope) => held.has(scope))) allowed.add(audiences.gateway);
  return allowed;
}
