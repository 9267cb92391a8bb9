import { describe, expect, it } from "vitest";
import {
  type AccessPolicy,
  InvalidAccessPolicyError,
  MAX_ACCESS_POLICY_BYTES,
  openAccessPolicy,
  parseAccessPolicy,
  serializeAccessPolicy,
  withWritesPaused,
} from "../../src/auth/access-policy.js";

const passwordSha256 = "a".repeat(64);

/** A policy using every part of the format. */
function fullPolicy(): AccessPolicy {
  return {
    formatVersion: 1,
    clusterId: "cluster-1",
    organizationId: "organization-1",
    ipAllowlist: [
      { ip: "10.0.0.0/8, 2001:db8::/32", description: "offices" },
      { ip: "192.0.2.7", description: "" },
    ],
    monitoring: { enabled: true, clients: [{ username: "prometheus", passwordSha256 }] },
    revokedClients: [{ clientId: "deleted-client", revokedAt: "2026-11-25T03:00:00.000Z" }],
  };
}

/** The message of the InvalidAccessPolicyError parsing `document` throws. */
function refusal(document: unknown): string {
  try {
    parseAccessPolicy(typeof document === "string" ? document : JSON.stringify(document));
  } catch (error) {
    expect(error).toBeInstanceOf(InvalidAccessPolicyError);
    return (error as Error).message;
  }
  throw new Error("expected an InvalidAccessPolicyError");
}

describe("access policy document", () => {
  it("reads back what it writes, with a stable key order and a final newline", () => {
    const policy = fullPolicy();
    const text = serializeAccessPolicy(policy);
    expect(text.endsWith("}\n")).toBe(true);
    expect(parseAccessPolicy(text)).toEqual(policy);
    const reordered: AccessPolicy = {
      revokedClients: policy.revokedClients.map(({ revokedAt, clientId }) => ({ revokedAt, clientId })),
      monitoring: { clients: policy.monitoring.clients, enabled: true },
      ipAllowlist: policy.ipAllowlist.map(({ description, ip }) => ({ description, ip })),
      organizationId: policy.organizationId,
      clusterId: policy.clusterId,
      formatVersion: 1,
    };
    expect(serializeAccessPolicy(reordered)).toBe(text);
    expect(Object.keys(JSON.parse(text))).toEqual([
      "formatVersion",
      "clusterId",
      "organizationId",
      "ipAllowlist",
      "monitoring",
      "revokedClients",
    ]);
  });

  it("pauses writes with a reason and takes them again, writing the pause last and only while there is one", () => {
    const policy = fullPolicy();
    const paused = withWritesPaused(policy, "it is being restored from backup 3");
    expect(paused).toEqual({ ...policy, writesPaused: { reason: "it is being restored from backup 3" } });
    const text = serializeAccessPolicy(paused);
    expect(parseAccessPolicy(text)).toEqual(paused);
    expect(Object.keys(JSON.parse(text)).at(-1)).toBe("writesPaused");
    const resumed = withWritesPaused(paused, undefined);
    expect(resumed).toEqual(policy);
    expect("writesPaused" in resumed).toBe(false);
    expect(serializeAccessPolicy(resumed)).toBe(serializeAccessPolicy(policy));
    expect(refusal({ ...policy, writesPaused: { reason: "" } })).toContain("/writesPaused/reason");
    expect(refusal({ ...policy, writesPaused: { reason: "x", until: "later" } })).toBe(
      "invalid access policy: /writesPaused/until is not a known field",
    );
  });

  it("opens nothing up by default: the open policy has no allowlist, no protected metrics, no revoked client", () => {
    const policy = openAccessPolicy("cluster-1", "organization-1");
    expect(policy).toEqual({
      formatVersion: 1,
      clusterId: "cluster-1",
      organizationId: "organization-1",
      ipAllowlist: [],
      monitoring: { enabled: false, clients: [] },
      revokedClients: [],
    });
    expect(parseAccessPolicy(serializeAccessPolicy(policy))).toEqual(policy);
  });

  it.each<[string, (policy: Record<string, unknown>) => unknown, string]>([
    ["text that is no JSON", () => "{", "the document is not JSON"],
    ["a document that is no object", () => [], "/ must be object"],
    ["another format version", (policy) => ({ ...policy, formatVersion: 2 }), "/formatVersion"],
    ["a missing cluster id", ({ clusterId: _, ...policy }) => policy, "clusterId"],
    ["an empty organization id", (policy) => ({ ...policy, organizationId: "" }), "/organizationId"],
    ["an unknown field", (policy) => ({ ...policy, allowEveryone: true }), "/allowEveryone is not a known field"],
    [
      "an unknown field in an allowlist entry",
      (policy) => ({ ...policy, ipAllowlist: [{ ip: "10.0.0.1", description: "", port: 80 }] }),
      "/ipAllowlist/0/port is not a known field",
    ],
    [
      "a password hash that is not 64 lowercase hex digits",
      (policy) => ({
        ...policy,
        monitoring: { enabled: true, clients: [{ username: "u", passwordSha256: "A".repeat(64) }] },
      }),
      "/monitoring/clients/0/passwordSha256",
    ],
    [
      "a revocation time that is no date-time",
      (policy) => ({ ...policy, revokedClients: [{ clientId: "c", revokedAt: "yesterday" }] }),
      "/revokedClients/0/revokedAt",
    ],
    [
      "an allowlist beyond its bound",
      (policy) => ({
        ...policy,
        ipAllowlist: Array.from({ length: 1_001 }, () => ({ ip: "10.0.0.1", description: "" })),
      }),
      "/ipAllowlist",
    ],
  ])("refuses %s, naming where", (_name, change, expected) => {
    const message = refusal(change(fullPolicy() as unknown as Record<string, unknown>));
    expect(message).toContain("invalid access policy: ");
    expect(message).toContain(expected);
  });

  it("refuses an allowlist entry that is no list of ranges, naming the entry and the reason but not its text", () => {
    const policy = fullPolicy();
    policy.ipAllowlist.push({ ip: "10.0.0.0/8, secret-looking-host", description: "" });
    const message = refusal(policy);
    expect(message).toBe(
      "invalid access policy: /ipAllowlist/2/ip is not a list of IPv4 or IPv6 addresses or CIDR blocks: the address is not valid",
    );
    expect(message).not.toContain("secret-looking-host");
  });

  it("refuses a document larger than its bound before parsing it", () => {
    const message = refusal(" ".repeat(MAX_ACCESS_POLICY_BYTES + 1));
    expect(message).toBe(`invalid access policy: the document is larger than ${MAX_ACCESS_POLICY_BYTES} bytes`);
  });

  it("never repeats a password hash in its messages", () => {
    const policy = fullPolicy();
    const leaked = "b".repeat(63);
    (policy.monitoring.clients[0] as { passwordSha256: string }).passwordSha256 = leaked;
    expect(refusal(policy)).not.toContain(leaked);
  });
});
