import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { loadConfiguration } from "../../src/config/load.js";
import { DataDirectoryInUseError } from "../../src/files/directory-claim.js";
import { startPlatform } from "../../src/platform/platform.js";
import { rotateKeyEncryptionKey } from "../../src/platform/store/key-rotation.js";
import { startTestPlatform } from "../support/platform.js";
import { requestToken } from "../support/tokens.js";

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

describe("the platform's data directory", () => {
  it("is held by one process: a second platform and a key rotation are refused before they touch anything", async () => {
    const dataDirectory = mkdtempSync(join(tmpdir(), "flowplane-claim-"));
    cleanups.push(async () => rmSync(dataDirectory, { recursive: true, force: true }));
    const platform = await startTestPlatform({}, { dataDirectory });
    cleanups.push(() => platform.close());
    const configuration = loadConfiguration({
      environment: {},
      flags: { "service.dataDirectory": platform.dataDirectory, "service.platform.port": 0 },
    });

    const second = startPlatform(configuration);
    await expect(second).rejects.toBeInstanceOf(DataDirectoryInUseError);
    await expect(second).rejects.toThrow(`in use by a platform with process id ${process.pid}`);
    const rotation = rotateKeyEncryptionKey({ url: "", dataDirectory: platform.dataDirectory });
    await expect(rotation).rejects.toBeInstanceOf(DataDirectoryInUseError);
    // The running platform was not disturbed.
    expect(await requestToken(platform, platform.adminClient, "admin-api")).toEqual(expect.any(String));

    await platform.close();
    cleanups.pop();
    // Released when the platform stops: the rotation runs now.
    const rotated = await rotateKeyEncryptionKey({ url: "", dataDirectory: platform.dataDirectory });
    expect(rotated.keyId).not.toBe(rotated.previousKeyId);
    // It re-sealed the key material the platform created (signing keys, the secret-hash key), not an empty database.
    expect(rotated.resealedValues).toBeGreaterThan(1);
  });
});
