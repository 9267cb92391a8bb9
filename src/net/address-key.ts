/**
 * The unit a server limits a client address by, shared by every server that keeps a per-address limit (the HTTP
 * servers' connection caps, the cluster port's unauthenticated connections, the token endpoint's and the diff links'
 * rate limits), and what counts as an address there.
 */
import { isIP, isIPv4, isIPv6 } from "node:net";

/** An IPv6 address in brackets, as in a URL's host, with or without a port after it. */
const bracketedIpv6 = /^\[([^\]]+)\](?::(\d{1,5}))?$/;
/** An IPv4 address with a port after it. */
const ipv4WithPort = /^(\d{1,3}(?:\.\d{1,3}){3}):(\d{1,5})$/;

/** Whether the digits `port` (when there are any) name a TCP port. */
function isPort(port: string | undefined): boolean {
  return port === undefined || Number(port) <= 65_535;
}

/**
 * The IP address `text` names, or undefined when it names none. Besides a plain IPv4 or IPv6 address it takes the
 * forms a proxy may write into `X-Forwarded-For`: an IPv4 address with `:port`, and an IPv6 address in brackets, with
 * or without `:port`; the port is dropped. Nothing else is read as an address: a name, an address with spaces around
 * it or a bare IPv6 address followed by a port (which no one can tell from a longer address) is none.
 */
export function ipAddressOf(text: string | undefined): string | undefined {
  if (text === undefined) return undefined;
  const bracketed = bracketedIpv6.exec(text);
  if (bracketed !== null) {
    const address = bracketed[1] as string;
    return isIPv6(address) && isPort(bracketed[2]) ? address : undefined;
  }
  const withPort = ipv4WithPort.exec(text);
  if (withPort !== null) {
    const address = withPort[1] as string;
    return isIPv4(address) && isPort(withPort[2]) ? address : undefined;
  }
  return isIP(text) === 0 ? undefined : text;
}

/** The eight 16-bit groups of an IPv6 address in text form, with `::` expanded and an embedded IPv4 tail kept whole. */
function ipv6Groups(address: string): string[] {
  const [head = "", tail] = address.split("::");
  const headGroups = head === "" ? [] : head.split(":");
  if (tail === undefined) return headGroups;
  const tailGroups = tail === "" ? [] : tail.split(":");
  const tailWidth = tailGroups.reduce((width, group) => width + (group.includes(".") ? 2 : 1), 0);
  const zeros = Array.from({ length: Math.max(0, 8 - headGroups.length - tailWidth) }, () => "0");
  return [...headGroups, ...zeros, ...tailGroups];
}

/**
 * The key a client address counts under for a per-address limit: its IPv4 address, or the /64 network of its IPv6
 * address (`2001:db8:0:1::/64`), since one IPv6 host usually holds a whole /64 and could otherwise take the limit's
 * worth from each address.
 *
 * `remoteAddress` goes through `ipAddressOf`, so a port or brackets are dropped; what names no address at all
 * (or no address known) counts as `unknown`, never as a key of its own: a server should pass its socket's peer
 * address instead, which is always one (see `requestAddress` in `http/request-address.ts`). No key contains "|".
 */
export function connectionAddressKey(remoteAddress: string | undefined): string {
  const address = ipAddressOf(remoteAddress);
  if (address === undefined) return "unknown";
  if (isIPv4(address)) return address;
  const withoutZone = address.split("%")[0] ?? address;
  const mapped = /^::ffff:(\d{1,3}(?:\.\d{1,3}){3})$/i.exec(withoutZone);
  if (mapped !== null) return mapped[1] as string;
  const network = ipv6Groups(withoutZone)
    .slice(0, 4)
    .map((group) => (/^[0-9a-f]{1,4}$/i.test(group) ? Number.parseInt(group, 16).toString(16) : group));
  return `${network.join(":")}::/64`;
}
