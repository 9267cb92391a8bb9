import { describe, expect, it } from "vitest";
import { AddressRangeSet } from "../../../src/auth/address-ranges.js";
import { clientAddressOf, MAX_FORWARDED_HOPS } from "../../../src/cluster/gateway/client-address.js";

const proxies = AddressRangeSet.fromEntries(["10.0.0.0/24, fd00::/64"]);
const noProxies = new AddressRangeSet([]);

describe("clientAddressOf", () => {
  it("is the peer when no proxy is trusted or the peer is not one, whatever the header says", () => {
    expect(clientAddressOf("203.0.113.5", "198.51.100.1", noProxies)).toBe("203.0.113.5");
    expect(clientAddressOf("203.0.113.5", "198.51.100.1", proxies)).toBe("203.0.113.5");
    expect(clientAddressOf("10.0.0.2", undefined, proxies)).toBe("10.0.0.2");
    expect(clientAddressOf(undefined, "198.51.100.1", proxies)).toBeUndefined();
  });

  it("is the address a trusted proxy forwarded for, IPv4 or IPv6", () => {
    expect(clientAddressOf("10.0.0.2", "198.51.100.1", proxies)).toBe("198.51.100.1");
    expect(clientAddressOf("fd00::2", " 2001:db8::7 ", proxies)).toBe("2001:db8::7");
    expect(clientAddressOf("::ffff:10.0.0.2", "198.51.100.1", proxies)).toBe("198.51.100.1");
  });

  it("walks a chain of trusted proxies from the right and ignores what the client wrote left of its address", () => {
    expect(clientAddressOf("10.0.0.2", "1.1.1.1, 198.51.100.1, 10.0.0.9", proxies)).toBe("198.51.100.1");
    expect(clientAddressOf("10.0.0.2", ["1.1.1.1", "198.51.100.1, 10.0.0.9"], proxies)).toBe("198.51.100.1");
  });

  it("is the peer when the header holds something that is not an address", () => {
    expect(clientAddressOf("10.0.0.2", "unknown", proxies)).toBe("10.0.0.2");
    expect(clientAddressOf("10.0.0.2", "198.51.100.1,", proxies)).toBe("10.0.0.2");
    expect(clientAddressOf("10.0.0.2", "", proxies)).toBe("10.0.0.2");
    expect(clientAddressOf("10.0.0.2", "198.51.100.1:99999", proxies)).toBe("10.0.0.2");
    expect(clientAddressOf("10.0.0.2", "1.1.1.1, [2001:db8::1", proxies)).toBe("10.0.0.2");
  });

  it("reads an address a proxy wrote with its port, or in brackets, as the address, as the rate limits do", () => {
    expect(clientAddressOf("10.0.0.2", "198.51.100.1:4711", proxies)).toBe("198.51.100.1");
    expect(clientAddressOf("10.0.0.2", "1.1.1.1, [2001:db8::1]:443", proxies)).toBe("2001:db8::1");
    expect(clientAddressOf("10.0.0.2", "1.1.1.1, [2001:db8::1]", proxies)).toBe("2001:db8::1");
    // A trusted proxy written with a port is skipped like one without.
    expect(clientAddressOf("10.0.0.2", "198.51.100.1, 10.0.0.9:8080", proxies)).toBe("198.51.100.1");
  });

  it("is the furthest trusted proxy when every address is one, and examines a bounded number of entries", () => {
    expect(clientAddressOf("10.0.0.2", "10.0.0.7, 10.0.0.8", proxies)).toBe("10.0.0.7");
    const chain = Array.from({ length: MAX_FORWARDED_HOPS + 10 }, (_, index) => `10.0.0.${index + 10}`);
    const header = ["198.51.100.1", ...chain].join(", ");
    expect(clientAddressOf("10.0.0.2", header, proxies)).toBe(chain[chain.length - MAX_FORWARDED_HOPS]);
  });
});
