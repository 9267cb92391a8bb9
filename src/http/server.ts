import { createServer, type IncomingMessage, type ServerOptions } from "node:http";
import type { Socket } from "node:net";
import type { TypeBoxTypeProvider } from "@fastify/type-provider-typebox";
import { Ajv, type Options as AjvOptions } from "ajv";
import addFormats from "ajv-formats";
import Fastify, { type FastifyBaseLogger, type FastifyInstance, type FastifyRequest, LogController } from "fastify";
import FindMyWay, { type HTTPMethod } from "find-my-way";
import type { AddressRangeSet } from "../auth/address-ranges.js";
import { ipAddressOf } from "../net/address-key.js";
import { monotonicNowMs } from "../time/monotonic.js";
import { AnswerBudget, largeAnswerBytes, maxWaitingPipelinedRequests, oneRequestAtATime } from "./answer-flow.js";
import { ServiceError } from "./errors.js";
import { addExactIntegerKeyword, hasInt64Field, withExactIntegers } from "./exact-integers.js";
import { parseJsonBody } from "./json-body.js";
import {
  deadlineCheckIntervalMs,
  guardConnections,
  type HttpServerLimits,
  maxHeaderBytes,
  maxPathParameterCharacters,
  maxUrlCharacters,
} from "./limits.js";
import { boundPipelinedParsing } from "./pipelined-parsing.js";
import {
  answerOnSocket,
  classifyClientError,
  pathParameterTooLong,
  problemMediaType,
  requestNotReceivedInTime,
  sendError,
  toProblemDocument,
} from "./problem.js";
import { repeatedQueryParameter } from "./repeated-query.js";
import { RepeatedWarnings } from "./repeated-warnings.js";
import { withTypedEnums } from "./typed-enums.js";
import { closeAfterUnreadBody } from "./unread-bodies.js";

declare module "fastify" {
  interface FastifyContextConfig {
    /**
     * Whether the route's body may be left out: no body, or an empty one of any content type, reaches the handler as
     * `{}`, which the body schema checks like any other. Its OpenAPI operation says the body is not required.
     */
    bodyOptional?: boolean;
  }
}

/** When a client refused a large answer for the server's answer budget may ask again. */
const LARGE_ANSWER_RETRY_AFTER_SECONDS = 5;

/** Shortest time between two warnings of one kind that a server logs for requests it could not serve. */
export const REPEATED_WARNING_WINDOW_MS = 10_000;

/** A Fastify instance typed for TypeBox route schemas; every flowplane server is one. */
export type HttpServer = FastifyInstance<
  // biome-ignore lint/suspicious/noExplicitAny: Fastify's default server generics.
  any,
  // biome-ignore lint/suspicious/noExplicitAny: Fastify's default server generics.
  any,
  // biome-ignore lint/suspicious/noExplicitAny: Fastify's default server generics.
  any,
  FastifyBaseLogger,
  TypeBoxTypeProvider
>;

/** Options of `createHttpServer`. */
export interface HttpServerOptions {
  /** The pino logger requests log to. */
  logger: FastifyBaseLogger;
  /** Largest accepted request body; larger ones are answered 413. */
  bodyLimitBytes: number;
  /**
   * Whether the server sits behind one proxy of its operator's, whose address it then trusts: a request's address is
   * the one that proxy saw, the right-most `X-Forwarded-For` entry (what the client wrote there is ignored). Or the
   * addresses of a chain of trusted proxies: the address is the right-most entry, read from the peer on, that is none
   * of them.
   */
  trustProxy: boolean | AddressRangeSet;
  /** The request deadline and the connection limits (the `service.http` settings). */
  limits: HttpServerLimits;
  /**
   * Turns an error of a dependency the server's services use into the typed error it stands for (the platform's
   * database that cannot serve now: a 503), or null to leave it to the catalogue's classification.
   */
  translateError?: (error: unknown) => ServiceError | null;
}

const sharedAjvOptions: AjvOptions = {
  allErrors: true,
  // Unknown fields are an error (schemas say additionalProperties: false), never silently dropped.
  removeAdditional: false,
  useDefaults: true,
  strict: false,
};

/**
 * Builds the Ajv validators: bodies are validated strictly (a number sent as a string is a 400), while path and
 * query parameters, which arrive as text, are coerced to the types their schema declares.
 */
