import { type Static, type TSchema, Type } from "typebox";
import { type ApiClientOptions, ApiTransport, defaultMaxApiResponseBytes, pathSegment } from "./api.js";
import { ClientConnectionError } from "./errors.js";
import { sendWithRetry } from "./http.js";

/** Schema of the Modeler API's info answer. */
export const modelerInfoSchema = Type.Object({
  version: Type.String(),
  authorizedOrganization: Type.String(),
  createPermission: Type.Boolean(),
  readPermission: Type.Boolean(),
  updatePermission: Type.Boolean(),
  deletePermission: Type.Boolean(),
});

/** The API version, the caller's organization and the caller's four permissions. */
export type ModelerInfo = Static<typeof modelerInfoSchema>;

/** The default audience of the Modeler API. */
export const modelerAudience = "modeler-api";

const personSchema = Type.Object({ name: Type.String(), email: Type.String() });
const auditProperties = {
  created: Type.String(),
  createdBy: personSchema,
  updated: Type.String(),
  updatedBy: personSchema,
};

/** The kinds of file the Modeler stores. */
export const modelerFileTypes = ["bpmn", "dmn", "form", "connector_template"] as const;

/** One kind of file. */
export type ModelerFileType = (typeof modelerFileTypes)[number];

/** Schema of a project's metadata. */
export const projectMetadataSchema = Type.Object({ id: Type.String(), name: Type.String(), ...auditProperties });
/** A project's metadata. */
export type ProjectMetadata = Static<typeof projectMetadataSchema>;

/** Schema of a folder's metadata. */
export const folderMetadataSchema = Type.Object({
  id: Type.String(),
  name: Type.String(),
  projectId: Type.String(),
  parentId: Type.Union([Type.String(), Type.Null()]),
  ...auditProperties,
});
/** A folder's metadata. */
export type FolderMetadata = Static<typeof folderMetadataSchema>;

/** Schema of a file's metadata. */
export const fileMetadataSchema = Type.Object({
  id: Type.String(),
  name: Type.String(),
  projectId: Type.String(),
  folderId: Type.Union([Type.String(), Type.Null()]),
  simplePath: Type.String(),
  canonicalPath: Type.Array(Type.Object({ id: Type.String(), name: Type.String() })),
  revision: Type.Integer(),
  type: Type.Enum(modelerFileTypes),
  ...auditProperties,
});
/** A file's metadata. */
export type FileMetadata = Static<typeof fileMetadataSchema>;

/** Schema of a milestone's metadata. */
export const milestoneMetadataSchema = Type.Object({
  id: Type.String(),
  name: Type.String(),
  fileId: Type.String(),
  ...auditProperties,
});
/** A milestone's metadata. */
export type MilestoneMetadata = Static<typeof milestoneMetadataSchema>;

/** Roles a collaborator can hold. */
export const collaboratorRoles = ["project_admin", "editor", "viewer", "commenter"] as const;
/** One collaborator role. */
export type CollaboratorRole = (typeof collaboratorRoles)[number];

/** Schema of a collaborator. */
export const collaboratorSchema = Type.Object({
  projectId: Type.String(),
  email: Type.String(),
  name: Type.String(),
  role: Type.Enum(collaboratorRoles),
});
/** A collaborator of a project. */
export type Collaborator = Static<typeof collaboratorSchema>;

const containerContentSchema = Type.Object({
  folders: Type.Array(folderMetadataSchema),
  files: Type.Array(fileMetadataSchema),
});

/** The folders and files directly inside a project or folder. */
export type ContainerContent = Static<typeof containerContentSchema>;

const projectViewSchema = Type.Object({ metadata: projectMetadataSchema, content: containerContentSchema });
const folderViewSchema = Type.Object({ metadata: folderMetadataSchema, content: containerContentSchema });
const fileViewSchema = Type.Object({ metadata: fileMetadataSchema, content: Type.String() });
const milestoneViewSchema = Type.Object({ metadata: milestoneMetadataSchema, content: Type.String() });

function pageSchema<Item extends TSchema>(item: Item) {
  return Type.Object({ items: Type.Array(item), total: Type.Integer() });
}

/** A search request: filter by metadata fields, sort keys, page number (from 0) and page size (0–50, default 10). */
export interface SearchRequest {
  filter?: Record<string, unknown>;
  sort?: { field: string; direction: "ASC" | "DESC" }[];
  page?: number;
  size?: number;
}

/** One page of search results and the number of matches on all pages. */
export interface SearchPage<Item> {
  items: Item[];
  total: number;
}

