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
  /** Base URL of the cluster's management port (`SERVICE_CLUSTER_MANAGEMENT_URL`, else the local default). */
  clusterManagementUrl: string;
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
  return {
    oauthUrl,
    clientId,
    clientSecret,
    audience: audience === undefined || audience === "" ? undefined : audience,
    adminUrl: adminUrl ?? `${platformUrl}/admin`,
    modelerUrl: modelerUrl ?? `${platformUrl}/modeler`,
    clusterManagementUrl: clusterManagementUrl ?? defaultClusterManagementUrl,
  };
}
