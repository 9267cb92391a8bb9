import { describe, expect, it } from "vitest";
import { connectionAddressKey, ipAddressOf } from "../../src/net/address-key.js";

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

  it("keys an IPv4 address carried in IPv6, mapped or under NAT64's well-known prefix, by that IPv4 address", () => {
    // Behind a NAT64 front end every IPv4 client is 64:ff9b::<its address>: one /64 would hold them all.
    expect(connectionAddressKey("64:ff9b::c000:201")).toBe("192.0.2.1");
    expect(connectionAddressKey("64:ff9b::192.0.2.1")).toBe("192.0.2.1");
    expect(connectionAddressKey("64:FF9B:0:0:0:0:C000:202")).toBe("192.0.2.2");
    expect(connectionAddressKey("0064:ff9b:0000:0000:0000:0000:cb00:7107")).toBe("203.0.113.7");
    expect(connectionAddressKey("[64:ff9b::cb00:7108]:443")).toBe("203.0.113.8");
    expect(connectionAddressKey("64:ff9b::c000:201")).not.toBe(connectionAddressKey("64:ff9b::c000:202"));
    // IPv4-mapped addresses in hex form too.
    expect(connectionAddressKey("::ffff:c000:203")).toBe("192.0.2.3");
    expect(connectionAddressKey("::FFFF:c000:204")).toBe("192.0.2.4");
    expect(connectionAddressKey("0:0:0:0:0:ffff:192.0.2.5")).toBe("192.0.2.5");
    // Only those /96 networks: the rest of 64:ff9b::/32 (local-use prefixes and others) counts by /64 as usual.
    expect(connectionAddressKey("64:ff9b:1::c000:201")).toBe("64:ff9b:1:0::/64");
    expect(connectionAddressKey("64:ff9b::1:c000:201")).toBe("64:ff9b:0:0::/64");
    expect(connectionAddressKey("::fffe:c000:201")).toBe("0:0:0:0::/64");
  });

  it("keys an address with a port or in brackets by the address alone, and what is no address as unknown", () => {
    // A proxy writing the port into X-Forwarded-For gave every source port a bucket of its own (`…:50123::/64`).
    expect(connectionAddressKey("203.0.113.7:50123")).toBe("203.0.113.7");
    expect(connectionAddressKey("203.0.113.7:50124")).toBe("203.0.113.7");
    expect(connectionAddressKey("[2001:db8:0:1::9]:443")).toBe("2001:db8:0:1::/64");
    expect(connectionAddressKey("[2001:db8:0:1::9]")).toBe("2001:db8:0:1::/64");
    for (const text of ["", "proxy.internal", "203.0.113.7:", "203.0.113.7:99999", "a:b", "1:2:3", "unknown", "a|b"]) {
      expect(connectionAddressKey(text), text).toBe("unknown");
    }
  });
});

describe("ipAddressOf", () => {
  it("takes plain addresses, IPv4 with a port and bracketed IPv6 with or without one, and nothing else", () => {
    expect(ipAddressOf("198.51.100.23")).toBe("198.51.100.23");
    expect(ipAddressOf("198.51.100.23:8443")).toBe("198.51.100.23");
    expect(ipAddressOf("2001:db8::23")).toBe("2001:db8::23");
    expect(ipAddressOf("[2001:db8::23]:8443")).toBe("2001:db8::23");
    expect(ipAddressOf("[2001:db8::23]")).toBe("2001:db8::23");
    expect(ipAddressOf("[fe80::23%eth0]:8443")).toBe("fe80::23%eth0");
    // Without brackets a port cannot be told from the address's last group: it is read as part of the address.
    expect(ipAddressOf("2001:db8::23:8443")).toBe("2001:db8::23:8443");
    const none = [
      undefined,
      "",
      " 198.51.100.23",
      "198.51.100.23 ",
      "198.51.100.023",
      "198.51.100.256:80",
      "198.51.100.23:65536",
      "[198.51.100.23]:80",
      "[2001:db8::23]:",
      "[2001:db8::23]x",
      "proxy.internal:80",
      "_hidden",
    ];
    for (const text of none) expect(ipAddressOf(text), String(text)).toBeUndefined();
  });
});