/** What `createFile` sends: the project or folder to place it in (either or both). */
export interface NewFile {
  name: string;
  content: string;
  fileType: ModelerFileType;
  projectId?: string;
  folderId?: string | null;
}

/** What `updateFile` sends: the revision read last, and the fields to change. */
export interface FileChange {
  revision: number;
  name?: string;
  content?: string;
  projectId?: string;
  folderId?: string | null;
}

/** Typed client of the Modeler API v1. */
export class ModelerClient {
  private readonly transport: ApiTransport;
  private readonly http: ApiClientOptions["http"];

  /** Creates a client for the Modeler API at `options.baseUrl` (e.g. `http://localhost:8088/modeler`). */
  constructor(options: ApiClientOptions) {
    this.transport = new ApiTransport(options, modelerAudience);
    this.http = options.http;
  }

  /** Reports the API version, the caller's organization and which of create/read/update/delete it may do. */
  async info(): Promise<ModelerInfo> {
    return (await this.transport.sendForJson("GET", "/api/v1/info", modelerInfoSchema)) as ModelerInfo;
  }

  /** Creates a project. */
  async createProject(name: string): Promise<ProjectMetadata> {
    return (await this.transport.sendForJson("POST", "/api/v1/projects", projectMetadataSchema, {
      name,
    })) as ProjectMetadata;
  }

  /** Reads a project and the folders and files at its top level. */
  async getProject(id: string): Promise<{ metadata: ProjectMetadata; content: ContainerContent }> {
    return (await this.transport.sendForJson("GET", `/api/v1/projects/${pathSegment(id)}`, projectViewSchema)) as {
      metadata: ProjectMetadata;
      content: ContainerContent;
    };
  }

  /** Renames a project. */
  async renameProject(id: string, name: string): Promise<ProjectMetadata> {
    return (await this.transport.sendForJson("PATCH", `/api/v1/projects/${pathSegment(id)}`, projectMetadataSchema, {
      name,
    })) as ProjectMetadata;
  }

  /** Deletes an empty project. */
  async deleteProject(id: string): Promise<void> {
    await this.transport.send("DELETE", `/api/v1/projects/${pathSegment(id)}`);
  }

  /** Searches projects. */
  async searchProjects(request: SearchRequest = {}): Promise<SearchPage<ProjectMetadata>> {
    return await this.search("projects", projectMetadataSchema, request);
  }

  /** Creates a folder in a project or inside another folder. */
  async createFolder(folder: { name: string; projectId?: string; parentId?: string | null }): Promise<FolderMetadata> {
    return (await this.transport.sendForJson(
      "POST",
      "/api/v1/folders",
      folderMetadataSchema,
      folder,
    )) as FolderMetadata;
  }

  /** Reads a folder and the folders and files directly inside it. */
  async getFolder(id: string): Promise<{ metadata: FolderMetadata; content: ContainerContent }> {
    return (await this.transport.sendForJson("GET", `/api/v1/folders/${pathSegment(id)}`, folderViewSchema)) as {
      metadata: FolderMetadata;
      content: ContainerContent;
    };
  }

  /** Renames and/or moves a folder. */
  async updateFolder(
    id: string,
    change: { name?: string; projectId?: string; parentId?: string | null },
  ): Promise<FolderMetadata> {
    return (await this.transport.sendForJson(
      "PATCH",
      `/api/v1/folders/${pathSegment(id)}`,
      folderMetadataSchema,
      change,
    )) as FolderMetadata;
  }

  /** Deletes an empty folder. */
  async deleteFolder(id: string): Promise<void> {
    await this.transport.send("DELETE", `/api/v1/folders/${pathSegment(id)}`);
  }

  /** Searches folders. */
  async searchFolders(request: SearchRequest = {}): Promise<SearchPage<FolderMetadata>> {
    return await this.search("folders", folderMetadataSchema, request);
  }

  /** Creates a file; its content is validated for its type. */
  async createFile(file: NewFile): Promise<FileMetadata> {
    return (await this.transport.sendForJson("POST", "/api/v1/files", fileMetadataSchema, file)) as FileMetadata;
  }

  /** Reads a file's metadata and content. */
  async getFile(id: string): Promise<{ metadata: FileMetadata; content: string }> {
    return (await this.transport.sendForJson("GET", `/api/v1/files/${pathSegment(id)}`, fileViewSchema)) as {
      metadata: FileMetadata;
      content: string;
    };
  }

