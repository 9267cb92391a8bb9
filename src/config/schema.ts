import { type Static, Type } from "typebox";
import { MAX_BROKER_ID } from "../cluster/topology/distribution.js";

/**
 * How a key-encryption key is written (`service.secrets.key`, and the key file): base64, standard or URL-safe
 * alphabet, of exactly 32 bytes, which is 43 characters and an optional `=`.
 */
export const keyEncryptionKeyPattern = /^[A-Za-z0-9+/_-]{43}=?$/;

/**
 * The one configuration schema of flowplane. Every leaf has a default, so `npm start` runs with none given.
 * Each leaf is reachable three ways, by the same name: the YAML key `service.<path>` (e.g.
 * `service.platform.port`), the environment variable `SERVICE_<PATH>` in upper snake case (e.g.
 * `SERVICE_PLATFORM_PORT`) and the CLI flag `--set service.platform.port=…`.
 */
export const configurationSchema = Type.Object(
  {
    dataDirectory: Type.String({ minLength: 1, default: "./data", description: "Where every local file is kept." }),
    log: Type.Object(
      {
        level: Type.Enum(["fatal", "error", "warn", "info", "debug", "trace", "silent"], {
          default: "info",
          description: "Minimum level of structured log lines.",
        }),
      },
      { additionalProperties: false, default: {} },
    ),
    http: Type.Object(
      {
        requestReceiveTimeoutMs: Type.Integer({
          minimum: 100,
          maximum: 3_600_000,
          default: 30_000,
          description:
            "Longest time a client may take to send one whole request, headers and body, counted from the request's first byte; a new connection must also deliver its first request's headers within this time. A slower request is answered 408 and its connection closed. Applies to every HTTP server (platform, gateway REST and management ports, broker management port).",
        }),
        maxConnections: Type.Integer({
          minimum: 1,
          maximum: 1_000_000,
          default: 1024,
          description:
            "Open connections one HTTP server accepts. At the cap a new connection takes the place of one doing nothing useful (a request head not sent within 1 s, a body or an answer moving too slowly, or idle between requests), and is closed at once when none qualifies. A server lowers it to what the process's open-file limit (ulimit -n) leaves it, half of that limit less 128, less the up to 64 more that Node accepts for a moment before the server closes them.",
        }),
        maxConnectionsPerAddress: Type.Integer({
          minimum: 1,
          maximum: 1_000_000,
          default: 128,
          description:
            "Open connections one HTTP server accepts from one client address (IPv6: from one /64 network); further connections from it are closed at once. Behind a proxy every client has the proxy's address: raise it there and limit clients at the proxy.",
        }),
        maxRequestsPerConnection: Type.Integer({
          minimum: 1,
          maximum: 1_000_000,
          default: 1000,
          description:
            "Requests served on one keep-alive connection; the last answer carries Connection: close and the client opens a new connection.",
        }),
        responseStallTimeoutMs: Type.Integer({
          minimum: 100,
          maximum: 3_600_000,
          default: 30_000,
          description:
            "Longest time an answer may wait while the client reads none of it; the connection is then closed. A handler still at work and an idle keep-alive connection are not affected. Applies to every HTTP server.",
        }),
        maxAnswerBytesInFlight: Type.Integer({
          minimum: 64 * 1024 * 1024,
          maximum: 64 * 1024 * 1024 * 1024,
          default: 256 * 1024 * 1024,
          description:
            "Bytes of large answers (1 MiB or more each, such as model files) one HTTP server holds at once until their clients have read them; a large answer beyond it is answered 503 with Retry-After instead. Bounds what clients that request large answers and read them slowly, or not at all, make a server hold.",
        }),
      },
      { additionalProperties: false, default: {} },
    ),
    platform: Type.Object(
      {
        host: Type.String({ minLength: 1, default: "127.0.0.1", description: "Address the platform listens on." }),
        port: Type.Integer({ minimum: 0, maximum: 65535, default: 8088, description: "Port of the platform." }),
        publicUrl: Type.String({
          default: "",
          description: "URL clients reach the platform at; the token issuer (iss). Empty: http://localhost:<port>.",
        }),
        bodyLimitBytes: Type.Integer({
          minimum: 1024,
          maximum: 64 * 1024 * 1024,
          default: 1024 * 1024,
          description:
            "Largest accepted request body; larger bodies are answered 413 (the token endpoint keeps its own 16 KiB).",
        }),
        trustProxy: Type.Boolean({
          default: false,
          description:
            "Behind one proxy you control: take the client address from the right-most X-Forwarded-For entry, which that proxy wrote.",
        }),
        trustedProxies: Type.String({
          default: "",
          description:
            "Comma-separated addresses or CIDR blocks of the reverse proxies in front of the platform, for a chain of " +
            "them: the client address is the right-most X-Forwarded-For entry that is none of them (the peer counts " +
            "when it is none). Instead of trustProxy. Empty: none.",
        }),
        workers: Type.Object(
          {
            threads: Type.Integer({
              minimum: 0,
              maximum: 256,
              default: 0,
              description:
                "Worker threads that parse BPMN/DMN content and compute milestone diffs off the event loop, started when needed. 0: the available processors minus one, at least 1.",
            }),
            queueLength: Type.Integer({
              minimum: 0,
              maximum: 10_000,
              default: 64,
              description:
                "Tasks that may wait while every worker thread is busy; requests needing one more are answered 503 with Retry-After.",
            }),
            queueBytes: Type.Integer({
              minimum: 0,
              maximum: 16 * 1024 * 1024 * 1024,
              default: 256 * 1024 * 1024,
              description:
                "Content bytes that may wait while every worker thread is busy (uploads, both sides of diffs); beyond, requests are answered 503 with Retry-After.",
            }),
            taskTimeLimitMs: Type.Integer({
              minimum: 100,
              maximum: 3_600_000,
              default: 30_000,
              description:
                "Longest a worker task may run; past it its thread is terminated and replaced and the request answered 503.",
            }),
          },
          { additionalProperties: false, default: {} },
        ),
        activity: Type.Object(
          {
            retentionDays: Type.Integer({
              minimum: 0,
              maximum: 36_500,
              default: 365,
              description:
                "Days an activity entry (`/admin/activity`) is kept; older ones are deleted at start and every hour, at most a million per round. 0 keeps every entry.",
            }),
          },
          { additionalProperties: false, default: {} },
        ),
      },
      { additionalProperties: false, default: {} },
    ),
    modeler: Type.Object(
      {
        diffMaxChangedLines: Type.Integer({
          minimum: 1,
          maximum: 1_000_000,
          default: 1_000,
          description:
            "Largest number of changed lines (removed plus added) a milestone diff is computed for; contents differing in more are answered 409. The work grows with the square of this number.",
        }),
        diffCacheBytes: Type.Integer({
          minimum: 0,
          maximum: 16 * 1024 * 1024 * 1024,
          default: 64 * 1024 * 1024,
          description:
            "Memory for computed milestone diffs kept for reuse (least recently used dropped first); 0 keeps none.",
        }),
        diffLinkRateLimit: Type.Object(
          {
            burst: Type.Integer({
              minimum: 1,
              maximum: 1_000_000,
              default: 10,
              description: "Diff-link requests (no token needed) one address may make at once.",
            }),
            refillPerSecond: Type.Number({
              exclusiveMinimum: 0,
              maximum: 1_000_000,
              default: 1,
              description: "Sustained diff-link requests per second per address.",
            }),
            blockSeconds: Type.Integer({
              minimum: 0,
              maximum: 86400,
              default: 10,
              description: "How long an address that exceeded the diff-link limit stays blocked.",
            }),
          },
          { additionalProperties: false, default: {} },
        ),
      },
      { additionalProperties: false, default: {} },
    ),
    database: Type.Object(
      {
        url: Type.String({
          default: "",
          description: "Empty: SQLite file <dataDirectory>/platform.sqlite. postgres://… selects PostgreSQL.",
        }),
        statementTimeoutMs: Type.Integer({
          default: 30_000,
          minimum: 100,
          maximum: 3_600_000,
          description:
            "PostgreSQL only: longest a statement may run; the platform waits 2 s longer for an answer, then " +
            "answers the request 503 and closes the connection. Bounds what a stopped or unreachable server can hold.",
        }),
      },
      { additionalProperties: false, default: {} },
    ),
    secrets: Type.Object(
      {
        key: Type.String({
          default: "",
          allowedDescription: "empty, or base64 of 32 bytes (43 or 44 characters)",
          description:
            "Key-encryption key of the key material in the database (signing keys, the client-secret hash key, the " +
            "diff-link key, connector secrets): base64 of 32 random bytes, e.g. from `openssl rand -base64 32`. " +
            "Every platform replica of one database needs the same key; change it with `flowplane store " +
            "rotate-key`. Empty: the key file.",
        }),
        keyFile: Type.String({
          default: "",
          description:
            "File holding the key-encryption key when service.secrets.key is empty; generated (mode 0600) on the " +
            "first start. Losing it loses the signing keys and connector secrets: back it up apart from the " +
            "database. Empty: " +
            "<dataDirectory>/keys/secrets.key.",
        }),
      },
      { additionalProperties: false, default: {} },
    ),
    token: Type.Object(
      {
        lifetimeSeconds: Type.Integer({
          minimum: 60,
          maximum: 30 * 86400,
          default: 86400,
          description:
            "Lifetime of issued access tokens. A gateway that cannot reach the platform verifies tokens with the last " +
            "key set it fetched for up to this long (plus 30 s) after that fetch: give gateways you start yourself the " +
            "platform's value (the platform's own clusters get it).",
        }),
        signingAlgorithm: Type.Enum(["RS256", "ES256"], {
          default: "RS256",
          description: "Algorithm of the platform's signing key.",
        }),
      },
      { additionalProperties: false, default: {} },
    ),
    rateLimit: Type.Object(
      {
        burst: Type.Integer({
          minimum: 1,
          maximum: 1_000_000,
          default: 5,
          description: "Token requests one address may make at once.",
        }),
        refillPerSecond: Type.Number({
          exclusiveMinimum: 0,
          maximum: 1_000_000,
          default: 1,
          description: "Sustained token requests per second per address.",
        }),
        blockSeconds: Type.Integer({
          minimum: 0,
          maximum: 86400,
          default: 60,
          description: "How long an address that exceeded the limit stays blocked.",
        }),
        failureDelayBaseMs: Type.Integer({
          minimum: 0,
          maximum: 60_000,
          default: 250,
          description:
            "Delay after the first failed authentication of a client id from one address; doubles per further failure from that address.",
        }),
        failureDelayMaxMs: Type.Integer({
          minimum: 0,
          maximum: 600_000,
          default: 10_000,
          description: "Cap of the failed-authentication delay.",
        }),
      },
      { additionalProperties: false, default: {} },
    ),
    audiences: Type.Object(
      {
        admin: Type.String({ minLength: 1, default: "admin-api", description: "Audience of the Administration API." }),
        modeler: Type.String({ minLength: 1, default: "modeler-api", description: "Audience of the Modeler API." }),
        gateway: Type.String({ minLength: 1, default: "gateway-api", description: "Audience of cluster gateways." }),
      },
      { additionalProperties: false, default: {} },
    ),
    bootstrap: Type.Object(
      {
        organizationName: Type.String({
          minLength: 1,
          maxLength: 255,
          default: "My organization",
          description: "Name of the organization created on the first start.",
        }),
        ownerEmail: Type.String({
          format: "email",
          default: "owner@flowplane.local",
          description: "Email of the owner member created on the first start.",
        }),
        clientId: Type.String({
          default: "",
          description:
            "Preset id of the first administration client (automated deployments); not `platform`, the subject of the platform's own tokens.",
        }),
        clientSecret: Type.String({
          default: "",
          description: "Preset secret of the first administration client (at least 32 characters).",
        }),
      },
      { additionalProperties: false, default: {} },
    ),
    cluster: Type.Object(
      {
        secret: Type.String({
          default: "",
          description:
            "Secret shared by the brokers and gateways of one cluster: base64 of at least 32 random bytes, e.g. from " +
            "`openssl rand -base64 32`. Every connection to a broker's cluster port must prove it knows it; brokers " +
            "and gateways refuse to start without it (or secretFile). The local cluster of `flowplane start` " +
            "generates its own. Empty: secretFile.",
        }),
        secretFile: Type.String({
          default: "",
          description:
            "File holding the cluster secret when service.cluster.secret is empty (keep it mode 0600); read at start.",
        }),
        id: Type.String({
          default: "",
          description:
            "Name of the cluster, carried in every cluster handshake: brokers refuse peers and gateways of another " +
            "cluster, naming both ids in their log. 1-64 of A-Z a-z 0-9 . _ -. Empty: derived from the secret.",
        }),
      },
      { additionalProperties: false, default: {} },
    ),
    broker: Type.Object(
      {
        host: Type.String({ minLength: 1, default: "127.0.0.1", description: "Address the broker listens on." }),
        advertisedHost: Type.String({
          default: "",
          description: "Address other brokers and gateways reach this broker at. Empty: the listening host.",
        }),
        dataDirectory: Type.String({
          default: "",
          description: "Where the broker keeps its data. Empty: <dataDirectory>/brokers/<nodeId>.",
        }),
        managementPort: Type.Integer({
          minimum: 0,
          maximum: 65535,
          default: 9700,
          description: "Port of the broker's health and metrics endpoints (0: any free port).",
        }),
        cluster: Type.Object(
          {
            nodeId: Type.Integer({ minimum: 0, maximum: MAX_BROKER_ID, default: 0, description: "This broker's id." }),
            clusterSize: Type.Integer({
              minimum: 1,
              maximum: MAX_BROKER_ID + 1,
              default: 3,
              description: "Brokers at first start.",
            }),
            partitionsCount: Type.Integer({
              minimum: 1,
              maximum: 8191,
              default: 3,
              description: "Partitions at first start.",
            }),
            replicationFactor: Type.Integer({
              minimum: 1,
              maximum: 1024,
              default: 3,
              description: "Replicas of each partition at first start.",
            }),
            initialContactPoints: Type.String({
              default: "",
              description:
                "Comma-separated host:port cluster addresses of running brokers (any order), asked for the cluster configuration at start.",
            }),
            clusterPort: Type.Integer({
              minimum: 0,
              maximum: 65535,
              default: 26502,
              description: "Port of the broker's internal cluster transport.",
            }),
          },
          { additionalProperties: false, default: {} },
        ),
        raft: Type.Object(
          {
            heartbeatIntervalMs: Type.Integer({
              minimum: 10,
              maximum: 10_000,
              default: 100,
              description: "How often a partition leader sends heartbeats.",
            }),
            electionTimeoutMs: Type.Integer({
              minimum: 50,
              maximum: 60_000,
              default: 1000,
              description: "How long a follower waits for its leader before campaigning (randomized above this).",
            }),
            snapshotIntervalEntries: Type.Integer({
              minimum: 10,
              maximum: 10_000_000,
              default: 10_000,
              description:
                "Applied entries between two snapshots of a partition replica; each snapshot lets the replica drop the log behind it.",
            }),
            synchronousCommit: Type.Boolean({
              default: true,
              description:
                "Commit the partitions' log writes on the broker's main thread: faster when a disk sync takes well under a millisecond (SSD, NVMe). Turn it off on slow disks, so the broker keeps serving while a thread-pool thread waits for each sync.",
            }),
          },
          { additionalProperties: false, default: {} },
        ),
        memory: Type.Object(
          {
            maxBufferedMessageBytes: Type.Integer({
              minimum: 0,
              maximum: Number.MAX_SAFE_INTEGER,
              default: 0,
              description:
                "Most bytes of buffered messages (their records) the partitions of this broker hold together; beyond it their leaders refuse new publications with 503 until messages expire or are correlated. Buffered messages are held in memory, about twice their size. 0: a quarter of the memory available to the process (its cgroup's limit, else the machine's).",
            }),
          },
          { additionalProperties: false, default: {} },
        ),
        experimental: Type.Object(
          {
            features: Type.Object(
              {
                enablePartitionScaling: Type.Boolean({
                  default: false,
                  description: "Allow adding partitions to a running cluster (experimental).",
                }),
              },
              { additionalProperties: false, default: {} },
            ),
            partitioning: Type.Object(
              {
                scheme: Type.Enum(["ROUND_ROBIN", "FIXED"], {
                  default: "ROUND_ROBIN",
                  description: "Initial partition distribution; FIXED uses the explicit `fixed` list.",
                }),
                fixed: Type.Array(
                  Type.Object(
                    {
                      partitionId: Type.Integer({ minimum: 1 }),
                      nodes: Type.Array(
                        Type.Object(
                          { nodeId: Type.Integer({ minimum: 0 }), priority: Type.Integer({ minimum: 1 }) },
                          { additionalProperties: false },
                        ),
                        { minItems: 1 },
                      ),
                    },
                    { additionalProperties: false },
                  ),
                  {
                    default: [],
                    description: "For scheme FIXED: [{partitionId, nodes: [{nodeId, priority}]}] for every partition.",
                  },
                ),
              },
              { additionalProperties: false, default: {} },
            ),
          },
          { additionalProperties: false, default: {} },
        ),
      },
      { additionalProperties: false, default: {} },
    ),
    gateway: Type.Object(
      {
        host: Type.String({ minLength: 1, default: "127.0.0.1", description: "Address the gateway listens on." }),
        port: Type.Integer({
          minimum: 0,
          maximum: 65535,
          default: 8080,
          description: "Port of the gateway's REST API.",
        }),
        contactPoints: Type.String({
          default: "127.0.0.1:26502",
          description: "Comma-separated host:port cluster addresses of brokers the gateway asks for the topology.",
        }),
        issuerUrl: Type.String({
          default: "http://localhost:8088",
          description:
            "The platform's issuer URL (a trailing slash is ignored): tokens must carry it as iss; keys come from its " +
            "JWKS.",
        }),
        requestTimeoutMs: Type.Integer({
          minimum: 100,
          maximum: 600_000,
          default: 10_000,
          description: "How long the gateway waits for a broker before answering 504.",
        }),
        maxInFlightRequests: Type.Integer({
          minimum: 1,
          maximum: 1_000_000,
          default: 1024,
          description: "Requests in progress beyond which the gateway answers 503 with Retry-After.",
        }),
        accessPolicyFile: Type.String({
          default: "",
          description:
            "File holding the cluster's access policy (IP allowlist, protected metrics, revoked clients, the cluster " +
            "its tokens must name), written by the platform's provisioner; read at start and again within a second " +
            "of every change. Empty: no policy, every address and every token of the issuer may connect.",
        }),
        trustedProxies: Type.String({
          default: "",
          description:
            "Comma-separated addresses or CIDR blocks of reverse proxies whose X-Forwarded-For header the gateway " +
            "believes when it checks the IP allowlist. Empty: the header is ignored and the peer address counts.",
        }),
        allowedOrigins: Type.String({
          default: "",
          description:
            "Comma-separated origins (scheme://host:port) whose web pages may call the REST API and the management " +
            "port from a browser (CORS), such as the platform's web console; the local provisioner sets the " +
            "platform's URL. Empty: no cross-origin calls.",
        }),
      },
      { additionalProperties: false, default: {} },
    ),
    backup: Type.Object(
      {
        store: Type.Enum(["filesystem", "none"], {
          default: "filesystem",
          description:
            "Where partition leaders write their parts of a cluster backup: a directory shared by every broker (filesystem), or none (backups switched off).",
        }),
        filesystem: Type.Object(
          {
            basePath: Type.String({
              default: "",
              description:
                "Directory of the filesystem backup store, laid out as <basePath>/<partition>/<backup id>/<broker>/. Every broker must reach the same directory. Empty: <dataDirectory>/backups.",
            }),
          },
          { additionalProperties: false, default: {} },
        ),
      },
      { additionalProperties: false, default: {} },
    ),
    management: Type.Object(
      {
        host: Type.String({ minLength: 1, default: "127.0.0.1", description: "Address of the management API." }),
        port: Type.Integer({
          minimum: 0,
          maximum: 65535,
          default: 9600,
          description: "Port of the gateway's management API (cluster management, health, metrics).",
        }),
      },
      { additionalProperties: false, default: {} },
    ),
    provisioner: Type.Object(
      {
        maxClustersPerOrganization: Type.Integer({
          minimum: 1,
          maximum: 1_000,
          default: 8,
          description:
            "Most clusters one organization may have through the Administration API; the local provisioner runs every one as processes on this machine.",
        }),
        healthCheckIntervalMs: Type.Integer({
          minimum: 100,
          maximum: 600_000,
          default: 2_000,
          description: "How often the platform polls every cluster's gateway for the cluster's status.",
        }),
        logFileBytes: Type.Integer({
          minimum: 1024 * 1024,
          maximum: 1024 * 1024 * 1024 * 1024,
          default: 64 * 1024 * 1024,
          description:
            "Size beyond which a local cluster's log file (a broker's or the gateway's) is copied to <file>.1 and emptied; looked at when the cluster starts and every 30 s.",
        }),
        keptLogFiles: Type.Integer({
          minimum: 1,
          maximum: 100,
          default: 3,
          description:
            "Older copies kept beside each local cluster log file (<file>.1 the newest); the oldest beyond is deleted.",
        }),
      },
      { additionalProperties: false, default: {} },
    ),
  },
  { additionalProperties: false, default: {} },
);

/** The validated configuration with every default filled in. */
export type Configuration = Static<typeof configurationSchema>;
