/**
 * Membership rules.
 *
 * The group changes membership one server at a time (Raft dissertation §4.1) rather than by joint consensus:
 * every change adds or removes at most one voter, so any majority of the old voter set and any majority of the new
 * one overlap, and a single majority decides everything. That keeps the quorum code and the proofs small, and the
 * cluster scaling feature never needs to swap several voters atomically (it joins and leaves replicas one at a time
 * anyway). As the dissertation requires, a configuration takes effect on a member as soon as its entry is in that
 * member's log (committed or not), a leader proposes a change only when no earlier change is uncommitted, and only
 * after it has committed an entry of its own term (the fix for the single-server change bug found after the
 * dissertation).
 *
 * New members join as learners (they receive the log but neither vote nor count towards commits). The CALLER
 * decides when to promote a learner; the core refuses the promotion until the learner holds every committed entry,
 * so a promotion never makes the group less available than it was.
 */
import type { Configuration, Member, MemberId } from "../types.js";

/** One membership change. Each changes at most one voter. */
export type ConfigurationChange =
  | { readonly type: "addLearner"; readonly member: MemberId; readonly priority: number }
  | { readonly type: "promote"; readonly member: MemberId }
  | { readonly type: "remove"; readonly member: MemberId }
  | { readonly type: "setPriority"; readonly member: MemberId; readonly priority: number };

/** The empty configuration of a member that has not yet received its group's log. */
export const EMPTY_CONFIGURATION: Configuration = { members: [] };

/** Ids of the voters. */
export function votersOf(configuration: Configuration): MemberId[] {
  return configuration.members.filter((member) => member.role === "voter").map((member) => member.id);
}

/** The member with this id, if any. */
export function memberOf(configuration: Configuration, id: MemberId): Member | undefined {
  return configuration.members.find((member) => member.id === id);
}

/** Whether `id` is a voter. */
export function isVoter(configuration: Configuration, id: MemberId): boolean {
  return memberOf(configuration, id)?.role === "voter";
}

/** Throws unless the configuration is well formed: unique ids, integer priorities ≥ 1, no joint part. */
export function assertValidConfiguration(configuration: Configuration): void {
  if (configuration.outgoing !== undefined) {
    throw new Error("configuration: joint configurations are not used; changes are single-server changes");
  }
  const seen = new Set<MemberId>();
  for (const member of configuration.members) {
    if (seen.has(member.id)) throw new Error(`configuration: member ${member.id} appears twice`);
    seen.add(member.id);
    if (!Number.isInteger(member.priority) || member.priority < 1) {
      throw new Error(`configuration: member ${member.id} has priority ${member.priority}; it must be an integer ≥ 1`);
    }
  }
}

/** Applies one change, or throws a clear error when the change does not fit the configuration. */
export function applyChange(configuration: Configuration, change: ConfigurationChange): Configuration {
  const existing = memberOf(configuration, change.member);
  const others = configuration.members.filter((member) => member.id !== change.member);
  let result: Configuration;
  switch (change.type) {
    case "addLearner":
      if (existing) throw new Error(`configuration change: member ${change.member} is already a member`);
      result = {
        members: [...configuration.members, { id: change.member, role: "learner", priority: change.priority }],
      };
      break;
    case "promote":
      if (existing?.role !== "learner")
        throw new Error(`configuration change: member ${change.member} is not a learner`);
      result = { members: [...others, { ...existing, role: "voter" }] };
      break;
    case "remove":
      if (!existing) throw new Error(`configuration change: member ${change.member} is not a member`);
      if (existing.role === "voter" && votersOf(configuration).length === 1) {
        throw new Error("configuration change: cannot remove the last voter");
      }
      result = { members: others };
      break;
    case "setPriority":
      if (!existing) throw new Error(`configuration change: member ${change.member} is not a member`);
      result = { members: [...others, { ...existing, priority: change.priority }] };
      break;
  }
  const sorted = { members: [...result.members].sort((left, right) => left.id - right.id) };
  assertValidConfiguration(sorted);
  return sorted;
}

/** Encodes a configuration as the data of a configuration entry. */
export function encodeConfiguration(configuration: Configuration): Uint8Array {
  return new TextEncoder().encode(JSON.stringify({ members: configuration.members }));
}

/** Decodes the data of a configuration entry. */
export function decodeConfiguration(data: Uint8Array): Configuration {
  const parsed = JSON.parse(new TextDecoder().decode(data)) as Configuration;
  assertValidConfiguration(parsed);
  return { members: parsed.members };
}

/** Whether two configurations have the same members with the same roles and priorities. */
export function sameConfiguration(left: Configuration, right: Configuration): boolean {
  const key = (configuration: Configuration): string =>
    [...configuration.members]
      .sort((a, b) => a.id - b.id)
      .map((member) => `${member.id}:${member.role}:${member.priority}`)
      .join(",");
  return key(left) === key(right);
}

/**
 * Configurations in force along the log: a base (from the snapshot or empty) and one record per configuration
 * entry still in the log. Truncating the log reverts to the previous record; compaction folds records into the base.
 */
export class ConfigurationHistory {
  private readonly records: { index: number; configuration: Configuration }[];

  constructor(baseIndex: number, base: Configuration) {
    this.records = [{ index: baseIndex, configuration: base }];
  }

  /** The configuration in force at the end of the log. */
  current(): Configuration {
    const last = this.records[this.records.length - 1];
    if (!last) throw new Error("configuration history: empty");
    return last.configuration;
  }

  /** Index of the latest configuration entry (or of the base). */
  currentIndex(): number {
    return this.records[this.records.length - 1]?.index ?? 0;
  }

  /** The configuration in force at `index`. */
  at(index: number): Configuration {
    for (let position = this.records.length - 1; position >= 0; position--) {
      const record = this.records[position];
      if (record && record.index <= index) return record.configuration;
    }
    const first = this.records[0];
    if (!first) throw new Error("configuration history: empty");
    return first.configuration;
  }

  /** Records a configuration entry appended at `index`. */
  append(index: number, configuration: Configuration): void {
    if (index <= this.currentIndex()) {
      throw new Error(`configuration history: entry ${index} not after ${this.currentIndex()}`);
    }
    this.records.push({ index, configuration });
  }

  /** Forgets configuration entries at or after `index` (the log was truncated there). */
  truncateFrom(index: number): void {
    while (this.records.length > 1 && (this.records[this.records.length - 1]?.index ?? 0) >= index) {
      this.records.pop();
    }
  }

  /** Replaces everything with a snapshot's configuration. */
  reset(index: number, configuration: Configuration): void {
    this.records.length = 0;
    this.records.push({ index, configuration });
  }

  /** Folds records at or before `index` into the base, bounding the history by the live log. */
  compactTo(index: number): void {
    while (this.records.length > 1 && (this.records[1]?.index ?? Number.POSITIVE_INFINITY) <= index) {
      this.records.shift();
    }
  }
}
