import type { HttpServer } from "../../http/server.js";
import { collaboratorRoutes } from "./collaborators/routes.js";
import { fileRoutes } from "./files/routes.js";
import { folderRoutes } from "./folders/routes.js";
import { infoRoutes } from "./info/routes.js";
import { milestoneDiffRoutes, milestoneRoutes } from "./milestones/routes.js";
import { projectRoutes } from "./projects/routes.js";
import type { ModelerServices } from "./services.js";
import { versionNaming, versionRoutes } from "./versions/routes.js";

/** Options of `modelerRoutes`. */
export interface ModelerRouteOptions {
  /** Body limit of the routes carrying file content. */
  fileBodyLimitBytes: number;
}

/** Every Modeler API route that needs a token; register it in a context guarded by `installAuthentication`. */
export function modelerRoutes(server: HttpServer, services: ModelerServices, options: ModelerRouteOptions): void {
  infoRoutes(server);
  projectRoutes(server, services);
  folderRoutes(server, services);
  fileRoutes(server, services, { bodyLimitBytes: options.fileBodyLimitBytes });
  milestoneRoutes(server, services);
  versionRoutes(server, services);
  collaboratorRoutes(server, services);
}

/** Modeler API routes that carry their own authorization (signed diff links); register them outside the guard. */
export function modelerPublicRoutes(server: HttpServer, services: ModelerServices): void {
  milestoneDiffRoutes(server, services);
  milestoneDiffRoutes(server, services, versionNaming);
}
