import { type Dispatcher, request } from "undici";
import { parseJsonExactly } from "../json/exact-json.js";
import { ClientConnectionError } from "./errors.js";

/** How long to wait and how often to retry when a server answers 429 or 503. */
export interface RetryPolicy {
  /** Retries after the first attempt; 0 disables retrying. */
  maxRetries: number;
  /** Longest single wait; a server asking for longer is not retried and its answer is returned as is. */
  maxWaitMs: number;
  /** Wait before the first retry when the server sent no usable `Retry-After`; doubles per retry. */
  fallbackWaitMs: number;
}

/** The default retry policy: three retries, each waiting at most 30 seconds. */
export const defaultRetryPolicy: RetryPolicy = { maxRetries: 3, maxWaitMs: 30_000, fallbackWaitMs: 1_000 };

/** Time as the client sees it; injectable so tests neither sleep nor depend on the wall clock. */
export interface Clock {
  /** Milliseconds since the Unix epoch. */
  now(): number;
  /** Resolves after `durationMs` milliseconds. */
  sleep(durationMs: number): Promise<void>;
}

/** The real clock: `Date.now()` and `setTimeout`. */
export const systemClock: Clock = {
  now: () => Date.now(),
  sleep: (durationMs) => new Promise((resolve) => setTimeout(resolve, durationMs)),
};

/** Transport options shared by every client class. */
export interface HttpOptions {
  /** The undici dispatcher (Agent, Pool, …) to send requests through; undici's global one when absent. */
  dispatcher?: Dispatcher | undefined;
  /** Overrides of the retry policy for 429 and 503 answers. */
  retry?: Partial<RetryPolicy> | undefined;
  /** The clock used for waiting and for token expiry. */
  clock?: Clock | undefined;
  /** Longest wait for a server's response headers, and then for its body. */
  timeoutMs?: number | undefined;
  /** Largest response body read, in bytes: a larger one fails the call (unbounded when absent). */
  maxResponseBytes?: number | undefined;
  /** Longest time one attempt may take in all, headers and body (`defaultRequestDeadlineMs` when absent). */
  deadlineMs?: number | undefined;
}

/**
 * The default deadline of one attempt, from sending it to the last byte of the answer. `timeoutMs` bounds each wait
 * for the next bytes, so a server trickling a byte just inside it could otherwise hold a call for ever. Ten minutes is
 * far above what any answer needs (the largest the client reads, 32 MiB, still arrives within five minutes at
 * 1 Mbit/s), so only a server that is stuck or hostile reaches it.
 */
export const defaultRequestDeadlineMs = 600_000;

/** One HTTP request as the client sends it. */
export interface HttpRequest {
  method: "GET" | "POST" | "PUT" | "PATCH" | "DELETE";
  url: string;
  headers?: Record<string, string>;
  body?: string;
  /**
   * True when sending the request twice does no more than sending it once, whatever its method (a token request):
   * it is then retried after any 429 or 503, like a GET.
   */
  idempotent?: boolean;
}

/** A fully read HTTP response. */
export interface HttpResponse {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  /** The body as text (empty for 204). */
  text: string;
}

/** Reads a single header value (the first one when repeated). */
export function headerValue(response: HttpResponse, name: string): string | undefined {
  const value = response.headers[name.toLowerCase()];
  return Array.isArray(value) ? value[0] : value;
}

/**
 * Parses `Retry-After` (delay in seconds or an HTTP date) into milliseconds from `nowMs`; undefined when the header
 * is absent or unreadable.
 */
export function parseRetryAfterMs(value: string | undefined, nowMs: number): number | undefined {
  if (value === undefined) return undefined;
  const trimmed = value.trim();
  if (/^\d+$/.test(trimmed)) return Number(trimmed) * 1000;
  const dateMs = Date.parse(trimmed);
  if (Number.isNaN(dateMs)) return undefined;
  return Math.max(0, dateMs - nowMs);
}

