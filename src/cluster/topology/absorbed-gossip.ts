/**
 * Gossip a broker has absorbed already. Each broker gossips its whole encoded configuration to every other broker
 * every interval; at the replica bound that is over 2 MB, and decoding and merging it takes tens of milliseconds, for
 * every sender, every interval. Merging is a pure function, so the same text merged into the very configuration
 * object that merging it gave before gives that object back: such gossip can be skipped exactly. Identity matters: a
 * configuration that moved on since (a change's progress, another broker's gossip) may merge the same text
 * differently, as when two coordinators recorded different changes at one version and the whole configuration whose
 * encoding sorts first wins. Texts are kept as SHA-256 digests: a few milliseconds each, and no copy of the text.
 */
import { createHash } from "node:crypto";
import type { ClusterConfiguration } from "./configuration.js";

/** The digest `AbsorbedGossip` compares texts by. */
export function gossipDigest(text: string): string {
  return createHash("sha256").update(text).digest("base64");
}

/** Per sender, the digest of the configuration text it last sent and the configuration merging that text gave. */
export class AbsorbedGossip {
  private readonly bySender = new Map<number, { digest: string; mergedInto: ClusterConfiguration }>();

  /** Whether merging the text of `digest` from `sender` into `current` would give `current` back unchanged. */
  repeats(sender: number, digest: string, current: ClusterConfiguration): boolean {
    const absorbed = this.bySender.get(sender);
    return absorbed !== undefined && absorbed.digest === digest && absorbed.mergedInto === current;
  }

  /**
   * Records that merging the text of `digest` from `sender` gave `mergedInto`, the configuration held from now on.
   * Entries of an earlier configuration can never match again (a broker never goes back to a configuration object it
   * held before), and they keep it alive: they go, so a sender that stopped gossiping holds nothing.
   */
  record(sender: number, digest: string, mergedInto: ClusterConfiguration): void {
    for (const [other, absorbed] of this.bySender) {
      if (absorbed.mergedInto !== mergedInto) this.bySender.delete(other);
    }
    this.bySender.set(sender, { digest, mergedInto });
  }

  /** How many senders' texts are remembered. */
  get size(): number {
    return this.bySender.size;
  }
}
