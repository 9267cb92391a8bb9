/**
 * Enforcement of a cluster's access policy (src/auth/access-policy.ts) by its gateway, on the REST port and the
 * management port alike:
 *
 * - the IP allowlist, checked before anything else (an address outside it learns nothing but the refusal, 403);
 *   the health routes stay open so that probes and the provisioner's health polling keep working;
 * - the binding of tokens to the cluster: a token naming another cluster or another organization is refused (403),
 *   a token of a deleted cluster client (`revokedClients`) is treated as invalid (401), also when it was verified
 *   and cached before the client was deleted;
 * - while monitoring is enabled, HTTP Basic credentials of a monitoring client on `/actuator/prometheus` (401 with a
 *   Basic challenge otherwise);
 * - while writes are paused (`writesPaused`: a restore not committed yet), a 503 with the reason for every
 *   authenticated request that could change the cluster; reads go on.
 *
 * The guard reads the policy in force at every check, so a new policy applies to the next request without a
 * restart.
 */
import { createHash, timingSafeEqual } from "node:crypto";
import type { FastifyRequest } from "fastify";
import type { AccessPolicy } from "../../auth/access-policy.js";
import { AddressRangeSet } from "../../auth/address-ranges.js";
import { type Principal, TokenVerificationError } from "../../auth/verifier.js";
import { ServiceError } from "../../http/errors.js";
import { clientAddressOf } from "./client-address.js";

/** Why the guard refused a request; the label of the refusal counter. */
export type AccessRefusalReason =
  | "address-not-allowed"
  | "token-for-another-cluster"
  | "token-for-another-organization"
  | "client-deleted"
  | "metrics-credentials";

/** Routes on the management port that every address may call: liveness and readiness probes, health polling. */
export const healthRoutes: ReadonlySet<string> = new Set([
  "/actuator/health",
  "/actuator/health/liveness",
  "/actuator/health/readiness",
]);

/** Methods that only read, which a pause of the writes lets through. */
const READ_METHODS: ReadonlySet<string> = new Set(["GET", "HEAD", "OPTIONS"]);

/** What a refused write is told to wait: a restore's commit follows its cluster's readiness within moments. */
const WRITES_PAUSED_RETRY_AFTER_SECONDS = 2;

/** Realm of the Basic challenge on the metrics route. */
export const metricsRealm = "flowplane metrics";

/**
 * Most allowlist decisions remembered per policy. Checking an address against a large allowlist walks every range,
 * and a gateway sees the same few client addresses again and again; the bound keeps a client that rotates through
 * many addresses from growing the memory.
 */
const MAX_REMEMBERED_DECISIONS = 10_000;

/** Longest `Authorization` header worth decoding as Basic credentials (usernames are at most 256 characters). */
const MAX_BASIC_CREDENTIALS_CHARACTERS = 2_048;

function sha256(text: string): Buffer {
  return createHash("sha256").update(text, "utf8").digest();
}

/**
 * Compared against when a username is unknown, so that an unknown username costs the same work as a wrong
 * password.
 */
const unknownUserDigest = Buffer.alloc(32);

/** An access policy prepared for checking requests against it: address ranges parsed, lists turned into sets. */
export class EnforcedAccessPolicy {
  readonly #allowlist: AddressRangeSet;
  readonly #decisions = new Map<string, boolean>();
  readonly #revokedClientIds: ReadonlySet<string>;
  readonly #monitoringDigests: ReadonlyMap<string, Buffer>;

