import type { AddressInfo } from "node:net";
import { createServer } from "node:net";
import { type Logger, pino } from "pino";
import { openAccessPolicy } from "../auth/access-policy.js";
import { installAuthentication } from "../auth/authenticate.js";
import { systemClock } from "../auth/clock.js";
import { administrationScopes, modelerScopes, scopeValues } from "../auth/scopes.js";
import { type Principal, TokenVerificationError } from "../auth/verifier.js";
import type { Configuration } from "../config/schema.js";
import { registerApiDocuments } from "../http/openapi.js";
import { createHttpServer, type HttpServer } from "../http/server.js";
import { parseTrustedProxies } from "../http/trusted-proxies.js";
import { installActivityRecording } from "./admin/activity/recording.js";
import { ActivityRetention } from "./admin/activity/retention.js";
import { activityRoutes } from "./admin/activity/routes.js";
import { ActivityService } from "./admin/activity/service.js";
import { backupRoutes } from "./admin/backups/routes.js";
import { BackupService } from "./admin/backups/service.js";
import { clusterClientRoutes } from "./admin/cluster-clients/routes.js";
import { ClusterClientService } from "./admin/cluster-clients/service.js";
import type { AccessPolicyChangedListener, ClusterDirectory } from "./admin/cluster-directory.js";
import { clusterRoutes, clusterScalingRoutes } from "./admin/clusters/routes.js";
import { ClusterScalingService } from "./admin/clusters/scaling.js";
import { ClusterService } from "./admin/clusters/service.js";
import { connectorSecretRoutes } from "./admin/connector-secrets/routes.js";
import { ConnectorSecretService } from "./admin/connector-secrets/service.js";
import { ipAllowlistRoutes } from "./admin/ip-allowlist/routes.js";
import { IpAllowlistService } from "./admin/ip-allowlist/service.js";
import { memberRoutes } from "./admin/members/routes.js";
import { MemberService } from "./admin/members/service.js";
import { monitoringRoutes } from "./admin/monitoring/routes.js";
import { MonitoringService } from "./admin/monitoring/service.js";
import { organizationClientRoutes } from "./admin/organization-clients/routes.js";
import { OrganizationClientService } from "./admin/organization-clients/service.js";
import { bootstrapOrganization } from "./bootstrap.js";
import { defaultConsoleDirectory, loadConsoleFiles } from "./console/files.js";
import { consoleOrigins } from "./console/origins.js";
import { consoleRoutes, prefersPage, sendConsoleIndex } from "./console/routes.js";
import { claimPlatformDataDirectory } from "./data-directory-claim.js";
import { platformClusterTokens } from "./issuer/cluster-tokens.js";
import { issuerRoutes } from "./issuer/routes.js";
import {
  createIssuerServices,
  createPlatformVerifier,
  type IssuerServices,
  issuerUrlFromConfiguration,
} from "./issuer/services.js";
import { fileBodyLimitBytes } from "./modeler/content.js";
import { modelerPublicRoutes, modelerRoutes } from "./modeler/routes.js";
import { createModelerServices } from "./modeler/services.js";
import { type ModelerWorkerTasks, modelerWorkerModule } from "./modeler/worker-tasks.js";
import { LocalProvisioner, type LocalProvisionerOptions } from "./provisioner/local-provisioner.js";
import { describeDatabase, openStore, type Store } from "./store/database.js";
import { databaseUnavailable, databaseUnavailableReason } from "./store/unavailable.js";
import { platformVersion } from "./version.js";
import { defaultWorkerThreads, WorkerPool } from "./worker-pool.js";

/** Credentials of the administration client created on the first start. */
export interface BootstrapCredentials {
  clientId: string;
  clientSecret: string;
}

/** Options of `startPlatform`. */
export interface StartPlatformOptions {
  /** Where structured logs go; defaults to stdout at the configured level. */
  logger?: Logger;
  /** Called once, on the first start only, with the generated administration client (not for a preset one). */
  onBootstrapCredentials?: (credentials: BootstrapCredentials) => void;
  /**
   * Runs the organization's clusters with the local provisioner (`flowplane start`): every recorded cluster is
   * launched, and the first cluster is created on the first start. Absent: the platform runs no cluster processes
   * (`flowplane platform`), and creating, waking or deleting a cluster answers 409.
   */
  localClusters?: LocalClustersOptions;
  /**
   * Replaces what the routes under `/clusters/{clusterId}/…` know of clusters (tests inject an in-memory
   * directory); by default the clusters service answers and delivers changed policies through its provisioner.
   */
  clusterAccess?: ClusterAccessOptions;
}

