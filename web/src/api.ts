/**
 * The console's one HTTP client: every call to the platform's public APIs goes through `ConsoleApi`, which adds the
 * access token, reads problem documents (RFC 9457) into `ApiError`s and ends the session on a 401 of the platform's
 * own APIs (a cluster's gateway refusing a token does not end it). Shapes are those of the command-line client in
 * src/client where it has them.
 */
import type {
  AllowlistEntry,
  AssignableRole,
  BackupSchedule,
  Cluster as ClientCluster,
  ClusterBackup,
  ClusterClient,
  ClusterClientConnectionDetails,
  ClusterClientPermission,
  ClusterCreation,
  ClusterParameters,
  ClusterRestore,
  CreatedClusterClient,
  CreatedOrganizationClient,
  Member,
  MonitoringClient,
  MonitoringCredentials,
  OrganizationClient,
} from "../../src/client/admin.js";
import type {
  BrokerEntry,
  ClusterOperationEntry,
  ClusterPatch,
  ClusterStatus,
  ScaleResponse,
} from "../../src/client/cluster.js";
import type {
  ContainerContent,
  FileMetadata,
  FolderMetadata,
  MilestoneMetadata,
  ProjectMetadata,
  SearchPage,
  SearchRequest,
} from "../../src/client/modeler.js";
import type { TopologyDocument } from "../../src/cluster/gateway/topology-view.js";
import { mayCarryToken } from "./own-machine.js";
import type { ApiName, Audiences, Session } from "./session.js";

/** A cluster as the Administration API answers it; `status.reason` says why one is not Healthy. */
export type Cluster = ClientCluster & { status: ClientCluster["status"] & { reason?: string } };

export type {
  AllowlistEntry,
  AssignableRole,
  BackupSchedule,
  BrokerEntry,
  ClusterBackup,
  ClusterClient,
  ClusterClientConnectionDetails,
  ClusterClientPermission,
  ClusterCreation,
  ClusterOperationEntry,
  ClusterParameters,
  ClusterPatch,
  ClusterRestore,
  ClusterStatus,
  ContainerContent,
  CreatedClusterClient,
  CreatedOrganizationClient,
  FileMetadata,
  FolderMetadata,
  Member,
  MilestoneMetadata,
  MonitoringClient,
  MonitoringCredentials,
  OrganizationClient,
  ProjectMetadata,
  ScaleResponse,
  SearchPage,
  TopologyDocument,
};

/** Where the Modeler API lives on the platform that serves the console. */
const modelerBase = "/modeler/api/v1";

/** Stage labels a cluster may carry. */
export const stageLabels = ["dev", "test", "stage", "prod"] as const;

/** The scopes an organization API client may hold, in canonical order (the issuer's own list). */
export { scopeValues as organizationScopes } from "../../src/auth/scopes.js";

/** Roles a member can be given, in the order the Administration API lists them (owner cannot be assigned). */
export const assignableRoles: readonly AssignableRole[] = [
  "admin",
  "developer",
  "operationsengineer",
  "analyst",
  "taskuser",
  "visitor",
  "modeler",
];

/** One entry of the activity log (`GET /admin/activity/json`). */
export interface ActivityEntry {
  service: string;
  orgId: string;
  auditType: "c" | "r" | "u" | "d";
  entity: string;
  entityId: string;
  userId: string;
  /** Milliseconds since 1970-01-01 UTC. */
  timestamp: number;
  /** The change in words. */
  audit: string;
}

/** What the activity log is asked for. */
export interface ActivityQuery {
  limit: number;
  /** ISO-8601 instant: only entries at or after it. */
  since?: string | undefined;
}

/** The platform's JSON index (`GET /api`), as far as the console reads it. */
export interface PlatformIndex {
  name: string;
  version: string;
  audiences: Audiences;
}

/** A problem document as the APIs answer errors. */
export interface Problem {
  type?: string;
  title?: string;
  status?: number;
  detail?: string;
  /** For a refused body: each field at fault (`body/ipallowlist/1/ip`) and what is wrong with it. */
  errors?: { location: string; message: string }[];
}

