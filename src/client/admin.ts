import { type Static, Type } from "typebox";
import { type ApiClientOptions, ApiTransport, pathSegment } from "./api.js";
import { type ClusterPatch, type ScaleResponse, scaleResponseSchema } from "./cluster.js";

/** Roles a member can be given through the API (`owner` exists but cannot be assigned). */
export const assignableRoles = [
  "admin",
  "developer",
  "operationsengineer",
  "analyst",
  "taskuser",
  "visitor",
  "modeler",
] as const;

/** One role a member can be given through the API. */
export type AssignableRole = (typeof assignableRoles)[number];

/** Schema of a member of the organization as the Administration API returns it. */
export const memberSchema = Type.Object({
  name: Type.String(),
  email: Type.String(),
  roles: Type.Array(Type.String()),
  invitePending: Type.Boolean(),
});

/** A member of the organization. */
export type Member = Static<typeof memberSchema>;

const memberListSchema = Type.Array(memberSchema);

const reference = Type.Object({ uuid: Type.String(), name: Type.String() });

/** Schema of a cluster as the Administration API returns it. */
export const clusterSchema = Type.Object({
  uuid: Type.String(),
  name: Type.String(),
  description: Type.Optional(Type.String()),
  stageLabel: Type.Optional(Type.String()),
  ownerId: Type.String(),
  created: Type.String(),
  autoUpdate: Type.Boolean(),
  channel: reference,
  generation: reference,
  region: reference,
  planType: reference,
  status: Type.Object({ ready: Type.String(), gatewayStatus: Type.String() }),
  links: Type.Object({
    gateway: Type.String(),
    management: Type.String(),
    oauth: Type.String(),
    console: Type.String(),
  }),
  ipallowlist: Type.Array(Type.Object({ ip: Type.String(), description: Type.String() })),
});

/** A cluster of the organization. */
export type Cluster = Static<typeof clusterSchema>;

const clusterListSchema = Type.Array(clusterSchema);

/** Schema of what a cluster can be created with (`GET /clusters/parameters`). */
export const clusterParametersSchema = Type.Object({
  channels: Type.Array(
    Type.Object({
      uuid: Type.String(),
      name: Type.String(),
      defaultGeneration: reference,
      allowedGenerations: Type.Array(reference),
    }),
  ),
  clusterPlanTypes: Type.Array(reference),
  regions: Type.Array(reference),
});

/** Plan types, channels with their generations, and regions. */
export type ClusterParameters = Static<typeof clusterParametersSchema>;

/** What `createCluster` sends: ids from `clusterParameters()`. */
export interface ClusterCreation {
  name: string;
  planTypeId: string;
  channelId: string;
  generationId: string;
  regionId: string;
  description?: string;
  stageLabel?: "dev" | "test" | "stage" | "prod";
  autoUpdate?: boolean;
}

/** What `updateCluster` changes. */
export interface ClusterChange {
  name?: string;
  description?: string;
  stageLabel?: "dev" | "test" | "stage" | "prod";
}

const createdClusterSchema = Type.Object({ clusterId: Type.String() });

const identified = Type.Object({ id: Type.String(), name: Type.String() });

/** What an upgrade answers: the cluster and the generations it moved from and to. */
export const generationUpgradeSchema = Type.Object({
  cluster: identified,
  oldGeneration: identified,
  newGeneration: identified,
  orgId: Type.String(),
});
export type GenerationUpgrade = Static<typeof generationUpgradeSchema>;

/** Permissions a cluster API client may hold: `gateway` (the cluster's gateway REST API), `secrets`. */
export const clusterClientPermissions = ["gateway", "secrets"] as const;

/** One permission of a cluster API client. */
export type ClusterClientPermission = (typeof clusterClientPermissions)[number];

/** Schema of a cluster API client as the list answers it. */
export const clusterClientSchema = Type.Object({
  clientId: Type.String(),
  name: Type.String(),
  permissions: Type.Array(Type.String()),
});

