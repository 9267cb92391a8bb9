/**
 * Records every change made through the Administration API in the activity log, as one mechanism rather than a
 * call in each route: every route that changes something (POST, PUT, PATCH, DELETE) declares in its configuration
 * what it changes, and a hook records the change once the route has answered with success. A mutating route
 * registered without a declaration is refused at start, so a new route cannot forget its entry.
 */
import type { FastifyInstance, FastifyRequest } from "fastify";
import { principalOf } from "../../../auth/authenticate.js";
import type { ActivityService, AuditType } from "./service.js";

/** What a route's successful request is recorded as. */
export interface ActivityDeclaration {
  /** The kind of resource changed, e.g. `member`. */
  entity: string;
  auditType: AuditType;
  /**
   * The changed resource's id or name, from the request (typically a path parameter). Routes that learn it only
   * while they run (a created resource's new id) set `request.activityOutcome.entityId` instead.
   */
  entityId?: (request: FastifyRequest) => string;
}

declare module "fastify" {
  interface FastifyContextConfig {
    /** What a change made by this route is recorded as in the activity log (required on mutating admin routes). */
    activity?: ActivityDeclaration;
  }
  interface FastifyRequest {
    /** Set by a handler when its change's kind or id is known only once it ran (an invitation or a role change). */
    activityOutcome?: {
      auditType?: AuditType;
      entityId?: string;
      /** The request changed nothing after all (a dry run): no entry is recorded. */
      unchanged?: boolean;
    };
  }
}

/** HTTP methods whose successful requests are changes. */
const mutatingMethods = new Set(["POST", "PUT", "PATCH", "DELETE"]);

function isMutating(method: string | readonly string[]): boolean {
  return (typeof method === "string" ? [method] : method).some((name) => mutatingMethods.has(name.toUpperCase()));
}

/**
 * Installs activity recording on an authenticated Administration API context: call it before the context's routes
 * are registered.
 */
export function installActivityRecording(server: FastifyInstance, activity: ActivityService): void {
  server.addHook("onRoute", (route) => {
    if (isMutating(route.method) && route.config?.activity === undefined) {
      throw new Error(
        `invariant violated: ${String(route.method)} ${route.url} changes something but declares no activity entry`,
      );
    }
  });
  server.addHook("onSend", async (request, reply, payload) => {
    const declaration = request.routeOptions.config.activity;
    if (declaration === undefined || reply.statusCode >= 300) return payload;
    const outcome = request.activityOutcome;
    if (outcome?.unchanged === true) return payload;
    const entityId = outcome?.entityId ?? declaration.entityId?.(request);
    if (entityId === undefined) {
      throw new Error(`invariant violated: ${request.method} ${request.routeOptions.url} recorded no entity id`);
    }
    const { organizationId, clientId } = principalOf(request);
    // Answered as the success it was even when the database cannot take the entry now (it is written later).
    await activity.recordEventually({
      organizationId,
      entity: declaration.entity,
      entityId,
      auditType: outcome?.auditType ?? declaration.auditType,
      userId: clientId,
    });
    return payload;
  });
}

/** An `entityId` reader for a resource named by a path parameter, e.g. `pathParameter("clusterId")`. */
export function pathParameter(name: string): (request: FastifyRequest) => string {
  return (request) => {
    const value = (request.params as Record<string, unknown>)[name];
    if (typeof value !== "string") throw new Error(`invariant violated: the route has no path parameter ${name}`);
    return value;
  };
}
