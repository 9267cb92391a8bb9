/**
 * The platform a cluster benchmark needs beside the local cluster: the token issuer whose keys the gateway verifies,
 * started as a child process, and a gateway token (audience `gateway-api`, which carries the `cluster` scope the
 * management API asks for).
 */
import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { freePort } from "../../src/platform/provisioner/index.js";
import type { BenchmarkChildren } from "./children.js";

const repositoryRoot = fileURLToPath(new URL("../../", import.meta.url));

/** A running platform. */
export interface BenchmarkPlatform {
  /** Its base URL, the gateway's issuer URL. */
  readonly url: string;
  /** A gateway token (audience `gateway-api`). */
  readonly token: string;
  readonly child: ChildProcess;
}

/** Stops a child: SIGTERM, then SIGKILL after 5 s. */
export async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  child.kill("SIGTERM");
  const timer = setTimeout(() => child.kill("SIGKILL"), 5_000);
  await exited;
  clearTimeout(timer);
}

/** Polls `probeOnce` every 200 ms until it says ready; throws after `timeoutMs`. */
export async function waitUntil(name: string, timeoutMs: number, probeOnce: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    try {
      if (await probeOnce()) return;
    } catch {
      // Not up yet.
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  throw new Error(`${name} was not ready within ${timeoutMs} ms`);
}

/**
 * Starts the platform as a child of this process (tracked by `children`) with its data under `dataDirectory`, and
 * returns its URL and a gateway token.
 */
export async function startPlatform(
  children: BenchmarkChildren,
  dataDirectory: string,
  startTimeoutMs: number,
): Promise<BenchmarkPlatform> {
  const port = await freePort("127.0.0.1");
  const url = `http://127.0.0.1:${port}`;
  const clientId = "bench-cluster-client";
  const clientSecret = randomBytes(32).toString("base64url");
  const child = children.track(
    spawn(
      process.execPath,
      [
        "--import",
        "tsx",
        "src/cli/main.ts",
        "platform",
        "--port",
        String(port),
        "--data-directory",
        join(dataDirectory, "platform"),
        "--set",
        `service.platform.publicUrl=${url}`,
        "--set",
        "service.log.level=warn",
        "--set",
        `service.bootstrap.clientId=${clientId}`,
        "--set",
        `service.bootstrap.clientSecret=${clientSecret}`,
      ],
      { cwd: repositoryRoot, stdio: ["ignore", "ignore", "inherit"] },
    ),
  );
  await waitUntil("the platform", startTimeoutMs, async () => (await fetch(`${url}/health`)).status === 200);
  const response = await fetch(`${url}/oauth/token`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({
      grant_type: "client_credentials",
      audience: "gateway-api",
      client_id: clientId,
      client_secret: clientSecret,
    }),
  });
  const body = (await response.json()) as { access_token?: string };
  if (body.access_token === undefined) throw new Error(`the platform refused a gateway token: ${response.status}`);
  return { url, token: body.access_token, child };
}
