/**
 * Benchmark `token`: token issuance and authenticated reads of the flowplane platform, side by side with
 * oidc-provider configured for the same grant, client authentication and key type. Both servers run as child
 * processes on 127.0.0.1 (each with its own event loop, as in production); the load generator runs here.
 * Prints a table, then the ratios against the targets.
 */

import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { cpus, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { decodeJwt, decodeProtectedHeader } from "jose";
import { BenchmarkChildren } from "../support/children.js";
import { type LoadResult, type LoadTarget, measure, probe } from "../support/load.js";
import { formatNumber, printTable } from "../support/report.js";

type Algorithm = "RS256" | "ES256";

const repositoryRoot = fileURLToPath(new URL("../../", import.meta.url));
const connectionCounts = [1, 16, 64] as const;
const readConnectionCounts = [16, 64] as const;
const warmupMs = 1_000;
const durationMs = 5_000;
const startTimeoutMs = 30_000;
/** The whole run stops itself after this, whatever happens. */
const runDeadlineMs = 170_000;
const peerResource = "urn:admin-api";
const tokenTargets: Record<Algorithm, number> = { RS256: 2, ES256: 4 };
const readsPerSecondTarget = 5_000;

/** The run's child processes and its stop-by-itself guard; set at the start of `run()`. */
let children: BenchmarkChildren;

/** Spawns a server child and resolves with the URL it announces on standard output. */
async function spawnServer(
  name: string,
  arguments_: string[],
  announcement: (line: string) => string | undefined,
): Promise<{ url: string; child: ChildProcess }> {
  const child = spawn(process.execPath, ["--import", "tsx", ...arguments_], {
    cwd: repositoryRoot,
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, NODE_ENV: "production" },
  });
  children.track(child);
  const errorLines: string[] = [];
  createInterface({ input: child.stderr! }).on("line", (line) => {
    // Keep the last lines for the failure message; the peer's runtime notices are not worth printing.
    errorLines.push(line);
    if (errorLines.length > 20) errorLines.shift();
  });
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`${name} did not start within ${startTimeoutMs} ms`)),
      startTimeoutMs,
    );
    createInterface({ input: child.stdout! }).on("line", (line) => {
      const found = announcement(line);
      if (found !== undefined) {
        clearTimeout(timer);
        resolve(found);
      }
    });
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`${name} exited with code ${code} before listening:\n${errorLines.join("\n")}`));
    });
  });
  return { url, child };
}

async function stopServer(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  child.kill("SIGTERM");
  const timer = setTimeout(() => child.kill("SIGKILL"), 5_000);
  await exited;
  clearTimeout(timer);
}

function formTarget(origin: string, path: string, fields: Record<string, string>): LoadTarget {
  return {
    origin,
    method: "POST",
    path,
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams(fields).toString(),
  };
}

/** Checks that the target issues a JWT signed with `algorithm` and returns the token, or throws saying why not. */
async function checkIssuesJwt(name: string, target: LoadTarget, algorithm: Algorithm): Promise<string> {
  const answer = await probe(target);
  if (answer.status !== 200) throw new Error(`${name} answered ${answer.status} to a token request: ${answer.body}`);
  const token = (JSON.parse(answer.body) as { access_token?: string }).access_token ?? "";
  const header = decodeProtectedHeader(token);
  const claims = decodeJwt(token);
  if (header.alg !== algorithm) throw new Error(`${name} signed with ${String(header.alg)}, not ${algorithm}`);
  console.log(`  ${name.padEnd(13)} issues JWT alg=${header.alg} kid=${String(header.kid)} aud=${String(claims.aud)}`);
  return token;
}

interface Row {
  algorithm: Algorithm;
  server: "flowplane" | "oidc-provider";
  result: LoadResult;
}

