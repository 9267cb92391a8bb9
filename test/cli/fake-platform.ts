import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { runCli } from "../../src/cli/main.js";
import { type CliResult, captureIo } from "./support.js";

/** Answers one request to a scripted route. */
export type FakeHandler = (request: IncomingMessage, response: ServerResponse, body: string) => void;

/**
 * A scripted stand-in for the platform's APIs on a loopback port: a token endpoint that grants any client, and the
 * routes a test sets (`"GET /admin/clusters"`), so a test can make the server answer what a real one never would.
 */
export interface FakePlatform {
  url: string;
  routes: Map<string, FakeHandler>;
  /** Answers `method path` with `status` and `body` as JSON. */
  answer(route: string, body: unknown, status?: number): void;
  /** Runs `flowplane <argv>` in-process against this server, home directory `home`. */
  cli(
    argv: readonly string[],
    home: string,
    options?: { terminal?: boolean; signal?: AbortSignal; environment?: Record<string, string> },
  ): Promise<CliResult>;
  close(): Promise<void>;
}

/** Starts a fake platform on 127.0.0.1 and a free port. */
export async function startFakePlatform(): Promise<FakePlatform> {
  const routes = new Map<string, FakeHandler>();
  const server = createServer((request, response) => {
    let body = "";
    request.on("data", (chunk: Buffer) => {
      body += chunk.toString("utf8");
    });
    request.on("end", () => {
      const path = (request.url ?? "").split("?")[0] ?? "";
      const handler = routes.get(`${request.method} ${path}`);
      if (handler !== undefined) return handler(request, response, body);
      response.writeHead(404, { "content-type": "application/problem+json" });
      response.end(
        JSON.stringify({ type: "about:blank", title: "Not Found", status: 404, detail: `no route ${path}` }),
      );
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const answer = (route: string, body: unknown, status = 200) => {
    routes.set(route, (_request, response) => {
      response.writeHead(status, {
        "content-type": status >= 400 ? "application/problem+json" : "application/json",
      });
      response.end(JSON.stringify(body));
    });
  };
  answer("POST /oauth/token", { access_token: "opaque-token", token_type: "Bearer", expires_in: 300 });
  return {
    url,
    routes,
    answer,
    async cli(argv, home, options = {}) {
      const { io, output } = captureIo(
        {
          SERVICE_CONSOLE_CLIENT_ID: "fake",
          SERVICE_CONSOLE_CLIENT_SECRET: "fake-secret",
          SERVICE_OAUTH_URL: `${url}/oauth/token`,
          SERVICE_CONSOLE_TOKEN_CACHE_FILE: "none",
          SERVICE_CLUSTER_MANAGEMENT_URL: url,
          ...options.environment,
        },
        home,
        options.signal,
      );
      io.stdoutIsTerminal = options.terminal === true;
      const exitCode = await runCli(argv, io);
      return { exitCode, ...output };
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
