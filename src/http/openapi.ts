import swagger from "@fastify/swagger";
import swaggerUi from "@fastify/swagger-ui";
import { bearerSecuritySchemes } from "../auth/authenticate.js";
import type { HttpServer } from "./server.js";

/** Describes one API's OpenAPI document. */
export interface ApiDocumentOptions {
  title: string;
  description: string;
  version: string;
  /** Absolute URL prefix the API is served under (e.g. `http://localhost:8088/admin`), for the document's `servers`. */
  serverUrl: string;
  /** Whether the API takes bearer tokens (adds the `bearerAuth` security scheme). */
  bearerAuth: boolean;
  /** Path of the JSON document, relative to the context's prefix (e.g. `/openapi.json`). */
  documentPath: string;
  /** Path of the browsable page, relative to the context's prefix (e.g. `/docs`). */
  docsPath: string;
}

/**
 * Generates an OpenAPI 3.1 document from the route schemas registered in `server`'s encapsulation context (and
 * its children), served at `documentPath` under the context's prefix, with a browsable page at `docsPath`. Register
 * it in the API's own plugin before the API's routes so that each API gets a document of its own routes only.
 */
export async function registerApiDocuments(server: HttpServer, options: ApiDocumentOptions): Promise<void> {
  await server.register(swagger, {
    openapi: {
      openapi: "3.1.0",
      info: { title: options.title, description: options.description, version: options.version },
      servers: [{ url: options.serverUrl }],
      components: options.bearerAuth ? { securitySchemes: bearerSecuritySchemes } : {},
    },
    hideUntagged: false,
    // A route whose body is optional (`bodyOptional`) marks its body schema here, and the marked operations' bodies
    // are not required in the document: the generator otherwise makes every request body required.
    transform: ({ schema, url, route }) =>
      route.config?.bodyOptional === true && schema?.body !== undefined
        ? { schema: { ...schema, body: { ...(schema.body as object), [optionalBodyMarker]: true } }, url }
        : { schema, url },
    transformObject: (document) => markOptionalBodies("openapiObject" in document ? document.openapiObject : {}),
  });
  server.get(options.documentPath, { schema: { hide: true } }, async () => server.swagger());
  await server.register(swaggerUi, {
    routePrefix: options.docsPath,
    // The page links its assets by absolute path, which must include the prefix of the API's context.
    indexPrefix: server.prefix,
    uiConfig: { deepLinking: true },
    staticCSP: true,
  });
}

/** The keyword `transform` puts on an optional body's schema, which `markOptionalBodies` takes off again. */
const optionalBodyMarker = "x-flowplane-optional-body";

/** Makes the request body of every operation whose body schema carries the marker not required, removing the marker. */
function markOptionalBodies<Document>(document: Document): Document {
  const paths = (document as { paths?: Record<string, Record<string, unknown>> }).paths ?? {};
  for (const operations of Object.values(paths)) {
    for (const operation of Object.values(operations)) {
      const requestBody = (operation as { requestBody?: { required?: boolean; content?: Record<string, unknown> } })
        .requestBody;
      for (const media of Object.values(requestBody?.content ?? {})) {
        const schema = (media as { schema?: Record<string, unknown> }).schema;
        if (schema?.[optionalBodyMarker] !== true || requestBody === undefined) continue;
        delete schema[optionalBodyMarker];
        requestBody.required = false;
      }
    }
  }
  return document;
}
