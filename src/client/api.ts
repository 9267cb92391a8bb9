import type { TSchema } from "typebox";
import { Value } from "typebox/value";
import { stringifyJsonExactly } from "../json/exact-json.js";
import {
  ApiError,
  ClientConnectionError,
  maxProblemDetailCharacters,
  type ProblemDocument,
  truncatedText,
} from "./errors.js";
import {
  type HttpOptions,
  type HttpRequest,
  type HttpResponse,
  headerValue,
  parseExactJsonBody,
  parseJsonBody,
  sendWithRetry,
} from "./http.js";
import type { TokenProvider, TokenRequest } from "./token-provider.js";

/**
 * What an API client needs of a token provider: a `TokenProvider`, or anything else that hands out bearer tokens
 * (the platform signs short-lived tokens for itself to call its clusters' management APIs).
 */
export type TokenSource = Pick<TokenProvider, "getToken" | "invalidate">;

/** Options shared by the API client classes. */
export interface ApiClientOptions {
  /** Base URL of the API, e.g. `http://localhost:8088/admin`. */
  baseUrl: string;
  /** Supplies bearer tokens; share one provider between clients so they share its cache. */
  tokenProvider: TokenSource;
  /** The audience tokens are requested for; each API has its own default. */
  audience?: string | undefined;
  /** Space-separated scopes to narrow tokens to; the client's full grant for the audience when absent. */
  scope?: string | undefined;
  /** Transport, retry policy and clock. */
  http?: HttpOptions | undefined;
}

/**
 * One path segment naming a resource, percent-encoded. "." and ".." are refused: URLs treat them as steps up the
 * path, even encoded, so `DELETE …/clients/..` would reach another route than the one meant.
 */
export function pathSegment(name: string): string {
  if (name === "" || name === "." || name === "..") {
    throw new RangeError(`${JSON.stringify(name)} cannot name a resource in a URL path`);
  }
  return encodeURIComponent(name);
}

/**
 * The default bound of an API answer's body. The largest legitimate answers are Modeler files: content of up to
 * 10 MiB, which the platform accepts only in upload bodies of at most 20 MiB and 64 KiB (`fileBodyLimitBytes`), so
 * its JSON-escaped form in an answer stays below that too; backup lists and topology documents are far smaller.
 * 32 MiB leaves room for that and the metadata beside it while a hostile or broken server cannot fill the memory.
 */
export const defaultMaxApiResponseBytes = 32 * 1024 * 1024;

function problemFrom(response: HttpResponse, url: string): ProblemDocument {
  if (response.status >= 300 && response.status < 400) {
    // Redirects are not followed (the bearer token must not travel to another origin), so a 3xx did nothing: a
    // proxy sending http to https, or a base URL missing a path, answers this way.
    const location = headerValue(response, "location");
    return {
      type: "about:blank",
      title: `HTTP ${response.status}`,
      status: response.status,
      detail:
        location === undefined
          ? `${url} answered HTTP ${response.status} (a redirect without a Location); nothing was done`
          : `${url} answered HTTP ${response.status}: the server redirected to ${location.slice(0, 500)}; ` +
            "point the URL setting there",
    };
  }
  const body = parseJsonBody(response) as Partial<ProblemDocument> | undefined;
  if (body !== undefined && typeof body === "object" && body !== null && typeof body.status === "number") {
    return {
      ...body,
      type: typeof body.type === "string" ? body.type : "about:blank",
      title:
        typeof body.title === "string"
          ? truncatedText(body.title, maxProblemDetailCharacters)
          : `HTTP ${response.status}`,
      status: body.status,
      detail: typeof body.detail === "string" ? truncatedText(body.detail, maxProblemDetailCharacters) : "",
    };
  }
  // Something between us and the API (a proxy, a stopped server) answered without a problem document.
  return {
    type: "about:blank",
    title: `HTTP ${response.status}`,
    status: response.status,
    detail: `${url} answered HTTP ${response.status}${response.text === "" ? "" : `: ${response.text.slice(0, 200)}`}`,
  };
}

/** How one request of `ApiTransport` is sent. */
export interface SendOptions {
  /** The request changes nothing whatever its method (a search, a dry run): it is retried after any 503. */
  readonly readOnly?: boolean;
}

