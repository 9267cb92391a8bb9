import { describe, expect, it } from "vitest";
import { consoleOrigins } from "../../../src/platform/console/origins.js";

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
});
