import { readFileSync } from "node:fs";
import type { TSchema } from "typebox";
import { Value } from "typebox/value";
import { parse as parseYaml } from "yaml";
import { parseTrustedProxies } from "../http/trusted-proxies.js";
import { platformSubject } from "../platform/issuer/cluster-tokens.js";
import { clusterIdProblem, clusterSecretProblem } from "./cluster-secret.js";
import { ConfigurationError } from "./errors.js";
import { type Configuration, configurationSchema, keyEncryptionKeyPattern } from "./schema.js";

/** Where configuration values come from, lowest precedence first: environment, YAML file, CLI flags. */
export interface ConfigurationSources {
  /** Environment variables; only `SERVICE_*` names that match a key are read. */
  environment: Readonly<Record<string, string | undefined>>;
  /** Path of an optional YAML file whose keys look like `service.platform.port`. */
  configFile?: string | undefined;
  /** Values from CLI flags, by YAML key (e.g. `service.platform.port`); they win over everything else. */
  flags?: Readonly<Record<string, string | number | boolean>>;
}

export { ConfigurationError } from "./errors.js";

interface Leaf {
  path: readonly string[];
  key: string;
  /** The documented environment variable: upper snake case with words separated (`SERVICE_DATA_DIRECTORY`). */
  environmentVariable: string;
  /**
   * Every accepted spelling, the documented one first. The second is the relaxed form that joins the words of a
   * key without separators (`SERVICE_BROKER_CLUSTER_NODEID`), which deployments of workflow-engine clusters use.
   */
  environmentVariables: readonly string[];
  schema: TSchema & Record<string, unknown>;
}

function upperSnake(name: string): string {
  return name.replace(/([a-z0-9])([A-Z])/g, "$1_$2").toUpperCase();
}

/** Every leaf setting of a schema, with its YAML key and environment variable name. */
export function configurationLeaves(
  schema: TSchema = configurationSchema,
  path: readonly string[] = [],
): readonly Leaf[] {
  const properties = (schema as { properties?: Record<string, TSchema> }).properties;
  if (properties === undefined) {
    return [
      {
        path,
        key: `service.${path.join(".")}`,
        environmentVariable: `SERVICE_${path.map(upperSnake).join("_")}`,
        environmentVariables: [
          ...new Set([
            `SERVICE_${path.map(upperSnake).join("_")}`,
            `SERVICE_${path.map((segment) => segment.toUpperCase()).join("_")}`,
          ]),
        ],
        schema: schema as Leaf["schema"],
      },
    ];
  }
  return Object.entries(properties).flatMap(([name, child]) => configurationLeaves(child, [...path, name]));
}

/** Describes, for an error message, which values a setting accepts. */
export function describeAllowed(schema: Leaf["schema"]): string {
  // Settings whose rule the schema cannot state (it is checked in crossFieldProblems) describe it themselves.
  if (typeof schema.allowedDescription === "string") return schema.allowedDescription;
  const values = schema.enum as unknown[] | undefined;
  if (values !== undefined) return `one of ${values.map(String).join(", ")}`;
  let range = "";
  if (schema.minimum !== undefined && schema.maximum !== undefined) {
    range = ` from ${String(schema.minimum)} to ${String(schema.maximum)}`;
  } else if (schema.exclusiveMinimum !== undefined && schema.maximum !== undefined) {
    range = ` greater than ${String(schema.exclusiveMinimum)}, at most ${String(schema.maximum)}`;
  }
  switch (schema.type) {
    case "integer":
      return `an integer${range}`;
    case "number":
      return `a number${range}`;
    case "boolean":
      return "true or false (also written 1 or 0, yes or no)";
    case "array":
      return "a JSON array as described in the documentation";
    default:
      if (schema.format === "email") return "an email address";
      if (typeof schema.format === "string") return `a string in ${schema.format} format`;
      return schema.minLength !== undefined && Number(schema.minLength) > 0 ? "a non-empty string" : "a string";
  }
}

/** Flattens nested YAML (`service: {platform: {port: 1}}`) and dotted keys alike into `service.platform.port`. */
function flattenYaml(value: unknown, prefix: string, into: Map<string, unknown>): void {
  if (value !== null && typeof value === "object" && !Array.isArray(value)) {
    for (const [name, child] of Object.entries(value)) {
      flattenYaml(child, prefix === "" ? name : `${prefix}.${name}`, into);
    }
    return;
  }
  into.set(prefix, value);
}

