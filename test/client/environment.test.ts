import { describe, expect, it } from "vitest";
import { clientSettingsFromEnvironment, platformUrlFromOauthUrl } from "../../src/client/environment.js";
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
      clusterManagementUrl: "http://localhost:9600",
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
