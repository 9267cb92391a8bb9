import { type ServerResponse, STATUS_CODES } from "node:http";
import type { Socket } from "node:net";
import type { FastifyError, FastifyReply, FastifyRequest } from "fastify";
import { OAuthError, ServiceError } from "./errors.js";
import { maxHeaderBytes, maxPathParameterCharacters, maxUrlCharacters } from "./limits.js";
import type { RepeatedWarnings } from "./repeated-warnings.js";
import { patternDescription } from "./schemas.js";

/** Media type of RFC 9457 problem documents. */
export const problemMediaType = "application/problem+json";

/** Prefix of every problem `type`; the stable error code follows it. */
export const problemTypePrefix = "urn:flowplane:problem:";

/** An RFC 9457 problem document as flowplane sends it. */
export interface ProblemDocument {
  type: string;
  title: string;
  status: number;
  detail: string;
  /** The request's path; absent when the request line was never read or is too long to repeat. */
  instance?: string;
  [extension: string]: unknown;
}

/** Route-level configuration read by the error mapper. */
export interface ErrorFormatConfig {
  /** Routes of the token endpoint answer RFC 6749 error bodies instead of problem documents. */
  errorFormat?: "problem" | "oauth";
}

declare module "fastify" {
  interface FastifyContextConfig extends ErrorFormatConfig {}
}

/** Builds the problem document for a typed error raised while serving `instance` (when known). */
export function toProblemDocument(error: ServiceError, instance: string | undefined): ProblemDocument {
  return {
    type: `${problemTypePrefix}${error.code}`,
    title: error.title,
    status: error.status,
    detail: error.detail,
    ...(instance === undefined ? {} : { instance }),
    ...error.extensions,
  };
}

/** The path of a request, without its query; undefined when it is longer than any URL the servers accept. */
function instanceOf(url: string): string | undefined {
  const path = url.split("?")[0] ?? url;
  return path.length > maxUrlCharacters ? undefined : path;
}

/** Characters of a request path that a log line repeats at most, so that hostile URLs cannot bloat the log. */
const LOGGED_PATH_CHARACTERS = 200;

/** The request's method and path as a log line shows them: the path cut after a bounded number of characters. */
function loggedRequest(request: FastifyRequest): { method: string; path: string } {
  const path = request.url.split("?")[0] ?? request.url;
  return {
    method: request.method,
    path: path.length > LOGGED_PATH_CHARACTERS ? `${path.slice(0, LOGGED_PATH_CHARACTERS)}…` : path,
  };
}

interface ValidationIssue {
  instancePath?: string;
  schemaPath?: string;
  keyword?: string;
  message?: string;
  params?: Record<string, unknown>;
}

/** Allowed values a 400 lists at most for a field that takes one of a set. */
const MAX_LISTED_ALLOWED_VALUES = 20;

/**
 * The issues to describe: for a value that matches none of a few alternatives (`anyOf`), Ajv reports each
 * alternative's failure and then the `anyOf` itself ("must match a schema in anyOf"); they become one issue that
 * names the alternatives, instead of three sentences of which the last says nothing.
 */
function mergedAlternatives(issues: readonly ValidationIssue[]): ValidationIssue[] {
  const merged: ValidationIssue[] = [];
  for (const issue of issues) {
    if (issue.keyword !== "anyOf" || issue.schemaPath === undefined) {
      merged.push(issue);
      continue;
    }
    const prefix = `${issue.schemaPath}/`;
    const alternatives = merged.filter(
      (candidate) => candidate.instancePath === issue.instancePath && candidate.schemaPath?.startsWith(prefix) === true,
    );
    if (alternatives.length === 0) {
      merged.push(issue);
      continue;
    }
    for (const alternative of alternatives) merged.splice(merged.indexOf(alternative), 1);
    // Described already: `issueMessage` keeps the joined message as it is.
    merged.push({ ...issue, keyword: "alternatives", message: alternatives.map(issueMessage).join(", or ") });
  }
  return merged;
}

/**
 * The message of one issue: Ajv's own, with the allowed values of a field that takes one of a set, and in words what
 * a pattern registered with `describedPattern` asks for.
 */
function issueMessage(issue: ValidationIssue): string {
  const allowed = issue.params?.allowedValues;
  if (issue.keyword === "enum" && Array.isArray(allowed) && allowed.length > 0) {
    const listed = allowed.slice(0, MAX_LISTED_ALLOWED_VALUES).map((value) => JSON.stringify(value));
    return `must be one of ${listed.join(", ")}${allowed.length > listed.length ? ", …" : ""}`;
  }
  const pattern = issue.params?.pattern;
  if (issue.keyword === "pattern" && typeof pattern === "string") {
    const description = patternDescription(pattern);
    if (description !== undefined) return `must ${description}`;
  }
  if (issue.keyword === "const" && issue.params !== undefined && "allowedValue" in issue.params) {
    return `must be ${JSON.stringify(issue.params.allowedValue)}`;
  }
  return issue.message ?? "is invalid";
}

