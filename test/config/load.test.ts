import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { ConfigurationError, configurationLeaves, loadConfiguration } from "../../src/config/load.js";

/** Directories made by `yamlFile`, removed once the file's tests are done. */
const temporaryDirectories: string[] = [];

afterAll(() => {
  for (const directory of temporaryDirectories) rmSync(directory, { recursive: true, force: true });
});

function yamlFile(text: string): string {
  const directory = mkdtempSync(join(tmpdir(), "flowplane-config-"));
  temporaryDirectories.push(directory);
  const path = join(directory, "flowplane.yaml");
  writeFileSync(path, text);
  return path;
}

function problemsOf(action: () => unknown): readonly string[] {
  try {
    action();
  } catch (error) {
    if (error instanceof ConfigurationError) return error.problems;
    throw error;
  }
  throw new Error("expected a ConfigurationError");
}

describe("configuration defaults", () => {
  it("fills every documented default when nothing is given", () => {
    const configuration = loadConfiguration({ environment: {} });
    expect(configuration.dataDirectory).toBe("./data");
    expect(configuration.platform.port).toBe(8088);
    expect(configuration.database.url).toBe("");
    expect(configuration.token.lifetimeSeconds).toBe(86400);
    expect(configuration.token.signingAlgorithm).toBe("RS256");
    expect(configuration.rateLimit).toMatchObject({ burst: 5, refillPerSecond: 1, blockSeconds: 60 });
    expect(configuration.audiences).toEqual({ admin: "admin-api", modeler: "modeler-api", gateway: "gateway-api" });
    expect(configuration.bootstrap.clientId).toBe("");
  });

  it("derives environment variable names and YAML keys from the schema", () => {
    const names = configurationLeaves().map((leaf) => [leaf.key, leaf.environmentVariable]);
    expect(names).toContainEqual(["service.dataDirectory", "SERVICE_DATA_DIRECTORY"]);
    expect(names).toContainEqual(["service.platform.port", "SERVICE_PLATFORM_PORT"]);
    expect(names).toContainEqual(["service.database.url", "SERVICE_DATABASE_URL"]);
    expect(names).toContainEqual(["service.token.lifetimeSeconds", "SERVICE_TOKEN_LIFETIME_SECONDS"]);
    expect(names).toContainEqual(["service.token.signingAlgorithm", "SERVICE_TOKEN_SIGNING_ALGORITHM"]);
    expect(names).toContainEqual(["service.bootstrap.clientId", "SERVICE_BOOTSTRAP_CLIENT_ID"]);
    expect(names).toContainEqual(["service.bootstrap.clientSecret", "SERVICE_BOOTSTRAP_CLIENT_SECRET"]);
  });
});

describe("configuration precedence", () => {
  it("reads environment variables, converting their text to the schema's types", () => {
    const configuration = loadConfiguration({
      environment: { SERVICE_PLATFORM_PORT: "9000", SERVICE_PLATFORM_TRUST_PROXY: "true", UNRELATED: "x" },
    });
    expect(configuration.platform.port).toBe(9000);
    expect(configuration.platform.trustProxy).toBe(true);
  });

  it("lets the YAML file override the environment, with nested or dotted keys", () => {
    const file = yamlFile("service:\n  platform:\n    port: 9100\nservice.token.signingAlgorithm: ES256\n");
    const configuration = loadConfiguration({
      environment: { SERVICE_PLATFORM_PORT: "9000", SERVICE_TOKEN_LIFETIME_SECONDS: "600" },
      configFile: file,
    });
    expect(configuration.platform.port).toBe(9100);
    expect(configuration.token.signingAlgorithm).toBe("ES256");
    expect(configuration.token.lifetimeSeconds).toBe(600);
  });

  it("lets command-line flags override the file and the environment", () => {
    const file = yamlFile("service:\n  platform:\n    port: 9100\n");
    const configuration = loadConfiguration({
      environment: { SERVICE_PLATFORM_PORT: "9000" },
      configFile: file,
      flags: { "service.platform.port": "9200" },
    });
    expect(configuration.platform.port).toBe(9200);
  });
});

