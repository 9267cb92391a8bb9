/**
 * Whether a URL reaches the machine the browser itself runs on. A cluster of the local provisioner links its gateway
 * and management port at 127.0.0.1; opened from another machine through the platform's public URL, the console would
 * send the gateway token to that address, which is the viewer's own machine, where any process listening on the port
 * would receive it. So a token goes to such an address only from a page that was itself loaded from one.
 */

/** IPv4 loopback, 127.0.0.0/8, as the URL parser writes it (it turns `127.1` and `0x7f.1` into dotted decimal). */
const ipv4Loopback = /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/;
/** IPv4 loopback mapped into IPv6 (`::ffff:127.0.0.1`), which the URL parser writes `[::ffff:7f00:1]`. */
const mappedIpv4Loopback = /^\[::ffff:7f[0-9a-f]{2}:[0-9a-f]{1,4}\]$/;

/**
 * A host as the URL parser writes it (lowercase, IPv6 in brackets and shortest form, IPv4 in dotted decimal), or null
 * when it is not a valid host. Takes a bare IPv6 address too (`::1`).
 */
function canonicalHost(host: string): string | null {
  const trimmed = host.trim();
  const bracketed = trimmed.includes(":") && !trimmed.startsWith("[") ? `[${trimmed}]` : trimmed;
  try {
    return new URL(`http://${bracketed}/`).hostname;
  } catch {
    return null;
  }
}

/**
 * Whether `host` names the browser's own machine: a loopback address (127.0.0.0/8, ::1, either mapped), `localhost`
 * or a name below it (which browsers resolve to loopback themselves), or the unspecified address (0.0.0.0, ::), which
 * browsers that still connect to it connect to this machine.
 */
export function isOwnMachineHost(host: string): boolean {
  const canonical = canonicalHost(host);
  if (canonical === null) return false;
  const name = canonical.endsWith(".") ? canonical.slice(0, -1) : canonical;
  return (
    name === "localhost" ||
    name.endsWith(".localhost") ||
    ipv4Loopback.test(name) ||
    name === "0.0.0.0" ||
    name === "[::1]" ||
    name === "[::]" ||
    mappedIpv4Loopback.test(name)
  );
}

/**
 * Whether the console, loaded from `pageUrl`, may send a token to `targetUrl` (relative to the page): always, unless
 * the target is the browser's own machine and the page was not loaded from it (then the platform, and the cluster it
 * links at a loopback address, run on another machine).
 */
export function mayCarryToken(targetUrl: string, pageUrl: string): boolean {
  const page = new URL(pageUrl);
  const target = new URL(targetUrl, page);
  return !isOwnMachineHost(target.hostname) || isOwnMachineHost(page.hostname);
}
