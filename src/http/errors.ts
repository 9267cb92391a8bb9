/**
 * The one catalogue of errors the HTTP interfaces answer with. Every error a route or service raises is a
 * `ServiceError` of one of these kinds; `problem.ts` turns it into an RFC 9457 problem document. The `code` is
 * stable: clients may match on it (it is the last segment of the problem `type`).
 */
export const errorKinds = {
  invalidRequest: { code: "invalid-request", status: 400, title: "The request is invalid" },
  malformedBody: { code: "malformed-body", status: 400, title: "The request body could not be parsed" },
  unauthorized: { code: "unauthorized", status: 401, title: "Authentication is required" },
  forbidden: { code: "forbidden", status: 403, title: "The token lacks a required scope" },
  addressNotAllowed: { code: "address-not-allowed", status: 403, title: "The client address is not allowed" },
  linkNotValid: { code: "link-not-valid", status: 403, title: "The signed link is not valid or has expired" },
  tokenForAnotherCluster: {
    code: "token-for-another-cluster",
    status: 403,
    title: "The token grants access to another cluster",
  },
  notFound: { code: "not-found", status: 404, title: "The resource does not exist" },
  routeNotFound: { code: "route-not-found", status: 404, title: "No such route" },
  methodNotAllowed: { code: "method-not-allowed", status: 405, title: "The method is not allowed on this route" },
  notAcceptable: { code: "not-acceptable", status: 406, title: "No acceptable representation" },
  requestTimeout: { code: "request-timeout", status: 408, title: "The request did not arrive in time" },
  conflict: { code: "conflict", status: 409, title: "The request conflicts with the current state" },
  payloadTooLarge: { code: "payload-too-large", status: 413, title: "The request body is too large" },
  uriTooLong: { code: "uri-too-long", status: 414, title: "The request URL is too long" },
  unsupportedMediaType: { code: "unsupported-media-type", status: 415, title: "The content type is not supported" },
  tooManyRequests: { code: "too-many-requests", status: 429, title: "Too many requests" },
  headersTooLarge: { code: "headers-too-large", status: 431, title: "The request headers are too large" },
  internal: { code: "internal", status: 500, title: "Internal server error" },
  notApplicable: {
    code: "not-applicable",
    status: 501,
    title: "The request does not apply to a self-hosted installation",
  },
  badGateway: { code: "bad-gateway", status: 502, title: "An upstream service could not be reached" },
  outcomeUnknown: {
    code: "outcome-unknown",
    status: 502,
    title: "The request reached the cluster, which could not tell whether it took effect",
  },
  unavailable: { code: "unavailable", status: 503, title: "The service is temporarily unavailable" },
  writesPaused: { code: "writes-paused", status: 503, title: "The cluster takes no writes for the moment" },
  gatewayTimeout: { code: "gateway-timeout", status: 504, title: "An upstream service did not answer in time" },
} as const satisfies Record<string, { code: string; status: number; title: string }>;

/** Name of one entry of the error catalogue. */
export type ErrorKind = keyof typeof errorKinds;

/** Extra members of a problem document beyond the standard five (e.g. `errors` for validation failures). */
export type ProblemExtensions = Record<string, unknown>;

/** A typed error with a stable code and HTTP status; thrown by services, rendered by the problem mapper. */
export class ServiceError extends Error {
  readonly kind: ErrorKind;
  readonly status: number;
  readonly code: string;
  readonly title: string;
  readonly extensions: ProblemExtensions | undefined;
  /** Response headers the error requires (e.g. `Retry-After`, `WWW-Authenticate`, `Allow`). */
  readonly headers: Record<string, string>;

  constructor(
    kind: ErrorKind,
    detail: string,
    options: { extensions?: ProblemExtensions; headers?: Record<string, string>; cause?: unknown } = {},
  ) {
    super(detail, options.cause === undefined ? undefined : { cause: options.cause });
    const entry = errorKinds[kind];
    this.name = "ServiceError";
    this.kind = kind;
    this.status = entry.status;
    this.code = entry.code;
    this.title = entry.title;
    this.extensions = options.extensions;
    this.headers = options.headers ?? {};
  }

  /** The human-readable explanation of this occurrence (the problem document's `detail`). */
  get detail(): string {
    return this.message;
  }
}

/** Shorthand for a 400 naming what to fix. */
export function invalidRequest(detail: string, extensions?: ProblemExtensions): ServiceError {
  return new ServiceError("invalidRequest", detail, extensions === undefined ? {} : { extensions });
}

/** Shorthand for a 404 on a resource of the given kind. */
export function notFound(resource: string, identifier: string): ServiceError {
  return new ServiceError("notFound", `${resource} '${identifier}' does not exist`);
}

/** Shorthand for a 409 explaining the conflicting state. */
export function conflict(detail: string): ServiceError {
  return new ServiceError("conflict", detail);
}

/**
 * Error codes of RFC 6749 §5.2, plus `invalid_target` of RFC 8707, `slow_down` for the rate limit, and
 * `temporarily_unavailable` (RFC 6749 §4.1.2.1) for a server that cannot serve now but may soon.
 */
export type OAuthErrorCode =
  | "invalid_request"
  | "invalid_client"
  | "invalid_grant"
  | "unauthorized_client"
  | "unsupported_grant_type"
  | "invalid_scope"
  | "invalid_target"
  | "slow_down"
  | "temporarily_unavailable"
  | "server_error";

const oauthStatusByCode: Record<OAuthErrorCode, number> = {
  invalid_request: 400,
  invalid_client: 401,
  invalid_grant: 400,
  unauthorized_client: 400,
  unsupported_grant_type: 400,
  invalid_scope: 400,
  invalid_target: 400,
  slow_down: 429,
  temporarily_unavailable: 503,
  server_error: 500,
};

/** An error of the token endpoint, rendered as `{"error", "error_description"}` instead of a problem document. */
export class OAuthError extends Error {
  readonly error: OAuthErrorCode;
  readonly status: number;
  readonly headers: Record<string, string>;

  constructor(error: OAuthErrorCode, description: string, headers: Record<string, string> = {}) {
    super(description);
    this.name = "OAuthError";
    this.error = error;
    this.status = oauthStatusByCode[error];
    this.headers = headers;
  }
}