/** A call that the API answered with an error. */
export class ApiError extends Error {
  override readonly name = "ApiError";
  /**
   * Whether this answer ended the session (a 401 of the platform's own APIs): the console then shows the sign-in form
   * with the reason, so pages show nothing more.
   */
  readonly endedSession: boolean;
  constructor(
    readonly status: number,
    readonly problem: Problem,
    options: { message?: string; endedSession?: boolean } = {},
  ) {
    super(options.message ?? problem.detail ?? problem.title ?? `The platform answered ${status}.`);
    this.endedSession = options.endedSession ?? false;
  }
}

/** Whether an error ended the session, which the console already reports by showing the sign-in form. */
export function endedSession(error: unknown): boolean {
  return error instanceof ApiError && error.endedSession;
}

/**
 * A call the console does not make: its address is the browser's own machine (a loopback address) while the console
 * was loaded from another machine, so the token would go to whatever listens at that port on the viewer's machine.
 */
export class OwnMachineAddressError extends Error {
  override readonly name = "OwnMachineAddressError";
  constructor(readonly origin: string) {
    super(
      `The cluster's gateway listens at ${origin}, which is this browser's own machine, so the console can show this cluster only when it is opened on the platform's machine (at localhost or 127.0.0.1).`,
    );
  }
}

/** Reads an error answer's problem document, or describes the status when the body is something else. */
async function problemOf(response: Response): Promise<Problem> {
  const type = response.headers.get("content-type") ?? "";
  if (type.includes("json")) {
    const body = (await response.json().catch(() => null)) as Problem | null;
    if (body !== null && typeof body === "object") return body;
  }
  return { status: response.status, title: response.statusText };
}

/** Reads the platform's index, which names the audiences to ask tokens for. */
export async function fetchPlatformIndex(): Promise<PlatformIndex> {
  const response = await fetch("/api", { headers: { accept: "application/json" }, credentials: "omit" });
  if (!response.ok) throw new ApiError(response.status, await problemOf(response));
  return (await response.json()) as PlatformIndex;
}

/** The platform's own APIs: only their 401 means the platform no longer accepts the session. */
const platformApis: ReadonlySet<ApiName> = new Set(["admin", "modeler"]);

interface RequestOptions {
  method?: string;
  body?: unknown;
  accept?: string;
}

/** Typed calls to the platform's public APIs on behalf of the signed-in client. */
export class ConsoleApi {
  constructor(private readonly session: Session) {}

  /** Members of the organization (`GET /admin/members`). */
  async members(): Promise<Member[]> {
    return (await (await this.request("admin", "/admin/members")).json()) as Member[];
  }

  /** Invites a member, or changes an existing member's roles (`POST /admin/members/{email}`). */
  async inviteOrChangeRoles(email: string, roles: readonly AssignableRole[]): Promise<void> {
    await this.request("admin", `/admin/members/${encodeURIComponent(email)}`, {
      method: "POST",
      body: { orgRoles: roles },
    });
  }

  /** Removes a member (`DELETE /admin/members/{email}`). */
  async removeMember(email: string): Promise<void> {
    await this.request("admin", `/admin/members/${encodeURIComponent(email)}`, { method: "DELETE" });
  }

  /** The organization's API clients (`GET /admin/clients`). */
  async organizationClients(): Promise<OrganizationClient[]> {
    return (await (await this.request("admin", "/admin/clients")).json()) as OrganizationClient[];
  }

  /** Creates an API client of the organization; the answer holds its secret, which no other answer repeats. */
  async createOrganizationClient(name: string, scopes: readonly string[]): Promise<CreatedOrganizationClient> {
    return (await (
      await this.request("admin", "/admin/clients", { method: "POST", body: { name, scopes } })
    ).json()) as CreatedOrganizationClient;
  }

  /** Deletes an API client of the organization (`DELETE /admin/clients/{clientId}`). */
  async deleteOrganizationClient(clientId: string): Promise<void> {
    await this.request("admin", `/admin/clients/${encodeURIComponent(clientId)}`, { method: "DELETE" });
  }

  /** Clusters of the organization (`GET /admin/clusters`). */
  async clusters(): Promise<Cluster[]> {
    return (await (await this.request("admin", "/admin/clusters")).json()) as Cluster[];
  }

  /** One cluster (`GET /admin/clusters/{clusterId}`). */
  async cluster(clusterId: string): Promise<Cluster> {
    return (await (await this.request("admin", `/admin/clusters/${encodeURIComponent(clusterId)}`)).json()) as Cluster;
  }

