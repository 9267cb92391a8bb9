/**
 * How much a receiving broker's transport costs, against the least a Node.js process can spend receiving the same
 * bytes. One process sends 1 GiB (FLOWPLANE_BENCH_TRANSPORT_MB) in 1 MiB messages over the cluster transport, at most
 * 16 unanswered, as a leader sends a snapshot's chunks, and the other keeps every payload, as a joiner keeps them
 * for its restore; then the same bytes go over a plain loopback socket to a process that keeps Node's reads. Rounds
 * alternate the two (FLOWPLANE_BENCH_ROUNDS, default 5), so a machine whose speed drifts affects both alike, and the
 * ratios compare medians.
 *
 *   npm run bench -- transport
 */
import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { once } from "node:events";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { BenchmarkChildren } from "../support/children.js";
import { formatNumber, printTable } from "../support/report.js";

const PEERS = join(dirname(fileURLToPath(import.meta.url)), "peers.ts");

/** One receiver's measurement: from its first byte to its last. */
interface Receipt {
  readonly bytes: number;
  readonly elapsedMs: number;
  readonly cpuMs: number;
}

function positiveIntegerFromEnvironment(name: string, fallback: number): number {
  const text = process.env[name];
  if (text === undefined) return fallback;
  const value = Number(text);
  if (!Number.isSafeInteger(value) || value < 1) throw new Error(`${name} must be a positive integer, got "${text}"`);
  return value;
}

/** Lines a child prints, one at a time, in order. */
function linesOf(child: ChildProcess): AsyncIterator<string> {
  if (child.stdout === null) throw new Error("a peer's output is piped");
  return createInterface({ input: child.stdout })[Symbol.asyncIterator]();
}

async function nextLine(lines: AsyncIterator<string>, expected: string): Promise<string[]> {
  const { value, done } = await lines.next();
  const words = done === true ? [] : String(value).split(" ");
  if (words[0] !== expected) throw new Error(`a peer printed "${done === true ? "nothing" : value}", not ${expected}`);
  return words.slice(1);
}

/** Runs one receiver and one sender of `messages` MiB; returns the receiver's measurement. */
async function oneRun(
  children: BenchmarkChildren,
  kind: "transport" | "socket",
  messages: number,
  secret: string,
): Promise<Receipt> {
  const environment = { ...process.env, FLOWPLANE_BENCH_CLUSTER_SECRET: secret };
  const start = (argumentsOfPeer: string[]): ChildProcess =>
    children.track(
      spawn(process.execPath, ["--import", "tsx", PEERS, ...argumentsOfPeer], {
        env: environment,
        stdio: ["ignore", "pipe", "inherit"],
      }),
    );
  const receiver = start(kind === "transport" ? ["transport-receive", String(messages)] : ["socket-receive"]);
  const lines = linesOf(receiver);
  const [port] = await nextLine(lines, "listening");
  const sender = start([`${kind}-send`, String(port), String(messages)]);
  const [bytes, elapsedMs, cpuMs] = (await nextLine(lines, "received")).map(Number);
  if (sender.exitCode === null) await once(sender, "exit");
  receiver.kill("SIGTERM");
  if (receiver.exitCode === null && receiver.signalCode === null) await once(receiver, "exit");
  if (bytes !== messages * 1024 * 1024) throw new Error(`the ${kind} receiver got ${bytes} bytes`);
  return { bytes, elapsedMs: elapsedMs ?? Number.NaN, cpuMs: cpuMs ?? Number.NaN };
}

function median(values: readonly number[]): number {
  const sorted = [...values].sort((left, right) => left - right);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1
    ? (sorted[middle] ?? Number.NaN)
    : ((sorted[middle - 1] ?? 0) + (sorted[middle] ?? 0)) / 2;
}

/** Runs the benchmark; see the module comment. */
export async function run(): Promise<void> {
  const messages = positiveIntegerFromEnvironment("FLOWPLANE_BENCH_TRANSPORT_MB", 1024);
  const rounds = positiveIntegerFromEnvironment("FLOWPLANE_BENCH_ROUNDS", 5);
  const children = new BenchmarkChildren("transport", 10 * 60 * 1000);
  const secret = randomBytes(32).toString("hex");
  console.log(
    `bench transport: ${messages} MiB in 1 MiB messages, ${rounds} rounds of the transport and a plain socket`,
  );
  const results: Record<"transport" | "socket", Receipt[]> = { transport: [], socket: [] };
  try {
    for (let round = 0; round < rounds; round += 1) {
      for (const kind of ["transport", "socket"] as const) {
        results[kind].push(await oneRun(children, kind, messages, secret));
      }
    }
  } finally {
    children.release();
  }
  const mibPerSecond = (receipt: Receipt): number => receipt.bytes / 1024 / 1024 / (receipt.elapsedMs / 1000);
  printTable(
    ["receiver", "seconds by round", "median s", "MiB/s (median)", "CPU s by round", "median CPU s", "CPU s per GiB"],
    (["transport", "socket"] as const).map((kind) => {
      const receipts = results[kind];
      const medianSeconds = median(receipts.map((receipt) => receipt.elapsedMs)) / 1000;
      const medianCpuSeconds = median(receipts.map((receipt) => receipt.cpuMs)) / 1000;
      return [
        kind === "transport" ? "cluster transport, payloads kept" : "plain socket, Node's reads kept",
        receipts.map((receipt) => formatNumber(receipt.elapsedMs / 1000, 2)).join(" "),
        formatNumber(medianSeconds, 2),
        formatNumber(median(receipts.map(mibPerSecond))),
        receipts.map((receipt) => formatNumber(receipt.cpuMs / 1000, 2)).join(" "),
        formatNumber(medianCpuSeconds, 2),
        formatNumber((medianCpuSeconds * 1024) / messages, 2),
      ];
    }),
  );
  const ratio = (measure: (receipt: Receipt) => number): string =>
    formatNumber(median(results.transport.map(measure)) / median(results.socket.map(measure)), 2);
  console.log("");
  printTable(
    ["ratio (medians)", "value"],
    [
      ["receiving time: transport / plain socket", ratio((receipt) => receipt.elapsedMs)],
      ["receiver's processor time: transport / plain socket", ratio((receipt) => receipt.cpuMs)],
    ],
  );
}
