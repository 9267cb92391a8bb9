/**
 * The cluster secret and the cluster id (`service.cluster.*`): their format, and how a broker or gateway reads them
 * at start. Every broker and gateway of one cluster holds the same secret; the cluster transport derives from it the
 * key that authenticates each connection to a broker's cluster port, and, unless `service.cluster.id` names the
 * cluster, the cluster's id.
 *
 * The secret is base64 (standard or URL-safe alphabet, padding optional) of at least 32 bytes, the output of
 * `openssl rand -base64 32`: 256 bits, as much as the platform's client secrets. Error messages never repeat a
 * secret's value, only what is wrong with it.
 */
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { ConfigurationError } from "./errors.js";
import type { Configuration } from "./schema.js";

/** Fewest bytes a cluster secret must encode. */
export const CLUSTER_SECRET_MIN_BYTES = 32;

/** Longest accepted secret text: far above any sensible secret, low enough that a wrong file is noticed. */
const CLUSTER_SECRET_MAX_CHARACTERS = 4_096;

/**
 * Fewest distinct byte values a secret must contain. Random 32 bytes have about 30; a secret made of one repeated
 * byte or a short repeated pattern (typed by hand, or a placeholder left in a template) has far fewer.
 */
const CLUSTER_SECRET_MIN_DISTINCT_BYTES = 16;

/** Base64 in either alphabet, padding optional. */
const BASE64_PATTERN = /^[A-Za-z0-9+/_-]+={0,2}$/;

/** What a cluster id may look like: it appears in log lines, so only characters that need no escaping. */
export const CLUSTER_ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

/** How to obtain and hand out a secret; ends every error about a missing or invalid one. */
export const CLUSTER_SECRET_ADVICE =
  "generate one with `openssl rand -base64 32` and give the same value to every broker and gateway of the cluster, " +
  "as SERVICE_CLUSTER_SECRET or in a file named by SERVICE_CLUSTER_SECRET_FILE";

/** Why `text` is not a valid cluster secret, or undefined when it is one. Never includes the text itself. */
export function clusterSecretProblem(text: string): string | undefined {
  const trimmed = text.trim();
  if (trimmed.length > CLUSTER_SECRET_MAX_CHARACTERS) {
    return `it is longer than ${CLUSTER_SECRET_MAX_CHARACTERS} characters`;
  }
  if (!BASE64_PATTERN.test(trimmed)) return "it is not base64";
  const bytes = Buffer.from(trimmed, "base64");
  if (bytes.length < CLUSTER_SECRET_MIN_BYTES) {
    return `it encodes ${bytes.length} bytes, fewer than ${CLUSTER_SECRET_MIN_BYTES}`;
  }
  if (new Set(bytes).size < CLUSTER_SECRET_MIN_DISTINCT_BYTES) {
    return "its bytes repeat too much to be random";
  }
  return undefined;
}

/** Why `id` is not a valid cluster id, or undefined when it is one. */
export function clusterIdProblem(id: string): string | undefined {
  return CLUSTER_ID_PATTERN.test(id)
    ? undefined
    : "allowed: 1-64 of A-Z a-z 0-9 . _ - (starting with a letter or digit)";
}

/** The bytes of a valid cluster secret; throws when `text` is not one (callers validate first). */
export function decodeClusterSecret(text: string): Buffer {
  const problem = clusterSecretProblem(text);
  if (problem !== undefined) throw new Error(`invalid cluster secret: ${problem}`);
  return Buffer.from(text.trim(), "base64");
}

/** A new random cluster secret: 32 bytes, base64. */
export function generateClusterSecret(): string {
  return randomBytes(CLUSTER_SECRET_MIN_BYTES).toString("base64");
}

/** What a broker or gateway needs to join its cluster's transport. */
export interface ClusterSecretSettings {
  /** The decoded secret. */
  readonly secret: Buffer;
  /** `service.cluster.id`, or undefined when the id is to be derived from the secret. */
  readonly clusterId: string | undefined;
}

/**
 * Reads the cluster secret of a broker or gateway from `service.cluster.secret` or the file named by
 * `service.cluster.secretFile`. Throws ConfigurationError when neither is set (brokers and gateways never run
 * without one), when the file cannot be read, or when its content is not a valid secret.
 */
export function clusterSecretFromConfiguration(configuration: Configuration): ClusterSecretSettings {
  const { secret, secretFile, id } = configuration.cluster;
  const clusterId = id === "" ? undefined : id;
  if (secret !== "") return { secret: decodeClusterSecret(secret), clusterId };
  if (secretFile === "") {
    throw new ConfigurationError([
      `service.cluster.secret is not set: brokers and gateways authenticate every cluster connection with it; ${CLUSTER_SECRET_ADVICE}`,
    ]);
  }
  let text: string;
  try {
    text = readFileSync(secretFile, "utf8");
  } catch (error) {
    throw new ConfigurationError([
      `service.cluster.secretFile names ${JSON.stringify(secretFile)}, which cannot be read: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`,
    ]);
  }
  const problem = clusterSecretProblem(text);
  if (problem !== undefined) {
    throw new ConfigurationError([
      `the cluster secret in ${JSON.stringify(secretFile)} (service.cluster.secretFile) is not valid: ${problem}; ${CLUSTER_SECRET_ADVICE}`,
    ]);
  }
  return { secret: decodeClusterSecret(text), clusterId };
}
