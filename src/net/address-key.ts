/**
 * The unit a server caps connections per address by, shared by every server that keeps such a cap (the HTTP servers'
 * connection limits and the cluster port's unauthenticated connections).
 */

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
 * The key a connection counts under for the per-address cap: its IPv4 address, or the /64 network of its IPv6
 * address, since one IPv6 host usually holds a whole /64 and could otherwise open the cap's worth from each address.
 */
export function connectionAddressKey(remoteAddress: string | undefined): string {
  if (remoteAddress === undefined || remoteAddress === "") return "unknown";
  const withoutZone = remoteAddress.split("%")[0] ?? remoteAddress;
  const mapped = /^::ffff:(\d{1,3}(?:\.\d{1,3}){3})$/i.exec(withoutZone);
  if (mapped !== null) return mapped[1] as string;
  if (!withoutZone.includes(":")) return withoutZone;
  const network = ipv6Groups(withoutZone)
    .slice(0, 4)
    .map((group) => (/^[0-9a-f]{1,4}$/i.test(group) ? Number.parseInt(group, 16).toString(16) : group));
  return `${network.join(":")}::/64`;
}
