/**
 * The origins the web console is reached at, which the clusters' gateways must allow for cross-origin calls
 * (`service.gateway.allowedOrigins`). A browser names the console's origin as it reached it: the issuer URL (the
 * public URL, or `http://localhost:<port>`), or the address the platform listens at.
 */
const loopbackOrWildcardHosts = new Set(["127.0.0.1", "localhost", "::1", "0.0.0.0", "::"]);

/** Every origin the console may be served from, for a platform with `issuerUrl` listening on `host`:`port`. */
export function consoleOrigins(issuerUrl: string, host: string, port: number): string[] {
  const origins = new Set<string>([new URL(issuerUrl).origin]);
  if (loopbackOrWildcardHosts.has(host)) {
    origins.add(`http://127.0.0.1:${port}`);
    origins.add(`http://localhost:${port}`);
  } else {
    origins.add(new URL(`http://${host.includes(":") ? `[${host}]` : host}:${port}`).origin);
  }
  return [...origins];
}
