import { Type } from "typebox";
import { describedPattern } from "../../http/schemas.js";

/** Longest name of an API client, of a cluster or of the organization. */
export const maximumClientNameLength = 100;

/** A name with no blank at either end and no character that is invisible or rearranges what is shown (see below). */
export const visibleNamePattern = describedPattern(
  "^(?!\\s)(?!.*\\s$)[^\\p{Cc}\\p{Cf}\\p{Cs}\\p{Zl}\\p{Zp}]+$",
  "have no blank at either end and no invisible or control character",
);

/**
 * The name of an API client: 1 to 100 characters, no blank at either end, and none that are invisible or rearrange
 * what is shown (control characters C0 and C1, format characters such as bidirectional overrides and zero-width
 * joiners, lone surrogates, line and paragraph separators), so that two names that look alike are alike. The
 * services store the name in its composed form (NFC). Ajv matches patterns with the `u` flag, which `\p{…}` needs.
 */
export function clientNameSchema(where: string) {
  return Type.String({
    minLength: 1,
    maxLength: maximumClientNameLength,
    pattern: visibleNamePattern,
    description: `Name of the client, unique in ${where} (1 to ${maximumClientNameLength} characters, none invisible).`,
  });
}
