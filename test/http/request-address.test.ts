import { pino } from "pino";
import { describe, expect, it } from "vitest";
import { AddressRangeSet } from "../../src/auth/address-ranges.js";
import { requestAddress } from "../../src/http/request-address.js";
import { createHttpServer } from "../../src/http/server.js";
import { defaultHttpServerLimits } from "../support/http.js";

/**
 * A server that answers each request with the address `requestAddress` reads, and `addressOf`, which asks it as if
 * from `peer` with the given `X-Forwarded-For`.
 */
async function addressServer(trustProxy: boolean | AddressRangeSet, peer: string) {
  const server = createHttpServer({
    logger: pino({ level: "silent" }),
    bodyLimitBytes: 1024,
    trustProxy,
    limits: defaultHttpServerLimits,
  });
  server.get("/address", async (request) => ({ address: requestAddress(request) ?? null }));
  await server.ready();
  const addressOf = async (forwardedFor: string): Promise<unknown> =>
    (
      await server.inject({
        method: "GET",
        url: "/address",
        remoteAddress: peer,
        headers: { "x-forwarded-for": forwardedFor },
      })
    ).json().address;
  return { server, addressOf };
}

describe("requestAddress", () => {
  it("reduces what a trusted proxy wrote to a plain address, and takes the peer's when it names none", async () => {
    const { server, addressOf } = await addressServer(true, "10.0.0.31");
    try {
      expect(await addressOf("198.51.100.31")).toBe("198.51.100.31");
      expect(await addressOf("198.51.100.31:50123")).toBe("198.51.100.31");
      expect(await addressOf("203.0.113.99, [2001:db8:31::1]:443")).toBe("2001:db8:31::1");
      expect(await addressOf("[2001:db8:31::2]")).toBe("2001:db8:31::2");
      // Anything else the proxy wrote is no address: the request counts under the proxy's own.
      for (const entry of ["unknown", "_hidden", "198.51.100.31:", "198.51.100.31:70000", "proxy.internal:80"]) {
        expect(await addressOf(entry), entry).toBe("10.0.0.31");
      }
    } finally {
      await server.close();
    }
  });

  it("behind a chain of trusted proxies, skips them written with a port too, and reads the next entry the same way", async () => {
    const { server, addressOf } = await addressServer(AddressRangeSet.fromEntries(["10.0.0.0/24"]), "10.0.0.32");
    try {
      expect(await addressOf("198.51.100.32:4000, 10.0.0.7")).toBe("198.51.100.32");
      // A trusted proxy written with its port is still that proxy, not the client.
      expect(await addressOf("198.51.100.32:4000, 10.0.0.7:5555")).toBe("198.51.100.32");
      expect(await addressOf("garbage, 10.0.0.7")).toBe("10.0.0.32");
    } finally {
      await server.close();
    }
  });
});
