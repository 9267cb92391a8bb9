import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pino } from "pino";
import { loadConfiguration } from "../../src/config/load.js";
import {
  type BootstrapCredentials,
  type RunningPlatform,
  type StartPlatformOptions,
  startPlatform,
} from "../../src/platform/platform.js";
import { childCommand } from "./child-command.js";

/** A real platform started for a test, with its administration client. */
export interface TestPlatform {
  url: string;
  issuerUrl: string;
  organizationId: string;
  dataDirectory: string;
  adminClient: BootstrapCredentials;
  /** The platform itself (its clusters service and provisioner). */
  running: RunningPlatform;
  close(): Promise<void>;
}

/** Options of `startTestPlatform` beyond configuration settings. */
export interface TestPlatformOptions extends Pick<StartPlatformOptions, "logger" | "clusterAccess" | "localClusters"> {
  /** Use this data directory (a restart of an earlier test platform) and leave it in place on close. */
  dataDirectory?: string;
  /** The administration client of an earlier start on the same data directory. */
  adminClient?: BootstrapCredentials;
}

/**
 * Starts a real platform on 127.0.0.1 and a free port with a fresh data directory (SQLite unless `overrides` says
 * otherwise). `overrides` are flag-style keys such as `service.rateLimit.burst`; `options` may replace the silent
 * logger, inject the platform's collaborators (such as `clusterAccess`), run clusters (from the run's child command
 * unless they name another), or restart on a kept data directory.
 */
export async function startTestPlatform(
  overrides: Record<string, string | number | boolean> = {},
  options: TestPlatformOptions = {},
): Promise<TestPlatform> {
  const dataDirectory = options.dataDirectory ?? mkdtempSync(join(tmpdir(), "flowplane-platform-"));
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
    logger: options.logger ?? pino({ level: "silent" }),
    onBootstrapCredentials: (credentials) => {
      adminClient = credentials;
    },
    ...(options.clusterAccess === undefined ? {} : { clusterAccess: options.clusterAccess }),
    ...(options.localClusters === undefined
      ? {}
      : { localClusters: { command: childCommand(), ...options.localClusters } }),
  });
  const presetId = configuration.bootstrap.clientId;
  const credentials: BootstrapCredentials | null =
    adminClient ??
    options.adminClient ??
    (presetId === "" ? null : { clientId: presetId, clientSecret: configuration.bootstrap.clientSecret });
  if (credentials === null) throw new Error("the test platform did not create an administration client");
  return {
    url: platform.url,
    issuerUrl: platform.issuerUrl,
    organizationId: platform.organizationId,
    dataDirectory,
    adminClient: credentials,
    running: platform,
    async close() {
      await platform.close();
      if (options.dataDirectory === undefined) rmSync(dataDirectory, { recursive: true, force: true });
    },
  };
}