  /** What clusters can be created with (`GET /admin/clusters/parameters`). */
  async clusterParameters(): Promise<ClusterParameters> {
    return (await (await this.request("admin", "/admin/clusters/parameters")).json()) as ClusterParameters;
  }

  /** Creates a cluster (`POST /admin/clusters`); it starts in the background. */
  async createCluster(creation: ClusterCreation): Promise<{ clusterId: string }> {
    return (await (await this.request("admin", "/admin/clusters", { method: "POST", body: creation })).json()) as {
      clusterId: string;
    };
  }

  /** Deletes a cluster, its processes and its data (`DELETE /admin/clusters/{clusterId}`). */
  async deleteCluster(clusterId: string): Promise<void> {
    await this.request("admin", `/admin/clusters/${encodeURIComponent(clusterId)}`, { method: "DELETE" });
  }

  /** The API clients of a cluster (`GET /admin/clusters/{clusterId}/clients`). */
  async clusterClients(clusterId: string): Promise<ClusterClient[]> {
    return (await (await this.request("admin", `${clusterPath(clusterId)}/clients`)).json()) as ClusterClient[];
  }

  /** Creates an API client of a cluster; the answer holds its secret, which no other answer repeats. */
  async createClusterClient(
    clusterId: string,
    clientName: string,
    permissions: readonly ClusterClientPermission[],
  ): Promise<CreatedClusterClient> {
    return (await (
      await this.request("admin", `${clusterPath(clusterId)}/clients`, {
        method: "POST",
        body: { clientName, permissions },
      })
    ).json()) as CreatedClusterClient;
  }

  /** The environment variables a cluster client's application needs, without its secret. */
  async clusterClientConnection(clusterId: string, clientId: string): Promise<ClusterClientConnectionDetails> {
    return (await (
      await this.request("admin", `${clusterPath(clusterId)}/clients/${encodeURIComponent(clientId)}`)
    ).json()) as ClusterClientConnectionDetails;
  }

  /** Deletes an API client of a cluster; the cluster's gateway refuses its tokens from then on. */
  async deleteClusterClient(clusterId: string, clientId: string): Promise<void> {
    await this.request("admin", `${clusterPath(clusterId)}/clients/${encodeURIComponent(clientId)}`, {
      method: "DELETE",
    });
  }

  /** A cluster's connector secrets, values by name (`GET /admin/clusters/{clusterId}/secrets`). */
  async connectorSecrets(clusterId: string): Promise<Record<string, string>> {
    return (await (await this.request("admin", `${clusterPath(clusterId)}/secrets`)).json()) as Record<string, string>;
  }

  /** Creates a connector secret (409 when the name exists). */
  async createConnectorSecret(clusterId: string, secretName: string, secretValue: string): Promise<void> {
    await this.request("admin", `${clusterPath(clusterId)}/secrets`, {
      method: "POST",
      body: { secretName, secretValue },
    });
  }

  /** Replaces the value of a connector secret. */
  async updateConnectorSecret(clusterId: string, secretName: string, secretValue: string): Promise<void> {
    await this.request("admin", `${clusterPath(clusterId)}/secrets/${encodeURIComponent(secretName)}`, {
      method: "PUT",
      body: { secretValue },
    });
  }

  /** Deletes a connector secret. */
  async deleteConnectorSecret(clusterId: string, secretName: string): Promise<void> {
    await this.request("admin", `${clusterPath(clusterId)}/secrets/${encodeURIComponent(secretName)}`, {
      method: "DELETE",
    });
  }

  /** A cluster's IP allowlist (`GET /admin/clusters/{clusterId}/ipallowlist`); empty allows every address. */
  async ipAllowlist(clusterId: string): Promise<AllowlistEntry[]> {
    const answer = (await (await this.request("admin", `${clusterPath(clusterId)}/ipallowlist`)).json()) as {
      ipallowlist: AllowlistEntry[];
    };
    return answer.ipallowlist;
  }

  /** Replaces a cluster's whole IP allowlist (`PUT /admin/clusters/{clusterId}/ipallowlist`). */
  async replaceIpAllowlist(clusterId: string, entries: readonly AllowlistEntry[]): Promise<void> {
    await this.request("admin", `${clusterPath(clusterId)}/ipallowlist`, {
      method: "PUT",
      body: { ipallowlist: entries },
    });
  }

