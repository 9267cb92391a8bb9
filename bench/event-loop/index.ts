/**
 * Benchmark `event-loop`: how long a token request takes while requests that need heavy computation hammer the
 * platform, against the same token requests on the idle platform in the same run. The hammering is what issue 18
 * (item 2) found blocking the event loop: signed milestone-diff links (no token needed) between contents of 60,000
 * lines, and uploads of BPMN files of almost 10 MiB. The platform runs as a child process (its own event loop and
 * worker threads, as in production), with the diff cache off and the rate limits lifted, so that every request
 * reaches the work it asks for: this measures what the worker pool and the limits on a diff's cost do, not what the
 * cache and the per-address limits spare. The attackers ignore `Retry-After` and send their next request at once.
 * Two attacks: the hammering, whose requests all fit the platform's queue, alternates with idle measurements; the
 * flood, with four times the upload connections, runs once at the end. The load generator runs in this process, on
 * the same machine. Prints the token latencies of each measurement, what the attacks were answered, then the ratios
 * of token p99 under attack to idle, and against the 50 ms target.
 */

import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { availableParallelism, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { Pool } from "undici";
import { BenchmarkChildren } from "../support/children.js";
import { type LoadResult, type LoadTarget, measure } from "../support/load.js";
import { formatNumber, printTable } from "../support/report.js";

const repositoryRoot = fileURLToPath(new URL("../../", import.meta.url));
const rounds = 2;
const warmupMs = 1_000;
const durationMs = 5_000;
/** How long the attack runs before token requests are measured under it, so that its queues are full. */
const attackWarmupMs = 2_000;
const diffLinkConnections = 16;
/** Upload connections of the hammering: the platform's queue (64 tasks, 256 MiB) holds all of their uploads. */
const hammeringUploadConnections = 8;
/**
 * Upload connections of the flood, run once at the end: more than the queue holds, so most uploads are refused
 * (503, their connection closed) and the attackers, ignoring Retry-After, send the next one at once.
 */
const floodingUploadConnections = 32;
/** Lines of each milestone content the diff links compare. */
const diffContentTasks = 60_000;
/** Tasks renamed in the diff that is answered: two changed lines each, within the default limit of 1,000. */
const renamedTasks = 450;
/** Size of each uploaded BPMN file: just under the 10 MiB a file may hold. */
const uploadBytes = 10 * 1024 * 1024 - 64 * 1024;
const targetP99Ms = 50;
const startTimeoutMs = 60_000;
/** The whole run stops itself after this, whatever happens. */
const runDeadlineMs = 300_000;

/** The run's child processes and its stop-by-itself guard; set at the start of `run()`. */
let children: BenchmarkChildren;

/** A BPMN document whose process holds one task per line, named by `taskName`, in the order of `order`. */
function bpmnDocument(taskCount: number, taskName: (index: number) => string, order?: readonly number[]): string {
  const indices = order ?? Array.from({ length: taskCount }, (_, index) => index);
  const tasks = indices.map((index) => `    <bpmn:task id="Task_${index}" name="${taskName(index)}" />`).join("\n");
  return `<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" id="Definitions_1" targetNamespace="http://bpmn.io/schema/bpmn">
  <bpmn:process id="Process_1" name="Hammered" isExecutable="true">
${tasks}
  </bpmn:process>
</bpmn:definitions>
`;
}

/** A permutation of `0..count-1`, the same on every run. */
function shuffledOrder(count: number): number[] {
  const order = Array.from({ length: count }, (_, index) => index);
  let seed = 42;
  for (let index = count - 1; index > 0; index--) {
    seed = (seed * 16_807) % 2_147_483_647;
    const other = seed % (index + 1);
    [order[index], order[other]] = [order[other] as number, order[index] as number];
  }
  return order;
}

/** A BPMN document of at most `bytes` bytes and not much less. */
function bpmnOfSize(bytes: number): string {
  const taskName = (index: number) => `Step ${index}`;
  const lineBytes =
    Buffer.byteLength(bpmnDocument(1, () => taskName(100_000))) - Buffer.byteLength(bpmnDocument(0, taskName));
  let taskCount = Math.floor(bytes / lineBytes);
  let document = bpmnDocument(taskCount, taskName);
  while (Buffer.byteLength(document) > bytes) {
    taskCount = Math.floor(taskCount * 0.99);
    document = bpmnDocument(taskCount, taskName);
  }
  return document;
}

async function spawnPlatform(dataDirectory: string, clientId: string, clientSecret: string): Promise<ChildProcess> {
  const settings = {
    "service.rateLimit.burst": 1_000_000,
    "service.rateLimit.refillPerSecond": 1_000_000,
    "service.modeler.diffLinkRateLimit.burst": 1_000_000,
    "service.modeler.diffLinkRateLimit.refillPerSecond": 1_000_000,
    "service.modeler.diffCacheBytes": 0,
    "service.log.level": "error",
    "service.bootstrap.clientId": clientId,
    "service.bootstrap.clientSecret": clientSecret,
  };
  const child = spawn(
    process.execPath,
    [
      "--import",
      "tsx",
      "src/cli/main.ts",
      "platform",
      "--port",
      "0",
      "--data-directory",
      dataDirectory,
      ...Object.entries(settings).flatMap(([key, value]) => ["--set", `${key}=${value}`]),
    ],
    { cwd: repositoryRoot, stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, NODE_ENV: "production" } },
  );
  children.track(child);
  return child;
}