/** An API client of a cluster. */
export type ClusterClient = Static<typeof clusterClientSchema>;

const clusterClientListSchema = Type.Array(clusterClientSchema);

/** Schema of an organization API client as the list answers it. */
export const organizationClientSchema = Type.Object({
  clientId: Type.String(),
  name: Type.String(),
  scopes: Type.Array(Type.String()),
  created: Type.String(),
});

/** An API client of the organization (not of one cluster). */
export type OrganizationClient = Static<typeof organizationClientSchema>;

const organizationClientListSchema = Type.Array(organizationClientSchema);

/** Schema of the answer to an organization API client's creation, the only answer that carries its secret. */
export const createdOrganizationClientSchema = Type.Object({
  clientId: Type.String(),
  clientSecret: Type.String(),
  name: Type.String(),
  scopes: Type.Array(Type.String()),
  created: Type.String(),
});

/** A newly created organization API client, with its secret (shown this once). */
export type CreatedOrganizationClient = Static<typeof createdOrganizationClientSchema>;

/** Schema of the answer to a cluster API client's creation, the only answer that carries its secret. */
export const createdClusterClientSchema = Type.Object({
  uuid: Type.String(),
  clientId: Type.String(),
  clientSecret: Type.String(),
  name: Type.String(),
  permissions: Type.Array(Type.String()),
  audience: Type.String(),
  links: Type.Object({ gateway: Type.String(), management: Type.String(), oauth: Type.String() }),
});

/** A newly created cluster API client, with its secret (shown this once). */
export type CreatedClusterClient = Static<typeof createdClusterClientSchema>;

/** Schema of a cluster API client's connection details: the environment variables a client application needs. */
export const clusterClientConnectionDetailsSchema = Type.Object({
  name: Type.String(),
  SERVICE_ADDRESS: Type.String(),
  SERVICE_CLIENT_ID: Type.String(),
  SERVICE_AUTHORIZATION_SERVER_URL: Type.String(),
  SERVICE_TOKEN_AUDIENCE: Type.String(),
});

/** The connection details of a cluster API client (everything but its secret). */
export type ClusterClientConnectionDetails = Static<typeof clusterClientConnectionDetailsSchema>;
/** Schema of a cluster's connector secrets as the Administration API returns them: values by name. */
export const connectorSecretsSchema = Type.Record(Type.String(), Type.String());

/** The connector secrets of a cluster, values by name. */
export type ConnectorSecrets = Record<string, string>;

/** Schema of one IP allowlist entry: `CIDR[,CIDR…]` and what the addresses are. */
export const allowlistEntrySchema = Type.Object({ ip: Type.String(), description: Type.String() });

/** One IP allowlist entry. */
export type AllowlistEntry = Static<typeof allowlistEntrySchema>;

const allowlistSchema = Type.Object({ ipallowlist: Type.Array(allowlistEntrySchema) });

/** Schema of a monitoring client as listed (never with its password). */
export const monitoringClientSchema = Type.Object({
  uuid: Type.String(),
  username: Type.String(),
  created: Type.String(),
});

/** A monitoring client of a cluster. */
export type MonitoringClient = Static<typeof monitoringClientSchema>;

/** Schema of a monitoring client's credentials, answered only when its password is created or rotated. */
export const monitoringCredentialsSchema = Type.Object({
  uuid: Type.String(),
  username: Type.String(),
  password: Type.String(),
});

/** A monitoring client's HTTP Basic credentials. */
export type MonitoringCredentials = Static<typeof monitoringCredentialsSchema>;

const monitoringStatusSchema = Type.Object({ active: Type.Boolean() });

/** Schema of a cluster's backup as the Administration API shows it. */
export const clusterBackupSchema = Type.Object({
  uuid: Type.String(),
  name: Type.String(),
  created: Type.Union([Type.String(), Type.Null()]),
  completed: Type.Union([Type.String(), Type.Null()]),
  status: Type.String(),
});