function createValidatorCompiler() {
  const strictAjv = addExactIntegerKeyword(
    addFormats.default(new Ajv({ ...sharedAjvOptions, coerceTypes: false })),
    false,
  );
  const coercingAjv = addExactIntegerKeyword(
    addFormats.default(new Ajv({ ...sharedAjvOptions, coerceTypes: "array" })),
    true,
  );
  return ({ schema, httpPart }: { schema: object; httpPart?: string }) =>
    httpPart === "body"
      ? strictAjv.compile(withExactIntegers(withTypedEnums(schema)) as object)
      : coercingAjv.compile(withExactIntegers(withTypedEnums(schema), "parameters") as object);
}

/** How Node's server recognizes an `Expect` header asking for `100 Continue` (it emits `checkContinue` for these). */
const CONTINUE_EXPECTATION = /(?:^|\W)100-continue(?:$|\W)/i;

/** Whether a request waits for `100 Continue` before its body, as Node's server tells (HTTP/1.1 only). */
function expectsContinue(request: IncomingMessage): boolean {
  const expect = request.headers.expect;
  return request.httpVersion === "1.1" && expect !== undefined && CONTINUE_EXPECTATION.test(expect);
}

/**
 * Whether the body of an admitted request that reached a route will be read: it declares no more bytes than the route
 * takes (a larger one is refused with 413 unread), and has a content type the route's context parses (any other is
 * refused with 415, and a body without one too). A client expecting `100 Continue` is invited to send only such a body.
 */
function bodyWillBeRead(request: FastifyRequest): boolean {
  const declaredBytes = Number(request.headers["content-length"]);
  if (declaredBytes > request.routeOptions.bodyLimit) return false;
  const contentType = request.headers["content-type"];
  if (contentType === undefined) return false;
  const mediaType = (contentType.split(";")[0] ?? "").trim().toLowerCase();
  return mediaType !== "" && request.server.hasContentTypeParser(mediaType);
}

/** The length of a path segment once its percent-encoding is decoded (its raw length when that is not valid). */
function decodedLength(segment: string): number {
  try {
    return decodeURIComponent(segment).length;
  } catch {
    return segment.length;
  }
}

/**
 * What Fastify trusts of a request's peer and `X-Forwarded-For` entries (hop 0: the peer); false: only the peer. An
 * entry is checked as the address it names (`ipAddressOf`), so that a proxy writing `10.0.0.7:5555` is still the
 * trusted proxy 10.0.0.7. What Fastify then takes for `request.ip` is read through `requestAddress`.
 */
function trustFunction(trust: boolean | AddressRangeSet): ((address: string, hop: number) => boolean) | false {
  if (trust === false) return false;
  if (trust === true) return (_address, hop) => hop === 0;
  if (trust.size === 0) return false;
  return (address) => {
    const plain = ipAddressOf(address);
    return plain !== undefined && trust.contains(plain);
  };
}

/**
 * Creates a Fastify server with flowplane's HTTP conventions: TypeBox schemas, strict bodies, problem documents
 * for every error, 404 for unknown routes and 405 (with `Allow`) for a known route with another method, and the
 * limits of `limits.ts` (request deadline, connection caps, sizes of URLs, headers and JSON nesting).
 */