async function sendOnce(httpRequest: HttpRequest, options: HttpOptions): Promise<HttpResponse> {
  const timeoutMs = options.timeoutMs ?? 30_000;
  const deadlineMs = options.deadlineMs ?? defaultRequestDeadlineMs;
  const deadline = AbortSignal.timeout(deadlineMs);
  try {
    const response = await request(httpRequest.url, {
      method: httpRequest.method,
      headers: httpRequest.headers,
      body: httpRequest.body,
      dispatcher: options.dispatcher,
      headersTimeout: timeoutMs,
      bodyTimeout: timeoutMs,
      signal: deadline,
    });
    const text =
      options.maxResponseBytes === undefined
        ? await response.body.text()
        : await boundedText(response.body, options.maxResponseBytes, httpRequest.url);
    return { status: response.statusCode, headers: response.headers, text };
  } catch (error) {
    if (error instanceof ClientConnectionError) throw error;
    if (deadline.aborted) {
      throw new ClientConnectionError(httpRequest.url, `did not complete its answer within ${deadlineMs} ms`, {
        cause: error,
      });
    }
    const code = (error as { code?: unknown }).code;
    const reason = typeof code === "string" ? `${code} (${(error as Error).message})` : (error as Error).message;
    throw new ClientConnectionError(httpRequest.url, `cannot be reached: ${reason}`, { cause: error });
  }
}

/** Reads a body as UTF-8 text up to `maxBytes`; a longer one is abandoned and fails the call. */
async function boundedText(body: AsyncIterable<Buffer> & { destroy(): unknown }, maxBytes: number, url: string) {
  const chunks: Buffer[] = [];
  let total = 0;
  for await (const chunk of body) {
    total += chunk.byteLength;
    if (total > maxBytes) {
      body.destroy();
      throw new ClientConnectionError(url, `answered a body larger than ${maxBytes} bytes`);
    }
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString("utf8");
}

/** The problem type of a gateway's 503 while its cluster takes no writes (`writesPaused` in `src/http/errors.ts`). */
const writesPausedProblemType = "urn:flowplane:problem:writes-paused";

/**
 * Whether an answer proves the request was not processed, so that even a POST or PATCH may be sent again: a 429
 * (refused before any work) or a gateway's writes-paused 503 (refused before the write). Any other 503 may come after
 * the work was done: the platform answers 503 for a lost database connection or a statement timeout, possibly after
 * an insert committed, and a create sent again would then make a second cluster or client.
 */
function retryable(httpRequest: HttpRequest, response: HttpResponse): boolean {
  if (response.status === 429) return true;
  if (response.status !== 503) return false;
  if (httpRequest.idempotent === true || (httpRequest.method !== "POST" && httpRequest.method !== "PATCH")) return true;
  const body = parseJsonBody(response) as { type?: unknown } | undefined;
  return typeof body === "object" && body !== null && body.type === writesPausedProblemType;
}

/**
 * Sends a request and, when the server answers 429 or 503, waits as its `Retry-After` says and tries again, within
 * the retry policy; a POST or PATCH only when the answer proves it was not processed (`retryable`). Returns the last
 * answer, whatever its status: interpreting it is the caller's job.
 */
export async function sendWithRetry(httpRequest: HttpRequest, options: HttpOptions = {}): Promise<HttpResponse> {
  const policy: RetryPolicy = { ...defaultRetryPolicy, ...options.retry };
  const clock = options.clock ?? systemClock;
  for (let attempt = 0; ; attempt++) {
    const response = await sendOnce(httpRequest, options);
    if (!retryable(httpRequest, response) || attempt >= policy.maxRetries) return response;
    const waitMs =
      parseRetryAfterMs(headerValue(response, "retry-after"), clock.now()) ?? policy.fallbackWaitMs * 2 ** attempt;
    // A server asking for a longer pause than we are willing to wait gets its answer passed up instead.
    if (waitMs > policy.maxWaitMs) return response;
    await clock.sleep(waitMs);
  }
}

/** Parses a JSON body, or returns undefined when the body is empty or not JSON. */
export function parseJsonBody(response: HttpResponse): unknown {
  return parseBodyWith(response, JSON.parse);
}

/** `parseJsonBody`, with integers beyond 2^53 − 1 parsed as their exact bigints (`parseJsonExactly`). */
export function parseExactJsonBody(response: HttpResponse): unknown {
  return parseBodyWith(response, parseJsonExactly);
}

function parseBodyWith(response: HttpResponse, parse: (text: string) => unknown): unknown {
  if (response.text === "") return undefined;
  try {
    return parse(response.text);
  } catch {
    return undefined;
  }
}