  /** Changes a file from the revision read last; throws `ApiError` 409 when someone changed it since. */
  async updateFile(id: string, change: FileChange): Promise<FileMetadata> {
    return (await this.transport.sendForJson(
      "PATCH",
      `/api/v1/files/${pathSegment(id)}`,
      fileMetadataSchema,
      change,
    )) as FileMetadata;
  }

  /** Deletes a file and its milestones. */
  async deleteFile(id: string): Promise<void> {
    await this.transport.send("DELETE", `/api/v1/files/${pathSegment(id)}`);
  }

  /** Searches files (metadata only). */
  async searchFiles(request: SearchRequest = {}): Promise<SearchPage<FileMetadata>> {
    return await this.search("files", fileMetadataSchema, request);
  }

  /** Freezes a file's current content as a milestone. */
  async createMilestone(fileId: string, name: string): Promise<MilestoneMetadata> {
    return (await this.transport.sendForJson("POST", "/api/v1/milestones", milestoneMetadataSchema, {
      name,
      fileId,
    })) as MilestoneMetadata;
  }

  /** Reads a milestone and the content it froze. */
  async getMilestone(id: string): Promise<{ metadata: MilestoneMetadata; content: string }> {
    return (await this.transport.sendForJson("GET", `/api/v1/milestones/${pathSegment(id)}`, milestoneViewSchema)) as {
      metadata: MilestoneMetadata;
      content: string;
    };
  }

  /** Renames a milestone. */
  async renameMilestone(id: string, name: string): Promise<MilestoneMetadata> {
    return (await this.transport.sendForJson(
      "PATCH",
      `/api/v1/milestones/${pathSegment(id)}`,
      milestoneMetadataSchema,
      { name },
    )) as MilestoneMetadata;
  }

  /** Deletes a milestone. */
  async deleteMilestone(id: string): Promise<void> {
    await this.transport.send("DELETE", `/api/v1/milestones/${pathSegment(id)}`);
  }

  /** Restores a milestone's content into its file as a new revision; answers the file's metadata. */
  async restoreMilestone(id: string): Promise<FileMetadata> {
    return (await this.transport.sendForJson(
      "POST",
      `/api/v1/milestones/${pathSegment(id)}/restore`,
      fileMetadataSchema,
    )) as FileMetadata;
  }

  /** Searches milestones. */
  async searchMilestones(request: SearchRequest = {}): Promise<SearchPage<MilestoneMetadata>> {
    return await this.search("milestones", milestoneMetadataSchema, request);
  }

  /** A signed link (valid for minutes, no token needed) serving the unified diff from milestone `fromId` to `toId`. */
  async compareMilestones(fromId: string, toId: string): Promise<string> {
    const path = `/api/v1/milestones/compare/${pathSegment(fromId)}...${pathSegment(toId)}`;
    // The milestones API answers the link as plain text (the versions API answers it as JSON).
    return (await this.transport.send("GET", path)).text;
  }

  /** Fetches the unified diff a `compareMilestones` link serves. */
  async readDiff(url: string): Promise<string> {
    // A diff of two files of at most 10 MiB each, every line removed and added, with a sign before each line.
    const maxResponseBytes = this.http?.maxResponseBytes ?? 2 * defaultMaxApiResponseBytes;
    const response = await sendWithRetry({ method: "GET", url }, { ...this.http, maxResponseBytes });
    if (response.status !== 200) {
      throw new ClientConnectionError(url, `answered HTTP ${response.status}: ${response.text.slice(0, 200)}`);
    }
    return response.text;
  }

  /** Adds an organization member to a project with `role`, or changes their role. */
  async putCollaborator(projectId: string, email: string, role: CollaboratorRole): Promise<void> {
    await this.transport.send("PUT", "/api/v1/collaborators", { email, projectId, role });
  }

  /** Searches collaborators. */
  async searchCollaborators(request: SearchRequest = {}): Promise<SearchPage<Collaborator>> {
    return await this.search("collaborators", collaboratorSchema, request);
  }

  /** Removes a collaborator from a project. */
  async removeCollaborator(projectId: string, email: string): Promise<void> {
    await this.transport.send(
      "DELETE",
      `/api/v1/projects/${pathSegment(projectId)}/collaborators/${pathSegment(email)}`,
    );
  }

  private async search<Item extends TSchema>(
    resource: string,
    item: Item,
    request: SearchRequest,
  ): Promise<SearchPage<Static<Item>>> {
    return (await this.transport.sendForJson("POST", `/api/v1/${resource}/search`, pageSchema(item), request, {
      readOnly: true,
    })) as SearchPage<Static<Item>>;
  }
}