export function createHttpServer(options: HttpServerOptions): HttpServer {
  const { limits } = options;
  const warnings = new RepeatedWarnings({ windowMs: REPEATED_WARNING_WINDOW_MS, now: monotonicNowMs });
  const server = Fastify({
    loggerInstance: options.logger,
    bodyLimit: options.bodyLimitBytes,
    // One hop, not `true`: with `true` Fastify takes the left-most entry, which the client writes (a proxy appends to
    // the header), so a client could pick its own address for the rate limits, or name another to have it blocked.
    // `request.ip` is then the entry as the proxy wrote it, port and all: limits read it through `requestAddress`.
    trustProxy: trustFunction(options.trustProxy),
    // Per-request lines would dominate the log at token-issuer rates; errors are logged where they are mapped.
    logController: new LogController({ disableRequestLogging: true }),
    return503OnClosing: true,
    forceCloseConnections: "idle",
    // One deadline for the whole request: Node measures it from the request's first byte, headers and body alike.
    requestTimeout: limits.requestReceiveTimeoutMs,
    http: {
      headersTimeout: limits.requestReceiveTimeoutMs,
      connectionsCheckingInterval: deadlineCheckIntervalMs(limits),
      maxHeaderSize: maxHeaderBytes,
      // Node answers an HTTP/1.1 request without a Host header with a bare 400 of its own; the `onRequest` hook
      // below refuses it with a problem document instead, as every other refusal is.
      requireHostHeader: false,
    },
    // Node's server as Fastify would make it, but answering each connection's requests one at a time (see
    // `oneRequestAtATime`): pipelined requests are otherwise all handled at once, their answers held until read.
    serverFactory: (handler, fastifyOptions) => {
      const answer = oneRequestAtATime(handler, maxWaitingPipelinedRequests);
      const httpServer = createServer(fastifyOptions.http as ServerOptions, answer);
      // Node parses every request a read returned before any handler runs: bounded here, so that a connection closed
      // for too many waiting requests did not already cost thousands of them.
      boundPipelinedParsing(httpServer, maxWaitingPipelinedRequests + 1);
      // A request with an expectation other than 100-continue is answered like any other, through the same queue:
      // Node would answer each with a 417 of its own, outside it, however many a connection pipelines.
      httpServer.on("checkExpectation", answer);
      // One expecting 100-continue is answered through the queue too, and told to continue only once its body is
      // about to be read (the `preParsing` hook below): Node would tell every such client to send its body at once,
      // before the token, the address or the route was checked.
      httpServer.on("checkContinue", answer);
      // Without a listener Node closes a CONNECT's socket without a word: this server is no proxy, and says so.
      httpServer.on("connect", (_request: IncomingMessage, socket: Socket) => {
        answerOnSocket(
          new ServiceError("methodNotAllowed", "CONNECT is not served here: this is not a proxy."),
          socket,
        );
      });
      httpServer.keepAliveTimeout = fastifyOptions.keepAliveTimeout as number;
      httpServer.requestTimeout = fastifyOptions.requestTimeout as number;
      return httpServer;
    },
    // Deadlines and requests Node's parser refuses are answered with problem documents like every other error.
    clientErrorHandler: (error: Error & { code?: string }, socket) => {
      // Closed already: a connection that pipelined too much (`boundPipelinedParsing`) is owed no answer.
      if (socket.destroyed) return;
      if (error.code === "ECONNRESET") {
        socket.destroy();
        return;
      }
      answerOnSocket(classifyClientError(error, limits.requestReceiveTimeoutMs), socket);
    },
    routerOptions: { ignoreTrailingSlash: true, maxParamLength: maxPathParameterCharacters },
    // Errors raised before routing (a URL that is not valid percent-encoding) take the same path as all others.
    frameworkErrors: (error, request, reply) => {
      sendError(error, request, reply, warnings);
    },
  }).withTypeProvider<TypeBoxTypeProvider>();

  guardConnections(server.server, limits, {
    logger: options.logger,
    onFirstRequestOverdue: (socket) => answerOnSocket(requestNotReceivedInTime(limits.requestReceiveTimeoutMs), socket),
  });
  const answers = new AnswerBudget(limits.maxAnswerBytesInFlight);
  server.addHook("onSend", (request, reply, payload, done) => {
    // A string's bytes are at most three per UTF-16 unit: most answers are known to be small without counting.
    const bytes =
      typeof payload === "string"
        ? payload.length * 3 < largeAnswerBytes
          ? 0
          : Buffer.byteLength(payload)
        : payload instanceof Uint8Array
          ? payload.byteLength
          : 0;
    if (answers.reserve(bytes, reply.raw)) {
      done(null, payload);
      return;
    }
    const refusal = new ServiceError(
      "unavailable",
      "The server holds as many large answers as it may until their clients have read them; retry later.",
      { headers: { "retry-after": String(LARGE_ANSWER_RETRY_AFTER_SECONDS) } },
    );
    request.log.debug({ bytes, bytesInFlight: answers.bytesInFlight }, "large answer refused");
    reply.code(refusal.status).headers(refusal.headers).type(problemMediaType);
    done(null, JSON.stringify(toProblemDocument(refusal, request.url.split("?")[0])));
  });
  server.addHook("onSend", (request, reply, payload, done) => {
    closeAfterUnreadBody(request, reply, options.bodyLimitBytes);
    done(null, payload);
  });
  server.addHook("onRequest", (request, _reply, done) => {
    if (request.url.length > maxUrlCharacters) {
      done(new ServiceError("uriTooLong", `The URL is longer than ${maxUrlCharacters} characters.`));
      return;
    }
    if (request.raw.httpVersion === "1.1" && request.headers.host === undefined) {
      done(new ServiceError("invalidRequest", "An HTTP/1.1 request must carry a Host header."));
      return;
    }
    done();
  });

  server.setValidatorCompiler(createValidatorCompiler());
  // Only JSON bodies are understood by default; text/plain would otherwise reach handlers as a string.
  server.removeContentTypeParser("text/plain");
  // Clients send a content type with no body on requests that take none (an SDK our users own sends every DELETE
  // with a JSON one): an empty body is no body there, whatever type it claims. A route that takes a body still
  // refuses an empty one, unless its body is optional (`bodyOptional`). Any other body of a type other than JSON is
  // refused with 415 before it is read.
  const acceptsNoBody = (request: {
    routeOptions: { schema?: { body?: unknown }; config: { bodyOptional?: boolean } };
  }) => request.routeOptions.schema?.body === undefined || request.routeOptions.config.bodyOptional === true;
  server.addContentTypeParser("*", (request, _payload, done) => {
    const declaresNoBody =
      request.headers["transfer-encoding"] === undefined &&
      (request.headers["content-length"] === undefined || request.headers["content-length"] === "0");
    if (declaresNoBody && acceptsNoBody(request)) {
      done(null, undefined);
      return;
    }
    // A route that reads another type as well (the token endpoint's forms) names what it takes.
    const consumes = request.routeOptions.schema?.consumes ?? ["application/json"];
    done(new ServiceError("unsupportedMediaType", `Send the body as ${consumes.join(" or ")}.`));
  });
  server.removeContentTypeParser("application/json");
  server.addContentTypeParser("application/json", { parseAs: "buffer" }, (request, body, done) => {
    const bytes = body as Buffer;
    const schema = request.routeOptions.schema?.body;
    if (bytes.length === 0 && acceptsNoBody(request)) {
      done(null, undefined);
      return;
    }
    try {
      done(null, parseJsonBody(bytes, { exactIntegers: hasInt64Field(schema) }));
    } catch (error) {
      done(error as Error);
    }
  });
  // A route whose body is optional sees a request without one as one with an empty object, which its schema checks.
  server.addHook("preValidation", async (request) => {
    if (request.body === undefined && request.routeOptions.config.bodyOptional === true) request.body = {};
    const repeated = repeatedQueryParameter(request.query, request.routeOptions.schema?.querystring);
    if (repeated !== undefined) throw repeated;
  });
  const translateError = options.translateError;
  server.setErrorHandler((error, request, reply) =>
    sendError(translateError === undefined ? error : (translateError(error) ?? error), request, reply, warnings),
  );

  // Every registered route is mirrored into a second router so an unmatched request can be told apart:
  // a path that exists under another method is a 405, anything else a 404.
  const knownRoutes = FindMyWay({ ignoreTrailingSlash: true, maxParamLength: maxPathParameterCharacters });
  server.addHook("onRoute", (route) => {
    const methods = Array.isArray(route.method) ? route.method : [route.method];
    for (const method of methods) {
      if (method === "HEAD" && route.url === "*") continue;
      knownRoutes.on(method as HTTPMethod, route.url, () => undefined);
    }
  });
  /** The refusal of a request no route matched: 414 for an over-long parameter, 405 with `Allow`, or 404. */
  const unmatchedRouteError = (request: FastifyRequest): ServiceError => {
    const path = request.url.split("?")[0] ?? request.url;
    // No route has a segment this long, so the request named a resource by an over-long parameter. The router
    // reports that itself only when no sibling route was tried, hence the check here.
    if (path.split("/").some((segment) => decodedLength(segment) > maxPathParameterCharacters)) {
      return pathParameterTooLong();
    }
    // HEAD is listed where it is served: Fastify answers HEAD on every GET route.
    const allowed = (["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"] as const).filter(
      (method) => knownRoutes.find(method, path) !== null,
    );
    // A route of this method matched and found nothing to serve (a static file that does not exist): a 404.
    if (allowed.length > 0 && !(allowed as readonly string[]).includes(request.method)) {
      return new ServiceError(
        "methodNotAllowed",
        `${request.method} is not allowed on ${path}; use ${allowed.join(", ")}.`,
        {
          headers: { allow: allowed.join(", ") },
        },
      );
    }
    return new ServiceError("routeNotFound", `No route matches ${request.method} ${path}.`);
  };
  server.setNotFoundHandler((request, reply) => sendError(unmatchedRouteError(request), request, reply, warnings));
  // After every `onRequest` hook (tokens, addresses, scopes): a request that matched no route is answered here, before
  // its body is read. The not-found handler runs only after the body was parsed: a client with no token could have
  // every server read a body up to its limit per connection (a GiB for a thousand connections) just to hear 404, and
  // one that never ended its body held the connection until the request deadline. A client that waits for `100
  // Continue` sends its body only once the request was admitted and the body will be read; a refused one never sends it.
  server.addHook("preParsing", (request, reply, payload, done) => {
    if (request.is404 && !reply.raw.headersSent) {
      done(unmatchedRouteError(request));
      return;
    }
    if (expectsContinue(request.raw) && !reply.raw.headersSent && bodyWillBeRead(request)) reply.raw.writeContinue();
    done(null, payload);
  });
  return server;
}
