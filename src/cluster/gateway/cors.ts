/**
 * Cross-origin calls from web pages (CORS) to the gateway's REST API and management port, for the origins the
 * operator lists in `service.gateway.allowedOrigins` (the local provisioner lists the platform's own URL, so its web
 * console can show a cluster's topology and drive its scaling). Requests carry bearer tokens, never cookies, so no
 * credentials are allowed; an origin that is not listed gets no CORS headers and the browser keeps the answer from
 * the page.
 */
import type { FastifyReply, FastifyRequest } from "fastify";
import { ConfigurationError } from "../../config/errors.js";
import type { HttpServer } from "../../http/server.js";

/** Methods a page may use: those the REST and management APIs route. */
const allowedMethods = "GET, POST, PUT, PATCH, DELETE";
/** Request headers a page may send: the token, and the JSON body's type. */
const allowedHeaders = "authorization, content-type";
/** Answer headers a page may read beyond the simple ones. */
const exposedHeaders = "retry-after, location";
/** How long a browser may reuse a preflight answer. */
const preflightMaxAgeSeconds = 600;
/** Most origins the setting may list. */
const maxAllowedOrigins = 32;

/**
 * Reads `service.gateway.allowedOrigins`: comma-separated origins such as `https://console.example.com` or
 * `http://127.0.0.1:8088` (scheme, host and port; no path). Throws ConfigurationError naming the bad entry.
 */
export function parseAllowedOrigins(setting: string): ReadonlySet<string> {
  const origins = new Set<string>();
  for (const entry of setting.split(",")) {
    const candidate = entry.trim();
    if (candidate === "") continue;
    let origin: string;
    try {
      const url = new URL(candidate);
      if (url.protocol !== "http:" && url.protocol !== "https:") throw new Error("not http(s)");
      origin = url.origin;
    } catch {
      throw new ConfigurationError([
        `service.gateway.allowedOrigins: '${candidate}' is not an origin such as https://console.example.com`,
      ]);
    }
    if (origin !== candidate.replace(/\/$/, "")) {
      throw new ConfigurationError([
        `service.gateway.allowedOrigins: '${candidate}' is not an origin (scheme://host[:port], no path); did you mean ${origin}?`,
      ]);
    }
    origins.add(origin);
  }
  if (origins.size > maxAllowedOrigins) {
    throw new ConfigurationError([`service.gateway.allowedOrigins lists more than ${maxAllowedOrigins} origins`]);
  }
  return origins;
}

/**
 * Answers preflight requests of the allowed origins and marks their other answers readable by them. Install it after
 * the IP allowlist's hook, so that an address the cluster refuses learns nothing more from a preflight either.
 */
export function installCors(server: HttpServer, allowedOrigins: ReadonlySet<string>): void {
  if (allowedOrigins.size === 0) return;
  server.addHook("onRequest", async (request: FastifyRequest, reply: FastifyReply) => {
    // Every answer depends on the Origin header once origins are listed, so caches must keep them apart.
    reply.header("vary", "origin");
    const origin = request.headers.origin;
    if (origin === undefined || !allowedOrigins.has(origin)) return;
    reply.header("access-control-allow-origin", origin);
    if (request.method === "OPTIONS" && request.headers["access-control-request-method"] !== undefined) {
      return reply
        .code(204)
        .header("access-control-allow-methods", allowedMethods)
        .header("access-control-allow-headers", allowedHeaders)
        .header("access-control-max-age", String(preflightMaxAgeSeconds))
        .send();
    }
    reply.header("access-control-expose-headers", exposedHeaders);
  });
}