/** How the platform runs clusters with the local provisioner. */
export interface LocalClustersOptions {
  /** Create the organization's first cluster on the first start (default true). */
  createPrimaryCluster?: boolean;
  /** Environment the children inherit (default: this process's). */
  environment?: LocalProvisionerOptions["environment"];
  /** The flowplane command line to run the children with (tests); default this installation's. */
  command?: LocalProvisionerOptions["command"];
  readyTimeoutMs?: number;
  stopTimeoutMs?: number;
  /** How long an interrupted restore's put-back waits for processes still holding the brokers' data (tests). */
  dataHolderWaitMs?: number;
  /** When a committed restore's cluster takes writes again (tests). */
  writesResume?: LocalProvisionerOptions["writesResume"];
}

/** What the IP allowlist, monitoring, connector-secret and cluster API client routes need of clusters. */
export interface ClusterAccessOptions {
  /** Answers which clusters an organization has; without one, every cluster route answers 404. */
  clusters: ClusterDirectory;
  /** Delivers a cluster's changed access policy to its gateway. */
  onAccessPolicyChanged: AccessPolicyChangedListener;
}

/** A platform server that is up and listening. */
export interface RunningPlatform {
  /** Base URL the platform listens at, e.g. `http://127.0.0.1:8088`. */
  url: string;
  /** The issuer URL that tokens carry as `iss`. */
  issuerUrl: string;
  organizationId: string;
  /** Where the web console is served, or null when it was not built. */
  consoleUrl: string | null;
  /** The clusters of the Administration API. */
  clusters: ClusterService;
  /** The local provisioner, when the platform runs clusters. */
  provisioner: LocalProvisioner | undefined;
  /** The organization's first cluster (the one `flowplane start` runs), when the platform runs clusters. */
  primaryClusterId: string | undefined;
  /** Stops the clusters' processes, stops accepting requests, finishes in-flight ones and closes the database. */
  close(): Promise<void>;
}

/** Creates the platform's logger: structured JSON, with credentials redacted should a caller ever log them. */
export function createPlatformLogger(level: string): Logger {
  return pino({
    name: "flowplane-platform",
    level,
    redact: {
      paths: ["req.headers.authorization", "*.client_secret", "*.clientSecret", "*.access_token", "*.secret"],
      censor: "[redacted]",
    },
  });
}

/** A free port held by a listening probe until `release` (idempotent). */
export interface ReservedPort {
  port: number;
  release(): Promise<void>;
}

/**
 * Finds a free port for the rare case of port 0 without a public URL (tests) and holds it until the platform's server
 * listens there: the system hands a port just released to the next process that asks for a free one, and opening
 * the store and bootstrapping take long enough for another process to take it.
 */
export async function reservePort(host: string): Promise<ReservedPort> {
  const probe = createServer();
  await new Promise<void>((resolve, reject) => {
    probe.once("error", reject);
    probe.listen(0, host, () => resolve());
  });
  // Holding the port must not keep the process alive.
  probe.unref();
  let released: Promise<void> | undefined;
  return {
    port: (probe.address() as AddressInfo).port,
    release() {
      released ??= new Promise((resolve) => probe.close(() => resolve()));
      return released;
    },
  };
}

/**
 * Starts the platform: opens and migrates the database, bootstraps the organization on the first start, and serves
 * the token issuer, the Administration API under `/admin` and the Modeler API under `/modeler/api/v1`, each with
 * its own OpenAPI document.
 */
