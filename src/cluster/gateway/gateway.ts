/**
 * The gateway process: the REST API on `gateway.port` (`/v2/...`, bearer tokens verified with the platform's JWKS)
 * and the management port on `management.port`: health, liveness, readiness and Prometheus metrics
 * (unauthenticated), and the cluster management API (`/actuator/cluster...`, bearer tokens with the `cluster` scope),
 * which it forwards to the cluster's coordinator. It knows the cluster through the brokers' `describe` answers and
 * routes message requests to partition leaders over the cluster transport, as a client.
 *
 * Who may call: tokens issued by the platform (`gateway.issuerUrl`) for the audience `audiences.gateway` that hold
 * the `cluster` scope (organization clients), or on the REST API the `gateway` scope (cluster API clients). With an access policy file (`gateway.accessPolicyFile`, written by the platform's
 * provisioner and followed while the gateway runs, access-policy-watcher.ts) the gateway also enforces the cluster's
 * access policy on both ports (access-guard.ts): its IP allowlist before anything else (health routes exempt), the
 * binding of tokens to this cluster and its organization, the deleted cluster clients, and the monitoring clients'
 * credentials on the metrics route while monitoring is on. Without the file every address may connect and every
 * token of the issuer is accepted, whichever cluster it names.
 */
import type { AddressInfo } from "node:net";
import type { FastifyRequest } from "fastify";
import { type Logger, pino } from "pino";
import { installAuthentication } from "../../auth/authenticate.js";
import { systemClock } from "../../auth/clock.js";
import { remoteKeySource } from "../../auth/key-source.js";
import { clusterGatewayScope, clusterScope } from "../../auth/scopes.js";
import { defaultClockSkewSeconds, TokenVerifier } from "../../auth/verifier.js";
import { clusterSecretFromConfiguration } from "../../config/cluster-secret.js";
import type { Configuration } from "../../config/schema.js";
import { registerApiDocuments } from "../../http/openapi.js";
import { createHttpServer, type HttpServer } from "../../http/server.js";
import { parseTrustedProxies } from "../../http/trusted-proxies.js";
import { monotonicNowMs } from "../../time/monotonic.js";
import type { BrokerRequest } from "../broker/protocol.js";
import { ClusterCredentials, TransportClient } from "../transport/index.js";
import { AccessGuard, healthRoutes } from "./access-guard.js";
import { AccessPolicyWatcher } from "./access-policy-watcher.js";
import { backupRoutes } from "./backup-routes.js";
import { CoordinatorClient } from "./coordinator-client.js";
import { installCors, parseAllowedOrigins } from "./cors.js";
import { gatewayHealth } from "./health.js";
import { managementRoutes } from "./management-routes.js";
import { MessageRouter } from "./message-router.js";
import { GatewayMetrics } from "./metrics.js";
import { gatewayRoutes } from "./rest-routes.js";
import { parseContactPoints, TopologyCache } from "./topology-cache.js";
import { gatewayVersion } from "./version.js";

/** Options of `startGateway` beyond the configuration. */
export interface GatewayOptions {
  /** Where the gateway logs; by default standard output at `log.level`. */
  logger?: Logger;
  /** Time between two periodic topology rounds (default 1,000 ms). */
  topologyRefreshIntervalMs?: number;
  /** Time between two looks at the access policy file (default 500 ms). */
  accessPolicyPollIntervalMs?: number;
}

/** A running gateway. */
export interface RunningGateway {
  /** Base URL of the REST API, e.g. `http://127.0.0.1:8080`. */
  url: string;
  /** Base URL of the management port (health, metrics, cluster management API), e.g. `http://127.0.0.1:9600`. */
  managementUrl: string;
  /** Stops both servers, the topology refresh and every broker connection. */
  close(): Promise<void>;
}

/** Largest accepted REST body: the engine's largest record, with room for JSON being wordier than msgpack. */
const BODY_LIMIT_BYTES = 1024 * 1024;

/**
 * Largest accepted body on the management port: a broker list of a thousand ids, with room to spare; every other
 * body there is a few bytes.
 */
const MANAGEMENT_BODY_LIMIT_BYTES = 64 * 1024;

/** Longest wait for one broker's `describe` answer in a topology round. */
const DESCRIBE_TIMEOUT_MS = 1_000;

/** Requests in flight per broker on the topology's own connections: one round's `describe` each, with room to spare. */
const TOPOLOGY_MAX_IN_FLIGHT_REQUESTS = 8;

/**
 * Management requests (changes, dry runs, status, backups) in flight per broker on their own connections; beyond it
 * the management API answers 503 with Retry-After. An operator's tools send a few at a time; a burst of plans is what
 * this bounds: their answers can be megabytes each, and the coordinator computes them on its one thread.
 */
export const MANAGEMENT_MAX_IN_FLIGHT_REQUESTS = 8;

function baseUrl(server: HttpServer, host: string): string {
  const address = server.server.address() as AddressInfo;
  const shownHost = host === "0.0.0.0" || host === "::" ? "127.0.0.1" : host;
  return `http://${shownHost.includes(":") ? `[${shownHost}]` : shownHost}:${address.port}`;
}

