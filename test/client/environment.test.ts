import { describe, expect, it } from "vitest";
import {
  clientSettingsFromEnvironment,
  isLoopbackUrl,
  platformUrlFromOauthUrl,
  requireClusterManagementUrl,
} from "../../src/client/environment.js";
import { ClientConfigurationError } from "../../src/client/errors.js";

describe("clientSettingsFromEnvironment", () => {
  it("reads the SERVICE_* client variables and derives the API URLs from the token endpoint", () => {
    const settings = clientSettingsFromEnvironment({
      SERVICE_CONSOLE_CLIENT_ID: "id",
      SERVICE_CONSOLE_CLIENT_SECRET: "secret",
      SERVICE_OAUTH_URL: "https://platform.example/base/oauth/token",
      SERVICE_CONSOLE_OAUTH_AUDIENCE: "modeler-api",
    });
    expect(settings).toEqual({
      oauthUrl: "https://platform.example/base/oauth/token",
      clientId: "id",
      clientSecret: "secret",
      audience: "modeler-api",
      adminUrl: "https://platform.example/base/admin",
      modelerUrl: "https://platform.example/base/modeler",
      // A remote platform gives no reason to send a gateway token to whatever listens on a port of this machine.
      clusterManagementUrl: undefined,
    });
  });

  it("uses the local platform by default and SERVICE_ADMIN_URL when given", () => {
    const settings = clientSettingsFromEnvironment({
      SERVICE_CONSOLE_CLIENT_ID: "id",
      SERVICE_CONSOLE_CLIENT_SECRET: "secret",
      SERVICE_ADMIN_URL: "http://admin.example:9000/admin/",
    });
    expect(settings.oauthUrl).toBe("http://localhost:8088/oauth/token");
    expect(settings.adminUrl).toBe("http://admin.example:9000/admin");
    expect(settings.modelerUrl).toBe("http://localhost:8088/modeler");
    expect(settings.audience).toBeUndefined();
  });

  it("takes the cluster management URL from SERVICE_CLUSTER_MANAGEMENT_URL and refuses one that is not a URL", () => {
    const base = { SERVICE_CONSOLE_CLIENT_ID: "id", SERVICE_CONSOLE_CLIENT_SECRET: "secret" };
    const settings = clientSettingsFromEnvironment({
      ...base,
      SERVICE_CLUSTER_MANAGEMENT_URL: "http://gateway.example:9600/",
    });
    expect(settings.clusterManagementUrl).toBe("http://gateway.example:9600");
    expect(() => clientSettingsFromEnvironment({ ...base, SERVICE_CLUSTER_MANAGEMENT_URL: "gateway:9600" })).toThrow(
      /SERVICE_CLUSTER_MANAGEMENT_URL/,
    );
  });

  it("names every missing or invalid variable", () => {
    let caught: unknown;
    try {
      clientSettingsFromEnvironment({ SERVICE_OAUTH_URL: "not a url" });
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(ClientConfigurationError);
    const problems = (caught as ClientConfigurationError).problems.join("\n");
    expect(problems).toContain("SERVICE_CONSOLE_CLIENT_ID");
    expect(problems).toContain("SERVICE_CONSOLE_CLIENT_SECRET");
    expect(problems).toContain("SERVICE_OAUTH_URL");
  });
});

describe("platformUrlFromOauthUrl", () => {
  it("falls back to the origin when the URL does not end in /oauth/token", () => {
    expect(platformUrlFromOauthUrl("http://127.0.0.1:8088/token?x=1")).toBe("http://127.0.0.1:8088");
  });
});

describe("URLs that carry a secret or a token", () => {
  const credentials = { SERVICE_CONSOLE_CLIENT_ID: "id", SERVICE_CONSOLE_CLIENT_SECRET: "secret" };

  it("warns once per URL sent over plain http to another machine, and never for loopback or https", () => {
    const warnings: string[] = [];
    const warn = (message: string) => warnings.push(message);
    const remote = { ...credentials, SERVICE_OAUTH_URL: "http://platform.example.com/oauth/token" };
    clientSettingsFromEnvironment(remote, { warn });
    clientSettingsFromEnvironment(remote, { warn });
    expect(warnings).toEqual([
      "The token endpoint (SERVICE_OAUTH_URL) http://platform.example.com/oauth/token is plain http to another machine: the client secret would cross the network unencrypted; use https.",
      "The Administration API (SERVICE_ADMIN_URL) http://platform.example.com/admin is plain http to another machine: access tokens would cross the network unencrypted; use https.",
      "The Modeler API (SERVICE_MODELER_URL) http://platform.example.com/modeler is plain http to another machine: access tokens would cross the network unencrypted; use https.",
    ]);

    const quiet: string[] = [];
    clientSettingsFromEnvironment(credentials, { warn: (message) => quiet.push(message) });
    clientSettingsFromEnvironment(
      {
        ...credentials,
        SERVICE_OAUTH_URL: "https://platform.example.com/oauth/token",
        SERVICE_CLUSTER_MANAGEMENT_URL: "http://127.0.0.2:9600",
        SERVICE_ADMIN_URL: "http://[::1]:8088/admin",
      },
      { warn: (message) => quiet.push(message) },
    );
    expect(quiet).toEqual([]);

    const gateway: string[] = [];
    clientSettingsFromEnvironment(
      { ...credentials, SERVICE_CLUSTER_MANAGEMENT_URL: "http://gateway.example:9600" },
      { warn: (message) => gateway.push(message) },
    );
    expect(gateway).toHaveLength(1);
    expect(gateway[0]).toContain("SERVICE_CLUSTER_MANAGEMENT_URL");
  });

  it("defaults the cluster management URL to this machine only when the token endpoint is on it", () => {
    expect(requireClusterManagementUrl(clientSettingsFromEnvironment(credentials))).toBe("http://localhost:9600");
    const remote = clientSettingsFromEnvironment({
      ...credentials,
      SERVICE_OAUTH_URL: "https://platform.example.com/oauth/token",
    });
    expect(remote.clusterManagementUrl).toBeUndefined();
    expect(() => requireClusterManagementUrl(remote)).toThrow(ClientConfigurationError);
    expect(() => requireClusterManagementUrl(remote)).toThrow(/SERVICE_CLUSTER_MANAGEMENT_URL is not set/);
  });

  it("takes localhost, 127.0.0.0/8 and ::1 for loopback, and nothing else", () => {
    for (const url of ["http://localhost:1", "http://a.localhost", "http://127.1.2.3", "http://[::1]:8"]) {
      expect(isLoopbackUrl(url), url).toBe(true);
    }
    for (const url of ["http://localhost.example.com", "http://10.0.0.1", "http://127.0.0.1.nip.io", "http://[::2]"]) {
      expect(isLoopbackUrl(url), url).toBe(false);
    }
  });
});