/** A backup of a cluster: `status` is `In progress`, `Complete` or `Failed`. */
export type ClusterBackup = Static<typeof clusterBackupSchema>;

/** Schema of a restore of a cluster from one of its backups. */
export const clusterRestoreSchema = Type.Object({
  uuid: Type.String(),
  backupId: Type.String(),
  state: Type.String(),
  failureReason: Type.Union([Type.String(), Type.Null()]),
  created: Type.String(),
  updated: Type.String(),
});

/** A restore: `state` is PENDING, VALIDATING, IN_PROGRESS, COMPLETED or FAILED (with `failureReason`). */
export type ClusterRestore = Static<typeof clusterRestoreSchema>;

/** Schema of a cluster's backup schedule. */
export const backupScheduleSchema = Type.Object({
  cron: Type.String(),
  keep: Type.Integer(),
  nextRun: Type.Union([Type.String(), Type.Null()]),
  lastRun: Type.Union([Type.String(), Type.Null()]),
  // Optional: a platform of an earlier version does not report its failed runs.
  lastFailure: Type.Optional(Type.Union([Type.String(), Type.Null()])),
  lastFailureAt: Type.Optional(Type.Union([Type.String(), Type.Null()])),
  consecutiveFailures: Type.Optional(Type.Integer({ minimum: 0 })),
  retryAt: Type.Optional(Type.Union([Type.String(), Type.Null()])),
  retrying: Type.Optional(Type.Boolean()),
});

/** A backup schedule: a UTC cron expression and how many complete backups it keeps. */
export type BackupSchedule = Static<typeof backupScheduleSchema>;

/** The default audience of the Administration API. */
export const adminAudience = "admin-api";

/** Typed client of the Administration API; each call needs a token with the scope its route names. */
export class AdminClient {
  private readonly transport: ApiTransport;

  /** Creates a client for the Administration API at `options.baseUrl` (e.g. `http://localhost:8088/admin`). */
  constructor(options: ApiClientOptions) {
    this.transport = new ApiTransport(options, adminAudience);
  }

  /** Lists the members of the organization. */
  async listMembers(): Promise<Member[]> {
    return (await this.transport.sendForJson("GET", "/members", memberListSchema)) as Member[];
  }

  /** Invites `email` with `roles`; if it is already a member, replaces its roles instead. */
  async inviteMember(email: string, roles: readonly string[]): Promise<void> {
    await this.transport.send("POST", `/members/${pathSegment(email)}`, { orgRoles: roles });
  }

  /** Replaces the roles of an existing member (the same call as an invitation, by the API's design). */
  async changeMemberRoles(email: string, roles: readonly string[]): Promise<void> {
    await this.inviteMember(email, roles);
  }

  /** Removes a member; throws `ApiError` with status 404 if `email` is not a member. */
  async removeMember(email: string): Promise<void> {
    await this.transport.send("DELETE", `/members/${pathSegment(email)}`);
  }

  /** Lists the organization's clusters, oldest first. */
  async listClusters(): Promise<Cluster[]> {
    return (await this.transport.sendForJson("GET", "/clusters", clusterListSchema)) as Cluster[];
  }

  /** Plan types, channels with their generations, and regions a cluster can be created with. */
  async clusterParameters(): Promise<ClusterParameters> {
    return (await this.transport.sendForJson(
      "GET",
      "/clusters/parameters",
      clusterParametersSchema,
    )) as ClusterParameters;
  }

  /** Creates a cluster and returns its id; the platform starts it (status Creating, then Healthy). */
  async createCluster(creation: ClusterCreation): Promise<string> {
    const created = (await this.transport.sendForJson("POST", "/clusters", createdClusterSchema, creation)) as {
      clusterId: string;
    };
    return created.clusterId;
  }

  /** Gets a cluster; throws `ApiError` with status 404 when the organization has no such cluster. */
  async getCluster(clusterId: string): Promise<Cluster> {
    return (await this.transport.sendForJson("GET", `/clusters/${pathSegment(clusterId)}`, clusterSchema)) as Cluster;
  }

