import { execFileSync } from "node:child_process";
import { mkdir, mkdtemp, rename, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type Logger, pino } from "pino";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { type AccessPolicy, openAccessPolicy, serializeAccessPolicy } from "../../../src/auth/access-policy.js";
import type { EnforcedAccessPolicy } from "../../../src/cluster/gateway/access-guard.js";
import { AccessPolicyWatcher } from "../../../src/cluster/gateway/access-policy-watcher.js";
import { ConfigurationError } from "../../../src/config/errors.js";
import { waitFor } from "../broker/support.js";

/** A password hash that must never appear in a log line. */
const passwordSha256 = "c0ffee".padEnd(64, "e");

let directory: string;
let path: string;
const watchers: AccessPolicyWatcher[] = [];

function capturingLogger(): { logger: Logger; lines: Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = [];
  const logger = pino({ level: "debug" }, { write: (line: string) => lines.push(JSON.parse(line)) });
  return { logger, lines };
}

function policyWith(changes: Partial<AccessPolicy>): AccessPolicy {
  return { ...openAccessPolicy("cluster-1", "organization-1"), ...changes };
}

/** Replaces the file in one step, as the provisioner does. */
async function replaceFile(text: string): Promise<void> {
  const temporary = `${path}.next`;
  await writeFile(temporary, text, { mode: 0o600 });
  await rename(temporary, path);
}

async function openWatcher(
  logger: Logger,
  events: { applied: EnforcedAccessPolicy[]; rejected: number } = { applied: [], rejected: 0 },
): Promise<AccessPolicyWatcher> {
  const watcher = await AccessPolicyWatcher.open({
    path,
    logger,
    pollIntervalMs: 20,
    onApplied: (policy) => events.applied.push(policy),
    onRejected: () => {
      events.rejected += 1;
    },
  });
  watchers.push(watcher);
  return watcher;
}

/** Resolves after the watcher has looked at the file a few more times. */
function afterSomePolls(): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, 200));
}

beforeEach(async () => {
  directory = await mkdtemp(join(tmpdir(), "flowplane-access-policy-"));
  path = join(directory, "access-policy.json");
});

afterEach(async () => {
  for (const watcher of watchers.splice(0)) watcher.close();
  await rm(directory, { recursive: true, force: true });
});