async function platformUrl(child: ChildProcess): Promise<string> {
  const errorLines: string[] = [];
  createInterface({ input: child.stderr! }).on("line", (line) => {
    errorLines.push(line);
    if (errorLines.length > 20) errorLines.shift();
  });
  return await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`the platform did not start within ${startTimeoutMs} ms`)),
      startTimeoutMs,
    );
    createInterface({ input: child.stdout! }).on("line", (line) => {
      const found = /listening at (http:\/\/\S+)/.exec(line)?.[1];
      if (found !== undefined) {
        clearTimeout(timer);
        resolve(found);
      }
    });
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`the platform exited with code ${code} before listening:\n${errorLines.join("\n")}`));
    });
  });
}

async function stopPlatform(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  child.kill("SIGTERM");
  const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
  await exited;
  clearTimeout(timer);
}

async function token(origin: string, clientId: string, clientSecret: string, audience: string): Promise<string> {
  const response = await fetch(`${origin}/oauth/token`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({
      grant_type: "client_credentials",
      audience,
      client_id: clientId,
      client_secret: clientSecret,
    }),
  });
  const body = (await response.json()) as { access_token?: string };
  if (response.status !== 200 || body.access_token === undefined) {
    throw new Error(`token request failed with ${response.status}: ${JSON.stringify(body)}`);
  }
  return body.access_token;
}

/** One diff link and what it compares. */
interface DiffLink {
  label: string;
  /** Path and query of the signed link. */
  path: string;
}

