import { chmodSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import {
  CLUSTER_SECRET_MIN_BYTES,
  clusterSecretFromConfiguration,
  clusterSecretProblem,
  generateClusterSecret,
} from "../../src/config/cluster-secret.js";
import { ConfigurationError, loadConfiguration } from "../../src/config/load.js";
import { TEST_CLUSTER_SECRET } from "../support/cluster-secret.js";

const directory = mkdtempSync(join(tmpdir(), "flowplane-cluster-secret-"));

afterAll(() => rmSync(directory, { recursive: true, force: true }));

function problemsOf(action: () => unknown): readonly string[] {
  try {
    action();
  } catch (error) {
    if (error instanceof ConfigurationError) return error.problems;
    throw error;
  }
  throw new Error("expected a ConfigurationError");
}

describe("the cluster secret's format", () => {
  it("accepts base64 of at least 32 random bytes in either alphabet, with or without padding", () => {
    const secret = generateClusterSecret();
    expect(Buffer.from(secret, "base64")).toHaveLength(CLUSTER_SECRET_MIN_BYTES);
    expect(clusterSecretProblem(secret)).toBeUndefined();
    expect(clusterSecretProblem(`  ${secret}\n`)).toBeUndefined();
    expect(clusterSecretProblem(Buffer.from(secret, "base64").toString("base64url"))).toBeUndefined();
  });

  it("says what is wrong without repeating the value", () => {
    const cases: [string, RegExp][] = [
      ["correct horse battery staple", /not base64/],
      [Buffer.alloc(31, 1).toString("base64"), /encodes 31 bytes, fewer than 32/],
      [Buffer.alloc(64, 0x41).toString("base64"), /repeat too much/],
      [Buffer.from("abcd".repeat(16)).toString("base64"), /repeat too much/],
      ["A".repeat(5_000), /longer than/],
    ];
    for (const [text, problem] of cases) {
      const described = clusterSecretProblem(text);
      expect(described).toMatch(problem);
      expect(described).not.toContain(text.trim().slice(0, 12));
    }
  });
});

describe("service.cluster settings", () => {
  it("refuse an invalid secret, a secret given twice and a malformed id, never echoing the secret", () => {
    const weak = Buffer.alloc(16, 7).toString("base64");
    const problems = problemsOf(() =>
      loadConfiguration({
        environment: {
          SERVICE_CLUSTER_SECRET: weak,
          SERVICE_CLUSTER_SECRET_FILE: "/etc/secret",
          SERVICE_CLUSTER_ID: "a b",
        },
      }),
    );
    expect(problems).toContain(
      "service.cluster.secret and service.cluster.secretFile are both set; allowed: one of them",
    );
    expect(problems.join("\n")).toMatch(/service\.cluster\.secret is not valid: it encodes 16 bytes/);
    expect(problems.join("\n")).toMatch(/service\.cluster\.id is "a b"; allowed: 1-64 of/);
    expect(problems.join("\n")).not.toContain(weak);
    expect(loadConfiguration({ environment: { SERVICE_CLUSTER_SECRET: TEST_CLUSTER_SECRET } }).cluster.secret).toBe(
      TEST_CLUSTER_SECRET,
    );
  });

  it("are required by brokers and gateways, with advice on how to set one", () => {
    const configuration = loadConfiguration({ environment: {} });
    const [problem] = problemsOf(() => clusterSecretFromConfiguration(configuration));
    expect(problem).toMatch(/service\.cluster\.secret is not set/);
    expect(problem).toContain("openssl rand -base64 32");
    expect(problem).toContain("SERVICE_CLUSTER_SECRET_FILE");
  });

  it("read the secret from its setting or its file, with the configured id", () => {
    const fromSetting = clusterSecretFromConfiguration(
      loadConfiguration({ environment: { SERVICE_CLUSTER_SECRET: TEST_CLUSTER_SECRET, SERVICE_CLUSTER_ID: "prod" } }),
    );
    expect(fromSetting.secret.equals(Buffer.from(TEST_CLUSTER_SECRET, "base64"))).toBe(true);
    expect(fromSetting.clusterId).toBe("prod");

    const file = join(directory, "cluster.secret");
    writeFileSync(file, `${TEST_CLUSTER_SECRET}\n`, { mode: 0o600 });
    const fromFile = clusterSecretFromConfiguration(
      loadConfiguration({ environment: { SERVICE_CLUSTER_SECRETFILE: file } }),
    );
    expect(fromFile.secret.equals(fromSetting.secret)).toBe(true);
    expect(fromFile.clusterId).toBeUndefined();
  });

  it("name the file when it cannot be read or holds no valid secret", () => {
    const missing = join(directory, "missing.secret");
    expect(
      problemsOf(() =>
        clusterSecretFromConfiguration(loadConfiguration({ environment: { SERVICE_CLUSTER_SECRET_FILE: missing } })),
      )[0],
    ).toContain(`${JSON.stringify(missing)}, which cannot be read: ENOENT`);
    const invalid = join(directory, "invalid.secret");
    writeFileSync(invalid, "changeme\n");
    chmodSync(invalid, 0o600);
    const [problem] = problemsOf(() =>
      clusterSecretFromConfiguration(loadConfiguration({ environment: { SERVICE_CLUSTER_SECRET_FILE: invalid } })),
    );
    expect(problem).toContain(`the cluster secret in ${JSON.stringify(invalid)} (service.cluster.secretFile)`);
    expect(problem).not.toContain("changeme");
  });
});
