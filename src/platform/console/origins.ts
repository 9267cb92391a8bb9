/**
 * The origins the web console is reached at, which the clusters' gateways must allow for cross-origin calls
 * (`service.gateway.allowedOrigins`). A browser names the console's origin as it reached it: the issuer URL (the
 * public URL, or `http://localhost:<port>`), or the address the platform listens at.
 */
const loopbackOrWildcardHosts = new Set(["127.0.0.1", "localhost", "::1", "0.0.0.0", "::"]);
/** Hosts at which the platform also answers on IPv6 loopback, which a browser names `[::1]`. */
const ipv6LoopbackHosts = new Set(["::1", "::"]);

/**
 * The origin of `http://<host>:<port>` as a browser sends it in `Origin`: through URL, so that a default port (80)
 * is dropped and an IPv6 address is bracketed, exactly as `parseAllowedOrigins` expects an entry.
 */
function httpOrigin(host: string, port: number): string {
  return new URL(`http://${host.includes(":") ? `[${host}]` : host}:${port}`).origin;
}

/** Every origin the console may be served from, for a platform with `issuerUrl` listening on `host`:`port`. */
export function consoleOrigins(issuerUrl: string, host: string, port: number): string[] {
  const origins = new Set<string>([new URL(issuerUrl).origin]);
  if (loopbackOrWildcardHosts.has(host)) {
    origins.add(httpOrigin("127.0.0.1", port));
    origins.add(httpOrigin("localhost", port));
    if (ipv6LoopbackHosts.has(host)) origins.add(httpOrigin("::1", port));
  } else {
    origins.add(httpOrigin(host, port));
  }
  return [...origins];
}
