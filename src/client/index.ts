/** The typed flowplane client: token provider with caches, Administration and Modeler API clients, typed errors. */
export {
  AdminClient,
  type AssignableRole,
  adminAudience,
  assignableRoles,
  type Cluster,
  type ClusterChange,
  type ClusterClient,
  type ClusterClientConnectionDetails,
  type ClusterClientPermission,
  type ClusterCreation,
  type ClusterParameters,
  type ConnectorSecrets,
  type CreatedClusterClient,
  clusterClientPermissions,
  clusterParametersSchema,
  clusterSchema,
  connectorSecretsSchema,
  type Member,
  memberSchema,
} from "./admin.js";
export { type ApiClientOptions, ApiTransport } from "./api.js";
export {
  type BrokerEntry,
  ClusterManagementClient,
  type ClusterOperationEntry,
  type ClusterPatch,
  type ClusterStatus,
  gatewayAudience,
  type ScaleResponse,
} from "./cluster.js";
export {
  type ClientSettings,
  type ClientSettingsOptions,
  clientSettingsFromEnvironment,
  defaultClusterManagementUrl,
  defaultOauthUrl,
  isLoopbackUrl,
  platformUrlFromOauthUrl,
  requireClusterManagementUrl,
} from "./environment.js";
export {
  ApiError,
  ClientConfigurationError,
  ClientConnectionError,
  OAuthClientError,
  type ProblemDocument,
} from "./errors.js";
export {
  type Clock,
  defaultRetryPolicy,
  type HttpOptions,
  type HttpRequest,
  type HttpResponse,
  parseRetryAfterMs,
  type RetryPolicy,
  sendWithRetry,
  systemClock,
} from "./http.js";
export { ModelerClient, type ModelerInfo, modelerAudience, modelerInfoSchema } from "./modeler.js";
export {
  type CachedToken,
  defaultTokenCacheFile,
  secretDigest,
  TokenCacheFile,
  type TokenCacheKey,
  tokenCacheKeyString,
} from "./token-cache.js";
export {
  type AccessToken,
  type ClientCredentials,
  TokenProvider,
  type TokenProviderOptions,
  type TokenRequest,
} from "./token-provider.js";
