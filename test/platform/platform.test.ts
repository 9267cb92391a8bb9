import { randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pino } from "pino";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { loadConfiguration } from "../../src/config/load.js";
import { type RunningPlatform, reservePort, startPlatform } from "../../src/platform/platform.js";
import { KeyEncryptionKeyError } from "../../src/platform/store/key-encryption-key.js";
import { entriesOpenToOthers } from "../support/file-modes.js";
import { probeConnectionLimits } from "../support/http.js";
import { startTestPlatform, type TestPlatform } from "../support/platform.js";

describe("platform files and keys at rest", () => {
  const roots: string[] = [];
  const running: RunningPlatform[] = [];
  afterEach(async () => {
    for (const platform of running.splice(0)) await platform.close();
    for (const directory of roots.splice(0)) rmSync(directory, { recursive: true, force: true });
  });

  /** Starts a platform on 127.0.0.1 and a free port over `dataDirectory`, `environment` its SERVICE_* variables. */
  async function start(dataDirectory: string, environment: Record<string, string> = {}): Promise<RunningPlatform> {
    const configuration = loadConfiguration({
      environment,
      flags: {
        "service.dataDirectory": dataDirectory,
        "service.platform.port": 0,
        "service.platform.host": "127.0.0.1",
      },
    });
    const platform = await startPlatform(configuration, { logger: pino({ level: "silent" }) });
    running.push(platform);
    return platform;
  }

  async function stop(platform: RunningPlatform): Promise<void> {
    running.splice(running.indexOf(platform), 1);
    await platform.close();
  }

  async function keyIds(platform: RunningPlatform): Promise<string[]> {
    const response = await fetch(`${platform.url}/.well-known/jwks.json`);
    return ((await response.json()) as { keys: { kid: string }[] }).keys.map((key) => key.kid);
  }

  it("creates its data directory, database and key file for the owner only", async () => {
    const root = mkdtempSync(join(tmpdir(), "flowplane-platform-files-"));
    roots.push(root);
    const dataDirectory = join(root, "data");
    const platform = await start(dataDirectory);
    expect(await keyIds(platform)).toHaveLength(1);
    await stop(platform);
    expect(existsSync(join(dataDirectory, "platform.sqlite"))).toBe(true);
    expect(existsSync(join(dataDirectory, "keys", "secrets.key"))).toBe(true);
    expect(entriesOpenToOthers(dataDirectory)).toEqual({});
  });

  it("refuses to start with the wrong SERVICE_SECRETS_KEY and keeps its signing key for the right one", async () => {
    const dataDirectory = mkdtempSync(join(tmpdir(), "flowplane-platform-keys-"));
    roots.push(dataDirectory);
    const rightKey = randomBytes(32).toString("base64");
    const first = await start(dataDirectory, { SERVICE_SECRETS_KEY: rightKey });
    const published = await keyIds(first);
    await stop(first);

    const refusal = await start(dataDirectory, { SERVICE_SECRETS_KEY: randomBytes(32).toString("base64") }).then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(refusal).toBeInstanceOf(KeyEncryptionKeyError);
    expect((refusal as Error).message).toMatch(/does not replace keys it cannot read/);

    const again = await start(dataDirectory, { SERVICE_SECRETS_KEY: rightKey });
    expect(await keyIds(again)).toEqual(published);
  });
});

describe("reservePort", () => {
  /** Whether another server can listen on `port` of 127.0.0.1 now. */
  async function canListen(port: number): Promise<boolean> {
    const server = createServer();
    return await new Promise((resolve) => {
      server.once("error", () => resolve(false));
      server.listen({ host: "127.0.0.1", port }, () => server.close(() => resolve(true)));
    });
  }

  it("holds the port it found free until released, so that no other process takes it before the platform listens", async () => {
    const reserved = await reservePort("127.0.0.1");
    try {
      expect(reserved.port).toBeGreaterThan(0);
      expect(await canListen(reserved.port)).toBe(false);
    } finally {
      await reserved.release();
    }
    await reserved.release();
    expect(await canListen(reserved.port)).toBe(true);
  });
});

describe("the platform's HTTP server", () => {
  let platform: TestPlatform;

  beforeAll(async () => {
    platform = await startTestPlatform({
      "service.http.maxConnectionsPerAddress": 3,
      "service.http.requestReceiveTimeoutMs": 2_000,
    });
  });
  afterAll(async () => await platform?.close());

  it("applies the connection limits and the request deadline of service.http", async () => {
    const probe = await probeConnectionLimits(platform.url, {
      count: 10,
      otherClientPath: "/.well-known/jwks.json",
      timeoutMs: 20_000,
    });
    expect(probe.otherClientStatus).toBe(200);
    expect(probe.unanswered).toBe(7);
    expect(probe.answered).toHaveLength(3);
    for (const answer of probe.answered) expect(answer).toMatch(/^HTTP\/1\.1 408 [\s\S]*request-timeout/);
  }, 30_000);
});
