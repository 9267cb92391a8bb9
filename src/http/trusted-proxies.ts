/**
 * The reverse proxies an operator trusts to say who a request came from (`service.gateway.trustedProxies`,
 * `service.platform.trustedProxies`): addresses or CIDR blocks, comma-separated.
 */
import { AddressRangeSet, InvalidAddressRangeError, parseAddressRangeEntry } from "../auth/address-ranges.js";
import { ConfigurationError } from "../config/errors.js";

/** Parses the setting `settingName` holding `setting`; empty: no proxy is trusted. ConfigurationError when invalid. */
export function parseTrustedProxies(setting: string, settingName: string): AddressRangeSet {
  if (setting.trim() === "") return new AddressRangeSet([]);
  try {
    return new AddressRangeSet(parseAddressRangeEntry(setting));
  } catch (error) {
    if (!(error instanceof InvalidAddressRangeError)) throw error;
    throw new ConfigurationError([`${settingName}: ${error.message}`]);
  }
}
