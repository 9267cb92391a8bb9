/**
 * Benchmark `modeler`: `POST /modeler/api/v1/files/search` requests per second over 100,000 files, with a filter
 * and a sort, on SQLite and on PostgreSQL. The platform runs as a child process (its own event loop, as in
 * production) over a database seeded with 100,000 files in 100 projects; the load generator runs here. Prints a
 * table of throughput and latency per database and query.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { openStore } from "../../src/platform/store/database.js";
import { findPostgresBinaries, type PostgresServer, startPostgresServer } from "../../test/support/postgres-server.js";
import { type LoadResult, measure, probe } from "../support/load.js";

const repositoryRoot = fileURLToPath(new URL("../../", import.meta.url));
const fileCount = 100_000;
const projectCount = 100;
const foldersPerProject = 10;
const insertBatchSize = 500;
const connections = 16;
const warmupMs = 1_000;
const durationMs = 5_000;
const startTimeoutMs = 60_000;
const fileTypes = ["bpmn", "dmn", "form", "connector_template"] as const;
const words = ["order", "invoice", "shipment", "refund", "onboarding", "claim", "payment", "review", "audit", "loan"];
/** Contents are small and alike: search never reads them, but they make rows as wide as real ones' metadata. */
const sampleContent = `{"components":[{"type":"textfield","key":"field","label":"${"x".repeat(200)}"}]}`;

interface Running {
  url: string;
  organizationId: string;
  clientId: string;
  clientSecret: string;
  child: ChildProcess;
}

/** The queries measured: each has a filter and a sort, as a Modeler client searching files would send. */
function queries(projectId: string): { label: string; body: unknown }[] {
  return [
    {
      label: "project + type, by updated desc",
      body: { filter: { projectId, type: "bpmn" }, sort: [{ field: "updated", direction: "DESC" }], size: 20 },
    },
    {
      label: "name substring, by name",
      body: { filter: { name: "invoice 0042" }, sort: [{ field: "name", direction: "ASC" }], size: 20 },
    },
    {
      label: "updated in a month, by updated desc",
      body: {
        filter: { updated: "2024-03-10T00:00:00Z||/M" },
        sort: [{ field: "updated", direction: "DESC" }],
        page: 3,
        size: 50,
      },
    },
  ];
}

async function startServer(databaseUrl: string, dataDirectory: string): Promise<Running> {
  const child = spawn(process.execPath, ["--import", "tsx", "bench/modeler/server.ts"], {
    cwd: repositoryRoot,
    stdio: ["ignore", "pipe", "pipe"],
    env: {
      ...process.env,
      NODE_ENV: "production",
      FLOWPLANE_BENCH_DATABASE_URL: databaseUrl,
      FLOWPLANE_BENCH_DATA_DIRECTORY: dataDirectory,
    },
  });
  const errorLines: string[] = [];
  createInterface({ input: child.stderr! }).on("line", (line) => {
    errorLines.push(line);
    if (errorLines.length > 20) errorLines.shift();
  });
  const announced = await new Promise<Omit<Running, "child">>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`the platform did not start within ${startTimeoutMs} ms`)),
      startTimeoutMs,
    );
    createInterface({ input: child.stdout! }).on("line", (line) => {
      if (!line.startsWith("{")) return;
      clearTimeout(timer);
      resolve(JSON.parse(line) as Omit<Running, "child">);
    });
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`the platform exited with code ${code}:\n${errorLines.join("\n")}`));
    });
  });
  return { ...announced, child };
}

async function stopServer(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  child.kill("SIGTERM");
  const timeout = new Promise<"timeout">((resolve) => setTimeout(() => resolve("timeout"), 10_000).unref());
  if ((await Promise.race([exited, timeout])) === "timeout") child.kill("SIGKILL");
}

/** Inserts projects, folders and files directly (the API would validate 100,000 contents for minutes). */
async function seed(databaseUrl: string, dataDirectory: string, organizationId: string): Promise<string> {
  const store = await openStore({ url: databaseUrl, dataDirectory });
  try {
    const baseMs = Date.parse("2024-01-01T00:00:00.000Z");
    const audit = (offsetMs: number) => {
      const timestamp = new Date(baseMs + offsetMs).toISOString();
      return {
        created_at: timestamp,
        created_by_name: "bench",
        created_by_email: "bench@clients.invalid",
        updated_at: timestamp,
        updated_by_name: "bench",
        updated_by_email: "bench@clients.invalid",
      };
    };
    const projectIds = Array.from({ length: projectCount }, () => randomUUID());
    await store.database
      .insertInto("modeler_projects")
      .values(
        projectIds.map((id, index) => ({
          id,
          organization_id: organizationId,
          name: `Project ${index}`,
          name_folded: `project ${index}`,
          ...audit(index),
        })),
      )
      .execute();
    const folders = projectIds.flatMap((projectId, projectIndex) =>
      Array.from({ length: foldersPerProject }, (_, index) => ({
        id: randomUUID(),
        organization_id: organizationId,
        project_id: projectId,
        parent_id: null,
        name: `Folder ${projectIndex}.${index}`,
        name_folded: `folder ${projectIndex}.${index}`,
        ...audit(index),
      })),
    );
    await store.database.insertInto("modeler_folders").values(folders).execute();
    for (let start = 0; start < fileCount; start += insertBatchSize) {
      const rows = Array.from({ length: Math.min(insertBatchSize, fileCount - start) }, (_, offset) => {
        const index = start + offset;
        const folder = folders[index % folders.length];
        if (folder === undefined) throw new Error("no folders to place files in (invariant)");
        const inFolder = index % 3 !== 0;
        const name = `${words[index % words.length]} ${String(index).padStart(6, "0")}`;
        return {
          id: randomUUID(),
          organization_id: organizationId,
          project_id: folder.project_id,
          folder_id: inFolder ? folder.id : null,
          name,
          name_folded: name,
          file_type: fileTypes[index % fileTypes.length] ?? "form",
          content: sampleContent,
          revision: 1 + (index % 7),
          // Spread over a year, in an order unrelated to insertion.
          ...audit(((index * 7_919) % fileCount) * 315_000),
        };
      });
      await store.database.insertInto("modeler_files").values(rows).execute();
    }
    if (store.kind === "postgres") await analyzePostgres(databaseUrl);
    const [first] = projectIds;
    if (first === undefined) throw new Error("no projects were seeded (invariant)");
    return first;
  } finally {
    await store.close();
  }
}

