import { randomBytes } from "node:crypto";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import {
  defaultKeyFile,
  KeyEncryptionKeyError,
  type KeyEncryptionKeySettings,
  resolveKeyEncryptionKey,
} from "../../../src/platform/store/key-encryption-key.js";
import { parseKeyEncryptionKey } from "../../../src/platform/store/secrets-box.js";
import { modeOf } from "../../support/file-modes.js";

describe("resolveKeyEncryptionKey", () => {
  const roots: string[] = [];
  const root = (): string => {
    const directory = mkdtempSync(join(tmpdir(), "flowplane-kek-"));
    roots.push(directory);
    return directory;
  };
  afterEach(() => {
    for (const directory of roots.splice(0)) rmSync(directory, { recursive: true, force: true });
  });

  const unset: KeyEncryptionKeySettings = { key: "", keyFile: "" };
  const resolveWith = (
    dataDirectory: string,
    settings: KeyEncryptionKeySettings = unset,
    databaseHoldsSealedValues = false,
  ) =>
    resolveKeyEncryptionKey({
      settings,
      dataDirectory,
      databaseHoldsSealedValues: async () => databaseHoldsSealedValues,
    });

  /** The message of the `KeyEncryptionKeyError` that `promise` rejects with. */
  async function refusal(promise: Promise<unknown>): Promise<string> {
    const error = await promise.then(
      () => undefined,
      (rejection: unknown) => rejection,
    );
    expect(error).toBeInstanceOf(KeyEncryptionKeyError);
    return (error as Error).message;
  }

  it("generates a key file 0600 in a 0700 directory apart from the database, then keeps using it", async () => {
    const dataDirectory = root();
    const keyFile = defaultKeyFile(dataDirectory);
    expect(keyFile).toBe(join(dataDirectory, "keys", "secrets.key"));
    const first = await resolveWith(dataDirectory);
    expect(first.createdKeyFile).toBe(keyFile);
    expect(first.source).toBe(`the key file ${keyFile}`);
    expect(modeOf(join(dataDirectory, "keys"))).toBe(0o700);
    expect(modeOf(keyFile)).toBe(0o600);
    expect(parseKeyEncryptionKey(readFileSync(keyFile, "utf8"))?.equals(first.key)).toBe(true);

    const second = await resolveWith(dataDirectory);
    expect(second.createdKeyFile).toBeUndefined();
    expect(second.key.equals(first.key)).toBe(true);
  });

  it("uses the configured key and writes no key file", async () => {
    const dataDirectory = root();
    const key = randomBytes(32);
    const resolved = await resolveWith(dataDirectory, { key: key.toString("base64"), keyFile: "" });
    expect(resolved.key.equals(key)).toBe(true);
    expect(resolved.source).toMatch(/SERVICE_SECRETS_KEY/);
    expect(existsSync(join(dataDirectory, "keys"))).toBe(false);
  });

  it("refuses a malformed configured key without repeating it", async () => {
    const almost = randomBytes(31).toString("base64");
    const message = await refusal(resolveWith(root(), { key: almost, keyFile: "" }));
    expect(message).toMatch(/SERVICE_SECRETS_KEY .*base64 of 32 random bytes/);
    expect(message).not.toContain(almost);
  });

  it("refuses a key file that holds no valid key, naming the file", async () => {
    const dataDirectory = root();
    const keyFile = join(dataDirectory, "elsewhere", "kek");
    mkdirSync(join(dataDirectory, "elsewhere"));
    writeFileSync(keyFile, "not a key\n", { mode: 0o600 });
    expect(await refusal(resolveWith(dataDirectory, { key: "", keyFile }))).toContain(keyFile);
  });

  it("generates no key when the database is already encrypted and the key file is missing", async () => {
    const dataDirectory = root();
    const message = await refusal(resolveWith(dataDirectory, unset, true));
    expect(message).toContain(defaultKeyFile(dataDirectory));
    expect(message).toMatch(/Restore the key file/);
    expect(existsSync(defaultKeyFile(dataDirectory))).toBe(false);
  });

  it("creates a configured key file where it is asked, leaving an existing directory's mode alone", async () => {
    const dataDirectory = root();
    const shared = join(dataDirectory, "etc");
    mkdirSync(shared, { mode: 0o755 });
    chmodSync(shared, 0o755);
    const keyFile = join(shared, "flowplane.key");
    const created = await resolveWith(dataDirectory, { key: "", keyFile });
    expect(created.createdKeyFile).toBe(keyFile);
    expect(modeOf(keyFile)).toBe(0o600);
    expect(modeOf(shared)).toBe(0o755);
    expect(existsSync(defaultKeyFile(dataDirectory))).toBe(false);
  });

  it("narrows a key file that is readable by others", async () => {
    const dataDirectory = root();
    const { key } = await resolveWith(dataDirectory);
    chmodSync(defaultKeyFile(dataDirectory), 0o644);
    expect((await resolveWith(dataDirectory)).key.equals(key)).toBe(true);
    expect(modeOf(defaultKeyFile(dataDirectory))).toBe(0o600);
  });
});
