import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pino from "pino";
import { Pool } from "undici";
import { loadConfiguration } from "../../../src/config/load.js";
import { createHttpServer } from "../../../src/http/server.js";
import { issuerRoutes } from "../../../src/platform/issuer/routes.js";
import { createIssuerServices, createPlatformVerifier } from "../../../src/platform/issuer/services.js";
import { openStore } from "../../../src/platform/store/database.js";

const algorithm = (process.argv[2] ?? "RS256") as "RS256" | "ES256";
const dataDirectory = mkdtempSync(join(tmpdir(), "perf-"));
const store = await openStore({ url: "", dataDirectory });
await store.database.insertInto("organizations").values({ id: "o", name: "o", created_at: "x" }).execute();
const configuration = loadConfiguration({ environment: {}, flags: { "service.rateLimit.burst": 1000000, "service.rateLimit.refillPerSecond": 1000000, "service.token.signingAlgorithm": algorithm } });
const services = await createIssuerServices({ store, configuration });
const { client, secret } = await services.clients.create({ organizationId: "o", name: "c", scopes: ["members"] });
const server = createHttpServer({ logger: pino({ level: "silent" }), bodyLimitBytes: 1 << 20, trustProxy: false });
await server.register(issuerRoutes, services);
await server.listen({ port: 0, host: "127.0.0.1" });
const port = (server.server.address() as { port: number }).port;
const body = new URLSearchParams({ grant_type: "client_credentials", audience: "admin-api", client_id: client.clientId, client_secret: secret }).toString();
for (const connections of [1, 16, 64]) {
  const pool = new Pool(`http://127.0.0.1:${port}`, { connections });
  const total = 3000;
  let sent = 0;
  const started = performance.now();
  await Promise.all(Array.from({ length: connections }, async () => {
    while (sent < total) {
      sent++;
      const response = await pool.request({ method: "POST", path: "/oauth/token", body, headers: { "content-type": "application/x-www-form-urlencoded" } });
      if (response.statusCode !== 200) throw new Error(String(response.statusCode) + await response.body.text());
      await response.body.text();
    }
  }));
  const seconds = (performance.now() - started) / 1000;
  console.log(`${algorithm} connections=${connections} tokens/s=${Math.round(total / seconds)}`);
  await pool.close();
}
const verifier = createPlatformVerifier(services, "admin-api");
await server.close();
await store.close();
void verifier;