/**
 * Most validation issues a 400 lists. Every issue of a body is found (Ajv's `allErrors`), but one answer names only
 * the first ones and counts the rest: a 1 MB body of 330,000 bad items was answered with 35–78 MB, which clients that
 * leave answers unread could make a server hold many times over.
 */
export const MAX_LISTED_ISSUES = 20;

/** Characters of a field's location a 400 repeats at most: a client's own field names are echoed, and may be long. */
const MAX_LOCATION_CHARACTERS = 200;

function shortened(location: string): string {
  return location.length > MAX_LOCATION_CHARACTERS ? `${location.slice(0, MAX_LOCATION_CHARACTERS)}…` : location;
}

/** Turns Ajv validation issues into `{location, message}` pairs that name the offending field. */
function describeValidation(
  issues: readonly ValidationIssue[],
  context: string | undefined,
): { location: string; message: string }[] {
  return mergedAlternatives(issues).map((issue) => {
    const base = `${context ?? "body"}${issue.instancePath ?? ""}`;
    const additional = issue.params?.additionalProperty;
    if (typeof additional === "string") {
      return { location: shortened(`${base}/${additional}`), message: "is not a known field" };
    }
    const missing = issue.params?.missingProperty;
    if (typeof missing === "string") {
      return { location: shortened(`${base}/${missing}`), message: "is required" };
    }
    return { location: shortened(base), message: issueMessage(issue) };
  });
}

/** The 414 for a path parameter longer than any resource's name can be. */
export function pathParameterTooLong(): ServiceError {
  return new ServiceError(
    "uriTooLong",
    `A path parameter is longer than ${maxPathParameterCharacters} characters; no resource has such a name.`,
  );
}

/**
 * Classifies any error thrown while handling a request into a typed `ServiceError`. Fastify's own errors
 * (content-type, body size, JSON syntax, schema validation) map to their catalogue entries; anything unknown is a 500.
 */
export function classifyError(error: unknown): ServiceError {
  if (error instanceof ServiceError) return error;
  const fastifyError = error as Partial<FastifyError> & { validation?: ValidationIssue[] };
  if (Array.isArray(fastifyError.validation)) {
    const issues = fastifyError.validation;
    const problems = describeValidation(issues.slice(0, MAX_LISTED_ISSUES), fastifyError.validationContext);
    const unlisted = issues.length - problems.length;
    const detail =
      problems.map((problem) => `${problem.location} ${problem.message}`).join("; ") +
      (unlisted > 0 ? `; and ${unlisted} more ${unlisted === 1 ? "issue" : "issues"}` : "");
    return new ServiceError("invalidRequest", detail, {
      extensions: unlisted > 0 ? { errors: problems, unlistedErrorCount: unlisted } : { errors: problems },
    });
  }
  switch (fastifyError.code) {
    case "FST_ERR_CTP_INVALID_MEDIA_TYPE":
    case "FST_ERR_CTP_INVALID_TYPE":
      return new ServiceError("unsupportedMediaType", "Send the body as application/json.");
    case "FST_ERR_CTP_BODY_TOO_LARGE":
      return new ServiceError("payloadTooLarge", fastifyError.message ?? "The body exceeds the size limit.");
    case "FST_ERR_BAD_URL":
      return new ServiceError("invalidRequest", "The URL is not valid: check its percent-encoding.");
    case "FST_ERR_MAX_PARAM_LENGTH":
      return pathParameterTooLong();
    case "FST_ERR_CTP_INVALID_CONTENT_LENGTH":
      return new ServiceError("malformedBody", "The Content-Length header does not match the body.");
  }
  if (error instanceof SyntaxError || fastifyError.statusCode === 400) {
    return new ServiceError("malformedBody", `The body could not be parsed: ${fastifyError.message ?? ""}`);
  }
  if (fastifyError.statusCode === 413) {
    return new ServiceError("payloadTooLarge", "The body exceeds the size limit.");
  }
  if (fastifyError.statusCode === 415) {
    return new ServiceError("unsupportedMediaType", "The content type of the body is not supported.");
  }
  // The static files of the API docs: a path leaving their folder (403 from the file sender) or naming no file is
  // nothing the server has, and no reason to log a stack trace.
  if (fastifyError.statusCode === 403 || fastifyError.statusCode === 404) {
    return new ServiceError("notFound", "Nothing is found at this path.");
  }
  return new ServiceError("internal", "An unexpected error occurred; it has been logged.", { cause: error });
}

/**
 * Logs the warning that `request` was not served for the expected reason `typed`, unless `warnings` holds it back as
 * a repeat; the line names how many of its kind were held back before it.
 */
function warnNotServed(
  typed: ServiceError,
  request: FastifyRequest,
  warnings: RepeatedWarnings | undefined,
  message: string,
): void {
  const heldBack = warnings === undefined ? 0 : warnings.admit(`${message}: ${typed.code}`);
  if (heldBack === null) return;
  request.log.warn(
    { code: typed.code, detail: typed.detail, ...(heldBack > 0 ? { repeatsNotLogged: heldBack } : {}) },
    message,
  );
}