describe("invalid configuration", () => {
  it("names the key, its source, the value and what is allowed", () => {
    const problems = problemsOf(() => loadConfiguration({ environment: { SERVICE_PLATFORM_PORT: "eighty" } }));
    expect(problems).toEqual([
      'service.platform.port (from environment variable SERVICE_PLATFORM_PORT) is "eighty"; allowed: an integer from 0 to 65535',
    ]);
  });

  it("lists allowed values of an enumeration", () => {
    const problems = problemsOf(() => loadConfiguration({ environment: { SERVICE_TOKEN_SIGNING_ALGORITHM: "HS256" } }));
    expect(problems[0]).toContain("allowed: one of RS256, ES256");
  });

  it("accepts the relaxed spelling of environment variables and JSON for structured settings", () => {
    const configuration = loadConfiguration({
      environment: {
        SERVICE_BROKER_CLUSTER_NODEID: "2",
        SERVICE_BROKER_EXPERIMENTAL_FEATURES_ENABLEPARTITIONSCALING: "true",
        SERVICE_BROKER_EXPERIMENTAL_PARTITIONING_FIXED: '[{"partitionId":1,"nodes":[{"nodeId":0,"priority":1}]}]',
      },
    });
    expect(configuration.broker.cluster.nodeId).toBe(2);
    expect(configuration.broker.experimental.features.enablePartitionScaling).toBe(true);
    expect(configuration.broker.experimental.partitioning.fixed).toEqual([
      { partitionId: 1, nodes: [{ nodeId: 0, priority: 1 }] },
    ]);
  });

  it("names the element of a structured setting that is wrong, and where it came from", () => {
    const problems = problemsOf(() =>
      loadConfiguration({
        environment: { SERVICE_BROKER_EXPERIMENTAL_PARTITIONING_FIXED: '[{"partitionId":0,"nodes":[]}]' },
      }),
    );
    expect(problems).toContain(
      "service.broker.experimental.partitioning.fixed.0.partitionId (from environment variable SERVICE_BROKER_EXPERIMENTAL_PARTITIONING_FIXED) is 0; allowed: must be >= 1",
    );
  });

  it("explains formats such as an email address", () => {
    const problems = problemsOf(() => loadConfiguration({ environment: { SERVICE_BOOTSTRAP_OWNER_EMAIL: "nope" } }));
    expect(problems[0]).toContain("allowed: an email address");
  });

  it("rejects unknown keys in the file and in flags", () => {
    const file = yamlFile("service:\n  platform:\n    prot: 1\n");
    expect(problemsOf(() => loadConfiguration({ environment: {}, configFile: file }))[0]).toContain(
      "service.platform.prot",
    );
    expect(problemsOf(() => loadConfiguration({ environment: {}, flags: { "service.nope": 1 } }))[0]).toContain(
      "service.nope (from a command-line flag) is not a known setting",
    );
  });

  it("reports a YAML syntax error and an unreadable file", () => {
    expect(problemsOf(() => loadConfiguration({ environment: {}, configFile: yamlFile("a: [") }))[0]).toContain(
      "is not valid YAML",
    );
    expect(problemsOf(() => loadConfiguration({ environment: {}, configFile: "/nonexistent/x.yaml" }))[0]).toContain(
      "cannot be read",
    );
  });

  it("requires bootstrap client id and secret together, with a long enough secret", () => {
    expect(problemsOf(() => loadConfiguration({ environment: { SERVICE_BOOTSTRAP_CLIENT_ID: "ci" } }))).toContain(
      "service.bootstrap.clientId and service.bootstrap.clientSecret must be set together or not at all",
    );
    const short = problemsOf(() =>
      loadConfiguration({
        environment: { SERVICE_BOOTSTRAP_CLIENT_ID: "ci", SERVICE_BOOTSTRAP_CLIENT_SECRET: "short" },
      }),
    );
    expect(short).toContain("service.bootstrap.clientSecret is too short; allowed: at least 32 characters");
  });

  it("refuses a bootstrap client id that is the subject of the platform's own tokens", () => {
    const environment = { SERVICE_BOOTSTRAP_CLIENT_SECRET: "s".repeat(32) };
    expect(
      problemsOf(() => loadConfiguration({ environment: { ...environment, SERVICE_BOOTSTRAP_CLIENT_ID: "platform" } })),
    ).toContain('service.bootstrap.clientId is "platform", the subject of the platform\'s own tokens; choose another');
    expect(() =>
      loadConfiguration({ environment: { ...environment, SERVICE_BOOTSTRAP_CLIENT_ID: "platform-admin" } }),
    ).not.toThrow();
  });

  it("requires a different audience for each API", () => {
    expect(
      problemsOf(() =>
        loadConfiguration({
          environment: { SERVICE_AUDIENCES_ADMIN: "flowplane", SERVICE_AUDIENCES_GATEWAY: "flowplane" },
        }),
      ),
    ).toEqual([
      'service.audiences.admin and service.audiences.gateway are both "flowplane"; allowed: a different audience each',
    ]);
    expect(loadConfiguration({ environment: { SERVICE_AUDIENCES_ADMIN: "flowplane-admin" } }).audiences.admin).toBe(
      "flowplane-admin",
    );
  });

  it("takes the platform's trusted proxies as a list, refusing an invalid one or one beside the one-hop switch", () => {
    expect(
      loadConfiguration({ environment: { SERVICE_PLATFORM_TRUSTED_PROXIES: "10.0.0.0/8, 192.0.2.1" } }).platform
        .trustedProxies,
    ).toBe("10.0.0.0/8, 192.0.2.1");
    expect(
      problemsOf(() => loadConfiguration({ environment: { SERVICE_PLATFORM_TRUSTED_PROXIES: "10.0.0.0/8, proxy" } })),
    ).toEqual([
      'service.platform.trustedProxies: "proxy" is not an IPv4 or IPv6 address or CIDR block: the address is not valid',
    ]);
    expect(
      problemsOf(() =>
        loadConfiguration({
          environment: { SERVICE_PLATFORM_TRUSTED_PROXIES: "10.0.0.0/8", SERVICE_PLATFORM_TRUST_PROXY: "true" },
        }),
      ),
    ).toEqual([
      "service.platform.trustProxy and service.platform.trustedProxies exclude each other: list the proxies, or trust one hop",
    ]);
  });

  it("accepts only SQLite or PostgreSQL database URLs", () => {
    expect(problemsOf(() => loadConfiguration({ environment: { SERVICE_DATABASE_URL: "mysql://x" } }))[0]).toContain(
      "allowed: empty (SQLite in the data directory), sqlite:<file> or postgres://",
    );
    expect(loadConfiguration({ environment: { SERVICE_DATABASE_URL: "postgres://u@h/db" } }).database.url).toBe(
      "postgres://u@h/db",
    );
  });

  it("accepts SERVICE_SECRETS_KEY only as base64 of 32 bytes, and never repeats a wrong one", () => {
    const key = randomBytes(32);
    const secrets = loadConfiguration({
      environment: { SERVICE_SECRETS_KEY: key.toString("base64"), SERVICE_SECRETS_KEY_FILE: "/etc/flowplane/key" },
    }).secrets;
    expect(secrets).toEqual({ key: key.toString("base64"), keyFile: "/etc/flowplane/key" });
    expect(loadConfiguration({ environment: { SERVICE_SECRETS_KEY: key.toString("base64url") } }).secrets.key).toBe(
      key.toString("base64url"),
    );
    for (const wrong of [randomBytes(16).toString("base64"), key.toString("hex"), "hunter2-hunter2"]) {
      const problems = problemsOf(() => loadConfiguration({ environment: { SERVICE_SECRETS_KEY: wrong } }));
      expect(problems).toHaveLength(1);
      expect(problems[0]).toMatch(/^service\.secrets\.key is not a valid key .*base64 of 32 random bytes/);
      expect(problems[0]).not.toContain(wrong);
    }
  });
});