export async function startPlatform(
  configuration: Configuration,
  options: StartPlatformOptions = {},
): Promise<RunningPlatform> {
  const logger = options.logger ?? createPlatformLogger(configuration.log.level);
  const { host } = configuration.platform;
  // Before anything is read or written: a second platform on the same data directory would migrate the database,
  // record other ports for its clusters and rewrite their files under the one running, and then fail to start them.
  const releaseDataDirectory = await claimPlatformDataDirectory(configuration.dataDirectory, "a platform");
  // Tokens name their issuer, so the port must be known before the issuer is built; port 0 is resolved up front.
  const reserved = await (configuration.platform.port === 0 && configuration.platform.publicUrl === ""
    ? reservePort(host)
    : Promise.resolve(undefined)
  ).catch(async (error: unknown) => {
    await releaseDataDirectory();
    throw error;
  });
  const port = reserved?.port ?? configuration.platform.port;
  const store = await openStore({
    url: configuration.database.url,
    dataDirectory: configuration.dataDirectory,
    secrets: configuration.secrets,
    postgresStatementTimeoutMs: configuration.database.statementTimeoutMs,
    onIdleConnectionError: (error) =>
      logger.warn(
        { reason: databaseUnavailableReason(error) ?? error.message.slice(0, 200) },
        "a database connection was lost",
      ),
  }).catch(async (error: unknown) => {
    await reserved?.release();
    await releaseDataDirectory();
    throw error;
  });
  if (store.keyEncryption.createdKeyFile !== undefined) {
    logger.warn(
      { keyFile: store.keyEncryption.createdKeyFile },
      "generated the key-encryption key file of the database's key material; back it up apart from the " +
        "database: without it the signing keys cannot be read",
    );
  }
  try {
    const issuerUrl = issuerUrlFromConfiguration(configuration, port);
    const issuer = await createIssuerServices({ store, configuration, issuerUrl });
    const bootstrap = await bootstrapOrganization(store, {
      organizationName: configuration.bootstrap.organizationName,
      ownerEmail: configuration.bootstrap.ownerEmail,
      presetClient:
        configuration.bootstrap.clientId === ""
          ? null
          : { clientId: configuration.bootstrap.clientId, clientSecret: configuration.bootstrap.clientSecret },
      async createAdministrationClient(organizationId, preset) {
        const created = await issuer.clients.create({
          organizationId,
          name: "Administration (created on first start)",
          scopes: [...scopeValues],
          ...(preset === null ? {} : { clientId: preset.clientId, secret: preset.clientSecret }),
        });
        return { clientId: created.client.clientId, clientSecret: created.secret };
      },
    });
    const provisioner =
      options.localClusters === undefined
        ? undefined
        : new LocalProvisioner({
            database: store.database,
            dataDirectory: configuration.dataDirectory,
            primaryGatewayPort: configuration.gateway.port,
            primaryManagementPort: configuration.management.port,
            issuerUrl,
            gatewayAudience: configuration.audiences.gateway,
            tokenLifetimeSeconds: configuration.token.lifetimeSeconds,
            allowedOrigins: consoleOrigins(issuerUrl, host, port).join(","),
            logLevel: configuration.log.level,
            logFileLimits: {
              maxBytes: configuration.provisioner.logFileBytes,
              keptFiles: configuration.provisioner.keptLogFiles,
            },
            logger: logger.child({ component: "provisioner" }),
            ...(options.localClusters.environment === undefined
              ? {}
              : { environment: options.localClusters.environment }),
            ...(options.localClusters.command === undefined ? {} : { command: options.localClusters.command }),
            ...(options.localClusters.readyTimeoutMs === undefined
              ? {}
              : { readyTimeoutMs: options.localClusters.readyTimeoutMs }),
            ...(options.localClusters.stopTimeoutMs === undefined
              ? {}
              : { stopTimeoutMs: options.localClusters.stopTimeoutMs }),
            ...(options.localClusters.dataHolderWaitMs === undefined
              ? {}
              : { dataHolderWaitMs: options.localClusters.dataHolderWaitMs }),
            ...(options.localClusters.writesResume === undefined
              ? {}
              : { writesResume: options.localClusters.writesResume }),
          });
    const clusters = new ClusterService({
      database: store.database,
      provisioner,
      issuerUrl,
      maxClustersPerOrganization: configuration.provisioner.maxClustersPerOrganization,
      healthCheckIntervalMs: configuration.provisioner.healthCheckIntervalMs,
      logger,
    });
    const server = await buildPlatformServer({
      configuration,
      store,
      issuer,
      logger,
      issuerUrl,
      clusters,
      // The console calls the clusters' gateways and management ports, which listen on the provisioner's host.
      consoleConnectSources: provisioner === undefined ? [] : [`http://${provisioner.host}:*`],
      ...(options.clusterAccess === undefined ? {} : { clusterAccess: options.clusterAccess }),
    });
    await reserved?.release();
    await server.listen({ host, port });
    const address = server.server.address() as AddressInfo;
    const url = `http://${address.family === "IPv6" ? `[${address.address}]` : address.address}:${address.port}`;
    const database = describeDatabase({ url: configuration.database.url, dataDirectory: configuration.dataDirectory });
    logger.info(
      {
        url,
        issuerUrl,
        database: database.kind,
        databaseLocation: database.location,
        keyEncryptionKeySource: store.keyEncryption.source,
      },
      "platform started",
    );
    if (bootstrap.createdClient !== null) options.onBootstrapCredentials?.(bootstrap.createdClient);
    let primaryClusterId: string | undefined;
    const stopClusters = async (): Promise<void> => {
      await clusters.close();
      await provisioner?.close();
    };
    if (provisioner !== undefined) {
      try {
        if (options.localClusters?.createPrimaryCluster !== false) {
          primaryClusterId = await clusters.ensurePrimaryCluster(bootstrap.organizationId);
        }
        await clusters.start();
      } catch (error) {
        await stopClusters();
        await server.close();
        throw error;
      }
    }
    return {
      url,
      issuerUrl,
      organizationId: bootstrap.organizationId,
      consoleUrl: server.hasRoute({ method: "GET", url: "/console" }) ? `${url}/console/` : null,
      clusters,
      provisioner,
      primaryClusterId,
      async close() {
        // The clusters go first: their gateways verify tokens against the platform's keys until the end.
        try {
          await stopClusters();
          await server.close();
          await store.close();
        } finally {
          await releaseDataDirectory();
        }
      },
    };
  } catch (error) {
    await reserved?.release();
    await store.close();
    await releaseDataDirectory();
    throw error;
  }
}

