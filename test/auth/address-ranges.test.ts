import { describe, expect, it } from "vitest";
import {
  AddressRangeSet,
  InvalidAddressRangeError,
  MAX_ADDRESS_RANGE_ENTRY_LENGTH,
  MAX_RANGES_PER_ENTRY,
  parseAddressRange,
  parseAddressRangeEntry,
} from "../../src/auth/address-ranges.js";

/** The error `parse` throws for `text`; fails the test when it throws none. */
function refusal(parse: () => unknown): InvalidAddressRangeError {
  try {
    parse();
  } catch (error) {
    expect(error).toBeInstanceOf(InvalidAddressRangeError);
    return error as InvalidAddressRangeError;
  }
  throw new Error("expected an InvalidAddressRangeError");
}

describe("parseAddressRange", () => {
  it("reads IPv4 and IPv6 addresses as single-address ranges and CIDR blocks with their prefix", () => {
    expect(parseAddressRange("192.0.2.7")).toEqual({ family: "ipv4", network: "192.0.2.7", prefixLength: 32 });
    expect(parseAddressRange(" 10.0.0.0/8 ")).toEqual({ family: "ipv4", network: "10.0.0.0", prefixLength: 8 });
    expect(parseAddressRange("2001:db8::1")).toEqual({ family: "ipv6", network: "2001:db8::1", prefixLength: 128 });
    expect(parseAddressRange("2001:db8::/32")).toEqual({ family: "ipv6", network: "2001:db8::", prefixLength: 32 });
    expect(parseAddressRange("0.0.0.0/0").prefixLength).toBe(0);
    expect(parseAddressRange("::/0").prefixLength).toBe(0);
    expect(parseAddressRange("192.0.2.7/32").prefixLength).toBe(32);
    expect(parseAddressRange("2001:db8::1/128").prefixLength).toBe(128);
  });

  it.each([
    ["", "it is empty"],
    ["   ", "it is empty"],
    ["example.org", "the address is not valid"],
    ["256.0.0.1", "the address is not valid"],
    ["10.0.0", "the address is not valid"],
    ["010.0.0.1", "the address is not valid"],
    ["2001:db8:::1", "the address is not valid"],
    ["10.0.0.0/33", "the prefix length is above 32"],
    ["2001:db8::/129", "the prefix length is above 128"],
    ["10.0.0.0/", "the prefix length is not a number"],
    ["10.0.0.0/-1", "the prefix length is not a number"],
    ["10.0.0.0/8/8", "the prefix length is not a number"],
    ["10.0.0.0/1000", "the prefix length is not a number"],
    ["10.0.0.0 /8", "the address is not valid"],
  ])("refuses %j: %s", (text, reason) => {
    const error = refusal(() => parseAddressRange(text));
    expect(error.reason).toBe(reason);
    expect(error.message).toContain(reason);
  });

  it("names the range at fault, shortened when it is long", () => {
    const error = refusal(() => parseAddressRange("10.0.0.0/40"));
    expect(error.range).toBe("10.0.0.0/40");
    expect(error.message).toBe(
      '"10.0.0.0/40" is not an IPv4 or IPv6 address or CIDR block: the prefix length is above 32',
    );
    const long = refusal(() => parseAddressRange(`${"1".repeat(500)}`));
    expect(long.range.length).toBeLessThanOrEqual(64);
    expect(long.message.length).toBeLessThan(200);
  });
});

describe("parseAddressRangeEntry", () => {
  it("reads comma-separated ranges of both families", () => {
    expect(parseAddressRangeEntry("10.0.0.0/8, 2001:db8::/32,192.0.2.7")).toEqual([
      { family: "ipv4", network: "10.0.0.0", prefixLength: 8 },
      { family: "ipv6", network: "2001:db8::", prefixLength: 32 },
      { family: "ipv4", network: "192.0.2.7", prefixLength: 32 },
    ]);
  });

  it("names the invalid range of an entry, and refuses empty parts", () => {
    expect(refusal(() => parseAddressRangeEntry("10.0.0.0/8, 300.1.1.1, ::1")).range).toBe("300.1.1.1");
    expect(refusal(() => parseAddressRangeEntry("10.0.0.0/8,")).reason).toBe("it is empty");
  });

  it("bounds the length of an entry and its number of ranges", () => {
    const ranges = Array.from({ length: MAX_RANGES_PER_ENTRY }, (_, index) => `10.0.${index}.0/24`);
    expect(parseAddressRangeEntry(ranges.join(","))).toHaveLength(MAX_RANGES_PER_ENTRY);
    const tooMany = refusal(() => parseAddressRangeEntry([...ranges, "10.1.0.0/16"].join(",")));
    expect(tooMany.reason).toBe(`an entry holds at most ${MAX_RANGES_PER_ENTRY} ranges`);
    const tooLong = refusal(() => parseAddressRangeEntry(`${" ".repeat(MAX_ADDRESS_RANGE_ENTRY_LENGTH)}1.2.3.4`));
    expect(tooLong.reason).toBe(`an entry holds at most ${MAX_ADDRESS_RANGE_ENTRY_LENGTH} characters`);
    expect(tooLong.message.length).toBeLessThan(200);
  });
});

