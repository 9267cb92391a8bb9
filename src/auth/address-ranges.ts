/**
 * IP address ranges as operators write them in an IP allowlist: one entry holds one or more IPv4 or IPv6 addresses
 * or CIDR blocks separated by commas (`10.0.0.0/8, 2001:db8::/32, 192.0.2.7`). Shared by the platform, which
 * validates what it stores, and the gateway, which enforces it; both must agree on what an entry means.
 */
import { BlockList, isIPv4, isIPv6 } from "node:net";

/** Longest entry accepted, in characters: bounds the work one entry costs (and what an error message repeats). */
export const MAX_ADDRESS_RANGE_ENTRY_LENGTH = 4_096;

/** Most ranges one entry may hold. */
export const MAX_RANGES_PER_ENTRY = 64;

/** One parsed range: an address family, the network address and the prefix length. */
export interface AddressRange {
  family: "ipv4" | "ipv6";
  network: string;
  prefixLength: number;
}

/** An entry of an allowlist that is not a list of addresses or CIDR blocks; `range` is the part at fault. */
export class InvalidAddressRangeError extends Error {
  constructor(
    readonly range: string,
    readonly reason: string,
  ) {
    super(`"${range}" is not an IPv4 or IPv6 address or CIDR block: ${reason}`);
    this.name = "InvalidAddressRangeError";
  }
}

/** Shortens what an error repeats of the caller's input, so a message stays bounded. */
function quoted(text: string): string {
  return text.length <= 64 ? text : `${text.slice(0, 61)}...`;
}

/** Parses one range, `address` or `address/prefix`. */
export function parseAddressRange(text: string): AddressRange {
  const trimmed = text.trim();
  if (trimmed === "") throw new InvalidAddressRangeError(quoted(text), "it is empty");
  const slash = trimmed.indexOf("/");
  const network = slash === -1 ? trimmed : trimmed.slice(0, slash);
  const family = isIPv4(network) ? "ipv4" : isIPv6(network) ? "ipv6" : undefined;
  if (family === undefined) throw new InvalidAddressRangeError(quoted(trimmed), "the address is not valid");
  const maximumPrefix = family === "ipv4" ? 32 : 128;
  if (slash === -1) return { family, network, prefixLength: maximumPrefix };
  const prefixText = trimmed.slice(slash + 1);
  if (!/^\d{1,3}$/.test(prefixText)) {
    throw new InvalidAddressRangeError(quoted(trimmed), "the prefix length is not a number");
  }
  const prefixLength = Number(prefixText);
  if (prefixLength > maximumPrefix) {
    throw new InvalidAddressRangeError(quoted(trimmed), `the prefix length is above ${maximumPrefix}`);
  }
  return { family, network, prefixLength };
}

/** Parses one allowlist entry: ranges separated by commas. */
export function parseAddressRangeEntry(entry: string): AddressRange[] {
  if (entry.length > MAX_ADDRESS_RANGE_ENTRY_LENGTH) {
    throw new InvalidAddressRangeError(
      quoted(entry),
      `an entry holds at most ${MAX_ADDRESS_RANGE_ENTRY_LENGTH} characters`,
    );
  }
  const parts = entry.split(",");
  if (parts.length > MAX_RANGES_PER_ENTRY) {
    throw new InvalidAddressRangeError(quoted(entry), `an entry holds at most ${MAX_RANGES_PER_ENTRY} ranges`);
  }
  return parts.map(parseAddressRange);
}

/** A set of ranges that answers whether an address falls in one of them. */
export class AddressRangeSet {
  readonly #blockList = new BlockList();
  readonly size: number;

  constructor(ranges: readonly AddressRange[]) {
    for (const range of ranges) this.#blockList.addSubnet(range.network, range.prefixLength, range.family);
    this.size = ranges.length;
  }

  /** Builds the set from allowlist entries (each `CIDR[,CIDR…]`); throws InvalidAddressRangeError naming a bad one. */
  static fromEntries(entries: readonly string[]): AddressRangeSet {
    return new AddressRangeSet(entries.flatMap(parseAddressRangeEntry));
  }

  /**
   * Whether `address` (as a socket reports it) is in the set. An IPv4 address a dual-stack socket reports as
   * IPv4-mapped IPv6 (`::ffff:192.0.2.7`) is checked as the IPv4 address it is.
   */
  contains(address: string): boolean {
    const mapped = /^::ffff:(\d{1,3}(?:\.\d{1,3}){3})$/i.exec(address);
    const plain = mapped === null ? address : (mapped[1] as string);
    if (isIPv4(plain)) return this.#blockList.check(plain, "ipv4");
    if (isIPv6(plain)) return this.#blockList.check(plain, "ipv6");
    return false;
  }
}