  /** Prepares `policy`, which must have passed `parseAccessPolicy` (its allowlist entries are valid). */
  constructor(readonly policy: AccessPolicy) {
    this.#allowlist = AddressRangeSet.fromEntries(policy.ipAllowlist.map((entry) => entry.ip));
    this.#revokedClientIds = new Set(policy.revokedClients.map((client) => client.clientId));
    this.#monitoringDigests = new Map(
      policy.monitoring.clients.map((client) => [client.username, Buffer.from(client.passwordSha256, "hex")]),
    );
  }

  /** Whether a request from `address` may proceed: an empty allowlist allows everyone. */
  allowsAddress(address: string | undefined): boolean {
    if (this.#allowlist.size === 0) return true;
    if (address === undefined) return false;
    const remembered = this.#decisions.get(address);
    if (remembered !== undefined) return remembered;
    const allowed = this.#allowlist.contains(address);
    if (this.#decisions.size >= MAX_REMEMBERED_DECISIONS) this.#decisions.clear();
    this.#decisions.set(address, allowed);
    return allowed;
  }

  /** Whether the client `clientId` was deleted while tokens issued to it may still be valid. */
  isRevoked(clientId: string): boolean {
    return this.#revokedClientIds.has(clientId);
  }

  /** Why writes are paused, or undefined while they are taken. */
  get writesPausedReason(): string | undefined {
    return this.policy.writesPaused?.reason;
  }

  /** Whether monitoring is on, so that the metrics route needs a monitoring client's credentials. */
  get protectsMetrics(): boolean {
    return this.policy.monitoring.enabled;
  }

  /** Whether `username` and `password` are the credentials of one of the cluster's monitoring clients. */
  acceptsMonitoringCredentials(username: string, password: string): boolean {
    const expected = this.#monitoringDigests.get(username);
    const matches = timingSafeEqual(sha256(password), expected ?? unknownUserDigest);
    return expected !== undefined && matches;
  }
}

/** The username and password of an `Authorization: Basic` header, or undefined when it holds none. */
export function basicCredentialsOf(
  authorization: string | undefined,
): { username: string; password: string } | undefined {
  if (authorization === undefined || authorization.length > MAX_BASIC_CREDENTIALS_CHARACTERS) return undefined;
  const match = /^Basic +([A-Za-z0-9+/]+={0,2}) *$/i.exec(authorization);
  if (match?.[1] === undefined) return undefined;
  const decoded = Buffer.from(match[1], "base64").toString("utf8");
  const separator = decoded.indexOf(":");
  if (separator === -1) return undefined;
  return { username: decoded.slice(0, separator), password: decoded.slice(separator + 1) };
}

/** Options of `AccessGuard`. */
export interface AccessGuardOptions {
  /** The policy in force now (read at every check). */
  policy: () => EnforcedAccessPolicy;
  /** Reverse proxies whose `X-Forwarded-For` header is believed. */
  trustedProxies: AddressRangeSet;
  /** Told of every refusal (for the metrics). */
  onRefused: (reason: AccessRefusalReason) => void;
}

/** Checks requests against the access policy in force; each check throws the refusal to send. */
export class AccessGuard {
  readonly #options: AccessGuardOptions;

  constructor(options: AccessGuardOptions) {
    this.#options = options;
  }

  /** Refuses (403) a request whose client address the allowlist does not hold. */
  checkAddress(request: FastifyRequest): void {
    const address = clientAddressOf(
      request.socket.remoteAddress,
      request.headers["x-forwarded-for"],
      this.#options.trustedProxies,
    );
    if (this.#options.policy().allowsAddress(address)) return;
    this.#options.onRefused("address-not-allowed");
    throw new ServiceError(
      "addressNotAllowed",
      `Requests from ${address ?? "an unknown address"} are refused by the cluster's IP allowlist.`,
    );
  }

  /**
   * Refuses a verified token that must not reach this cluster: issued to a deleted client (TokenVerificationError,
   * answered 401), for another organization or naming another cluster (403). Organization clients, whose tokens
   * name no cluster, reach every cluster of their organization.
   */
  checkPrincipal(principal: Principal): void {
    const policy = this.#options.policy();
    if (policy.isRevoked(principal.clientId)) {
      this.#options.onRefused("client-deleted");
      throw new TokenVerificationError("The access token was issued to a client that has been deleted.");
    }
    if (principal.organizationId !== policy.policy.organizationId) {
      this.#options.onRefused("token-for-another-organization");
      throw new ServiceError(
        "tokenForAnotherCluster",
        "The access token was issued to a client of another organization.",
      );
    }
    if (principal.clusterId !== undefined && principal.clusterId !== policy.policy.clusterId) {
      this.#options.onRefused("token-for-another-cluster");
      throw new ServiceError("tokenForAnotherCluster", "The access token was issued for another cluster.");
    }
  }

  /**
   * While writes are paused, refuses (503 with `Retry-After`) a request whose method may change the cluster. Called
   * after authentication, so that a caller without a valid token learns nothing of the pause.
   */
  checkWritesAllowed(request: FastifyRequest): void {
    const reason = this.#options.policy().writesPausedReason;
    if (reason === undefined || READ_METHODS.has(request.method)) return;
    throw new ServiceError("writesPaused", `The cluster takes no writes for the moment: ${reason}. Retry later.`, {
      headers: { "retry-after": String(WRITES_PAUSED_RETRY_AFTER_SECONDS) },
    });
  }

  /** While monitoring is on, refuses (401 with a Basic challenge) a request without a monitoring client's credentials. */
  checkMetricsCredentials(request: FastifyRequest): void {
    const policy = this.#options.policy();
    if (!policy.protectsMetrics) return;
    const credentials = basicCredentialsOf(request.headers.authorization);
    if (credentials !== undefined && policy.acceptsMonitoringCredentials(credentials.username, credentials.password)) {
      return;
    }
    this.#options.onRefused("metrics-credentials");
    throw new ServiceError(
      "unauthorized",
      "The metrics require the credentials of one of the cluster's monitoring clients as HTTP Basic authentication.",
      { headers: { "www-authenticate": `Basic realm="${metricsRealm}", charset="UTF-8"` } },
    );
  }
}