  /** Changes a cluster's name, description or stage label. */
  async updateCluster(clusterId: string, change: ClusterChange): Promise<void> {
    await this.transport.send("PATCH", `/clusters/${pathSegment(clusterId)}`, change);
  }

  /** Deletes a cluster: its processes stop and its data is removed. */
  async deleteCluster(clusterId: string): Promise<void> {
    await this.transport.send("DELETE", `/clusters/${pathSegment(clusterId)}`);
  }

  /** Starts a cluster whose processes do not run. */
  async wakeCluster(clusterId: string): Promise<void> {
    await this.transport.send("PUT", `/clusters/${pathSegment(clusterId)}/wake`);
  }

  /** Moves a cluster to its channel's default generation; answers the generations it moved from and to. */
  async upgradeCluster(clusterId: string): Promise<GenerationUpgrade> {
    return (await this.transport.sendForJson(
      "PUT",
      `/clusters/${pathSegment(clusterId)}/upgrade`,
      generationUpgradeSchema,
    )) as GenerationUpgrade;
  }

  /**
   * Plans (`dryRun`) or starts a change of a cluster's brokers, partitions or replication factor: the body is the
   * cluster management API's PATCH body, and the platform starts the brokers the change adds before sending it.
   */
  async scaleCluster(
    clusterId: string,
    patch: ClusterPatch,
    options: { dryRun?: boolean } = {},
  ): Promise<ScaleResponse> {
    const path = `/clusters/${pathSegment(clusterId)}/scale${options.dryRun === true ? "?dryRun=true" : ""}`;
    return (await this.transport.sendForJson("POST", path, scaleResponseSchema, patch, {
      readOnly: options.dryRun === true,
    })) as ScaleResponse;
  }

  /** Lists the organization's API clients (a token holding every scope is needed). */
  async listOrganizationClients(): Promise<OrganizationClient[]> {
    return (await this.transport.sendForJson("GET", "/clients", organizationClientListSchema)) as OrganizationClient[];
  }

  /** Creates an API client of the organization; the answer holds its secret, which the API never shows again. */
  async createOrganizationClient(name: string, scopes: readonly string[]): Promise<CreatedOrganizationClient> {
    return (await this.transport.sendForJson("POST", "/clients", createdOrganizationClientSchema, {
      name,
      scopes,
    })) as CreatedOrganizationClient;
  }

  /** Deletes an API client of the organization; the platform and every gateway refuse its tokens from then on. */
  async deleteOrganizationClient(clientId: string): Promise<void> {
    await this.transport.send("DELETE", `/clients/${pathSegment(clientId)}`);
  }

  /** Lists the API clients of a cluster; throws `ApiError` with status 404 for an unknown cluster. */
  async listClusterClients(clusterId: string): Promise<ClusterClient[]> {
    const path = `/clusters/${pathSegment(clusterId)}/clients`;
    return (await this.transport.sendForJson("GET", path, clusterClientListSchema)) as ClusterClient[];
  }

  /** Creates an API client of a cluster; the answer holds its secret, which the API never shows again. */
  async createClusterClient(
    clusterId: string,
    clientName: string,
    permissions?: readonly ClusterClientPermission[],
  ): Promise<CreatedClusterClient> {
    const path = `/clusters/${pathSegment(clusterId)}/clients`;
    const body = { clientName, ...(permissions === undefined ? {} : { permissions }) };
    return (await this.transport.sendForJson("POST", path, createdClusterClientSchema, body)) as CreatedClusterClient;
  }

  /** The connection details of a cluster API client: the environment variables a client application needs. */
  async getClusterClient(clusterId: string, clientId: string): Promise<ClusterClientConnectionDetails> {
    const path = `/clusters/${pathSegment(clusterId)}/clients/${pathSegment(clientId)}`;
    return (await this.transport.sendForJson(
      "GET",
      path,
      clusterClientConnectionDetailsSchema,
    )) as ClusterClientConnectionDetails;
  }

