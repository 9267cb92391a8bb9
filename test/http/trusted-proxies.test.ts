import { describe, expect, it } from "vitest";
import { ConfigurationError } from "../../src/config/errors.js";
import { parseTrustedProxies } from "../../src/http/trusted-proxies.js";

describe("parseTrustedProxies", () => {
  it("reads comma-separated addresses and blocks; empty trusts no proxy", () => {
    expect(parseTrustedProxies("", "service.gateway.trustedProxies").size).toBe(0);
    expect(parseTrustedProxies("  ", "service.gateway.trustedProxies").size).toBe(0);
    const set = parseTrustedProxies("10.0.0.0/8, ::1", "service.gateway.trustedProxies");
    expect(set.contains("10.1.2.3")).toBe(true);
    expect(set.contains("::1")).toBe(true);
  });

  it("refuses an invalid setting with a configuration error naming the setting and the range", () => {
    const parse = () => parseTrustedProxies("10.0.0.0/8, proxy.internal", "service.platform.trustedProxies");
    expect(parse).toThrow(ConfigurationError);
    expect(parse).toThrow(/service\.platform\.trustedProxies: "proxy\.internal" is not an IPv4 or IPv6 address/);
  });
});
