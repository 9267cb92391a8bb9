/** Longest part of an error's message a log line quotes. */
const REASON_MAX_CHARACTERS = 200;

/** The start of an error's message: a decoding error may quote bytes a peer sent, which a log line must not hold. */
export function boundedReason(error: unknown): string {
  return (error instanceof Error ? error.message : String(error)).slice(0, REASON_MAX_CHARACTERS);
}