  /** Deletes a cluster API client; its tokens stop working at the cluster's gateway. */
  async deleteClusterClient(clusterId: string, clientId: string): Promise<void> {
    await this.transport.send("DELETE", `/clusters/${pathSegment(clusterId)}/clients/${pathSegment(clientId)}`);
  }

  /** Lists the connector secrets of the cluster with their values; throws `ApiError` 404 for an unknown cluster. */
  async listSecrets(clusterId: string): Promise<ConnectorSecrets> {
    return (await this.transport.sendForJson(
      "GET",
      `/clusters/${pathSegment(clusterId)}/secrets`,
      connectorSecretsSchema,
    )) as ConnectorSecrets;
  }

  /** Creates the connector secret `name`; throws `ApiError` 409 when the cluster already has one by that name. */
  async createSecret(clusterId: string, name: string, value: string): Promise<void> {
    await this.transport.send("POST", `/clusters/${pathSegment(clusterId)}/secrets`, {
      secretName: name,
      secretValue: value,
    });
  }

  /** Replaces the value of the connector secret `name`; throws `ApiError` 404 when there is none by that name. */
  async updateSecret(clusterId: string, name: string, value: string): Promise<void> {
    await this.transport.send("PUT", `/clusters/${pathSegment(clusterId)}/secrets/${pathSegment(name)}`, {
      secretValue: value,
    });
  }

  /** Deletes the connector secret `name`; throws `ApiError` 404 when there is none by that name. */
  async deleteSecret(clusterId: string, name: string): Promise<void> {
    await this.transport.send("DELETE", `/clusters/${pathSegment(clusterId)}/secrets/${pathSegment(name)}`);
  }

  /** The cluster's IP allowlist (scope `ipallowlist` or `cluster`). */
  async getIpAllowlist(clusterId: string): Promise<AllowlistEntry[]> {
    const path = `/clusters/${pathSegment(clusterId)}/ipallowlist`;
    return ((await this.transport.sendForJson("GET", path, allowlistSchema)) as { ipallowlist: AllowlistEntry[] })
      .ipallowlist;
  }

  /** Replaces the cluster's IP allowlist (scope `ipallowlist`); an empty list allows every address. */
  async setIpAllowlist(clusterId: string, entries: readonly AllowlistEntry[]): Promise<void> {
    await this.transport.send("PUT", `/clusters/${pathSegment(clusterId)}/ipallowlist`, {
      ipallowlist: entries,
    });
  }

  /** Whether the cluster's metrics require monitoring credentials (scope `cluster`). */
  async isMonitoringActive(clusterId: string): Promise<boolean> {
    const path = `/clusters/${pathSegment(clusterId)}/monitoring`;
    return ((await this.transport.sendForJson("GET", path, monitoringStatusSchema)) as { active: boolean }).active;
  }

  /** Activates (or deactivates) protected metrics of the cluster (scope `cluster`). */
  async setMonitoringActive(clusterId: string, active: boolean): Promise<void> {
    await this.transport.send(active ? "POST" : "DELETE", `/clusters/${pathSegment(clusterId)}/monitoring`);
  }

  /** Lists the cluster's monitoring clients (scope `cluster`). */
  async listMonitoringClients(clusterId: string): Promise<MonitoringClient[]> {
    const path = `/clusters/${pathSegment(clusterId)}/monitoring/clients`;
    return (await this.transport.sendForJson("GET", path, Type.Array(monitoringClientSchema))) as MonitoringClient[];
  }

  /** Creates a monitoring client; the answer holds its password, which no other answer shows (scope `cluster`). */
  async createMonitoringClient(clusterId: string, username: string): Promise<MonitoringCredentials> {
    const path = `/clusters/${pathSegment(clusterId)}/monitoring/clients`;
    return (await this.transport.sendForJson("POST", path, monitoringCredentialsSchema, {
      username,
    })) as MonitoringCredentials;
  }