function readYamlFile(path: string): Map<string, unknown> {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (error) {
    throw new ConfigurationError([`configuration file ${path} cannot be read: ${(error as Error).message}`]);
  }
  let document: unknown;
  try {
    document = parseYaml(text);
  } catch (error) {
    throw new ConfigurationError([`configuration file ${path} is not valid YAML: ${(error as Error).message}`]);
  }
  const values = new Map<string, unknown>();
  if (document !== null && document !== undefined) flattenYaml(document, "", values);
  return values;
}

function convertText(leaf: Leaf, text: string): unknown {
  const trimmed = text.trim();
  if (leaf.schema.type === "integer" || leaf.schema.type === "number") {
    return trimmed !== "" && Number.isFinite(Number(trimmed)) ? Number(trimmed) : text;
  }
  if (leaf.schema.type === "array") {
    try {
      return JSON.parse(trimmed) as unknown;
    } catch {
      return text;
    }
  }
  if (leaf.schema.type === "boolean") {
    if (["true", "1", "yes"].includes(trimmed.toLowerCase())) return true;
    if (["false", "0", "no"].includes(trimmed.toLowerCase())) return false;
  }
  return text;
}

function setAt(target: Record<string, unknown>, path: readonly string[], value: unknown): void {
  let node = target;
  for (const segment of path.slice(0, -1)) {
    node[segment] ??= {};
    node = node[segment] as Record<string, unknown>;
  }
  node[path[path.length - 1] as string] = value;
}

/**
 * Reads the configuration from its three sources, fills in defaults and validates it. Throws a
 * `ConfigurationError` that names every bad key, where it came from, its value and what is allowed.
 */
export function loadConfiguration(sources: ConfigurationSources): Configuration {
  const leaves = configurationLeaves();
  const leafByKey = new Map(leaves.map((leaf) => [leaf.key, leaf]));
  const raw: Record<string, unknown> = {};
  const origin = new Map<string, string>();
  const problems: string[] = [];

  for (const leaf of leaves) {
    const name = leaf.environmentVariables.find((candidate) => sources.environment[candidate] !== undefined);
    if (name === undefined) continue;
    setAt(raw, leaf.path, convertText(leaf, sources.environment[name] as string));
    origin.set(leaf.key, `environment variable ${name}`);
  }
  if (sources.configFile !== undefined) {
    for (const [key, value] of readYamlFile(sources.configFile)) {
      const leaf = leafByKey.get(key);
      if (leaf === undefined) {
        problems.push(`${key} (in ${sources.configFile}) is not a known setting`);
        continue;
      }
      setAt(raw, leaf.path, typeof value === "string" ? convertText(leaf, value) : value);
      origin.set(key, `file ${sources.configFile}`);
    }
  }
  for (const [key, value] of Object.entries(sources.flags ?? {})) {
    const leaf = leafByKey.get(key);
    if (leaf === undefined) {
      problems.push(`${key} (from a command-line flag) is not a known setting`);
      continue;
    }
    setAt(raw, leaf.path, typeof value === "string" ? convertText(leaf, value) : value);
    origin.set(key, "command-line flag");
  }
  if (problems.length > 0) throw new ConfigurationError(problems);

  const configuration = Value.Default(configurationSchema, raw) as Configuration;
  for (const error of Value.Errors(configurationSchema, configuration)) {
    const path = error.instancePath.split("/").filter((segment) => segment !== "");
    const key = `service.${path.join(".")}`;
    const leaf = leafByKey.get(key);
    const value = path.reduce<unknown>((node, segment) => (node as Record<string, unknown>)?.[segment], configuration);
    const allowed = leaf === undefined ? error.message : describeAllowed(leaf.schema);
    // Inside a structured setting (a list), the source is the one of the setting that holds the bad element.
    const source = [...origin].find(([originKey]) => key === originKey || key.startsWith(`${originKey}.`))?.[1];
    problems.push(`${key} (from ${source ?? "defaults"}) is ${JSON.stringify(value)}; allowed: ${allowed}`);
  }
  problems.push(...crossFieldProblems(configuration));
  if (problems.length > 0) throw new ConfigurationError([...new Set(problems)]);
  return configuration;
}

