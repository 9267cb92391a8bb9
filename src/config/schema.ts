import { type Static, Type } from "typebox";

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
          description: "Largest accepted request body; larger bodies are answered 413.",
        }),
        trustProxy: Type.Boolean({
          default: false,
          description: "Take the client address from X-Forwarded-For (only behind a proxy you control).",
        }),
      },
      { additionalProperties: false, default: {} },
    ),
    database: Type.Object(
      {
        url: Type.String({
          default: "",
          description: "Empty: SQLite file <dataDirectory>/platform.sqlite. postgres://… selects PostgreSQL.",
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
          description: "Lifetime of issued access tokens.",
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
          description: "Delay after the first failed authentication of a client id; doubles per further failure.",
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
          description: "Preset id of the first administration client (automated deployments).",
        }),
        clientSecret: Type.String({
          default: "",
          description: "Preset secret of the first administration client (at least 32 characters).",
        }),
      },
      { additionalProperties: false, default: {} },
    ),
  },
  { additionalProperties: false, default: {} },
);

/** The validated configuration with every default filled in. */
export type Configuration = Static<typeof configurationSchema>;