/**
 * The single place where every error of every route becomes a response. `warnings` holds back repeats of the
 * warnings for expected unavailability (a defect's error is always logged).
 */
export function sendError(
  error: unknown,
  request: FastifyRequest,
  reply: FastifyReply,
  warnings?: RepeatedWarnings,
): FastifyReply {
  if (request.routeOptions?.config?.errorFormat === "oauth" || error instanceof OAuthError) {
    return sendOAuthError(error, request, reply, warnings);
  }
  const typed = classifyError(error);
  if (typed.kind === "internal") {
    request.log.error({ err: typed.cause ?? typed, ...loggedRequest(request) }, "request failed");
  } else if (typed.status >= 500 && typed.kind !== "notApplicable") {
    // An upstream that is away, busy or slow is an expected state of a cluster, not a defect: no stack trace, and a
    // level that does not page anyone for every request a leader change touches.
    warnNotServed(typed, request, warnings, "request not served");
  } else {
    // Clients' mistakes (and attackers' probes) are not the server's problem: short, and only at debug level. A 501
    // is one of them: the client asked for what a self-hosted installation never offers, so a client repeating it
    // in a loop must not fill the server's log with warnings.
    request.log.debug({ code: typed.code, ...loggedRequest(request) }, "request refused");
  }
  return reply
    .code(typed.status)
    .headers(typed.headers)
    .type(problemMediaType)
    .send(toProblemDocument(typed, instanceOf(request.url)));
}

/** The 408 for a request that did not arrive whole within the deadline. */
export function requestNotReceivedInTime(requestReceiveTimeoutMs: number): ServiceError {
  return new ServiceError(
    "requestTimeout",
    `The whole request, headers and body, must arrive within ${requestReceiveTimeoutMs} ms.`,
  );
}

/** Turns an error Node's HTTP parser or the request deadline raised on a connection into a typed error. */
export function classifyClientError(error: Error & { code?: string }, requestReceiveTimeoutMs: number): ServiceError {
  switch (error.code) {
    case "ERR_HTTP_REQUEST_TIMEOUT":
      return requestNotReceivedInTime(requestReceiveTimeoutMs);
    case "HPE_HEADER_OVERFLOW":
      return new ServiceError(
        "headersTooLarge",
        `The request line and headers together must not exceed ${maxHeaderBytes} bytes.`,
      );
    default:
      return new ServiceError("invalidRequest", "The request is not valid HTTP/1.1.");
  }
}

/**
 * Answers an error on a connection that has no Fastify request to answer through (a request that never arrived
 * whole, headers Node's parser refused): a problem document written straight to the socket, which is then closed.
 * Nothing is written when part of a response already left, since more bytes would corrupt it.
 */
export function answerOnSocket(error: ServiceError, socket: Socket): void {
  if (socket.destroyed) return;
  const inFlight = (socket as Socket & { _httpMessage?: ServerResponse | null })._httpMessage;
  if (socket.writable && (inFlight === undefined || inFlight === null || !inFlight.headersSent)) {
    const body = JSON.stringify(toProblemDocument(error, undefined));
    socket.write(
      `HTTP/1.1 ${error.status} ${STATUS_CODES[error.status] ?? ""}\r\n` +
        `Content-Type: ${problemMediaType}\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
    );
  }
  socket.destroy();
}

function sendOAuthError(
  error: unknown,
  request: FastifyRequest,
  reply: FastifyReply,
  warnings: RepeatedWarnings | undefined,
): FastifyReply {
  let oauth: OAuthError;
  if (error instanceof OAuthError) {
    oauth = error;
  } else {
    const typed = classifyError(error);
    if (typed.status === 503) {
      // A dependency that cannot serve now (the database), not a defect: the client may retry when asked to.
      warnNotServed(typed, request, warnings, "token request not served");
      oauth = new OAuthError("temporarily_unavailable", typed.detail, typed.headers);
    } else if (typed.status >= 500) {
      request.log.error({ err: typed.cause ?? typed }, "token request failed");
      oauth = new OAuthError("server_error", "An unexpected error occurred.");
    } else {
      oauth = new OAuthError("invalid_request", typed.detail);
    }
  }
  return reply
    .code(oauth.status)
    .headers(oauth.headers)
    .header("cache-control", "no-store")
    .header("pragma", "no-cache")
    .type("application/json")
    .send({ error: oauth.error, error_description: oauthDescription(oauth.message) });
}

/**
 * `message` within the characters RFC 6749 §5.2 allows an error description (printable ASCII but the double quote
 * and the backslash), each other one shown as `?`, so that a strict client library does not refuse the answer.
 */
function oauthDescription(message: string): string {
  return message.replace(/[^\x20-\x21\x23-\x5b\x5d-\x7e]/gu, "?");
}