  /** Whether a cluster's metrics need a monitoring client's credentials (`GET …/monitoring`). */
  async monitoringActive(clusterId: string): Promise<boolean> {
    const answer = (await (await this.request("admin", `${clusterPath(clusterId)}/monitoring`)).json()) as {
      active: boolean;
    };
    return answer.active;
  }

  /** Turns a cluster's protected metrics on (`POST …/monitoring`) or off (`DELETE`). */
  async setMonitoringActive(clusterId: string, active: boolean): Promise<void> {
    await this.request("admin", `${clusterPath(clusterId)}/monitoring`, { method: active ? "POST" : "DELETE" });
  }

  /** A cluster's monitoring clients, never with passwords (`GET …/monitoring/clients`). */
  async monitoringClients(clusterId: string): Promise<MonitoringClient[]> {
    return (await (
      await this.request("admin", `${clusterPath(clusterId)}/monitoring/clients`)
    ).json()) as MonitoringClient[];
  }

  /** Creates a monitoring client; the answer holds its generated password, shown this once. */
  async createMonitoringClient(clusterId: string, username: string): Promise<MonitoringCredentials> {
    return (await (
      await this.request("admin", `${clusterPath(clusterId)}/monitoring/clients`, {
        method: "POST",
        body: { username },
      })
    ).json()) as MonitoringCredentials;
  }

  /** Replaces a monitoring client's password; the answer holds the new one, and the old one stops working. */
  async rotateMonitoringPassword(clusterId: string, uuid: string): Promise<MonitoringCredentials> {
    return (await (
      await this.request("admin", `${clusterPath(clusterId)}/monitoring/clients/${encodeURIComponent(uuid)}/rotate`, {
        method: "POST",
      })
    ).json()) as MonitoringCredentials;
  }

  /** Deletes a monitoring client. */
  async deleteMonitoringClient(clusterId: string, uuid: string): Promise<void> {
    await this.request("admin", `${clusterPath(clusterId)}/monitoring/clients/${encodeURIComponent(uuid)}`, {
      method: "DELETE",
    });
  }

  /** A cluster's backups, newest first (`GET /admin/clusters/{clusterId}/backups`). */
  async backups(clusterId: string): Promise<ClusterBackup[]> {
    return (await (await this.request("admin", `${clusterPath(clusterId)}/backups`)).json()) as ClusterBackup[];
  }

  /** Starts a backup of a cluster; the answer is the backup, In progress. */
  async takeBackup(clusterId: string): Promise<ClusterBackup> {
    return (await (
      await this.request("admin", `${clusterPath(clusterId)}/backups`, { method: "POST" })
    ).json()) as ClusterBackup;
  }

  /** Deletes a backup from the cluster's backup store. */
  async deleteBackup(clusterId: string, backupId: string): Promise<void> {
    await this.request("admin", `${clusterPath(clusterId)}/backups/${encodeURIComponent(backupId)}`, {
      method: "DELETE",
    });
  }

  /** Starts restoring a cluster from one of its backups; the answer is the restore, PENDING. */
  async restoreBackup(clusterId: string, backupId: string): Promise<ClusterRestore> {
    return (await (
      await this.request("admin", `${clusterPath(clusterId)}/backups/${encodeURIComponent(backupId)}/restore`, {
        method: "POST",
      })
    ).json()) as ClusterRestore;
  }

  /** The latest restore of a cluster from one of its backups. */
  async restoreState(clusterId: string, backupId: string): Promise<ClusterRestore> {
    return (await (
      await this.request("admin", `${clusterPath(clusterId)}/backups/${encodeURIComponent(backupId)}/restore`)
    ).json()) as ClusterRestore;
  }

  /** A cluster's latest restores, newest first: one still running is followed after a reload. */
  async restores(clusterId: string): Promise<ClusterRestore[]> {
    return (await (await this.request("admin", `${clusterPath(clusterId)}/restores`)).json()) as ClusterRestore[];
  }

  /** A cluster's backup schedule, or null when it has none. */
  async backupSchedule(clusterId: string): Promise<BackupSchedule | null> {
    try {
      return (await (
        await this.request("admin", `${clusterPath(clusterId)}/backups/schedule`)
      ).json()) as BackupSchedule;
    } catch (error) {
      if (error instanceof ApiError && error.status === 404) return null;
      throw error;
    }
  }