/**
 * Sends authorized JSON requests to one API: adds the bearer token, retries once with a new token when the API
 * answers 401 (the cached one may have been revoked or signed by a rotated key), turns error answers into
 * `ApiError` and checks successful bodies against their schema.
 */
export class ApiTransport {
  private readonly baseUrl: string;
  private readonly tokenProvider: TokenSource;
  private readonly tokenRequest: TokenRequest;
  private readonly http: HttpOptions;

  /** Creates a transport for the API at `options.baseUrl`, asking tokens for `options.audience ?? defaultAudience`. */
  constructor(options: ApiClientOptions, defaultAudience: string) {
    this.baseUrl = options.baseUrl.replace(/\/+$/, "");
    this.tokenProvider = options.tokenProvider;
    this.tokenRequest = { audience: options.audience ?? defaultAudience, scope: options.scope };
    this.http = {
      ...options.http,
      maxResponseBytes: options.http?.maxResponseBytes ?? defaultMaxApiResponseBytes,
    };
  }

  /**
   * Sends a request to `path` (relative to the base URL) and returns the answer, throwing `ApiError` on failure.
   * `options.readOnly` marks a POST or PATCH that changes nothing (a search, a dry run), which is then retried after
   * any 503 like a GET.
   */
  async send(
    method: HttpRequest["method"],
    path: string,
    body?: unknown,
    options: SendOptions = {},
  ): Promise<HttpResponse> {
    return this.sendText(method, path, body === undefined ? undefined : JSON.stringify(body), options);
  }

  /** Sends a request with `bodyText` (JSON) as its body, as `send` describes. */
  private async sendText(
    method: HttpRequest["method"],
    path: string,
    bodyText: string | undefined,
    options: SendOptions = {},
  ): Promise<HttpResponse> {
    const url = `${this.baseUrl}${path}`;
    for (let attempt = 0; attempt < 2; attempt++) {
      const token = await this.tokenProvider.getToken(this.tokenRequest);
      const headers: Record<string, string> = {
        authorization: `Bearer ${token.accessToken}`,
        accept: "application/json, application/problem+json",
      };
      if (bodyText !== undefined) headers["content-type"] = "application/json";
      const response = await sendWithRetry(
        {
          method,
          url,
          headers,
          ...(bodyText === undefined ? {} : { body: bodyText }),
          ...(options.readOnly === true ? { idempotent: true } : {}),
        },
        this.http,
      );
      if (response.status === 401 && attempt === 0 && token.source !== "network") {
        await this.tokenProvider.invalidate(this.tokenRequest);
        continue;
      }
      // Only a 2xx is success: a 3xx (not followed) did nothing, and must not read as "Deleted" or "Created".
      if (response.status < 200 || response.status >= 300) throw new ApiError(problemFrom(response, url));
      return response;
    }
    throw new Error("ApiTransport.send: the retry loop ended without an answer (invariant: at most two attempts)");
  }

  /** Sends a request and returns its JSON body, checked against `schema`. */
  async sendForJson<Schema extends TSchema>(
    method: HttpRequest["method"],
    path: string,
    schema: Schema,
    body?: unknown,
    options: SendOptions = {},
  ): Promise<unknown> {
    return this.checked(path, schema, parseJsonBody(await this.send(method, path, body, options)));
  }

  /**
   * `sendForJson` for APIs with 64-bit integers (backup ids): a bigint in `body` is sent as its exact digits, and an
   * integer beyond 2^53 − 1 in the answer is read as its exact bigint. About twice as slow, hence only where needed.
   */
  async sendForExactJson<Schema extends TSchema>(
    method: HttpRequest["method"],
    path: string,
    schema: Schema,
    body?: unknown,
  ): Promise<unknown> {
    const bodyText = body === undefined ? undefined : stringifyJsonExactly(body);
    return this.checked(path, schema, parseExactJsonBody(await this.sendText(method, path, bodyText)));
  }

  /** `parsed`, the answer of `path`, once it matches `schema`. */
  private checked(path: string, schema: TSchema, parsed: unknown): unknown {
    if (!Value.Check(schema, parsed)) {
      throw new ClientConnectionError(`${this.baseUrl}${path}`, "answered a body that does not match the API's schema");
    }
    return parsed;
  }
}