/**
 * Starts the gateway of `configuration` (sections gateway, management, audiences, cluster, log). Throws
 * ConfigurationError when no valid cluster secret is configured.
 */
export async function startGateway(
  configuration: Configuration,
  options: GatewayOptions = {},
): Promise<RunningGateway> {
  const logger = options.logger ?? pino({ level: configuration.log.level });
  const contactPoints = parseContactPoints(configuration.gateway.contactPoints);
  if (contactPoints.length === 0) throw new Error("service.gateway.contactPoints names no broker");
  // The platform issues its tokens with its URL less any trailing slash (issuerUrlFromConfiguration): the key set's
  // URL and the `iss` tokens must carry both come from this one value (a configured `…/` once refused every token).
  const issuerUrl = configuration.gateway.issuerUrl.replace(/\/+$/, "");
  const { secret, clusterId } = clusterSecretFromConfiguration(configuration);
  const trustedProxies = parseTrustedProxies(configuration.gateway.trustedProxies, "service.gateway.trustedProxies");
  const allowedOrigins = parseAllowedOrigins(configuration.gateway.allowedOrigins);
  const client = new TransportClient<BrokerRequest, unknown>({
    maxInFlightRequests: configuration.gateway.maxInFlightRequests,
    credentials: ClusterCredentials.fromSecret(secret, clusterId),
    logger,
  });
  // The topology asks over connections of its own: on the requests' connections, a broker whose connection is full
  // of client requests (a hot partition's leader) refused the round's `describe` with backpressure, and the view
  // then listed it as unreachable, its partitions without a leader and the gateway DOWN.
  const topologyClient = new TransportClient<BrokerRequest, unknown>({
    maxInFlightRequests: TOPOLOGY_MAX_IN_FLIGHT_REQUESTS,
    credentials: ClusterCredentials.fromSecret(secret, clusterId),
    logger,
  });
  // Management requests travel on connections of their own too: a broker closes a connection whose answers pile up
  // unread beyond its limit (64 MiB), and 150 dry runs answered at once, 629 KB each, on the requests' connection
  // once took the publications in flight to that broker with them (answered 502, outcome unknown).
  const managementClient = new TransportClient<BrokerRequest, unknown>({
    maxInFlightRequests: MANAGEMENT_MAX_IN_FLIGHT_REQUESTS,
    credentials: ClusterCredentials.fromSecret(secret, clusterId),
    logger,
  });
  // Monotonic: request deadlines and topology rounds measure durations, which a step of the wall clock must not stretch.
  const now = monotonicNowMs;
  const topology = new TopologyCache({
    client: topologyClient,
    contactPoints,
    gatewayVersion: gatewayVersion,
    describeTimeoutMs: Math.min(DESCRIBE_TIMEOUT_MS, configuration.gateway.requestTimeoutMs),
    refreshIntervalMs: options.topologyRefreshIntervalMs ?? 1_000,
    logger,
    now,
  });
  const router = new MessageRouter({
    client,
    topology,
    requestTimeoutMs: configuration.gateway.requestTimeoutMs,
    maxInFlightRequests: configuration.gateway.maxInFlightRequests,
    now,
  });
  const keySource = remoteKeySource(new URL(`${issuerUrl}/.well-known/jwks.json`), {
    // While the platform cannot be reached, its last key set verifies tokens for as long as one it signed before
    // can still be valid.
    maximumStaleMs: (configuration.token.lifetimeSeconds + defaultClockSkewSeconds) * 1000,
    logger,
    onFetch: (outcome) => metrics.observeTokenKeySetFetch(outcome),
  });
  const metrics = new GatewayMetrics({
    topology: () => topology.current(),
    inFlightRequests: () => router.inFlightRequests(),
    tokenKeySetAgeMs: () => keySource.state().ageMs,
  });
  const verifier = new TokenVerifier({
    keySource,
    issuer: issuerUrl,
    audience: configuration.audiences.gateway,
    clock: systemClock,
  });
  const policyFile = configuration.gateway.accessPolicyFile;
  const accessPolicy =
    policyFile === ""
      ? undefined
      : await AccessPolicyWatcher.open({
          path: policyFile,
          logger,
          ...(options.accessPolicyPollIntervalMs === undefined
            ? {}
            : { pollIntervalMs: options.accessPolicyPollIntervalMs }),
          onApplied: () => metrics.observeAccessPolicyUpdate("applied"),
          onRejected: () => metrics.observeAccessPolicyUpdate("rejected"),
        });
  const guard =
    accessPolicy === undefined
      ? undefined
      : new AccessGuard({
          policy: () => accessPolicy.current(),
          trustedProxies,
          onRefused: (reason) => metrics.observeAccessRefusal(reason),
        });
  const authentication = {
    verifier,
    ...(guard === undefined ? {} : { checkPrincipal: guard.checkPrincipal.bind(guard) }),
  };

  // Added after the authentication's hook, so that it runs after it: a pause is told only to authenticated callers.
  const installWritesPause = (api: HttpServer): void => {
    if (guard !== undefined) api.addHook("onRequest", async (request) => guard.checkWritesAllowed(request));
  };
  const writesPaused = (): boolean => accessPolicy?.current().writesPausedReason !== undefined;

  const rest = createHttpServer({
    logger,
    bodyLimitBytes: BODY_LIMIT_BYTES,
    trustProxy: false,
    limits: configuration.http,
  });
  if (guard !== undefined) {
    rest.addHook("onRequest", async (request) => guard.checkAddress(request));
  }
  installCors(rest, allowedOrigins);
  rest.addHook("onResponse", async (request, reply) => {
    const route = request.routeOptions.url ?? "unmatched";
    metrics.observeRequest(request.method, route, reply.statusCode, reply.elapsedTime / 1000);
  });
  const restPort = configuration.gateway.port;
  await rest.register(
    async (context) => {
      await registerApiDocuments(context, {
        title: "flowplane gateway REST API",
        description: `Cluster topology and messages. Bearer token with audience '${configuration.audiences.gateway}' and the scope ${clusterScope} (organization clients) or ${clusterGatewayScope} (this cluster's API clients).`,
        version: gatewayVersion,
        serverUrl: `http://${configuration.gateway.host}:${restPort}/v2`,
        bearerAuth: true,
        documentPath: "/openapi.json",
        docsPath: "/docs",
      });
      await context.register(async (api) => {
        installAuthentication(api, authentication);
        installWritesPause(api);
        gatewayRoutes(api, topology, router);
      });
    },
    { prefix: "/v2" },
  );

  const management = createHttpServer({
    logger,
    bodyLimitBytes: MANAGEMENT_BODY_LIMIT_BYTES,
    trustProxy: false,
    limits: configuration.http,
  });
  if (guard !== undefined) {
    management.addHook("onRequest", async (request) => {
      // Probes and the provisioner's health polling come from wherever the orchestrator runs them.
      if (!healthRoutes.has(request.routeOptions.url ?? "")) guard.checkAddress(request);
    });
  }
  installCors(management, allowedOrigins);
  const coordinator = new CoordinatorClient({
    client: managementClient,
    topology,
    requestTimeoutMs: configuration.gateway.requestTimeoutMs,
    logger,
  });
  await management.register(async (context) => {
    await registerApiDocuments(context, {
      title: "flowplane cluster management API",
      description:
        "Resize the running cluster (brokers, partitions, replication factor), watch the change and cancel it. Bearer token with the scope 'cluster'. Health and metrics on this port need no token (the metrics need a monitoring client's HTTP Basic credentials while the cluster's monitoring is on).",
      version: gatewayVersion,
      serverUrl: `http://${configuration.management.host}:${configuration.management.port}`,
      bearerAuth: true,
      documentPath: "/actuator/cluster/openapi.json",
      docsPath: "/actuator/cluster/docs",
    });
    await context.register(async (api) => {
      installAuthentication(api, authentication);
      installWritesPause(api);
      managementRoutes(api, coordinator, topology);
      backupRoutes(api, coordinator);
    });
  });
  management.get("/actuator/health", async (_request, reply) => {
    const health = gatewayHealth(topology.current(), writesPaused());
    return reply.code(health.status === "UP" ? 200 : 503).send(health);
  });
  management.get("/actuator/health/liveness", async () => ({ status: "UP" }));
  management.get("/actuator/health/readiness", async (_request, reply) => {
    const health = gatewayHealth(topology.current(), writesPaused());
    return reply
      .code(health.status === "UP" ? 200 : 503)
      .send({ status: health.status, components: health.components });
  });
  const metricsCredentials =
    guard === undefined ? {} : { onRequest: async (request: FastifyRequest) => guard.checkMetricsCredentials(request) };
  management.get("/actuator/prometheus", metricsCredentials, async (_request, reply) => {
    const text = await metrics.registry.metrics();
    return reply.header("content-type", metrics.registry.contentType).send(text);
  });

  // A broker that is still starting is fine: the periodic refresh finds it later.
  await topology.start();
  try {
    await rest.listen({ host: configuration.gateway.host, port: restPort });
    await management.listen({ host: configuration.management.host, port: configuration.management.port });
  } catch (error) {
    topology.close();
    accessPolicy?.close();
    await Promise.allSettled([
      rest.close(),
      management.close(),
      client.close(),
      topologyClient.close(),
      managementClient.close(),
    ]);
    throw error;
  }
  const url = baseUrl(rest, configuration.gateway.host);
  const managementUrl = baseUrl(management, configuration.management.host);
  logger.info({ url, managementUrl, contactPoints: configuration.gateway.contactPoints }, "gateway started");
  return {
    url,
    managementUrl,
    async close() {
      topology.close();
      accessPolicy?.close();
      await Promise.allSettled([rest.close(), management.close()]);
      await Promise.all([client.close(), topologyClient.close(), managementClient.close()]);
    },
  };
}
