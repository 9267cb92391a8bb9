import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pino } from "pino";
import { loadConfiguration } from "../../src/config/load.js";
import { type BootstrapCredentials, type StartPlatformOptions, startPlatform } from "../../src/platform/platform.js";

/** A real platform started for a test, with its administration client. */
export interface TestPlatform {
  url: string;
  issuerUrl: string;
  organizationId: string;
  dataDirectory: string;
  adminClient: BootstrapCredentials;
  close(): Promise<void>;
}

/**
 * Starts a real platform on 127.0.0.1 and a free port with a fresh data directory (SQLite unless `overrides` says
 * otherwise). `overrides` are flag-style keys such as `service.rateLimit.burst`; `options` may replace the silent
 * logger or inject the platform's collaborators (such as `clusterAccess`).
 */
export async function startTestPlatform(
  overrides: Record<string, string | number | boolean> = {},
  options: Pick<StartPlatformOptions, "logger" | "clusterAccess"> = {},
): Promise<TestPlatform> {
  const dataDirectory = mkdtempSync(join(tmpdir(), "flowplane-platform-"));
  const configuration = loadConfiguration({
    environment: {},
    flags: {
      "service.dataDirectory": dataDirectory,
      "service.platform.port": 0,
      "service.platform.host": "127.0.0.1",
      // Tests make many token requests from one address; the rate-limit tests set their own limits.
      "service.rateLimit.burst": 10_000,
      "service.rateLimit.refillPerSecond": 10_000,
      "service.rateLimit.failureDelayBaseMs": 0,
      ...overrides,
    },
  });
  let adminClient: BootstrapCredentials | null = null;
  const platform = await startPlatform(configuration, {
    logger: pino({ level: "silent" }),
    ...options,
    onBootstrapCredentials: (credentials) => {
      adminClient = credentials;
    },
  });
  const presetId = configuration.bootstrap.clientId;
  const credentials: BootstrapCredentials | null =
    adminClient ??
    (presetId === "" ? null : { clientId: presetId, clientSecret: configuration.bootstrap.clientSecret });
  if (credentials === null) throw new Error("the test platform did not create an administration client");
  return {
    url: platform.url,
    issuerUrl: platform.issuerUrl,
    organizationId: platform.organizationId,
    dataDirectory,
    adminClient: credentials,
    async close() {
      await platform.close();
      rmSync(dataDirectory, { recursive: true, force: true });
    },
  };
}
