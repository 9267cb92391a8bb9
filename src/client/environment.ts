import { ClientConfigurationError } from "./errors.js";
import type { ClientCredentials } from "./token-provider.js";

/** The default token endpoint of a local platform (`{auth_url}` of the identity specification). */
export const defaultOauthUrl = "http://localhost:8088/oauth/token";

/** Everything a client needs to reach the platform, as read from `SERVICE_*` environment variables. */
export interface ClientSettings extends ClientCredentials {
  /** `SERVICE_CONSOLE_OAUTH_AUDIENCE`, when set. */
  audience: string | undefined;
  /** Base URL of the Administration API (`SERVICE_ADMIN_URL`, else derived from the token endpoint). */
  adminUrl: string;
  /** Base URL of the Modeler API (`SERVICE_MODELER_URL`, else derived from the token endpoint). */
  modelerUrl: string;
  /**
   * Base URL of the cluster's management port (`SERVICE_CLUSTER_MANAGEMENT_URL`, else the local default). Undefined
   * when it is not set and the token endpoint is on another machine: see `requireClusterManagementUrl`.
   */
  clusterManagementUrl: string | undefined;
}

/** Options of `clientSettingsFromEnvironment`. */
export interface ClientSettingsOptions {
  /**
   * Receives a warning, once per URL, for each URL that will carry the client secret or a token over plain http to
   * another machine; silent when absent (a library prints nothing of its own).
   */
  warn?: ((message: string) => void) | undefined;
}

/** Whether `url` names this machine: `localhost` (and names below it), 127.0.0.0/8 or ::1. */
export function isLoopbackUrl(url: string): boolean {
  const host = new URL(url).hostname.toLowerCase().replace(/^\[|\]$/g, "");
  return (
    host === "localhost" ||
    host.endsWith(".localhost") ||
    host === "::1" ||
    /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host) ||
    host === "::ffff:7f00:1"
  );
}

/** The URLs already warned about, per warning callback, so that settings read twice warn once. */
const warnedUrls = new WeakMap<(message: string) => void, Set<string>>();

function warnOfPlainHttp(warn: ((message: string) => void) | undefined, name: string, url: string, carries: string) {
  if (warn === undefined || new URL(url).protocol !== "http:" || isLoopbackUrl(url)) return;
  let warned = warnedUrls.get(warn);
  if (warned === undefined) {
    warned = new Set();
    warnedUrls.set(warn, warned);
  }
  if (warned.has(url)) return;
  warned.add(url);
  warn(`${name} ${url} is plain http to another machine: ${carries} would cross the network unencrypted; use https.`);
}

/**
 * The cluster management URL of `settings`, or a `ClientConfigurationError` naming `SERVICE_CLUSTER_MANAGEMENT_URL`
 * when it has none: with a platform on another machine, a default of `http://localhost:9600` would send a gateway
 * token to whatever listens on that port here.
 */
export function requireClusterManagementUrl(settings: ClientSettings): string {
  if (settings.clusterManagementUrl !== undefined) return settings.clusterManagementUrl;
  throw new ClientConfigurationError([
    `SERVICE_CLUSTER_MANAGEMENT_URL is not set; allowed: the management URL of the cluster's gateway. It defaults to ` +
      `${defaultClusterManagementUrl} only when the token endpoint (SERVICE_OAUTH_URL) is on this machine.`,
  ]);
}

/** The management port of a gateway on this machine with the default port. */
export const defaultClusterManagementUrl = "http://localhost:9600";

/**
 * The platform's base URL derived from its token endpoint: the endpoint without its `/oauth/token` suffix, so a
 * platform served under a path prefix keeps it.
 */
export function platformUrlFromOauthUrl(oauthUrl: string): string {
  const url = new URL(oauthUrl);
  url.search = "";
  url.hash = "";
  const path = url.pathname.replace(/\/+$/, "");
  url.pathname = path.endsWith("/oauth/token") ? path.slice(0, -"/oauth/token".length) : "";
  return url.toString().replace(/\/+$/, "");
}

function readUrl(
  environment: Readonly<Record<string, string | undefined>>,
  name: string,
  problems: string[],
): string | undefined {
  const value = environment[name];
  if (value === undefined || value === "") return undefined;
  if (!URL.canParse(value) || !/^https?:$/.test(new URL(value).protocol)) {
    problems.push(`${name} is ${JSON.stringify(value)}; allowed: an absolute http:// or https:// URL`);
    return undefined;
  }
  return value.replace(/\/+$/, "");
}

/**
 * Reads the client variables of the identity specification (`SERVICE_CONSOLE_CLIENT_ID`,
 * `SERVICE_CONSOLE_CLIENT_SECRET`, `SERVICE_OAUTH_URL`, `SERVICE_CONSOLE_OAUTH_AUDIENCE`) plus the optional API
 * base URLs `SERVICE_ADMIN_URL`, `SERVICE_MODELER_URL` and `SERVICE_CLUSTER_MANAGEMENT_URL`. Throws `ClientConfigurationError` naming every missing or
 * invalid variable.
 */
export function clientSettingsFromEnvironment(
  environment: Readonly<Record<string, string | undefined>>,
  options: ClientSettingsOptions = {},
): ClientSettings {
  const problems: string[] = [];
  const clientId = environment.SERVICE_CONSOLE_CLIENT_ID ?? "";
  const clientSecret = environment.SERVICE_CONSOLE_CLIENT_SECRET ?? "";
  if (clientId === "") problems.push("SERVICE_CONSOLE_CLIENT_ID is not set; allowed: the id of an API client");
  if (clientSecret === "") problems.push("SERVICE_CONSOLE_CLIENT_SECRET is not set; allowed: that client's secret");
  const oauthUrl = readUrl(environment, "SERVICE_OAUTH_URL", problems) ?? defaultOauthUrl;
  const adminUrl = readUrl(environment, "SERVICE_ADMIN_URL", problems);
  const modelerUrl = readUrl(environment, "SERVICE_MODELER_URL", problems);
  const clusterManagementUrl = readUrl(environment, "SERVICE_CLUSTER_MANAGEMENT_URL", problems);
  if (problems.length > 0) throw new ClientConfigurationError(problems);
  const platformUrl = platformUrlFromOauthUrl(oauthUrl);
  const audience = environment.SERVICE_CONSOLE_OAUTH_AUDIENCE;
  const settings: ClientSettings = {
    oauthUrl,
    clientId,
    clientSecret,
    audience: audience === undefined || audience === "" ? undefined : audience,
    adminUrl: adminUrl ?? `${platformUrl}/admin`,
    modelerUrl: modelerUrl ?? `${platformUrl}/modeler`,
    clusterManagementUrl: clusterManagementUrl ?? (isLoopbackUrl(oauthUrl) ? defaultClusterManagementUrl : undefined),
  };
  warnOfPlainHttp(options.warn, "The token endpoint (SERVICE_OAUTH_URL)", settings.oauthUrl, "the client secret");
  warnOfPlainHttp(options.warn, "The Administration API (SERVICE_ADMIN_URL)", settings.adminUrl, "access tokens");
  warnOfPlainHttp(options.warn, "The Modeler API (SERVICE_MODELER_URL)", settings.modelerUrl, "access tokens");
  if (settings.clusterManagementUrl !== undefined) {
    warnOfPlainHttp(
      options.warn,
      "The cluster management API (SERVICE_CLUSTER_MANAGEMENT_URL)",
      settings.clusterManagementUrl,
      "access tokens",
    );
  }
  return settings;
}
