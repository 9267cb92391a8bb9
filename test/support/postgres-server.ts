import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { chmodSync, chownSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";

/** A throwaway PostgreSQL server started for a test run. */
export interface PostgresServer {
  readonly url: string;
  stop(): Promise<void>;
}

/** Finds the newest installed PostgreSQL server binaries, or null when none is installed. */
export function findPostgresBinaries(): string | null {
  const root = "/usr/lib/postgresql";
  if (!existsSync(root)) return null;
  const versions = readdirSync(root)
    .filter((name) => existsSync(join(root, name, "bin", "initdb")))
    .sort((left, right) => Number(right) - Number(left));
  return versions[0] === undefined ? null : join(root, versions[0], "bin");
}

async function freePort(): Promise<number> {
  return await new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once("error", reject);
    probe.listen(0, "127.0.0.1", () => {
      const address = probe.address();
      probe.close(() => resolve(typeof address === "object" && address !== null ? address.port : 0));
    });
  });
}

/**
 * Starts PostgreSQL in a temporary directory on 127.0.0.1 and a free port. When running as root, `initdb` and the
 * server run as the `postgres` user, which PostgreSQL requires.
 */
export async function startPostgresServer(binaries: string): Promise<PostgresServer> {
  removeAbandonedServers();
  const directory = mkdtempSync(join(tmpdir(), DIRECTORY_PREFIX));
  try {
    return await startIn(directory, binaries);
  } catch (error) {
    rmSync(directory, { recursive: true, force: true });
    throw error;
  }
}

const DIRECTORY_PREFIX = "flowplane-postgres-";
/** A directory younger than this may belong to a run that is still starting its server, so it is left alone. */
const ABANDONED_AFTER_MS = 60 * 60 * 1000;

/**
 * Removes the directories of servers whose test run was killed before its teardown (an interrupted `npm test`):
 * older than an hour and with no live postmaster.
 */
function removeAbandonedServers(): void {
  for (const name of readdirSync(tmpdir())) {
    if (!name.startsWith(DIRECTORY_PREFIX)) continue;
    const directory = join(tmpdir(), name);
    try {
      if (Date.now() - statSync(directory).mtimeMs < ABANDONED_AFTER_MS) continue;
      const pidFile = join(directory, "data", "postmaster.pid");
      if (existsSync(pidFile) && isAlive(Number(readFileSync(pidFile, "utf8").split("\n")[0]))) continue;
      rmSync(directory, { recursive: true, force: true });
    } catch {
      // Another run removed it first, or it is not ours to read: leave it.
    }
  }
}

function isAlive(pid: number): boolean {
  if (!Number.isSafeInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function startIn(directory: string, binaries: string): Promise<PostgresServer> {
  const dataDirectory = join(directory, "data");
  const asRoot = process.getuid?.() === 0;
  const runAs = (command: string, args: string[]): [string, string[]] =>
    asRoot ? ["runuser", ["-u", "postgres", "--", command, ...args]] : [command, args];
  if (asRoot) {
    const uid = Number(execFileSync("id", ["-u", "postgres"]).toString().trim());
    const gid = Number(execFileSync("id", ["-g", "postgres"]).toString().trim());
    chownSync(directory, uid, gid);
    chmodSync(directory, 0o700);
  }
  const [initCommand, initArgs] = runAs(join(binaries, "initdb"), [
    "-D",
    dataDirectory,
    "-U",
    "postgres",
    "-A",
    "trust",
    "--no-sync",
  ]);
  execFileSync(initCommand, initArgs, { stdio: "ignore" });
  const port = await freePort();
  const [serverCommand, serverArgs] = runAs(join(binaries, "postgres"), [
    "-D",
    dataDirectory,
    "-p",
    String(port),
    "-h",
    "127.0.0.1",
    "-k",
    directory,
    // A test server holds nothing worth keeping: skip fsync for speed.
    "-c",
    "fsync=off",
    "-c",
    "max_connections=200",
  ]);
  const server: ChildProcess = spawn(serverCommand, serverArgs, { stdio: "ignore" });
  const url = `postgres://postgres@127.0.0.1:${port}/postgres`;
  const deadline = Date.now() + 30_000;
  for (;;) {
    const client = new pg.Client({ connectionString: url });
    try {
      await client.connect();
      await client.end();
      break;
    } catch (error) {
      await client.end().catch(() => undefined);
      if (Date.now() > deadline || server.exitCode !== null) {
        server.kill("SIGKILL");
        throw new Error(`PostgreSQL did not start: ${(error as Error).message}`);
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
  return {
    url,
    async stop() {
      // The server runs under `runuser`, which does not forward signals: signal the postmaster itself, whose
      // pid PostgreSQL records in postmaster.pid. SIGINT is PostgreSQL's "fast shutdown".
      const exited = new Promise<void>((resolve) => {
        if (server.exitCode !== null || server.signalCode !== null) resolve();
        else server.once("exit", () => resolve());
      });
      const postmasterPid = Number(readFileSync(join(dataDirectory, "postmaster.pid"), "utf8").split("\n")[0]);
      try {
        process.kill(postmasterPid, "SIGINT");
      } catch {
        // Already gone.
      }
      const timeout = new Promise<"timeout">((resolve) => setTimeout(() => resolve("timeout"), 10_000).unref());
      if ((await Promise.race([exited, timeout])) === "timeout") {
        process.kill(postmasterPid, "SIGKILL");
        server.kill("SIGKILL");
      }
      rmSync(directory, { recursive: true, force: true });
    },
  };
}
