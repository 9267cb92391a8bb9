import { describe, expect, it } from "vitest";
import {
  audiencesForScopes,
  canonicalPermissions,
  canonicalScopes,
  isClusterClientPermission,
  isScopeValue,
  scopeGroups,
  scopeValues,
} from "../../src/auth/scopes.js";

const audiences = { admin: "admin-api", modeler: "modeler-api", gateway: "gateway-api" };

describe("scopes", () => {
  it("lists every scope value of the contract once, each in exactly one group", () => {
    expect([...scopeValues].sort()).toEqual(
      [
        "backups",
        "cluster",
        "cluster-clients",
        "ipallowlist",
        "members",
        "modeler:create",
        "modeler:delete",
        "modeler:read",
        "modeler:update",
        "secrets",
      ].sort(),
    );
    expect(Object.values(scopeGroups).flat().sort()).toEqual([...scopeValues].sort());
    expect(isScopeValue("members")).toBe(true);
    expect(isScopeValue("admin")).toBe(false);
    expect(canonicalScopes(["members", "cluster", "members"])).toEqual(["cluster", "members"]);
  });

  it("derives the audiences a client may request from its scopes", () => {
    expect(audiencesForScopes(["members"], audiences)).toEqual(new Set(["admin-api"]));
    expect(audiencesForScopes(["modeler:delete"], audiences)).toEqual(new Set(["modeler-api"]));
    expect(audiencesForScopes(["cluster"], audiences)).toEqual(new Set(["admin-api", "gateway-api"]));
    for (const scope of ["cluster-clients", "ipallowlist", "secrets", "backups"]) {
      expect(audiencesForScopes([scope], audiences)).toEqual(new Set(["admin-api"]));
    }
    expect(audiencesForScopes([], audiences)).toEqual(new Set());
  });

  it("keeps cluster client permissions apart from organization scopes", () => {
    expect(isClusterClientPermission("gateway")).toBe(true);
    expect(isClusterClientPermission("cluster")).toBe(false);
    expect(isScopeValue("gateway")).toBe(false);
    expect(canonicalPermissions(["secrets", "gateway", "secrets"])).toEqual(["gateway", "secrets"]);
  });
});
