/**
 * The syntax of IP allowlist entries, checked in the browser before the console sends an allowlist. The platform
 * checks entries with Node's address parser (src/auth/address-ranges.ts), which the browser does not have; the
 * expressions below are the ones Node's `isIPv4` and `isIPv6` match with, and the rules and messages are the
 * platform's, so an entry the console accepts is one the platform accepts (test/web/address-ranges.test.ts compares
 * both on many inputs). The platform's own answer stays the authority: its 400 names the entry at fault.
 */

/** Longest entry the platform accepts, in characters. */
export const maxAddressRangeEntryLength = 4_096;

/** Most ranges one entry may hold. */
export const maxRangesPerEntry = 64;

const ipv4Segment = "(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])";
const ipv4Text = `(?:${ipv4Segment}\\.){3}${ipv4Segment}`;
const ipv4Pattern = new RegExp(`^${ipv4Text}$`);
const ipv6Segment = "(?:[0-9a-fA-F]{1,4})";
const ipv6Pattern = new RegExp(
  "^(?:" +
    `(?:${ipv6Segment}:){7}(?:${ipv6Segment}|:)|` +
    `(?:${ipv6Segment}:){6}(?:${ipv4Text}|:${ipv6Segment}|:)|` +
    `(?:${ipv6Segment}:){5}(?::${ipv4Text}|(?::${ipv6Segment}){1,2}|:)|` +
    `(?:${ipv6Segment}:){4}(?:(?::${ipv6Segment}){0,1}:${ipv4Text}|(?::${ipv6Segment}){1,3}|:)|` +
    `(?:${ipv6Segment}:){3}(?:(?::${ipv6Segment}){0,2}:${ipv4Text}|(?::${ipv6Segment}){1,4}|:)|` +
    `(?:${ipv6Segment}:){2}(?:(?::${ipv6Segment}){0,3}:${ipv4Text}|(?::${ipv6Segment}){1,5}|:)|` +
    `(?:${ipv6Segment}:){1}(?:(?::${ipv6Segment}){0,4}:${ipv4Text}|(?::${ipv6Segment}){1,6}|:)|` +
    `(?::(?:(?::${ipv6Segment}){0,5}:${ipv4Text}|(?::${ipv6Segment}){1,7}|:))` +
    ")(?:%[0-9a-zA-Z\\-.:]{1,})?$",
);

/** Shortens what a message repeats of the input, as the platform does. */
function quoted(text: string): string {
  return text.length <= 64 ? text : `${text.slice(0, 61)}...`;
}

function refusal(range: string, reason: string): string {
  return `"${range}" is not an IPv4 or IPv6 address or CIDR block: ${reason}`;
}

/** Why one range (`address` or `address/prefix`) is refused, or null when it is valid. */
function addressRangeProblem(text: string): string | null {
  const trimmed = text.trim();
  if (trimmed === "") return refusal(quoted(text), "it is empty");
  const slash = trimmed.indexOf("/");
  const network = slash === -1 ? trimmed : trimmed.slice(0, slash);
  const maximumPrefix = ipv4Pattern.test(network) ? 32 : ipv6Pattern.test(network) ? 128 : undefined;
  if (maximumPrefix === undefined) return refusal(quoted(trimmed), "the address is not valid");
  if (slash === -1) return null;
  const prefixText = trimmed.slice(slash + 1);
  if (!/^\d{1,3}$/.test(prefixText)) return refusal(quoted(trimmed), "the prefix length is not a number");
  if (Number(prefixText) > maximumPrefix) {
    return refusal(quoted(trimmed), `the prefix length is above ${maximumPrefix}`);
  }
  return null;
}

/**
 * Why an allowlist entry (ranges separated by commas) would be refused, in the platform's words, or null when the
 * platform accepts it.
 */
export function addressRangeEntryProblem(entry: string): string | null {
  if (entry.length > maxAddressRangeEntryLength) {
    return refusal(quoted(entry), `an entry holds at most ${maxAddressRangeEntryLength} characters`);
  }
  const parts = entry.split(",");
  if (parts.length > maxRangesPerEntry) {
    return refusal(quoted(entry), `an entry holds at most ${maxRangesPerEntry} ranges`);
  }
  for (const part of parts) {
    const problem = addressRangeProblem(part);
    if (problem !== null) return problem;
  }
  return null;
}