  /** Sets a cluster's backup schedule (a UTC cron expression and how many complete backups to keep). */
  async setBackupSchedule(clusterId: string, cron: string, keep: number): Promise<BackupSchedule> {
    return (await (
      await this.request("admin", `${clusterPath(clusterId)}/backups/schedule`, {
        method: "PUT",
        body: { cron, keep },
      })
    ).json()) as BackupSchedule;
  }

  /** Removes a cluster's backup schedule; its backups stay. */
  async deleteBackupSchedule(clusterId: string): Promise<void> {
    await this.request("admin", `${clusterPath(clusterId)}/backups/schedule`, { method: "DELETE" });
  }

  /** Whether the client may call clusters' gateways and management APIs (takes the gateway token once). */
  async canReachClusters(): Promise<boolean> {
    return await this.session.prepare("gateway");
  }

  /** A cluster's topology as its gateway sees it (`GET {gateway}/v2/topology`). */
  async topology(gatewayUrl: string): Promise<TopologyDocument> {
    return (await (await this.request("gateway", `${trimSlash(gatewayUrl)}/v2/topology`)).json()) as TopologyDocument;
  }

  /** A cluster's configuration and changes (`GET {management}/actuator/cluster`). */
  async clusterStatus(managementUrl: string): Promise<ClusterStatus> {
    return (await (
      await this.request("gateway", `${trimSlash(managementUrl)}/actuator/cluster`)
    ).json()) as ClusterStatus;
  }

  /**
   * A cluster's Prometheus metrics as text (`GET {management}/actuator/prometheus`). They need no token; while the
   * cluster's monitoring is on they need a monitoring client's credentials, which the console does not hold (401).
   */
  async metricsText(managementUrl: string): Promise<string> {
    const response = await fetch(`${trimSlash(managementUrl)}/actuator/prometheus`, {
      credentials: "omit",
      cache: "no-store",
    });
    if (!response.ok) throw new ApiError(response.status, await problemOf(response));
    return await response.text();
  }

  /**
   * Plans or starts a change of the cluster's shape (`POST /admin/clusters/{clusterId}/scale`): the platform starts
   * the brokers it adds first. A dry run starts and records nothing.
   */
  async scaleCluster(clusterId: string, patch: ClusterPatch, dryRun: boolean): Promise<ScaleResponse> {
    const path = `${clusterPath(clusterId)}/scale${dryRun ? "?dryRun=true" : ""}`;
    return (await (await this.request("admin", path, { method: "POST", body: patch })).json()) as ScaleResponse;
  }

  /** Cancels the running change (`DELETE {management}/actuator/cluster/changes/{id}`). */
  async cancelChange(managementUrl: string, changeId: number): Promise<ClusterStatus> {
    const path = `${trimSlash(managementUrl)}/actuator/cluster/changes/${changeId}`;
    return (await (await this.request("gateway", path, { method: "DELETE" })).json()) as ClusterStatus;
  }

  /** The activity log, newest first (`GET /admin/activity/json`). */
  async activity(query: ActivityQuery): Promise<ActivityEntry[]> {
    return (await (
      await this.request("admin", `/admin/activity/json?${activityParameters(query)}`)
    ).json()) as ActivityEntry[];
  }

  /** The activity log as CSV (`GET /admin/activity/csv`). */
  async activityCsv(query: ActivityQuery): Promise<Blob> {
    return await (
      await this.request("admin", `/admin/activity/csv?${activityParameters(query)}`, { accept: "text/csv" })
    ).blob();
  }

  /** One page of the organization's projects (`POST /modeler/api/v1/projects/search`). */
  async searchProjects(search: SearchRequest): Promise<SearchPage<ProjectMetadata>> {
    return await this.modelerJson("/projects/search", { method: "POST", body: search });
  }

  /** A project and what lies directly inside it (`GET /modeler/api/v1/projects/{id}`). */
  async project(projectId: string): Promise<{ metadata: ProjectMetadata; content: ContainerContent }> {
    return await this.modelerJson(`/projects/${encodeURIComponent(projectId)}`);
  }

  /** A folder and what lies directly inside it (`GET /modeler/api/v1/folders/{id}`). */
  async folder(folderId: string): Promise<{ metadata: FolderMetadata; content: ContainerContent }> {
    return await this.modelerJson(`/folders/${encodeURIComponent(folderId)}`);
  }