describe("AddressRangeSet", () => {
  it("matches addresses inside IPv4 blocks and nothing next to them", () => {
    const set = AddressRangeSet.fromEntries(["10.0.0.0/8", "192.0.2.7"]);
    expect(set.size).toBe(2);
    expect(set.contains("10.0.0.0")).toBe(true);
    expect(set.contains("10.255.255.255")).toBe(true);
    expect(set.contains("11.0.0.0")).toBe(false);
    expect(set.contains("9.255.255.255")).toBe(false);
    expect(set.contains("192.0.2.7")).toBe(true);
    expect(set.contains("192.0.2.8")).toBe(false);
    expect(set.contains("2001:db8::1")).toBe(false);
  });

  it("matches the whole network of a block written with host bits set", () => {
    const set = AddressRangeSet.fromEntries(["192.0.2.77/24"]);
    expect(set.contains("192.0.2.1")).toBe(true);
    expect(set.contains("192.0.3.1")).toBe(false);
  });

  it("matches IPv6 blocks and single addresses, whatever spelling the address has", () => {
    const set = AddressRangeSet.fromEntries(["2001:db8::/32", "fd00::1/128"]);
    expect(set.contains("2001:db8:ffff::1")).toBe(true);
    expect(set.contains("2001:0db8:0000::0001")).toBe(true);
    expect(set.contains("2001:db9::")).toBe(false);
    expect(set.contains("fd00::1")).toBe(true);
    expect(set.contains("fd00:0:0:0:0:0:0:1")).toBe(true);
    expect(set.contains("fd00::2")).toBe(false);
    expect(set.contains("10.0.0.1")).toBe(false);
  });

  it("treats /0 as every address of its family: 0.0.0.0/0 holds no IPv6 address", () => {
    const everyIpv4 = AddressRangeSet.fromEntries(["0.0.0.0/0"]);
    expect(everyIpv4.contains("0.0.0.0")).toBe(true);
    expect(everyIpv4.contains("255.255.255.255")).toBe(true);
    expect(everyIpv4.contains("::1")).toBe(false);
    expect(everyIpv4.contains("2001:db8::1")).toBe(false);
    // ::/0 covers ::ffff:0:0/96, the IPv6 form of every IPv4 address, so it holds IPv4 peers too.
    const everyIpv6 = AddressRangeSet.fromEntries(["::/0"]);
    expect(everyIpv6.contains("::1")).toBe(true);
    expect(everyIpv6.contains("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")).toBe(true);
    expect(everyIpv6.contains("203.0.113.9")).toBe(true);
  });

  it("checks an IPv4-mapped IPv6 peer (as a dual-stack socket reports it) as the IPv4 address it is", () => {
    const set = AddressRangeSet.fromEntries(["127.0.0.1", "198.51.100.0/24"]);
    expect(set.contains("::ffff:127.0.0.1")).toBe(true);
    expect(set.contains("::FFFF:198.51.100.200")).toBe(true);
    expect(set.contains("::ffff:127.0.0.2")).toBe(false);
    expect(set.contains("::1")).toBe(false);
  });

  it("holds nothing when empty and never matches text that is no address", () => {
    const empty = new AddressRangeSet([]);
    expect(empty.size).toBe(0);
    expect(empty.contains("127.0.0.1")).toBe(false);
    const everything = AddressRangeSet.fromEntries(["0.0.0.0/0,::/0"]);
    expect(everything.contains("")).toBe(false);
    expect(everything.contains("localhost")).toBe(false);
    expect(everything.contains("::ffff:999.0.0.1")).toBe(false);
  });

  it("refuses to build from an invalid entry, naming the range", () => {
    const error = refusal(() => AddressRangeSet.fromEntries(["10.0.0.0/8", "10.0.0.0/8, fe80::/200"]));
    expect(error.range).toBe("fe80::/200");
  });
});
