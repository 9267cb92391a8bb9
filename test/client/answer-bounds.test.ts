import { describe, expect, it } from "vitest";
import { ApiTransport, defaultMaxApiResponseBytes } from "../../src/client/api.js";
import { ApiError, ClientConnectionError, OAuthClientError } from "../../src/client/errors.js";
import { sendWithRetry } from "../../src/client/http.js";
import { TokenProvider } from "../../src/client/token-provider.js";
import { scriptedServer, sendJson, unsignedJwt } from "./support.js";

/** A token endpoint at /oauth/token and an API answering with `answer` everywhere else. */
async function platformAnswering(answer: Parameters<typeof scriptedServer>[0][number]) {
  const server = await scriptedServer([
    (request, response) => {
      if (request.url === "/oauth/token") {
        sendJson(response, 200, { access_token: unsignedJwt(Math.floor(Date.now() / 1000), 3600), expires_in: 3600 });
        return;
      }
      answer(request, response);
    },
  ]);
  const tokenProvider = new TokenProvider({
    credentials: { oauthUrl: `${server.url}/oauth/token`, clientId: "client", clientSecret: "secret" },
  });
  const transport = new ApiTransport({ baseUrl: `${server.url}/admin`, tokenProvider }, "admin-api");
  return { server, transport };
}

describe("what the client reads of an answer", () => {
  it("an API answer larger than the default bound fails the call without a bound set by the caller", async () => {
    const chunk = Buffer.alloc(1024 * 1024, 0x20);
    const { server, transport } = await platformAnswering((_request, response) => {
      response.writeHead(200, { "content-type": "application/json" });
      let sent = 0;
      const pump = (): void => {
        while (sent * chunk.byteLength <= defaultMaxApiResponseBytes) {
          sent++;
          if (!response.write(chunk)) {
            response.once("drain", pump);
            return;
          }
        }
        response.end("[]");
      };
      pump();
    });
    const error = await transport.send("GET", "/clusters").catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(ClientConnectionError);
    expect((error as Error).message).toContain(`larger than ${defaultMaxApiResponseBytes} bytes`);
    await server.close();
  });

  it("a token endpoint's answer larger than 64 KiB fails the token request", async () => {
    const server = await scriptedServer([
      (_request, response) =>
        sendJson(response, 200, { access_token: "t", expires_in: 60, padding: "x".repeat(100 * 1024) }),
    ]);
    const provider = new TokenProvider({
      credentials: { oauthUrl: `${server.url}/oauth/token`, clientId: "c", clientSecret: "s" },
      defaultAudience: "admin-api",
    });
    const error = await provider.getToken().catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(ClientConnectionError);
    expect((error as Error).message).toContain(`larger than ${64 * 1024} bytes`);
    await server.close();
  });

  it("a server trickling its answer inside the idle timeout is cut off at the request's deadline", async () => {
    const timers: NodeJS.Timeout[] = [];
    const server = await scriptedServer([
      (_request, response) => {
        response.writeHead(200, { "content-type": "application/json" });
        timers.push(setInterval(() => response.write(" "), 20));
      },
    ]);
    const error = await sendWithRetry(
      { method: "GET", url: `${server.url}/slow` },
      { timeoutMs: 10_000, deadlineMs: 300 },
    ).catch((caught: unknown) => caught);
    for (const timer of timers) clearInterval(timer);
    expect(error).toBeInstanceOf(ClientConnectionError);
    expect((error as Error).message).toContain("did not complete its answer within 300 ms");
    await server.close();
  });

  it("cuts a problem's detail and an OAuth error_description to about 1,000 characters", async () => {
    const { server, transport } = await platformAnswering((_request, response) =>
      sendJson(response, 409, { type: "about:blank", title: "t", status: 409, detail: "d".repeat(50_000) }),
    );
    const error = await transport.send("POST", "/clusters", {}).catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(ApiError);
    expect((error as Error).message.length).toBeLessThan(1_100);
    expect((error as Error).message).toContain("(49000 more characters)");
    await server.close();

    const tokenServer = await scriptedServer([
      (_request, response) =>
        sendJson(response, 400, { error: "invalid_request", error_description: "e".repeat(20_000) }),
    ]);
    const provider = new TokenProvider({
      credentials: { oauthUrl: `${tokenServer.url}/oauth/token`, clientId: "c", clientSecret: "s" },
      defaultAudience: "admin-api",
    });
    const refused = await provider.getToken().catch((caught: unknown) => caught);
    expect(refused).toBeInstanceOf(OAuthClientError);
    expect((refused as Error).message.length).toBeLessThan(1_100);
    await tokenServer.close();
  });
});
