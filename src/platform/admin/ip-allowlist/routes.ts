import { Type } from "typebox";
import { MAX_ADDRESS_RANGE_ENTRY_LENGTH } from "../../../auth/address-ranges.js";
import { principalOf } from "../../../auth/authenticate.js";
import { clusterScope, ipAllowlistScope } from "../../../auth/scopes.js";
import { standardErrorResponses } from "../../../http/schemas.js";
import type { HttpServer } from "../../../http/server.js";
import { pathParameter } from "../activity/recording.js";
import { clusterParameters } from "../cluster-directory.js";
import { type IpAllowlistService, MAX_ALLOWLIST_DESCRIPTION_LENGTH, MAX_ALLOWLIST_ENTRIES } from "./service.js";

const entrySchema = Type.Object(
  {
    ip: Type.String({
      minLength: 1,
      maxLength: MAX_ADDRESS_RANGE_ENTRY_LENGTH,
      description: "One or more IPv4 or IPv6 addresses or CIDR blocks, separated by commas.",
    }),
    description: Type.Optional(
      Type.String({ maxLength: MAX_ALLOWLIST_DESCRIPTION_LENGTH, description: "What the addresses are." }),
    ),
  },
  { additionalProperties: false },
);

const entriesSchema = Type.Array(entrySchema, {
  maxItems: MAX_ALLOWLIST_ENTRIES,
  description: "The whole allowlist; an empty list allows every address.",
});

const storedEntrySchema = Type.Object(
  { ip: Type.String(), description: Type.String() },
  { additionalProperties: false },
);

/** Routes of `/clusters/{clusterId}/ipallowlist` and its older spelling `ipwhitelist`: thin wrappers over the service. */
export function ipAllowlistRoutes(server: HttpServer, allowlists: IpAllowlistService): void {
  for (const field of ["ipallowlist", "ipwhitelist"] as const) {
    const older = field === "ipwhitelist";
    server.put(
      `/clusters/:clusterId/${field}`,
      {
        config: {
          scopes: [ipAllowlistScope],
          activity: { entity: "cluster-ip-allowlist", auditType: "u", entityId: pathParameter("clusterId") },
        },
        schema: {
          tags: ["IP allowlist"],
          summary: older
            ? "Replace the cluster's IP allowlist (older spelling, as the reference SDK sends it)"
            : "Replace the cluster's IP allowlist",
          params: clusterParameters,
          body: Type.Object({ [field]: entriesSchema }, { additionalProperties: false }),
          response: { 204: Type.Null(), ...standardErrorResponses },
        },
      },
      async (request, reply) => {
        const body = request.body as Record<typeof field, { ip: string; description?: string }[]>;
        const entries = body[field].map((entry) => ({ ip: entry.ip, description: entry.description ?? "" }));
        await allowlists.replace(principalOf(request).organizationId, request.params.clusterId, entries, field);
        return reply.code(204).send(null);
      },
    );
  }
  server.get(
    "/clusters/:clusterId/ipallowlist",
    {
      config: { scopes: [ipAllowlistScope, clusterScope] },
      schema: {
        tags: ["IP allowlist"],
        summary: "Read the cluster's IP allowlist",
        params: clusterParameters,
        response: {
          200: Type.Object({ ipallowlist: Type.Array(storedEntrySchema) }, { additionalProperties: false }),
          ...standardErrorResponses,
        },
      },
    },
    async (request) => ({
      ipallowlist: await allowlists.get(principalOf(request).organizationId, request.params.clusterId),
    }),
  );
}
