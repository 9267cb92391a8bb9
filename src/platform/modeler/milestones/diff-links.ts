import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import type { Kysely } from "kysely";
import type { Clock } from "../../../auth/clock.js";
import { ServiceError } from "../../../http/errors.js";
import { loadSecretSetting, secretSettingNames } from "../../store/key-material.js";
import type { PlatformDatabase } from "../../store/schema.js";
import type { SecretsBox } from "../../store/secrets-box.js";

/** Name of the `settings` row holding the key that signs diff links (sealed, see store/key-material.ts). */
export const diffLinkKeySetting = secretSettingNames.diffLinkKey;

/** How long a diff link works after it was handed out. */
export const diffLinkLifetimeMs = 10 * 60 * 1000;

const keyBytes = 32;

/** What a signed diff link grants: reading the diff of two milestones of one organization until `expiresAtMs`. */
export interface DiffGrant {
  organizationId: string;
  fromMilestoneId: string;
  toMilestoneId: string;
  expiresAtMs: number;
}

/**
 * Signs and checks the links that serve milestone diffs. The compare endpoint needs a token with `modeler:read`;
 * the link it returns needs none, so it can be opened in a browser or handed to a diff viewer, and is instead a
 * capability: an HMAC-SHA-256 over the organization, both milestone ids and an expiry ten minutes ahead, under a
 * key kept in the `settings` table so that every replica accepts links any replica signed.
 */
export class DiffLinkSigner {
  private constructor(
    private readonly key: Buffer,
    private readonly clock: Clock,
  ) {}

  /**
   * Loads the signing key from the `settings` table (sealed under the store's key-encryption key), creating it on
   * first use (replicas converge on one key).
   */
  static async open(database: Kysely<PlatformDatabase>, secrets: SecretsBox, clock: Clock): Promise<DiffLinkSigner> {
    const value = await loadSecretSetting(database, secrets, diffLinkKeySetting, () =>
      randomBytes(keyBytes).toString("base64url"),
    );
    const key = Buffer.from(value, "base64url");
    if (key.length !== keyBytes) throw new Error(`the diff link key must be ${keyBytes} bytes, found ${key.length}`);
    return new DiffLinkSigner(key, clock);
  }

  /** A grant for the two milestones, valid for `diffLinkLifetimeMs` from now, and its signature. */
  sign(
    organizationId: string,
    fromMilestoneId: string,
    toMilestoneId: string,
  ): { grant: DiffGrant; signature: string } {
    const grant = { organizationId, fromMilestoneId, toMilestoneId, expiresAtMs: this.clock() + diffLinkLifetimeMs };
    return { grant, signature: this.signature(grant) };
  }

  /** Checks a presented grant: 403 when the signature does not match or the link has expired. */
  verify(grant: DiffGrant, signature: string): void {
    // The texts are compared, not the bytes they decode to: base64url's last character may carry bits that decoding
    // ignores, and a link must have one spelling only.
    const expected = Buffer.from(this.signature(grant), "utf8");
    const presented = Buffer.from(signature, "utf8");
    if (presented.length !== expected.length || !timingSafeEqual(presented, expected)) {
      // Not `forbidden`, whose title speaks of a token's scopes: a diff link is used without a token.
      throw new ServiceError(
        "linkNotValid",
        "The diff link's signature is not valid; ask the compare endpoint for a new link.",
      );
    }
    if (this.clock() >= grant.expiresAtMs) {
      throw new ServiceError("linkNotValid", "The diff link has expired; ask the compare endpoint for a new link.");
    }
  }

  private signature(grant: DiffGrant): string {
    const message = [grant.organizationId, grant.fromMilestoneId, grant.toMilestoneId, String(grant.expiresAtMs)].join(
      "\n",
    );
    return createHmac("sha256", this.key).update(message).digest("base64url");
  }
}
