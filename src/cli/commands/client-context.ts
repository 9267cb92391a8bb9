import { AdminClient, adminAudience } from "../../client/admin.js";
import { type ClientSettings, clientSettingsFromEnvironment } from "../../client/environment.js";
import { defaultTokenCacheFile, TokenCacheFile } from "../../client/token-cache.js";
import { TokenProvider } from "../../client/token-provider.js";
import type { CliIo } from "../io.js";
import { printable } from "../terminal-text.js";

/** Environment variable naming the token cache file; `none` disables the disk cache. */
export const tokenCacheVariable = "SERVICE_CONSOLE_TOKEN_CACHE_FILE";

/** Help text describing the client variables, appended to every client command's `--help`. */
export const clientEnvironmentHelp = `
Environment:
  SERVICE_CONSOLE_CLIENT_ID         id of the API client (required)
  SERVICE_CONSOLE_CLIENT_SECRET     its secret (required)
  SERVICE_OAUTH_URL                 token endpoint (default http://localhost:8088/oauth/token)
  SERVICE_CONSOLE_OAUTH_AUDIENCE    default audience of \`flowplane token\` (default admin-api)
  SERVICE_ADMIN_URL                 Administration API (default: SERVICE_OAUTH_URL without /oauth/token, plus /admin)
  ${tokenCacheVariable}  token cache file (default ~/.flowplane/tokens.json; "none" disables it)`;

/** The help line of `SERVICE_CLUSTER_MANAGEMENT_URL`, for the commands that talk to a gateway's management port. */
export const clusterManagementUrlHelp =
  "  SERVICE_CLUSTER_MANAGEMENT_URL    the gateway's management port (default http://localhost:9600, only while\n" +
  "                                    SERVICE_OAUTH_URL is on this machine; otherwise required)";

/** The client settings and a token provider with the disk cache, both built from the command's environment. */
export interface ClientContext {
  settings: ClientSettings;
  tokenProvider: TokenProvider;
}

/** Reads the `SERVICE_*` client variables and creates the token provider every client command shares. */
export function createClientContext(io: CliIo): ClientContext {
  const warn = (message: string) => io.stderr(`Warning: ${printable(message)}\n`);
  const settings = clientSettingsFromEnvironment(io.environment, { warn });
  const configuredCacheFile = io.environment[tokenCacheVariable];
  const usesDefault = configuredCacheFile === undefined || configuredCacheFile === "";
  const cacheFile =
    configuredCacheFile === "none"
      ? undefined
      : new TokenCacheFile(usesDefault ? defaultTokenCacheFile(io.homeDirectory) : configuredCacheFile, {
          ownDirectory: usesDefault,
          warn,
        });
  const tokenProvider = new TokenProvider({
    credentials: settings,
    defaultAudience: settings.audience ?? "admin-api",
    cacheFile,
  });
  return { settings, tokenProvider };
}

/** An Administration API client for a command, with the token provider of `createClientContext`. */
export function createAdminClient(io: CliIo, options: { readonly audience?: string | undefined }): AdminClient {
  const { settings, tokenProvider } = createClientContext(io);
  return new AdminClient({ baseUrl: settings.adminUrl, tokenProvider, audience: options.audience ?? adminAudience });
}
