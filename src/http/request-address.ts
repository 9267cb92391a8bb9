/**
 * The client address of a request, as every per-address limit of a server must read it. Behind a trusted proxy,
 * Fastify's `request.ip` is whatever the proxy wrote into `X-Forwarded-For`, which need not be a bare address: proxies
 * that write `203.0.113.7:50123` gave each source port a rate-limit bucket of its own, since the key took everything
 * with a ":" for an IPv6 address (`203.0.113.7:50123::/64`).
 */
import type { FastifyRequest } from "fastify";
import { ipAddressOf } from "../net/address-key.js";

/**
 * The IP address a request counts under for per-address limits: `request.ip` (the peer's address, or behind a trusted
 * proxy the address `X-Forwarded-For` names) reduced to a plain address by `ipAddressOf` (a port or brackets
 * dropped); when that names no address, the socket's peer address. Undefined only when the socket no longer knows its
 * peer. Read a request's address here, never from `request.ip`.
 */
export function requestAddress(request: FastifyRequest): string | undefined {
  return ipAddressOf(request.ip) ?? ipAddressOf(request.socket?.remoteAddress);
}
