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

/** The eight 16-bit words of a valid IPv6 address without its zone, an embedded IPv4 tail taken as two of them. */
function ipv6Words(address: string): number[] {
  let text = address;
  if (text.includes(".")) {
    const lastColon = text.lastIndexOf(":");
    const [a = 0, b = 0, c = 0, d = 0] = text
      .slice(lastColon + 1)
      .split(".")
      .map(Number);
    text = `${text.slice(0, lastColon + 1)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head = "", tail] = text.split("::");
  const headWords = head === "" ? [] : head.split(":");
  const tailWords = tail === undefined || tail === "" ? [] : tail.split(":");
  const zeros = Array.from({ length: 8 - headWords.length - tailWords.length }, () => "0");
  return [...headWords, ...zeros, ...tailWords].map((word) => Number.parseInt(word, 16));
}

/** The IPv4 address in the last two words of an IPv6 address. */
function embeddedIpv4(words: number[]): string {
  const high = words[6] ?? 0;
  const low = words[7] ?? 0;
  return `${high >> 8}.${high & 0xff}.${low >> 8}.${low & 0xff}`;
}

/** Whether the first six words of an IPv6 address are `prefix`: the address is one of its /96 network. */
function inNetwork96(words: number[], prefix: readonly number[]): boolean {
  return prefix.every((word, index) => words[index] === word);
}

/** ::ffff:0:0/96: an IPv4 client seen through an IPv6 socket. */
const ipv4MappedPrefix = [0, 0, 0, 0, 0, 0xffff] as const;
/** 64:ff9b::/96, NAT64's well-known prefix (RFC 6052): an IPv4 host reached through a NAT64 translator. */
const nat64WellKnownPrefix = [0x64, 0xff9b, 0, 0, 0, 0] as const;

/**
 * The key a client address counts under for a per-address limit: its IPv4 address; the IPv4 address an IPv6
 * address carries when it is IPv4-mapped (`::ffff:192.0.2.1`, `::ffff:c000:201`) or under NAT64's well-known prefix
 * 64:ff9b::/96 (`64:ff9b::192.0.2.1`, `64:ff9b::c000:201`), since each of those stands for one IPv4 host and they
 * would otherwise all share one /64; else the /64 network of its IPv6 address (`2001:db8:0:1::/64`), since one IPv6
 * host usually holds a whole /64 and could otherwise take the limit's worth from each address.
 *
 * `remoteAddress` goes through `ipAddressOf`, so a port or brackets are dropped; what names no address at all
 * (or no address known) counts as `unknown`, never as a key of its own: a server should pass its socket's peer
 * address instead, which is always one (see `requestAddress` in `http/request-address.ts`). No key contains "|".
 */
export function connectionAddressKey(remoteAddress: string | undefined): string {
  const address = ipAddressOf(remoteAddress);
  if (address === undefined) return "unknown";
  if (isIPv4(address)) return address;
  const words = ipv6Words(address.split("%")[0] ?? address);
  if (inNetwork96(words, ipv4MappedPrefix) || inNetwork96(words, nat64WellKnownPrefix)) return embeddedIpv4(words);
  return `${words
    .slice(0, 4)
    .map((word) => word.toString(16))
    .join(":")}::/64`;
}