/** Options of `buildPlatformServer`. */
export interface PlatformServerOptions {
  configuration: Configuration;
  store: Store;
  issuer: IssuerServices;
  logger: Logger;
  issuerUrl: string;
  /** The clusters service; one without a provisioner when absent. */
  clusters?: ClusterService;
  clusterAccess?: ClusterAccessOptions;
  /** Directory of the built web console (web/dist by default). */
  consoleDirectory?: string;
  /** Where the console may connect beyond the platform itself (CSP `connect-src` sources, e.g. clusters' hosts). */
  consoleConnectSources?: readonly string[];
}

/** Assembles the platform's HTTP server from its parts, without listening. */
export async function buildPlatformServer(options: PlatformServerOptions): Promise<HttpServer> {
  const { configuration, store, issuer, logger, issuerUrl } = options;
  const clusters =
    options.clusters ??
    new ClusterService({
      database: store.database,
      issuerUrl,
      maxClustersPerOrganization: configuration.provisioner.maxClustersPerOrganization,
      healthCheckIntervalMs: configuration.provisioner.healthCheckIntervalMs,
      logger,
    });
  const server = createHttpServer({
    logger,
    bodyLimitBytes: configuration.platform.bodyLimitBytes,
    // Validated when the configuration was loaded; a list of proxies, when given, replaces the one-hop switch.
    trustProxy:
      configuration.platform.trustedProxies.trim() === ""
        ? configuration.platform.trustProxy
        : parseTrustedProxies(configuration.platform.trustedProxies, "service.platform.trustedProxies"),
    limits: configuration.http,
    translateError: databaseUnavailable,
  });

  server.get("/health", { schema: { hide: true } }, async () => {
    await store.database.selectFrom("settings").select("name").limit(1).execute();
    return { status: "UP" };
  });
  const platformIndex = {
    name: "flowplane",
    version: platformVersion,
    apis: {
      tokenIssuer: { token: `${issuerUrl}/oauth/token`, docs: `${issuerUrl}/oauth/docs` },
      administration: { base: `${issuerUrl}/admin`, docs: `${issuerUrl}/admin/docs` },
      modeler: { base: `${issuerUrl}/modeler/api/v1`, docs: `${issuerUrl}/modeler/api/v1/docs` },
    },
    // The audience each API's tokens must carry; the web console reads them to ask for its tokens.
    audiences: {
      admin: configuration.audiences.admin,
      modeler: configuration.audiences.modeler,
      gateway: configuration.audiences.gateway,
    },
  };
  server.get("/api", { schema: { hide: true } }, async () => platformIndex);
  // Browsers asking for `/` get the web console; API clients (no text/html in Accept) keep the JSON index.
  const consoleFiles = loadConsoleFiles(options.consoleDirectory ?? defaultConsoleDirectory);
  if (consoleFiles === null) {
    logger.warn("the web console is not built (run npm run build); `/` answers the JSON index only");
  } else {
    consoleRoutes(server, consoleFiles, options.consoleConnectSources ?? []);
  }
  server.get("/", { schema: { hide: true } }, async (request, reply) => {
    reply.header("vary", "accept");
    if (consoleFiles !== null && prefersPage(request)) {
      return await sendConsoleIndex(request, reply, consoleFiles, options.consoleConnectSources ?? []);
    }
    return platformIndex;
  });

  await server.register(async (context) => {
    await registerApiDocuments(context, {
      title: "flowplane token issuer",
      description: "OAuth 2.0 client-credentials grant returning JWT access tokens; JWKS and issuer metadata.",
      version: platformVersion,
      serverUrl: issuerUrl,
      bearerAuth: false,
      documentPath: "/oauth/openapi.json",
      docsPath: "/oauth/docs",
    });
    // The token endpoint keeps its own small limit (`issuerRoutes`): no token request needs the platform's general one.
    await context.register(issuerRoutes, { tokens: issuer.tokens, signingKeys: issuer.signingKeys });
  });

  const members = new MemberService(store.database);
  const clusterAccess = options.clusterAccess ?? {
    clusters,
    onAccessPolicyChanged: async (clusterId: string) => await clusters.deliverAccessPolicy(clusterId),
  };
  const ipAllowlists = new IpAllowlistService({ database: store.database, ...clusterAccess });
  const monitoring = new MonitoringService({ database: store.database, ...clusterAccess });
  const clusterClients = new ClusterClientService({
    clients: issuer.clients,
    ...clusterAccess,
    gatewayAudience: configuration.audiences.gateway,
    tokenUrl: `${issuerUrl}/oauth/token`,
    tokenLifetimeSeconds: configuration.token.lifetimeSeconds,
    clock: systemClock,
    logger,
  });
  const activity = new ActivityService(store.database, () => new Date(), logger);
  const activityRetention = new ActivityRetention({
    database: store.database,
    retentionDays: configuration.platform.activity.retentionDays,
    now: () => new Date(),
    logger,
  });
  const organizationClients = new OrganizationClientService({
    clients: issuer.clients,
    ...clusterAccess,
    tokenLifetimeSeconds: configuration.token.lifetimeSeconds,
    clock: systemClock,
    logger,
  });
  // The platform's own APIs refuse a cluster client's token, and the tokens of a client deleted since they were
  // issued (looked up at most `defaultClientCacheTtlMs` ago); gateways learn of deleted clients from their access
  // policies.
  const checkPlatformPrincipal = async (principal: Principal): Promise<void> => {
    // A cluster client's token is for its cluster's gateway only; the issuer never gives it this API's audience, and
    // the configuration keeps the audiences apart, so this refusal is the second line of that rule.
    if (principal.clusterId !== undefined) {
      throw new TokenVerificationError("A cluster client's token opens only its cluster's gateway.");
    }
    if (!(await issuer.clients.exists(principal.clientId))) {
      throw new TokenVerificationError("The client this token was issued to has been deleted.");
    }
  };
  const connectorSecrets = new ConnectorSecretService({
    database: store.database,
    secrets: store.secrets,
    clusters: clusterAccess.clusters,
  });
  const backups = new BackupService({
    database: store.database,
    clusters: clusterAccess.clusters,
    restorer: clusters,
    tokensFor: (organizationId, clusterId) =>
      platformClusterTokens(
        { signingKeys: issuer.signingKeys, issuerUrl, gatewayAudience: configuration.audiences.gateway },
        organizationId,
        clusterId,
      ),
    logger,
    activity,
    // Called only once requests are served, after `scaling` exists.
    scalingInProgress: (clusterId) => scaling.inProgress(clusterId),
  });
  const scaling = new ClusterScalingService({
    clusters: clusterAccess.clusters,
    provisioner: clusters.provisioner,
    tokensFor: (organizationId, clusterId) =>
      platformClusterTokens(
        { signingKeys: issuer.signingKeys, issuerUrl, gatewayAudience: configuration.audiences.gateway },
        organizationId,
        clusterId,
      ),
    logger,
    restoreRunning: (clusterId) => backups.isRestoring(clusterId),
  });
  clusters.onHealthPolled.push(async (cluster) => await scaling.afterHealthPoll(cluster));
  await backups.failInterruptedRestores();
  backups.startScheduler();
  server.addHook("onClose", async () => await backups.close());
  // After the server stopped answering: the entries of its last changes are written (or logged as lost) first.
  server.addHook("onClose", async () => await activity.close());
  // Once listening: a start that fails before (its port taken) closes the store, and no round may run against it.
  server.addHook("onListen", async () => activityRetention.start());
  server.addHook("onClose", async () => await activityRetention.close());
  // The clusters service builds each cluster's whole policy from the resources keeping its parts, shows its
  // allowlist, and has their data removed with the cluster.
  clusters.accessPolicyBuilder = async (cluster) => ({
    ...openAccessPolicy(cluster.id, cluster.organizationId),
    ipAllowlist: await ipAllowlists.allowlistOf(cluster.id),
    monitoring: await monitoring.monitoringPolicyOf(cluster.id),
    revokedClients: await clusterClients.revokedClients(cluster.organizationId, cluster.id),
  });
  clusters.allowlistReader = async (_organizationId, clusterId) => await ipAllowlists.allowlistOf(clusterId);
  clusters.onClusterDeleted.push(async ({ organizationId, clusterId }) => {
    scaling.forget(clusterId);
    await ipAllowlists.deleteAllOf(clusterId);
    await monitoring.deleteAllOf(clusterId);
    await clusterClients.deleteAllOfCluster(organizationId, clusterId);
    await connectorSecrets.deleteAllOf(clusterId);
    await backups.deleteAllOf(clusterId);
  });
  await server.register(
    async (context) => {
      await registerApiDocuments(context, {
        title: "flowplane Administration API",
        description: `Organization resources. Bearer token with audience '${configuration.audiences.admin}' and the scope each route names (${administrationScopes.join(", ")}).`,
        version: platformVersion,
        serverUrl: `${issuerUrl}/admin`,
        bearerAuth: true,
        documentPath: "/openapi.json",
        docsPath: "/docs",
      });
      await context.register(async (api) => {
        installAuthentication(api, {
          verifier: createPlatformVerifier(issuer, configuration.audiences.admin),
          checkPrincipal: checkPlatformPrincipal,
        });
        installActivityRecording(api, activity);
        ipAllowlistRoutes(api, ipAllowlists);
        monitoringRoutes(api, monitoring);
        clusterClientRoutes(api, clusterClients);
        organizationClientRoutes(api, organizationClients);
        connectorSecretRoutes(api, connectorSecrets);
        backupRoutes(api, backups);
        memberRoutes(api, members);
        clusterRoutes(api, clusters);
        clusterScalingRoutes(api, scaling);
        activityRoutes(api, activity);
      });
    },
    { prefix: "/admin" },
  );

  // CPU-heavy work (content parsing, diffs) runs in worker threads; they stop when the server closes, after the
  // requests in flight have been answered.
  const { workers } = configuration.platform;
  const workerPool = new WorkerPool<ModelerWorkerTasks>({
    workerModule: modelerWorkerModule,
    threads: workers.threads === 0 ? defaultWorkerThreads() : workers.threads,
    queueLength: workers.queueLength,
    queueBytes: workers.queueBytes,
    taskTimeLimitMs: workers.taskTimeLimitMs,
    logger,
  });
  server.addHook("onClose", async () => await workerPool.close());
  const modeler = await createModelerServices({
    database: store.database,
    secrets: store.secrets,
    members,
    clients: issuer.clients,
    baseUrl: `${issuerUrl}/modeler`,
    clock: systemClock,
    tasks: workerPool,
    diffMaxChangedLines: configuration.modeler.diffMaxChangedLines,
    diffCacheBytes: configuration.modeler.diffCacheBytes,
    diffLinkRateLimit: configuration.modeler.diffLinkRateLimit,
  });
  await server.register(
    async (context) => {
      await registerApiDocuments(context, {
        title: "flowplane Modeler API",
        description: `Modeler resources. Bearer token with audience '${configuration.audiences.modeler}'; permissions ${modelerScopes.join(", ")}.`,
        version: "v1",
        serverUrl: `${issuerUrl}/modeler`,
        bearerAuth: true,
        documentPath: "/api/v1/openapi.json",
        docsPath: "/api/v1/docs",
      });
      await context.register(async (api) => {
        installAuthentication(api, {
          verifier: createPlatformVerifier(issuer, configuration.audiences.modeler),
          checkPrincipal: checkPlatformPrincipal,
        });
        modelerRoutes(api, modeler, {
          fileBodyLimitBytes: Math.max(fileBodyLimitBytes, configuration.platform.bodyLimitBytes),
        });
      });
      // Diff links authorize themselves with a signature, so they are served outside the token guard.
      await context.register(async (api) => {
        modelerPublicRoutes(api, modeler);
      });
    },
    { prefix: "/modeler" },
  );
  return server;
}
