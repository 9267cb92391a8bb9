import swagger from "@fastify/swagger";
import pino from "pino";
import { describe, expect, it } from "vitest";
import { OAuthError } from "../../../src/http/errors.js";
import { createHttpServer } from "../../../src/http/server.js";
import { issuerRoutes } from "../../../src/platform/issuer/routes.js";
import { createIssuerServices } from "../../../src/platform/issuer/services.js";
import { parseTokenRequest } from "../../../src/platform/issuer/token-service.js";
import { defaultHttpServerLimits } from "../../support/http.js";
import { openTestStore, testConfiguration } from "./support.js";

const basicOf = (text: string) => `Basic ${Buffer.from(text).toString("base64")}`;
const fields = { grant_type: "client_credentials", audience: "admin-api" };

function refusal(body: unknown, authorization?: string): OAuthError {
  try {
    parseTokenRequest(body, authorization);
  } catch (error) {
    expect(error).toBeInstanceOf(OAuthError);
    return error as OAuthError;
  }
  throw new Error("the request was accepted");
}

describe("parseTokenRequest", () => {
  it("decodes Basic credentials as form-urlencoded halves split at the first colon", () => {
    const parsed = parseTokenRequest(fields, basicOf("my+client:p%3Ass:word"));
    expect(parsed).toEqual({
      grantType: "client_credentials",
      audience: "admin-api",
      scope: undefined,
      clientId: "my client",
      clientSecret: "p:ss:word",
      usedBasic: true,
    });
  });

  it("refuses malformed Basic credentials and other schemes", () => {
    expect(refusal(fields, basicOf("no-colon")).error).toBe("invalid_request");
    expect(refusal(fields, basicOf("id:%E0%A4%A")).error).toBe("invalid_request");
    expect(refusal(fields, "Basic !!!").error).toBe("invalid_request");
    expect(refusal(fields, "Digest username=x").error).toBe("invalid_request");
  });

  it("takes a body that names the Basic client beside its credentials, and refuses any other mix of the two", () => {
    const parsed = parseTokenRequest({ ...fields, client_id: "worker" }, basicOf("worker:s3cret"));
    expect(parsed).toMatchObject({ clientId: "worker", clientSecret: "s3cret", usedBasic: true });
    expect(refusal({ ...fields, client_id: "another" }, basicOf("worker:s3cret")).message).toMatch(
      /exactly one method/,
    );
    expect(refusal({ ...fields, client_secret: "s3cret" }, basicOf("worker:s3cret")).message).toMatch(/exactly one/);
    expect(refusal({ ...fields, client_id: "worker", client_secret: "x" }, basicOf("worker:s3cret")).error).toBe(
      "invalid_request",
    );
  });

  it("ignores unknown fields and treats a blank scope as absent", () => {
    const parsed = parseTokenRequest(
      { ...fields, client_id: "a", client_secret: "b", scope: "  ", extra: "x" },
      undefined,
    );
    expect(parsed.scope).toBeUndefined();
    expect(parsed.usedBasic).toBe(false);
  });

  it("refuses a missing body, a non-object body and empty required fields", () => {
    expect(refusal(undefined).message).toMatch(/grant_type, audience, client_id, client_secret/);
    expect(refusal("grant_type=client_credentials").error).toBe("invalid_request");
    expect(refusal({ ...fields, client_id: "", client_secret: "b" }).message).toMatch(/client_id/);
  });
});

describe("issuer routes in the OpenAPI document", () => {
  it("describe the token endpoint with both body media types under the 'Token issuer' tag", async () => {
    const opened = await openTestStore("sqlite");
    try {
      const services = await createIssuerServices({ store: opened.store, configuration: testConfiguration() });
      const server = createHttpServer({
        logger: pino({ level: "silent" }),
        bodyLimitBytes: 65_536,
        trustProxy: false,
        limits: defaultHttpServerLimits,
      });
      await server.register(swagger, { openapi: { openapi: "3.1.0", info: { title: "test", version: "1" } } });
      await server.register(issuerRoutes, services);
      await server.ready();
      const document = server.swagger() as {
        paths: Record<string, Record<string, { tags?: string[]; requestBody?: { content: Record<string, unknown> } }>>;
      };
      const token = document.paths["/oauth/token"]?.post;
      expect(token?.tags).toEqual(["Token issuer"]);
      expect(Object.keys(token?.requestBody?.content ?? {}).sort()).toEqual([
        "application/json",
        "application/x-www-form-urlencoded",
      ]);
      for (const path of ["/.well-known/jwks.json", "/.well-known/openid-configuration"]) {
        expect(document.paths[path]?.get?.tags).toEqual(["Token issuer"]);
      }
      await server.close();
    } finally {
      await opened.close();
    }
  });
});
