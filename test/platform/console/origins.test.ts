import { describe, expect, it } from "vitest";
import { parseAllowedOrigins } from "../../../src/cluster/gateway/cors.js";
import { consoleOrigins } from "../../../src/platform/console/origins.js";

/** The origins as the platform passes them to a gateway, which refuses the whole setting if one entry is not an origin. */
function acceptedByGateway(origins: string[]): string[] {
  return [...parseAllowedOrigins(origins.join(","))];
}

describe("console origins", () => {
  it("names the issuer URL's origin and both loopback names of a platform on a loopback or wildcard address", () => {
    expect(consoleOrigins("http://localhost:8088", "127.0.0.1", 8088)).toEqual([
      "http://localhost:8088",
      "http://127.0.0.1:8088",
    ]);
    expect(consoleOrigins("https://flowplane.example.com/", "0.0.0.0", 8088)).toEqual([
      "https://flowplane.example.com",
      "http://127.0.0.1:8088",
      "http://localhost:8088",
    ]);
  });

  it("names the listening address of a platform on another interface, IPv6 in brackets", () => {
    expect(consoleOrigins("http://localhost:9000", "10.0.0.5", 9000)).toEqual([
      "http://localhost:9000",
      "http://10.0.0.5:9000",
    ]);
    expect(consoleOrigins("http://localhost:9000", "fd00::5", 9000)).toEqual([
      "http://localhost:9000",
      "http://[fd00::5]:9000",
    ]);
  });

  it("drops port 80 from every origin, as a browser does in Origin, so that a gateway accepts the list", () => {
    for (const host of ["127.0.0.1", "localhost", "0.0.0.0", "::1", "::"]) {
      const origins = consoleOrigins("http://localhost/", host, 80);
      expect(origins).toContain("http://127.0.0.1");
      expect(origins).toContain("http://localhost");
      expect(origins.some((origin) => origin.endsWith(":80"))).toBe(false);
      expect(acceptedByGateway(origins)).toEqual(origins);
    }
    const onInterface = consoleOrigins("http://flowplane.example.com", "10.0.0.5", 80);
    expect(onInterface).toEqual(["http://flowplane.example.com", "http://10.0.0.5"]);
    expect(acceptedByGateway(onInterface)).toEqual(onInterface);
  });

  it("names IPv6 loopback in brackets for a platform on ::1 or ::, and not for one on IPv4 loopback", () => {
    expect(consoleOrigins("http://localhost:8088", "::1", 8088)).toEqual([
      "http://localhost:8088",
      "http://127.0.0.1:8088",
      "http://[::1]:8088",
    ]);
    expect(consoleOrigins("http://localhost:8088", "::", 8088)).toContain("http://[::1]:8088");
    expect(consoleOrigins("http://localhost", "::1", 80)).toEqual([
      "http://localhost",
      "http://127.0.0.1",
      "http://[::1]",
    ]);
    expect(consoleOrigins("http://localhost:8088", "127.0.0.1", 8088)).not.toContain("http://[::1]:8088");
    expect(consoleOrigins("http://localhost:8088", "0.0.0.0", 8088)).not.toContain("http://[::1]:8088");
  });

  it("lists only entries a gateway accepts, whatever the host and port", () => {
    for (const host of ["127.0.0.1", "localhost", "0.0.0.0", "::1", "::", "10.0.0.5", "fd00::5"]) {
      for (const port of [80, 443, 8088]) {
        const origins = consoleOrigins(`http://localhost:${port}`, host, port);
        expect(acceptedByGateway(origins)).toEqual(origins);
      }
    }
  });
});
