import { ServiceError } from "../../http/errors.js";
import { type Executor, inListSlices } from "./records.js";

/** One element of a canonical path: a project or a folder. */
export interface PathSegment {
  id: string;
  name: string;
}

/**
 * Folders are not nested deeper than this by a create or a move. Every file a search answers carries its whole path,
 * so the depth multiplies each answer: at 1,000 levels of 200-character names, a search of 50 files answered 24 MB and
 * held the platform's event loop for 0.8 s.
 */
export const maximumFolderDepth = 100;

/**
 * The deepest tree a store may hold: earlier versions let folders nest this deep, and reads still serve such trees.
 * Every walk up or down the tree stops here, since a deeper walk means a cycle.
 */
export const maximumStoredFolderDepth = 1_000;

/**
 * Escapes a name for `simplePath`: `/` inside a name becomes `\/`. A backslash becomes `\\` as well, so that a name
 * ending in a backslash cannot be mistaken for an escaped separator: the path always splits back into its names.
 */
export function escapePathSegment(name: string): string {
  return name.replace(/[\\/]/g, (character) => `\\${character}`);
}

/** Joins names into a `simplePath`. */
export function simplePath(names: readonly string[]): string {
  return names.map(escapePathSegment).join("/");
}

interface FolderLink {
  name: string;
  parentId: string | null;
}

/**
 * Resolves canonical paths (project, then folders from the top down) of many locations with one query per folder
 * level plus one for the projects, so a page of search results costs a handful of queries, not one per item.
 */
export async function resolvePaths(
  executor: Executor,
  organizationId: string,
  locations: readonly { projectId: string; folderId: string | null }[],
): Promise<Map<string, PathSegment[]>> {
  const projectIds = [...new Set(locations.map((location) => location.projectId))];
  const projects = new Map<string, string>();
  for (const slice of inListSlices(projectIds)) {
    const rows = await executor
      .selectFrom("modeler_projects")
      .select(["id", "name"])
      .where("organization_id", "=", organizationId)
      .where("id", "in", slice)
      .execute();
    for (const row of rows) projects.set(row.id, row.name);
  }
  const folders = new Map<string, FolderLink>();
  let frontier = [...new Set(locations.map((location) => location.folderId).filter((id): id is string => id !== null))];
  for (let depth = 0; frontier.length > 0; depth++) {
    if (depth > maximumStoredFolderDepth) {
      throw new Error(`folder tree deeper than ${maximumStoredFolderDepth} levels: the no-cycle invariant is broken`);
    }
    const next: string[] = [];
    for (const slice of inListSlices(frontier)) {
      const rows = await executor
        .selectFrom("modeler_folders")
        .select(["id", "name", "parent_id"])
        .where("organization_id", "=", organizationId)
        .where("id", "in", slice)
        .execute();
      for (const row of rows) {
        folders.set(row.id, { name: row.name, parentId: row.parent_id });
        if (row.parent_id !== null && !folders.has(row.parent_id)) next.push(row.parent_id);
      }
    }
    frontier = [...new Set(next)];
  }
  const paths = new Map<string, PathSegment[]>();
  for (const location of locations) {
    const key = locationKey(location);
    if (paths.has(key)) continue;
    const segments: PathSegment[] = [];
    let current = location.folderId;
    for (let depth = 0; current !== null; depth++) {
      const folder = folders.get(current);
      if (folder === undefined) {
        // The rows this request read first named a folder that a change committed since has deleted (the folders
        // reference each other, so the stored tree never misses one): the request read across that change.
        throw new ServiceError(
          "conflict",
          `Folder ${current} was moved or deleted while this request read it; send the request again.`,
        );
      }
      if (depth > maximumStoredFolderDepth) {
        throw new Error(`folder ${current}'s ancestry loops: the folder tree invariant is broken`);
      }
      segments.push({ id: current, name: folder.name });
      current = folder.parentId;
    }
    segments.push({ id: location.projectId, name: projects.get(location.projectId) ?? "" });
    paths.set(key, segments.reverse());
  }
  return paths;
}

/** Key of a location in the map `resolvePaths` returns. */
export function locationKey(location: { projectId: string; folderId: string | null }): string {
  return `${location.projectId}/${location.folderId ?? ""}`;
}
