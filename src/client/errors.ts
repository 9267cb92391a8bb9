/**
 * Longest `detail` (or title, or OAuth `error_description`) of a server's answer kept for an error message; the rest
 * is cut, so a server cannot fill a terminal or a log with one message.
 */
export const maxProblemDetailCharacters = 1_000;

/** `text` cut to `maxCharacters`, with a note of how much was cut. */
export function truncatedText(text: string, maxCharacters: number): string {
  if (text.length <= maxCharacters) return text;
  return `${text.slice(0, maxCharacters)}… (${text.length - maxCharacters} more characters)`;
}

/** An RFC 9457 problem document as an API answers it on failure. */
export interface ProblemDocument {
  type: string;
  title: string;
  status: number;
  detail: string;
  instance?: string;
  [extension: string]: unknown;
}

/** An API answered with an error status; carries the problem document it sent. */
export class ApiError extends Error {
  /** HTTP status of the answer. */
  readonly status: number;
  /** Stable problem type (e.g. `urn:flowplane:problem:not-found`). */
  readonly type: string;
  /** Short summary of the problem kind. */
  readonly title: string;
  /** What went wrong in this occurrence and what to fix. */
  readonly detail: string;
  /** The whole problem document, including extensions such as `errors`. */
  readonly problem: ProblemDocument;

  constructor(problem: ProblemDocument) {
    super(problem.detail === "" ? problem.title : problem.detail);
    this.name = "ApiError";
    this.status = problem.status;
    this.type = problem.type;
    this.title = problem.title;
    this.detail = problem.detail;
    this.problem = problem;
  }
}

/** The token endpoint refused to issue a token; carries the RFC 6749 §5.2 error code and description. */
export class OAuthClientError extends Error {
  /** HTTP status of the answer. */
  readonly status: number;
  /** The RFC 6749 error code, e.g. `invalid_client`, `invalid_target` or `slow_down`. */
  readonly error: string;
  /** The server's human-readable explanation, when it sent one. */
  readonly errorDescription: string | undefined;
  /** Seconds the server asked the client to wait (from `Retry-After`), when it said so. */
  readonly retryAfterSeconds: number | undefined;

  constructor(options: {
    status: number;
    error: string;
    errorDescription?: string | undefined;
    retryAfterSeconds?: number | undefined;
  }) {
    super(
      options.errorDescription === undefined || options.errorDescription === ""
        ? `token request failed: ${options.error}`
        : `token request failed: ${options.error}: ${options.errorDescription}`,
    );
    this.name = "OAuthClientError";
    this.status = options.status;
    this.error = options.error;
    this.errorDescription = options.errorDescription;
    this.retryAfterSeconds = options.retryAfterSeconds;
  }

  /** True when the client's identity was refused (unknown client, wrong secret, client not allowed this grant). */
  get isAuthenticationFailure(): boolean {
    return ["invalid_client", "unauthorized_client", "invalid_grant"].includes(this.error);
  }
}

/** The client-side settings (environment variables or options) are missing or invalid; `problems` names each. */
export class ClientConfigurationError extends Error {
  constructor(readonly problems: readonly string[]) {
    super(`Invalid client configuration:\n  - ${problems.join("\n  - ")}`);
    this.name = "ClientConfigurationError";
  }
}

/** A server could not be reached at all (refused connection, DNS failure, timeout) or answered something unreadable. */
export class ClientConnectionError extends Error {
  constructor(
    readonly url: string,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(`${url}: ${message}`, options);
    this.name = "ClientConnectionError";
  }
}