/** Creates a file with `before`, freezes it, changes it to `after`, freezes it again, and returns the signed link. */
async function createDiffLink(
  origin: string,
  modelerToken: string,
  projectId: string,
  label: string,
  before: string,
  after: string,
): Promise<DiffLink> {
  const call = async <T>(method: string, path: string, body?: unknown): Promise<T> => {
    const response = await fetch(`${origin}/modeler/api/v1${path}`, {
      method,
      headers: {
        authorization: `Bearer ${modelerToken}`,
        ...(body === undefined ? {} : { "content-type": "application/json" }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const text = await response.text();
    if (response.status !== 200)
      throw new Error(`${method} ${path} answered ${response.status}: ${text.slice(0, 300)}`);
    return JSON.parse(text) as T;
  };
  const file = await call<{ id: string }>("POST", "/files", {
    name: `${label}.bpmn`,
    content: before,
    fileType: "bpmn",
    projectId,
  });
  const first = await call<{ id: string }>("POST", "/milestones", { name: "before", fileId: file.id });
  await call("PATCH", `/files/${file.id}`, { revision: 1, content: after });
  const second = await call<{ id: string }>("POST", "/milestones", { name: "after", fileId: file.id });
  // The versions API answers the link as JSON; the milestones API answers it as plain text.
  const { url } = await call<{ url: string }>("GET", `/versions/compare/${first.id}...${second.id}`);
  const parsed = new URL(url);
  return { label, path: `${parsed.pathname}${parsed.search}` };
}

/** Requests an attacker repeats and how the platform answered them. */
interface Attack {
  label: string;
  connections: number;
  request: (sequence: number) => {
    method: "GET" | "POST";
    path: string;
    headers: Record<string, string>;
    body?: Buffer;
  };
  answers: Map<number, number>;
  /** Transport failures (connection reset, timeout). */
  failures: number;
}

/** Repeats an attack's requests over its connections until `stop` says so. */
async function hammer(origin: string, attack: Attack, stop: () => boolean): Promise<void> {
  const pool = new Pool(origin, {
    connections: attack.connections,
    pipelining: 1,
    bodyTimeout: 120_000,
    headersTimeout: 120_000,
  });
  let sequence = 0;
  async function connection(): Promise<void> {
    while (!stop()) {
      try {
        const response = await pool.request(attack.request(sequence++));
        await response.body.dump({ limit: 64 * 1024 * 1024 });
        attack.answers.set(response.statusCode, (attack.answers.get(response.statusCode) ?? 0) + 1);
      } catch {
        attack.failures += 1;
      }
    }
  }
  await Promise.all(Array.from({ length: attack.connections }, () => connection()));
  await pool.close();
}

function describeAnswers(attack: Attack): string {
  const statuses = [...attack.answers.entries()].sort(([left], [right]) => left - right);
  const answered = statuses.map(([status, count]) => `${count}×${status}`).join(", ");
  return attack.failures === 0 ? answered : `${answered}, ${attack.failures} failed`;
}

/** What one attack was answered. */
interface AttackOutcome {
  condition: string;
  diffLinks: Attack;
  uploads: Attack;
}

/**
 * Runs diff-link and upload attackers, measures token requests once the attack has filled the platform's queue,
 * and stops the attackers; with `waitForAnswers`, also waits until every request they sent was answered.
 */
async function measureUnderAttack(
  condition: string,
  options: {
    origin: string;
    tokenTarget: LoadTarget;
    links: readonly DiffLink[];
    upload: Buffer;
    modelerToken: string;
    uploadConnections: number;
    waitForAnswers: boolean;
  },
): Promise<{ result: LoadResult; outcome: AttackOutcome }> {
  const diffLinks: Attack = {
    label: "diff links",
    connections: diffLinkConnections,
    request: (sequence) => ({
      method: "GET",
      path: options.links[sequence % options.links.length]?.path ?? "/",
      headers: {},
    }),
    answers: new Map(),
    failures: 0,
  };
  const uploads: Attack = {
    label: "BPMN uploads",
    connections: options.uploadConnections,
    request: () => ({
      method: "POST",
      path: "/modeler/api/v1/files",
      headers: { authorization: `Bearer ${options.modelerToken}`, "content-type": "application/json" },
      body: options.upload,
    }),
    answers: new Map(),
    failures: 0,
  };
  let attacking = true;
  const attacks = Promise.all([
    hammer(options.origin, diffLinks, () => !attacking),
    hammer(options.origin, uploads, () => !attacking),
  ]);
  await new Promise((resolve) => setTimeout(resolve, attackWarmupMs));
  const result = await measure(options.tokenTarget, { connections: 1, warmupMs, durationMs });
  attacking = false;
  if (options.waitForAnswers) {
    await attacks;
    return { result, outcome: { condition, diffLinks, uploads } };
  }
  // Requests still waiting are answered (or cut off when the platform stops) after the counts are taken.
  void attacks.catch(() => undefined);
  const countsNow = (attack: Attack): Attack => ({ ...attack, answers: new Map(attack.answers) });
  return { result, outcome: { condition, diffLinks: countsNow(diffLinks), uploads: countsNow(uploads) } };
}

/** Runs the event-loop benchmark and prints its tables and ratios; stops its platform and itself whatever happens. */
export async function run(): Promise<void> {
  children = new BenchmarkChildren("event-loop", runDeadlineMs);
  const dataDirectory = await mkdtemp(join(tmpdir(), "flowplane-bench-event-loop-"));
  const clientId = "bench-client";
  const clientSecret = randomBytes(32).toString("base64url");
  const rows: { round: string; condition: string; result: LoadResult }[] = [];
  const outcomes: AttackOutcome[] = [];
  let child: ChildProcess | undefined;
  try {
    console.log(
      `bench event-loop: token p99 on the idle platform, then while ${diffLinkConnections} connections request diff links ` +
        `(${diffContentTasks.toLocaleString("en")}-line contents) and ${hammeringUploadConnections} (hammering) or ` +
        `${floodingUploadConnections} (flood) upload ${formatNumber(uploadBytes / 1024 / 1024, 1)} MiB BPMN files; ` +
        `${rounds} rounds of idle and hammering, then the flood; ${warmupMs / 1000} s warm-up + ${durationMs / 1000} s ` +
        "per measurement, 1 token connection",
    );
    console.log(
      `machine: ${availableParallelism()} processors (platform worker threads: ${Math.max(1, availableParallelism() - 1)}), ` +
        `load average ${formatNumber(loadavg()[0] ?? Number.NaN, 2)} at start`,
    );
    child = await spawnPlatform(dataDirectory, clientId, clientSecret);
    const origin = await platformUrl(child);
    const modelerToken = await token(origin, clientId, clientSecret, "modeler-api");
    const projectResponse = await fetch(`${origin}/modeler/api/v1/projects`, {
      method: "POST",
      headers: { authorization: `Bearer ${modelerToken}`, "content-type": "application/json" },
      body: JSON.stringify({ name: "hammered" }),
    });
    const { id: projectId } = (await projectResponse.json()) as { id: string };

    console.log("setting up three diff links (creating and validating six BPMN contents)…");
    const sameNames = (index: number) => `Step ${index}`;
    const links = [
      await createDiffLink(
        origin,
        modelerToken,
        projectId,
        "every line differs",
        bpmnDocument(diffContentTasks, (index) => `First ${index}`),
        bpmnDocument(diffContentTasks, (index) => `Second ${index}`),
      ),
      await createDiffLink(
        origin,
        modelerToken,
        projectId,
        "lines reordered",
        bpmnDocument(diffContentTasks, sameNames),
        bpmnDocument(diffContentTasks, sameNames, shuffledOrder(diffContentTasks)),
      ),
      await createDiffLink(
        origin,
        modelerToken,
        projectId,
        `${renamedTasks * 2} lines changed`,
        bpmnDocument(diffContentTasks, sameNames),
        bpmnDocument(diffContentTasks, (index) =>
          index % Math.floor(diffContentTasks / renamedTasks) === 0 ? `Renamed ${index}` : sameNames(index),
        ),
      ),
    ];
    for (const link of links) {
      const startedAt = performance.now();
      const response = await fetch(`${origin}${link.path}`);
      const body = await response.arrayBuffer();
      console.log(
        `  ${link.label.padEnd(20)} answers ${response.status} (${body.byteLength} bytes) in ${formatNumber(performance.now() - startedAt)} ms alone`,
      );
    }

    const upload = Buffer.from(
      JSON.stringify({ name: "upload.bpmn", content: bpmnOfSize(uploadBytes), fileType: "bpmn", projectId }),
    );
    const tokenTarget: LoadTarget = {
      origin,
      method: "POST",
      path: "/oauth/token",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({
        grant_type: "client_credentials",
        audience: "admin-api",
        client_id: clientId,
        client_secret: clientSecret,
      }).toString(),
    };

    const attack = { origin, tokenTarget, links, upload, modelerToken };
    for (let round = 1; round <= rounds; round++) {
      rows.push({
        round: String(round),
        condition: "idle",
        result: await measure(tokenTarget, { connections: 1, warmupMs, durationMs }),
      });
      const hammered = await measureUnderAttack(`hammering, round ${round}`, {
        ...attack,
        uploadConnections: hammeringUploadConnections,
        waitForAnswers: true,
      });
      rows.push({ round: String(round), condition: "hammered", result: hammered.result });
      outcomes.push(hammered.outcome);
    }
    // The flood's accepted uploads keep the worker busy for a minute after it stops; stopping the platform ends them.
    const flooded = await measureUnderAttack("flood", {
      ...attack,
      uploadConnections: floodingUploadConnections,
      waitForAnswers: false,
    });
    rows.push({ round: "last", condition: "flooded", result: flooded.result });
    outcomes.push(flooded.outcome);
  } finally {
    if (child !== undefined) await stopPlatform(child);
    children.release();
    await rm(dataDirectory, { recursive: true, force: true });
  }

  console.log(`\nload average ${formatNumber(loadavg()[0] ?? Number.NaN, 2)} at the end`);
  console.log("\nToken requests (POST /oauth/token, RS256, one connection)");
  printTable(
    ["round", "platform", "tokens/s", "p50 ms", "p99 ms", "errors"],
    rows.map((row) => [
      String(row.round),
      row.condition,
      formatNumber(row.result.requestsPerSecond),
      formatNumber(row.result.p50Ms, 2),
      formatNumber(row.result.p99Ms, 2),
      String(row.result.errors),
    ]),
  );
  console.log("\nAttack answers (warm-up included; the flood's until it stopped)");
  for (const outcome of outcomes) {
    console.log(
      `  ${outcome.condition}: diff links ${describeAnswers(outcome.diffLinks)}; BPMN uploads ${describeAnswers(outcome.uploads)}`,
    );
  }

  const worst = (condition: string) =>
    Math.max(...rows.filter((row) => row.condition === condition).map((row) => row.result.p99Ms));
  const idleP99Ms = worst("idle");
  console.log("\nRatios (worst measurement of each condition)");
  for (const condition of ["hammered", "flooded"]) {
    const attackedP99Ms = worst(condition);
    console.log(
      `  token p99 ${condition} / idle: ${formatNumber(attackedP99Ms, 2)} / ${formatNumber(idleP99Ms, 2)} ms = ` +
        `${formatNumber(attackedP99Ms / idleP99Ms, 2)}x; against the ${targetP99Ms} ms target: ` +
        `${formatNumber(attackedP99Ms / targetP99Ms, 2)}x (target <= 1x: ${attackedP99Ms <= targetP99Ms ? "met" : "not met"})`,
    );
  }
}