/** Rules that involve more than one setting or a format the schema cannot express. */
function crossFieldProblems(configuration: Configuration): string[] {
  const problems: string[] = [];
  const { trustProxy, trustedProxies } = configuration.platform;
  if (trustProxy && trustedProxies.trim() !== "") {
    problems.push(
      "service.platform.trustProxy and service.platform.trustedProxies exclude each other: list the proxies, or trust one hop",
    );
  }
  for (const [setting, value] of [
    ["service.platform.trustedProxies", trustedProxies],
    ["service.gateway.trustedProxies", configuration.gateway.trustedProxies],
  ] as const) {
    try {
      parseTrustedProxies(value, setting);
    } catch (error) {
      if (!(error instanceof ConfigurationError)) throw error;
      problems.push(...error.problems);
    }
  }
  const { clientId, clientSecret } = configuration.bootstrap;
  if ((clientId === "") !== (clientSecret === "")) {
    problems.push("service.bootstrap.clientId and service.bootstrap.clientSecret must be set together or not at all");
  }
  if (clientSecret !== "" && clientSecret.length < 32) {
    problems.push("service.bootstrap.clientSecret is too short; allowed: at least 32 characters");
  }
  if (clientId !== "" && !/^[A-Za-z0-9._~-]{1,128}$/.test(clientId)) {
    problems.push(`service.bootstrap.clientId is ${JSON.stringify(clientId)}; allowed: 1-128 of A-Z a-z 0-9 . _ ~ -`);
  }
  if (clientId === platformSubject) {
    // Deleting such a client would list its id among the revoked ones, and the gateways would refuse the platform's
    // own tokens (backups) with it.
    problems.push(
      `service.bootstrap.clientId is "${platformSubject}", the subject of the platform's own tokens; choose another`,
    );
  }
  const url = configuration.database.url;
  if (url !== "" && !/^(postgres|postgresql):\/\//.test(url) && !url.startsWith("sqlite:")) {
    problems.push(
      `service.database.url is ${JSON.stringify(url)}; allowed: empty (SQLite in the data directory), sqlite:<file> or postgres://…`,
    );
  }
  if (configuration.platform.publicUrl !== "" && !URL.canParse(configuration.platform.publicUrl)) {
    problems.push(
      `service.platform.publicUrl is ${JSON.stringify(configuration.platform.publicUrl)}; allowed: an absolute URL`,
    );
  }
  // The key is never repeated in the message: a near miss would still give most of it away.
  const secretsKey = configuration.secrets.key.trim();
  if (secretsKey !== "" && !keyEncryptionKeyPattern.test(secretsKey)) {
    problems.push(
      "service.secrets.key is not a valid key (its value is not shown); allowed: base64 of 32 random bytes " +
        "(43 or 44 characters), e.g. from `openssl rand -base64 32`",
    );
  }
  const { secret, secretFile, id } = configuration.cluster;
  if (secret !== "" && secretFile !== "") {
    problems.push("service.cluster.secret and service.cluster.secretFile are both set; allowed: one of them");
  }
  const secretProblem = secret === "" ? undefined : clusterSecretProblem(secret);
  if (secretProblem !== undefined) {
    // The value itself is never repeated: an error message may end up in a log or a terminal others can read.
    problems.push(
      `service.cluster.secret is not valid: ${secretProblem}; allowed: base64 of at least 32 random bytes, e.g. from \`openssl rand -base64 32\``,
    );
  }
  const idProblem = id === "" ? undefined : clusterIdProblem(id);
  if (idProblem !== undefined) problems.push(`service.cluster.id is ${JSON.stringify(id)}; ${idProblem}`);
  if (configuration.rateLimit.failureDelayMaxMs < configuration.rateLimit.failureDelayBaseMs) {
    problems.push("service.rateLimit.failureDelayMaxMs must not be lower than service.rateLimit.failureDelayBaseMs");
  }
  // A token's audience says which API it opens: two APIs under one audience would take each other's tokens (a
  // cluster client's gateway token would open the Administration API, and with it every cluster's secrets).
  const { admin, modeler, gateway } = configuration.audiences;
  const audiences: [string, string][] = [
    ["service.audiences.admin", admin],
    ["service.audiences.modeler", modeler],
    ["service.audiences.gateway", gateway],
  ];
  for (const [index, [key, value]] of audiences.entries()) {
    for (const [otherKey, otherValue] of audiences.slice(index + 1)) {
      if (value === otherValue) {
        problems.push(`${key} and ${otherKey} are both ${JSON.stringify(value)}; allowed: a different audience each`);
      }
    }
  }
  return problems;
}
