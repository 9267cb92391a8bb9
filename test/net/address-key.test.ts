import { describe, expect, it } from "vitest";
import { connectionAddressKey } from "../../src/net/address-key.js";

describe("connectionAddressKey", () => {
  it("counts IPv4 addresses alone, IPv4-mapped IPv6 as IPv4, and IPv6 by /64 network", () => {
    expect(connectionAddressKey("203.0.113.7")).toBe("203.0.113.7");
    expect(connectionAddressKey("::ffff:203.0.113.7")).toBe("203.0.113.7");
    expect(connectionAddressKey("2001:db8:0:1::7")).toBe("2001:db8:0:1::/64");
    expect(connectionAddressKey("2001:db8:0:1:ffff:1:2:3")).toBe("2001:db8:0:1::/64");
    expect(connectionAddressKey("2001:0db8:0000:0001::1%eth0")).toBe("2001:db8:0:1::/64");
    expect(connectionAddressKey("::1")).toBe("0:0:0:0::/64");
    expect(connectionAddressKey(undefined)).toBe("unknown");
  });
});
