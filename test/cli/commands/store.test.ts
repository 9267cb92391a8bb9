import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { exitCodes } from "../../../src/cli/io.js";
import { runCli } from "../../../src/cli/main.js";
import { openStore } from "../../../src/platform/store/database.js";
import { defaultKeyFile } from "../../../src/platform/store/key-encryption-key.js";
import { generateKeyEncryptionKey } from "../../../src/platform/store/secrets-box.js";
import { type CliResult, captureIo } from "../support.js";

const directories: string[] = [];

afterEach(async () => {
  for (const directory of directories.splice(0)) await rm(directory, { recursive: true, force: true });
});

async function cli(argv: readonly string[], environment: Record<string, string> = {}): Promise<CliResult> {
  const { io, output } = captureIo(environment, tmpdir());
  const exitCode = await runCli(argv, io);
  return { exitCode, ...output };
}

/** A data directory whose database has been opened once (with `key`, or generating its key file). */
async function preparedDataDirectory(key = ""): Promise<string> {
  const dataDirectory = await mkdtemp(join(tmpdir(), "flowplane-rotate-"));
  directories.push(dataDirectory);
  const store = await openStore({ url: "", dataDirectory, secrets: { key, keyFile: "" } });
  await store.close();
  return dataDirectory;
}

describe("flowplane store rotate-key", () => {
  it("writes a new key file and says where it is", async () => {
    const dataDirectory = await preparedDataDirectory();
    const keyFile = defaultKeyFile(dataDirectory);
    const before = await readFile(keyFile, "utf8");
    const result = await cli(["store", "rotate-key", "--data-directory", dataDirectory]);
    expect(result.stderr).toBe("");
    expect(result.exitCode).toBe(exitCodes.ok);
    expect(result.stdout).toMatch(/^Re-encrypted 1 value .* under the key-encryption key \S+ \(was \S+\)\.\n/);
    expect(result.stdout).toContain(`The new key is in ${keyFile}`);
    const after = await readFile(keyFile, "utf8");
    expect(after).not.toBe(before);
    expect(result.stdout).not.toContain(after.trim());
  });

  it("takes the new key from SERVICE_SECRETS_NEW_KEY when the key is SERVICE_SECRETS_KEY, and never prints it", async () => {
    const oldKey = generateKeyEncryptionKey();
    const dataDirectory = await preparedDataDirectory(oldKey);
    const missing = await cli(["store", "rotate-key", "--data-directory", dataDirectory], {
      SERVICE_SECRETS_KEY: oldKey,
    });
    expect(missing.exitCode).toBe(exitCodes.failure);
    expect(missing.stderr).toContain("SERVICE_SECRETS_NEW_KEY");

    const newKey = generateKeyEncryptionKey();
    const rotated = await cli(["store", "rotate-key", "--data-directory", dataDirectory], {
      SERVICE_SECRETS_KEY: oldKey,
      SERVICE_SECRETS_NEW_KEY: newKey,
    });
    expect(rotated.exitCode).toBe(exitCodes.ok);
    expect(rotated.stdout).toContain("Set SERVICE_SECRETS_KEY to the value of SERVICE_SECRETS_NEW_KEY");
    expect(`${rotated.stdout}${rotated.stderr}`).not.toContain(newKey);
    expect(`${rotated.stdout}${rotated.stderr}`).not.toContain(oldKey);
    const store = await openStore({ url: "", dataDirectory, secrets: { key: newKey, keyFile: "" } });
    await store.close();
  });
});
