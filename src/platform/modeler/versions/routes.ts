import type { HttpServer } from "../../../http/server.js";
import { type MilestoneApiNaming, milestoneApiRoutes } from "../milestones/routes.js";
import type { ModelerServices } from "../services.js";

/**
 * The 8.9 API: `/api/v1/versions`, the newer name of milestones. A version is a milestone: the same rows, ids and
 * fields (`id`, `name`, `fileId` and the audit fields), so either API reads and changes what the other created.
 * Where the 8.9 API differs, versions follow it: the name may be left out at creation, compare answers
 * `{"url": ...}` as JSON, and restore answers the restored version (the reference SDK's type for it).
 */
export const versionNaming: MilestoneApiNaming = {
  basePath: "/api/v1/versions",
  tag: "Versions",
  noun: "version",
  comparisonAnswer: "json",
  nameOptional: true,
  restoreAnswer: "restored",
};

/** Routes of `/api/v1/versions` that need a token. */
export function versionRoutes(server: HttpServer, services: ModelerServices): void {
  milestoneApiRoutes(server, services, versionNaming);
}
