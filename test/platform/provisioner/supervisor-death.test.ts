/**
 * A supervisor killed with SIGKILL cannot stop its children, so they must notice by themselves: a real one-broker
 * local cluster (`flowplane broker` and `flowplane gateway` processes) is started by a separate supervisor process,
 * which is then killed; its children must stop cleanly and free their ports.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterEach, describe, expect, it } from "vitest";
import { eventually } from "../../support/cluster.js";

const supervisorScript = fileURLToPath(new URL("./supervisor-process.ts", import.meta.url));
const cleanups: (() => void)[] = [];

afterEach(() => {
  for (const cleanup of cleanups.splice(0)) cleanup();
});

/** Whether a process runs: it exists and is not a zombie waiting for a parent that does not reap it. */
function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    // The state follows the command name in parentheses, which may itself hold spaces or parentheses.
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3) !== "Z";
  } catch {
    return false;
  }
}

/** Whether this process can listen on the port of 127.0.0.1. */
function isFree(port: number): Promise<boolean> {
  return new Promise((resolveFree) => {
    const server = createServer();
    server.once("error", () => resolveFree(false));
    server.listen(port, "127.0.0.1", () => server.close(() => resolveFree(true)));
  });
}

/** The first line the process writes on standard output. */
function firstLine(child: ChildProcess): Promise<string> {
  return new Promise((resolveLine, rejectLine) => {
    let buffered = "";
    child.stdout?.on("data", (chunk: Buffer) => {
      buffered += chunk.toString("utf8");
      const end = buffered.indexOf("\n");
      if (end >= 0) resolveLine(buffered.slice(0, end));
    });
    child.once("exit", (code) => rejectLine(new Error(`the supervisor exited with ${code} before it was ready`)));
  });
}

describe("a local cluster whose supervisor is killed", () => {
  it("stops every child cleanly, freeing its ports", async () => {
    const dataDirectory = mkdtempSync(join(tmpdir(), "flowplane-supervisor-"));
    cleanups.push(() => rmSync(dataDirectory, { recursive: true, force: true }));
    const supervisor = spawn(process.execPath, ["--import", "tsx", supervisorScript, dataDirectory], {
      stdio: ["ignore", "pipe", "inherit"],
    });
    let children: number[] = [];
    cleanups.push(() => {
      // Whatever the outcome, nothing started here outlives the test.
      for (const pid of [supervisor.pid, ...children]) {
        if (pid !== undefined && isAlive(pid)) process.kill(pid, "SIGKILL");
      }
    });
    const started = JSON.parse(await firstLine(supervisor)) as {
      pids: number[];
      ports: number[];
      brokerDirectory: string;
      brokerLogFile: string;
      gatewayLogFile: string;
    };
    children = started.pids;
    expect(children).toHaveLength(2);
    expect(children.every(isAlive)).toBe(true);
    expect(existsSync(join(started.brokerDirectory, "broker.pid"))).toBe(true);
    for (const port of started.ports) expect(await isFree(port)).toBe(false);

    const killedAtMs = performance.now();
    supervisor.kill("SIGKILL");
    await eventually("the children gone", 60_000, async () => (children.some(isAlive) ? undefined : true));
    const stoppedAfterMs = Math.round(performance.now() - killedAtMs);
    await eventually("the children's ports free", 15_000, async () => {
      for (const port of started.ports) if (!(await isFree(port))) return undefined;
      return true;
    });
    // The clean stop of SIGTERM, not a crash: the broker said why, and removed its pid file on the way out.
    expect(readFileSync(started.brokerLogFile, "utf8")).toContain("the process that started this broker is gone");
    expect(existsSync(join(started.brokerDirectory, "broker.pid"))).toBe(false);
    expect(readFileSync(started.gatewayLogFile, "utf8")).toContain("flowplane gateway stopped");
    console.log(`children of the killed supervisor stopped ${stoppedAfterMs} ms after its SIGKILL`);
  }, 180_000);
});
