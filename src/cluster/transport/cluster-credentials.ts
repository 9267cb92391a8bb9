/**
 * What the transport knows of the cluster secret: a key derived from it, which computes and checks the proofs of the
 * connection handshake (`handshake.ts`), and the cluster's id, which every handshake carries so that a node refuses
 * peers of another cluster with a reason an operator can act on.
 *
 * The secret itself is not kept. The handshake key and the default cluster id come from it through HKDF-SHA256
 * with distinct labels, so the id (which anyone who connects learns, and which log lines show) reveals nothing
 * about the key. The key is a private field and the object serializes and prints as its cluster id only, so
 * logging options that hold credentials cannot leak it.
 */
import { createHmac, hkdfSync, timingSafeEqual } from "node:crypto";
import { inspect } from "node:util";
import { CLUSTER_ID_PATTERN, CLUSTER_SECRET_MIN_BYTES } from "../../config/cluster-secret.js";

/** Bytes of the handshake key and of every proof (HMAC-SHA256). */
export const HANDSHAKE_PROOF_BYTES = 32;

/** Bytes of the cluster id derived from the secret when none is configured (shown as hexadecimal). */
const DERIVED_CLUSTER_ID_BYTES = 8;

/** Salt of both derivations: binds them to this use of the secret. */
const DERIVATION_SALT = "flowplane cluster transport";

/** A cluster's credentials as the transport uses them; see the module comment. */
export class ClusterCredentials {
  readonly #handshakeKey: Buffer;

  private constructor(
    /** The id every handshake carries; peers with another id are refused. */
    readonly clusterId: string,
    handshakeKey: Buffer,
  ) {
    this.#handshakeKey = handshakeKey;
  }

  /**
   * Credentials from a cluster secret of at least 32 bytes, and the cluster's id (derived from the secret when
   * undefined). Both sides of a connection must hold the same secret and id.
   */
  static fromSecret(secret: Uint8Array, clusterId?: string): ClusterCredentials {
    if (secret.length < CLUSTER_SECRET_MIN_BYTES) {
      throw new Error(`invariant violated: a cluster secret has at least ${CLUSTER_SECRET_MIN_BYTES} bytes`);
    }
    if (clusterId !== undefined && !CLUSTER_ID_PATTERN.test(clusterId)) {
      throw new Error(`invariant violated: cluster id ${JSON.stringify(clusterId)} has the format the setting allows`);
    }
    const handshakeKey = Buffer.from(
      hkdfSync("sha256", secret, DERIVATION_SALT, "handshake key", HANDSHAKE_PROOF_BYTES),
    );
    const derivedId = Buffer.from(
      hkdfSync("sha256", secret, DERIVATION_SALT, "cluster id", DERIVED_CLUSTER_ID_BYTES),
    ).toString("hex");
    return new ClusterCredentials(clusterId ?? derivedId, handshakeKey);
  }

  /** The proof of `transcript`: HMAC-SHA256 under the handshake key. */
  prove(transcript: Uint8Array): Buffer {
    return createHmac("sha256", this.#handshakeKey).update(transcript).digest();
  }

  /** Whether `proof` is the proof of `transcript`, compared in constant time. */
  verify(transcript: Uint8Array, proof: Uint8Array): boolean {
    const expected = this.prove(transcript);
    return proof.length === expected.length && timingSafeEqual(expected, proof);
  }

  /** Only the cluster id, so that serializing options that hold credentials cannot reveal the key. */
  toJSON(): { clusterId: string } {
    return { clusterId: this.clusterId };
  }

  /** Only the cluster id, for the same reason as `toJSON`. */
  [inspect.custom](): string {
    return `ClusterCredentials { clusterId: ${JSON.stringify(this.clusterId)} }`;
  }
}
