/**
 * A cluster's access policy: who may reach its gateway and management port. The platform keeps the parts of it
 * (IP allowlist, monitoring clients, deleted cluster clients) in its store and hands the whole document to the
 * cluster's provisioner, which delivers it as a file beside the gateway (a file in the cluster's directory for the
 * local provisioner; a mounted ConfigMap would do for another). The gateway reads the file at start and again
 * whenever it changes, so a change takes effect without a restart. The document is the contract between the two
 * sides, so it lives here, in the folder both share.
 */
import { type Static, Type } from "typebox";
import { Value } from "typebox/value";
import { InvalidAddressRangeError, parseAddressRangeEntry } from "./address-ranges.js";

/** Version of the document format; a reader refuses any other. */
export const ACCESS_POLICY_FORMAT_VERSION = 1;

/** The access policy document, as written to and read from the policy file. */
export const accessPolicySchema = Type.Object(
  {
    formatVersion: Type.Literal(ACCESS_POLICY_FORMAT_VERSION),
    /** The cluster this policy guards: a token naming another cluster in its `cluster` claim is refused (403). */
    clusterId: Type.String({ minLength: 1, maxLength: 128 }),
    /** The organization owning the cluster: a token of another organization is refused (403). */
    organizationId: Type.String({ minLength: 1, maxLength: 128 }),
    /** Entries of `CIDR[,CIDR…]`; an address outside all of them is refused (403). Empty: everyone may connect. */
    ipAllowlist: Type.Array(
      Type.Object(
        { ip: Type.String({ minLength: 1, maxLength: 4_096 }), description: Type.String({ maxLength: 1_024 }) },
        { additionalProperties: false },
      ),
      { maxItems: 1_000 },
    ),
    /** While enabled, `/actuator/prometheus` requires HTTP Basic credentials of one of the clients. */
    monitoring: Type.Object(
      {
        enabled: Type.Boolean(),
        clients: Type.Array(
          Type.Object(
            {
              username: Type.String({ minLength: 1, maxLength: 256 }),
              /** SHA-256 of the password, lowercase hex (the passwords are generated with 256 bits of entropy). */
              passwordSha256: Type.String({ pattern: "^[0-9a-f]{64}$" }),
            },
            { additionalProperties: false },
          ),
          { maxItems: 1_000 },
        ),
      },
      { additionalProperties: false },
    ),
    /**
     * Cluster API clients deleted while tokens issued to them may still be unexpired: their tokens are refused
     * (401). An entry may be dropped once `revokedAt` is older than the longest token lifetime.
     */
    revokedClients: Type.Array(
      Type.Object(
        { clientId: Type.String({ minLength: 1, maxLength: 256 }), revokedAt: Type.String({ format: "date-time" }) },
        { additionalProperties: false },
      ),
      { maxItems: 100_000 },
    ),
    /**
     * Present while whoever runs the cluster holds its writes back (a restore that is not committed yet, whose undoing
     * would discard them): the gateway answers every request that would change the cluster 503 with this reason, and
     * still serves reads. Absent: writes are taken.
     */
    writesPaused: Type.Optional(
      Type.Object({ reason: Type.String({ minLength: 1, maxLength: 1_024 }) }, { additionalProperties: false }),
    ),
  },
  { additionalProperties: false },
);

/** A cluster's access policy. */
export type AccessPolicy = Static<typeof accessPolicySchema>;

/** Largest policy file a reader accepts, in bytes: a bound on what a corrupt or hostile file can make it hold. */
export const MAX_ACCESS_POLICY_BYTES = 16 * 1024 * 1024;

/** A policy document that does not follow the format; the message names the first problem found. */
export class InvalidAccessPolicyError extends Error {
  constructor(reason: string) {
    super(`invalid access policy: ${reason}`);
    this.name = "InvalidAccessPolicyError";
  }
}

/** The policy that restricts nothing: no allowlist, unprotected metrics, no revoked clients. */
export function openAccessPolicy(clusterId: string, organizationId: string): AccessPolicy {
  return {
    formatVersion: ACCESS_POLICY_FORMAT_VERSION,
    clusterId,
    organizationId,
    ipAllowlist: [],
    monitoring: { enabled: false, clients: [] },
    revokedClients: [],
  };
}

/** Parses and checks a policy document (JSON text); every allowlist entry must be a valid range list. */
export function parseAccessPolicy(text: string): AccessPolicy {
  if (Buffer.byteLength(text) > MAX_ACCESS_POLICY_BYTES) {
    throw new InvalidAccessPolicyError(`the document is larger than ${MAX_ACCESS_POLICY_BYTES} bytes`);
  }
  let document: unknown;
  try {
    document = JSON.parse(text);
  } catch {
    throw new InvalidAccessPolicyError("the document is not JSON");
  }
  const firstError = Value.Errors(accessPolicySchema, document)[0];
  if (firstError !== undefined) {
    // A field the format does not know fails the `additionalProperties: false` schema, which says "schema is false".
    const unknownField = firstError.keyword === "boolean" && firstError.schemaPath.endsWith("/additionalProperties");
    throw new InvalidAccessPolicyError(
      `${firstError.instancePath || "/"} ${unknownField ? "is not a known field" : firstError.message}`,
    );
  }
  const policy = document as AccessPolicy;
  for (const [index, entry] of policy.ipAllowlist.entries()) {
    try {
      parseAddressRangeEntry(entry.ip);
    } catch (error) {
      if (!(error instanceof InvalidAddressRangeError)) throw error;
      // The location and the reason, not the entry's text: readers log this message, and it must not repeat the file.
      throw new InvalidAccessPolicyError(
        `/ipAllowlist/${index}/ip is not a list of IPv4 or IPv6 addresses or CIDR blocks: ${error.reason}`,
      );
    }
  }
  return policy;
}

/** Serializes a policy for its file (stable key order, so an unchanged policy writes the same bytes). */
export function serializeAccessPolicy(policy: AccessPolicy): string {
  return `${JSON.stringify(
    {
      formatVersion: policy.formatVersion,
      clusterId: policy.clusterId,
      organizationId: policy.organizationId,
      ipAllowlist: policy.ipAllowlist.map((entry) => ({ ip: entry.ip, description: entry.description })),
      monitoring: {
        enabled: policy.monitoring.enabled,
        clients: policy.monitoring.clients.map((client) => ({
          username: client.username,
          passwordSha256: client.passwordSha256,
        })),
      },
      revokedClients: policy.revokedClients.map((client) => ({
        clientId: client.clientId,
        revokedAt: client.revokedAt,
      })),
      ...(policy.writesPaused === undefined ? {} : { writesPaused: { reason: policy.writesPaused.reason } }),
    },
    null,
    2,
  )}\n`;
}

/** `policy` with its writes paused for `reason`, or taken again when `reason` is undefined. */
export function withWritesPaused(policy: AccessPolicy, reason: string | undefined): AccessPolicy {
  const { writesPaused: _previous, ...rest } = policy;
  return reason === undefined ? rest : { ...rest, writesPaused: { reason } };
}