  /** A file and its content (`GET /modeler/api/v1/files/{id}`). */
  async modelerFile(fileId: string): Promise<{ metadata: FileMetadata; content: string }> {
    return await this.modelerJson(`/files/${encodeURIComponent(fileId)}`);
  }

  /** One page of milestones (`POST /modeler/api/v1/milestones/search`). */
  async searchMilestones(search: SearchRequest): Promise<SearchPage<MilestoneMetadata>> {
    return await this.modelerJson("/milestones/search", { method: "POST", body: search });
  }

  /** A milestone and the content it froze (`GET /modeler/api/v1/milestones/{id}`). */
  async milestone(milestoneId: string): Promise<{ metadata: MilestoneMetadata; content: string }> {
    return await this.modelerJson(`/milestones/${encodeURIComponent(milestoneId)}`);
  }

  /**
   * The unified diff from one milestone's content to another's: the compare endpoint answers a signed link, which is
   * read at once and never shown. The link names the platform's configured URL; the console reads the same path on
   * the origin it was loaded from, which serves the same Modeler API, so the CSP's `connect-src 'self'` suffices.
   */
  async milestoneDiff(fromMilestoneId: string, toMilestoneId: string): Promise<string> {
    const comparison = `${encodeURIComponent(fromMilestoneId)}...${encodeURIComponent(toMilestoneId)}`;
    const answer = await this.request("modeler", `${modelerBase}/milestones/compare/${comparison}`, {
      accept: "text/plain",
    });
    const link = new URL((await answer.text()).trim(), window.location.origin);
    // Only a diff link is followed, whatever the answer held.
    if (!link.pathname.startsWith(`${modelerBase}/milestones/compare/`)) {
      throw new ApiError(502, { detail: "The platform answered something other than a diff link." });
    }
    const response = await fetch(`${link.pathname}${link.search}`, {
      headers: { accept: "text/plain" },
      credentials: "omit",
      cache: "no-store",
    });
    if (!response.ok) throw new ApiError(response.status, await problemOf(response));
    return await response.text();
  }

  private async modelerJson<Answer>(path: string, options: RequestOptions = {}): Promise<Answer> {
    return (await (await this.request("modeler", `${modelerBase}${path}`, options)).json()) as Answer;
  }

  private async request(api: ApiName, path: string, options: RequestOptions = {}): Promise<Response> {
    // A cluster linked at a loopback address is reachable with its token only from a page on the platform's machine.
    if (!mayCarryToken(path, window.location.href)) {
      throw new OwnMachineAddressError(new URL(path, window.location.href).origin);
    }
    const token = await this.session.accessToken(api);
    const headers: Record<string, string> = {
      authorization: `Bearer ${token}`,
      accept: options.accept ?? "application/json",
    };
    if (options.body !== undefined) headers["content-type"] = "application/json";
    const response = await fetch(path, {
      method: options.method ?? "GET",
      headers,
      credentials: "omit",
      cache: "no-store",
      ...(options.body === undefined ? {} : { body: JSON.stringify(options.body) }),
    });
    if (response.ok) return response;
    const problem = await problemOf(response);
    if (response.status === 401 && !platformApis.has(api)) {
      // A gateway may refuse a token the platform still accepts (while it waits to fetch the keys again after a
      // signing key rotation, or with a wrong issuer setting): the page says so, and the session goes on.
      const reason = problem.detail ?? problem.title ?? "401";
      throw new ApiError(response.status, problem, {
        message: `The cluster's gateway refused the console's token: ${reason}`,
      });
    }
    const error = new ApiError(response.status, problem, { endedSession: response.status === 401 });
    if (error.endedSession) this.session.end(`The platform no longer accepts this session: ${error.message}`);
    throw error;
  }
}

function activityParameters(query: ActivityQuery): string {
  const parameters = new URLSearchParams({ limit: String(query.limit) });
  if (query.since !== undefined) parameters.set("since", query.since);
  return parameters.toString();
}

/** The Administration API path of one cluster. */
function clusterPath(clusterId: string): string {
  return `/admin/clusters/${encodeURIComponent(clusterId)}`;
}

function trimSlash(url: string): string {
  return url.replace(/\/+$/, "");
}