async function benchmarkAlgorithm(
  algorithm: Algorithm,
  dataDirectory: string,
  measureReads: boolean,
): Promise<{ tokenRows: Row[]; readResults: LoadResult[] }> {
  const clientId = "bench-client";
  const clientSecret = randomBytes(32).toString("base64url");
  const flowplane = await spawnServer(
    `flowplane (${algorithm})`,
    [
      "src/cli/main.ts",
      "platform",
      "--port",
      "0",
      "--data-directory",
      join(dataDirectory, algorithm),
      "--set",
      "service.rateLimit.burst=1000000",
      "--set",
      "service.rateLimit.refillPerSecond=1000000",
      "--set",
      `service.token.signingAlgorithm=${algorithm}`,
      "--set",
      "service.log.level=warn",
      "--set",
      `service.bootstrap.clientId=${clientId}`,
      "--set",
      `service.bootstrap.clientSecret=${clientSecret}`,
    ],
    (line) => /listening at (http:\/\/\S+)/.exec(line)?.[1],
  );
  const peer = await spawnServer(
    `oidc-provider (${algorithm})`,
    ["bench/token/peer-server.ts", algorithm, clientId, clientSecret, peerResource],
    (line) => {
      if (!line.startsWith("{")) return undefined;
      return (JSON.parse(line) as { url?: string }).url;
    },
  );
  try {
    const flowplaneTarget = formTarget(flowplane.url, "/oauth/token", {
      grant_type: "client_credentials",
      audience: "admin-api",
      client_id: clientId,
      client_secret: clientSecret,
    });
    const peerTarget = formTarget(peer.url, "/token", {
      grant_type: "client_credentials",
      resource: peerResource,
      scope: "members",
      client_id: clientId,
      client_secret: clientSecret,
    });
    const token = await checkIssuesJwt("flowplane", flowplaneTarget, algorithm);
    await checkIssuesJwt("oidc-provider", peerTarget, algorithm);

    const tokenRows: Row[] = [];
    for (const connections of connectionCounts) {
      // Alternating the two servers at each step exposes both to the same machine conditions.
      const options = { connections, warmupMs, durationMs };
      tokenRows.push({ algorithm, server: "flowplane", result: await measure(flowplaneTarget, options) });
      tokenRows.push({ algorithm, server: "oidc-provider", result: await measure(peerTarget, options) });
    }
    const readResults: LoadResult[] = [];
    if (measureReads) {
      const readTarget: LoadTarget = {
        origin: flowplane.url,
        method: "GET",
        path: "/admin/members",
        headers: { authorization: `Bearer ${token}` },
      };
      const check = await probe(readTarget);
      if (check.status !== 200) throw new Error(`GET /admin/members answered ${check.status}: ${check.body}`);
      for (const connections of readConnectionCounts) {
        readResults.push(await measure(readTarget, { connections, warmupMs, durationMs }));
      }
    }
    return { tokenRows, readResults };
  } finally {
    await Promise.all([stopServer(flowplane.child), stopServer(peer.child)]);
  }
}

/** Runs the token benchmark and prints its table and ratios; stops its servers and itself whatever happens. */
export async function run(): Promise<void> {
  children = new BenchmarkChildren("token", runDeadlineMs);

  const dataDirectory = await mkdtemp(join(tmpdir(), "flowplane-bench-token-"));
  const tokenRows: Row[] = [];
  let readResults: LoadResult[] = [];
  try {
    console.log(
      `bench token: POST token endpoint (client_credentials, client_secret_post, JWT access token) and authenticated GET /admin/members; ` +
        `${warmupMs / 1000} s warm-up + ${durationMs / 1000} s per cell, servers in child processes on 127.0.0.1`,
    );
    // Other work on the machine skews both servers alike, but it lowers absolute figures; say how busy it was.
    console.log(`machine: ${cpus().length} CPUs, load average ${formatNumber(loadavg()[0] ?? Number.NaN, 2)} at start`);
    for (const algorithm of ["RS256", "ES256"] as const) {
      console.log(`${algorithm}:`);
      const result = await benchmarkAlgorithm(algorithm, dataDirectory, algorithm === "RS256");
      tokenRows.push(...result.tokenRows);
      if (result.readResults.length > 0) readResults = result.readResults;
    }
  } finally {
    children.release();
    await rm(dataDirectory, { recursive: true, force: true });
  }

  console.log(`\nload average ${formatNumber(loadavg()[0] ?? Number.NaN, 2)} at the end`);
  console.log("\nToken issuance");
  printTable(
    ["algorithm", "server", "connections", "tokens/s", "p50 ms", "p99 ms", "errors"],
    tokenRows.map((row) => [
      row.algorithm,
      row.server,
      String(row.result.connections),
      formatNumber(row.result.requestsPerSecond),
      formatNumber(row.result.p50Ms, 2),
      formatNumber(row.result.p99Ms, 2),
      String(row.result.errors),
    ]),
  );
  console.log("\nAuthenticated reads (flowplane GET /admin/members, one RS256 token reused)");
  printTable(
    ["connections", "requests/s", "p50 ms", "p99 ms", "errors"],
    readResults.map((result) => [
      String(result.connections),
      formatNumber(result.requestsPerSecond),
      formatNumber(result.p50Ms, 2),
      formatNumber(result.p99Ms, 2),
      String(result.errors),
    ]),
  );

  console.log("\nRatios");
  for (const algorithm of ["RS256", "ES256"] as const) {
    const cells = connectionCounts.map((connections) => {
      const find = (server: Row["server"]) =>
        tokenRows.find(
          (row) => row.algorithm === algorithm && row.server === server && row.result.connections === connections,
        );
      const ratio =
        (find("flowplane")?.result.requestsPerSecond ?? 0) / (find("oidc-provider")?.result.requestsPerSecond ?? 0);
      return `${connections} conn ${formatNumber(ratio, 2)}x`;
    });
    console.log(
      `  ${algorithm} tokens/s flowplane/oidc-provider: ${cells.join(", ")} (target >= ${tokenTargets[algorithm]}x)`,
    );
  }
  const readCells = readResults.map(
    (result) => `${result.connections} conn ${formatNumber(result.requestsPerSecond / readsPerSecondTarget, 2)}x`,
  );
  console.log(`  reads/s against the ${readsPerSecondTarget}/s target: ${readCells.join(", ")} (target >= 1x)`);
}