/**
 * Vacuums and analyzes after the bulk load, as autovacuum does shortly after one: planner statistics, and the
 * visibility map that lets counts run as index-only scans.
 */
async function analyzePostgres(url: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await client.query("VACUUM ANALYZE");
  } finally {
    await client.end();
  }
}

async function requestToken(running: Running): Promise<string> {
  const response = await fetch(`${running.url}/oauth/token`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({
      grant_type: "client_credentials",
      audience: "modeler-api",
      client_id: running.clientId,
      client_secret: running.clientSecret,
    }),
  });
  const body = (await response.json()) as { access_token?: string };
  if (body.access_token === undefined) throw new Error(`token request failed with ${response.status}`);
  return body.access_token;
}

async function benchmarkDatabase(
  kind: "sqlite" | "postgres",
  databaseUrl: string,
): Promise<{ label: string; result: LoadResult; total: number }[]> {
  const dataDirectory = await mkdtemp(join(tmpdir(), `flowplane-bench-modeler-${kind}-`));
  let running: Running | undefined;
  try {
    running = await startServer(databaseUrl, dataDirectory);
    const seedStartedAt = performance.now();
    const projectId = await seed(databaseUrl, dataDirectory, running.organizationId);
    console.log(`${kind}: seeded ${fileCount} files in ${((performance.now() - seedStartedAt) / 1000).toFixed(1)} s`);
    const token = await requestToken(running);
    const results: { label: string; result: LoadResult; total: number }[] = [];
    for (const query of queries(projectId)) {
      const target = {
        origin: running.url,
        method: "POST" as const,
        path: "/modeler/api/v1/files/search",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
        body: JSON.stringify(query.body),
      };
      const check = await probe(target);
      if (check.status !== 200) throw new Error(`${query.label}: the search answered ${check.status}: ${check.body}`);
      const total = (JSON.parse(check.body) as { total: number }).total;
      results.push({ label: query.label, result: await measure(target, { connections, warmupMs, durationMs }), total });
    }
    return results;
  } finally {
    if (running !== undefined) await stopServer(running.child);
    await rm(dataDirectory, { recursive: true, force: true });
  }
}

async function createPostgresDatabase(server: PostgresServer): Promise<string> {
  const name = `flowplane_bench_${randomUUID().replaceAll("-", "")}`;
  const admin = new pg.Client({ connectionString: server.url });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  await admin.end();
  const url = new URL(server.url);
  url.pathname = `/${name}`;
  return url.toString();
}

/** Runs the benchmark and prints its table. */
export async function run(): Promise<void> {
  console.log(
    `Modeler search: ${fileCount} files in ${projectCount} projects; ${connections} connections, ${durationMs / 1000} s per query after ${warmupMs / 1000} s warm-up`,
  );
  const rows: string[][] = [["database", "query", "matches", "requests/s", "p50 ms", "p99 ms", "errors"]];
  const add = (kind: string, measured: { label: string; result: LoadResult; total: number }[]) => {
    for (const { label, result, total } of measured) {
      rows.push([
        kind,
        label,
        String(total),
        result.requestsPerSecond.toFixed(0),
        result.p50Ms.toFixed(1),
        result.p99Ms.toFixed(1),
        String(result.errors),
      ]);
    }
  };
  add("sqlite", await benchmarkDatabase("sqlite", ""));
  const binaries = findPostgresBinaries();
  if (binaries === null) {
    console.log("postgres: skipped, PostgreSQL is not installed under /usr/lib/postgresql");
  } else {
    const server = await startPostgresServer(binaries);
    try {
      add("postgres", await benchmarkDatabase("postgres", await createPostgresDatabase(server)));
    } finally {
      await server.stop();
    }
  }
  const widths = rows[0]!.map((_, column) => Math.max(...rows.map((row) => (row[column] ?? "").length)));
  for (const row of rows)
    console.log(
      row
        .map((cell, column) => cell.padEnd(widths[column] ?? 0))
        .join("  ")
        .trimEnd(),
    );
}