  /** Gives a monitoring client a new generated password and answers it (scope `cluster`). */
  async rotateMonitoringPassword(clusterId: string, clientUuid: string): Promise<MonitoringCredentials> {
    const path = `/clusters/${pathSegment(clusterId)}/monitoring/clients/${pathSegment(clientUuid)}/rotate`;
    return (await this.transport.sendForJson("POST", path, monitoringCredentialsSchema)) as MonitoringCredentials;
  }

  /** The cluster's backups, newest first (scope `backups`). */
  async listBackups(clusterId: string): Promise<ClusterBackup[]> {
    const path = `/clusters/${pathSegment(clusterId)}/backups`;
    return (await this.transport.sendForJson("GET", path, Type.Array(clusterBackupSchema))) as ClusterBackup[];
  }

  /** Starts a backup of the cluster and answers it, In progress (scope `backups`). */
  async createBackup(clusterId: string): Promise<ClusterBackup> {
    const path = `/clusters/${pathSegment(clusterId)}/backups`;
    return (await this.transport.sendForJson("POST", path, clusterBackupSchema)) as ClusterBackup;
  }

  /** Deletes a backup of the cluster and answers what it was (scope `backups`). */
  async deleteBackup(clusterId: string, backupId: string): Promise<ClusterBackup> {
    const path = `/clusters/${pathSegment(clusterId)}/backups/${pathSegment(backupId)}`;
    return (await this.transport.sendForJson("DELETE", path, clusterBackupSchema)) as ClusterBackup;
  }

  /** Starts restoring the cluster from a backup and answers the restore, PENDING (scope `backups`). */
  async restoreBackup(clusterId: string, backupId: string): Promise<ClusterRestore> {
    const path = `/clusters/${pathSegment(clusterId)}/backups/${pathSegment(backupId)}/restore`;
    return (await this.transport.sendForJson("POST", path, clusterRestoreSchema)) as ClusterRestore;
  }

  /** The latest restore of the cluster from that backup (scope `backups`). */
  async getRestore(clusterId: string, backupId: string): Promise<ClusterRestore> {
    const path = `/clusters/${pathSegment(clusterId)}/backups/${pathSegment(backupId)}/restore`;
    return (await this.transport.sendForJson("GET", path, clusterRestoreSchema)) as ClusterRestore;
  }

  /** The cluster's latest restores, newest first (scope `backups`). */
  async listRestores(clusterId: string): Promise<ClusterRestore[]> {
    const path = `/clusters/${pathSegment(clusterId)}/restores`;
    return (await this.transport.sendForJson("GET", path, Type.Array(clusterRestoreSchema))) as ClusterRestore[];
  }

  /** Sets the cluster's backup schedule, replacing any (scope `backups`). */
  async setBackupSchedule(clusterId: string, cron: string, keep: number): Promise<BackupSchedule> {
    const path = `/clusters/${pathSegment(clusterId)}/backups/schedule`;
    return (await this.transport.sendForJson("PUT", path, backupScheduleSchema, { cron, keep })) as BackupSchedule;
  }

  /** The cluster's backup schedule (scope `backups`). */
  async getBackupSchedule(clusterId: string): Promise<BackupSchedule> {
    const path = `/clusters/${pathSegment(clusterId)}/backups/schedule`;
    return (await this.transport.sendForJson("GET", path, backupScheduleSchema)) as BackupSchedule;
  }

  /** Removes the cluster's backup schedule; its backups stay (scope `backups`). */
  async deleteBackupSchedule(clusterId: string): Promise<void> {
    await this.transport.send("DELETE", `/clusters/${pathSegment(clusterId)}/backups/schedule`);
  }

  /** Deletes a monitoring client (scope `cluster`). */
  async deleteMonitoringClient(clusterId: string, clientUuid: string): Promise<void> {
    await this.transport.send(
      "DELETE",
      `/clusters/${pathSegment(clusterId)}/monitoring/clients/${pathSegment(clientUuid)}`,
    );
  }
}
