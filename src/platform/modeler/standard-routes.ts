import { type TSchema, Type } from "typebox";
import { principalOf } from "../../auth/authenticate.js";
import { modelerDeleteScope, modelerReadScope } from "../../auth/scopes.js";
import { problemSchema, standardErrorResponses } from "../../http/schemas.js";
import type { HttpServer } from "../../http/server.js";
import { idParameters, searchResponseSchema } from "./schemas.js";
import type { SearchPage, SearchRequest } from "./search.js";

/** What `searchRoute` registers: `POST <path>` answering a page of `item`. */
export interface SearchRouteOptions {
  path: string;
  tag: string;
  summary: string;
  description?: string;
  /** The resource's search body schema (its filter fields and sort fields). */
  body: TSchema;
  /** Schema of one item of the answer. */
  item: TSchema;
  search(organizationId: string, request: SearchRequest): Promise<SearchPage<unknown>>;
}

/** Registers the search route of one resource: `modeler:read`, the body validated by the resource's own schema. */
export function searchRoute(server: HttpServer, options: SearchRouteOptions): void {
  server.post(
    options.path,
    {
      config: { scopes: [modelerReadScope] },
      schema: {
        tags: [options.tag],
        summary: options.summary,
        ...(options.description === undefined ? {} : { description: options.description }),
        body: options.body,
        response: { 200: searchResponseSchema(options.item), ...standardErrorResponses },
      },
    },
    // The body schema above is the resource's search schema, so the validated body is a SearchRequest.
    async (request) => await options.search(principalOf(request).organizationId, request.body as SearchRequest),
  );
}

/** What `deleteRoute` registers: `DELETE <path>` (with an `:id` parameter) answering 204. */
export interface DeleteRouteOptions {
  path: string;
  tag: string;
  summary: string;
  /** Whether the resource can refuse deletion with 409 (a container that is not empty). */
  mayConflict: boolean;
  remove(organizationId: string, id: string): Promise<void>;
}

/** Registers the delete route of one resource by id: `modeler:delete`, 204 on success. */
export function deleteRoute(server: HttpServer, options: DeleteRouteOptions): void {
  server.delete(
    options.path,
    {
      config: { scopes: [modelerDeleteScope] },
      schema: {
        tags: [options.tag],
        summary: options.summary,
        params: idParameters,
        response: {
          204: Type.Null(),
          ...(options.mayConflict ? { 409: problemSchema } : {}),
          ...standardErrorResponses,
        },
      },
    },
    async (request, reply) => {
      await options.remove(principalOf(request).organizationId, request.params.id);
      return reply.code(204).send(null);
    },
  );
}
