/**
 * Which address a request comes from, for the cluster's IP allowlist. The socket peer is the client unless it is one
 * of the operator's trusted reverse proxies (`service.gateway.trustedProxies`); then the `X-Forwarded-For` header
 * says who the proxy served. Each proxy appends the address it received the request from, so the header is read
 * from the right: trusted proxies are skipped and the first address that is not one is the client. Everything left
 * of that address was written by the client itself and proves nothing. A header that cannot be read leaves the peer
 * as the client, and so does a peer that is no trusted proxy, whatever its header claims.
 */
import type { AddressRangeSet } from "../../auth/address-ranges.js";
import { ipAddressOf } from "../../net/address-key.js";

/**
 * Most header entries examined: a chain of proxies is a handful long, and a bound keeps the work per request small
 * whatever a client sends.
 */
export const MAX_FORWARDED_HOPS = 32;

/**
 * The client address of a request that arrived from `peerAddress` with the `X-Forwarded-For` header `forwardedFor`
 * (as Node hands it over: repeated headers joined with commas). Undefined when the socket no longer knows its peer.
 */
export function clientAddressOf(
  peerAddress: string | undefined,
  forwardedFor: string | string[] | undefined,
  trustedProxies: AddressRangeSet,
): string | undefined {
  if (peerAddress === undefined || forwardedFor === undefined || trustedProxies.size === 0) return peerAddress;
  if (!trustedProxies.contains(peerAddress)) return peerAddress;
  const header = Array.isArray(forwardedFor) ? forwardedFor.join(",") : forwardedFor;
  let end = header.length;
  let candidate = peerAddress;
  for (let hop = 0; hop < MAX_FORWARDED_HOPS && end > 0; hop += 1) {
    const start = header.lastIndexOf(",", end - 1) + 1;
    // Some proxies write the address with the port they received the request on (`203.0.113.7:50123`,
    // `[2001:db8::1]:443`): read as every per-address limit of the product reads it (`ipAddressOf`).
    const entry = ipAddressOf(header.slice(start, end).trim());
    end = start - 1;
    // An entry that is no address (an obfuscated name, garbage): nothing in the header can be trusted.
    if (entry === undefined) return peerAddress;
    if (!trustedProxies.contains(entry)) return entry;
    candidate = entry;
  }
  // Every address examined is a trusted proxy: the furthest of them is the closest thing to a client there is.
  return candidate;
}