describe("AccessPolicyWatcher", () => {
  it("refuses to start without a valid policy file, naming the file and never its content", async () => {
    const { logger } = capturingLogger();
    await expect(openWatcher(logger)).rejects.toThrow(ConfigurationError);
    await expect(openWatcher(logger)).rejects.toThrow(
      `service.gateway.accessPolicyFile: the access policy file "${path}" cannot be used: it cannot be read (ENOENT)`,
    );
    const invalid = policyWith({
      monitoring: { enabled: true, clients: [{ username: "scraper", passwordSha256: `${passwordSha256}0` }] },
    });
    await writeFile(path, serializeAccessPolicy(invalid));
    const error: unknown = await openWatcher(logger).then(
      () => undefined,
      (caught: unknown) => caught,
    );
    expect(error).toBeInstanceOf(ConfigurationError);
    expect((error as Error).message).toContain("/monitoring/clients/0/passwordSha256");
    expect((error as Error).message).not.toContain(passwordSha256);
    await rm(path);
    await mkdir(path);
    await expect(openWatcher(logger)).rejects.toThrow("it is not a regular file");
    // A FIFO in the file's place would block a plain open until someone writes to it.
    await rm(path, { recursive: true });
    execFileSync("mkfifo", [path]);
    await expect(openWatcher(logger)).rejects.toThrow("it is not a regular file");
  });

  it("puts a new version in force once it parses, whether the file is replaced or rewritten in place", async () => {
    const { logger, lines } = capturingLogger();
    await writeFile(path, serializeAccessPolicy(policyWith({})));
    const events = { applied: [] as EnforcedAccessPolicy[], rejected: 0 };
    const watcher = await openWatcher(logger, events);
    expect(watcher.current().policy.ipAllowlist).toEqual([]);

    await replaceFile(serializeAccessPolicy(policyWith({ ipAllowlist: [{ ip: "10.0.0.0/8", description: "" }] })));
    await waitFor(() => watcher.current().policy.ipAllowlist.length === 1, "the replaced file is in force");
    expect(watcher.current().allowsAddress("10.1.2.3")).toBe(true);
    expect(watcher.current().allowsAddress("192.0.2.1")).toBe(false);

    const monitored = policyWith({
      monitoring: { enabled: true, clients: [{ username: "scraper", passwordSha256 }] },
      revokedClients: [{ clientId: "gone", revokedAt: "2026-11-25T03:00:00.000Z" }],
    });
    await writeFile(path, serializeAccessPolicy(monitored));
    await waitFor(() => watcher.current().protectsMetrics, "the file rewritten in place is in force");
    expect(watcher.current().isRevoked("gone")).toBe(true);
    expect(events.applied).toHaveLength(2);
    // A file rewritten in place is emptied before it is written: a loaded machine may let the watcher read it empty
    // once, which it refuses, keeping the version in force until the whole one arrives.
    expect(events.rejected).toBeLessThanOrEqual(1);

    const applied = lines.filter((line) => line.msg === "access policy applied");
    expect(applied.at(-1)).toMatchObject({
      file: path,
      allowlistEntries: 0,
      monitoringEnabled: true,
      monitoringClients: 1,
      revokedClients: 1,
    });
    expect(JSON.stringify(lines)).not.toContain(passwordSha256);
  });

  it("keeps the last valid policy while the file is invalid or gone, warning once per change", async () => {
    const { logger, lines } = capturingLogger();
    const valid = policyWith({
      ipAllowlist: [{ ip: "10.0.0.0/8", description: "" }],
      monitoring: { enabled: true, clients: [{ username: "scraper", passwordSha256 }] },
    });
    await writeFile(path, serializeAccessPolicy(valid));
    const events = { applied: [] as EnforcedAccessPolicy[], rejected: 0 };
    const watcher = await openWatcher(logger, events);
    const warnings = () => lines.filter((line) => line.level === 40);

    await replaceFile(serializeAccessPolicy(valid).replace('"10.0.0.0/8"', '"10.0.0.0/80"'));
    await waitFor(() => events.rejected === 1, "the invalid version is rejected");
    await afterSomePolls();
    expect(events.rejected).toBe(1);
    expect(warnings()).toHaveLength(1);
    expect(warnings()[0]).toMatchObject({
      file: path,
      problem:
        "invalid access policy: /ipAllowlist/0/ip is not a list of IPv4 or IPv6 addresses or CIDR blocks: the prefix length is above 32",
    });
    expect(watcher.current().allowsAddress("10.1.2.3")).toBe(true);
    expect(watcher.current().protectsMetrics).toBe(true);

    // Another invalid version is another change: one more warning, even though it is wrong in the same way.
    await replaceFile(`${serializeAccessPolicy(valid).replace('"10.0.0.0/8"', '"10.0.0.0/80"')} `);
    await waitFor(() => events.rejected === 2, "the second invalid version is rejected");

    await replaceFile("{ not json");
    await waitFor(() => events.rejected === 3, "the unparsable version is rejected");
    await rm(path);
    await waitFor(() => events.rejected === 4, "the missing file is reported");
    await afterSomePolls();
    expect(events.rejected).toBe(4);
    expect(warnings().map((line) => line.problem)).toEqual([
      expect.stringContaining("prefix length"),
      expect.stringContaining("prefix length"),
      "invalid access policy: the document is not JSON",
      "it cannot be read (ENOENT)",
    ]);
    expect(watcher.current().allowsAddress("10.1.2.3")).toBe(true);
    expect(events.applied).toHaveLength(0);

    await replaceFile(serializeAccessPolicy(policyWith({})));
    await waitFor(() => events.applied.length === 1, "the valid file is in force again");
    expect(watcher.current().allowsAddress("192.0.2.1")).toBe(true);
    expect(JSON.stringify(lines)).not.toContain(passwordSha256);
  });

  it("stops following the file once closed", async () => {
    const { logger } = capturingLogger();
    await writeFile(path, serializeAccessPolicy(policyWith({})));
    const events = { applied: [] as EnforcedAccessPolicy[], rejected: 0 };
    const watcher = await openWatcher(logger, events);
    watcher.close();
    await replaceFile(serializeAccessPolicy(policyWith({ ipAllowlist: [{ ip: "10.0.0.0/8", description: "" }] })));
    await afterSomePolls();
    expect(events.applied).toHaveLength(0);
    expect(watcher.current().policy.ipAllowlist).toEqual([]);
  });
});
