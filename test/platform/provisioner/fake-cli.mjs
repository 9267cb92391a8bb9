// A stand-in for the flowplane command line in provisioner tests: it records the environment it was started with,
// serves a ready gateway health endpoint (unready while `gateway.unready` exists in the record directory), which tells
// whether its access policy file pauses writes, and can be told to exit at once or to ignore SIGTERM. Like the real
// command line it exits with code 0 on SIGTERM, and, when supervised, once its channel to the supervisor closes.
import { appendFileSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { connect, createServer as createNetServer } from "node:net";
import { dirname, join } from "node:path";

const role = process.argv[2] ?? "unknown";
const environment = Object.fromEntries(Object.entries(process.env).filter(([name]) => name.startsWith("SERVICE_")));
environment.FAKE_ARGUMENTS = JSON.stringify(process.argv.slice(2));
environment.GLIBC_TUNABLES = process.env.GLIBC_TUNABLES;
environment.FLOWPLANE_SUPERVISOR = process.env.FLOWPLANE_SUPERVISOR;
environment.FAKE_HAS_CHANNEL = String(process.channel !== undefined);
environment.FAKE_PID = String(process.pid);
// What a restore is given to restore into, read while the file exists.
const configurationArgument = process.argv.indexOf("--cluster-configuration");
if (configurationArgument > 0) {
  environment.FAKE_CLUSTER_CONFIGURATION = readFileSync(process.argv[configurationArgument + 1], "utf8");
}
const name = role === "broker" || role === "restore" ? `${role}-${environment.SERVICE_BROKER_CLUSTER_NODE_ID}` : role;

/**
 * Why the gateway's access policy file pauses writes ("" when it does not), or `previous` when the file cannot be read
 * now: the real gateway keeps the last valid policy.
 */
function writesPausedReason(previous = "") {
  const policyFile = process.env.SERVICE_GATEWAY_ACCESS_POLICY_FILE;
  if (policyFile === undefined || policyFile === "" || !existsSync(policyFile)) return previous;
  try {
    return JSON.parse(readFileSync(policyFile, "utf8")).writesPaused?.reason ?? "";
  } catch {
    return previous;
  }
}
// Read at the start and then every 300 ms, as the real gateway polls its file: a pause ends some time after the file
// says so.
let pausedReason = "";
if (role === "gateway") {
  pausedReason = writesPausedReason();
  environment.FAKE_WRITES_PAUSED_AT_START = pausedReason;
  setInterval(() => {
    pausedReason = writesPausedReason(pausedReason);
  }, 300);
}
const recordDirectory = process.env.FAKE_RECORD_DIRECTORY ?? ".";
// Signal handlers first: once its record is written, the child handles signals as it will from then on.
if (process.env.FAKE_IGNORE_SIGTERM === "1") process.on("SIGTERM", () => undefined);
else process.on("SIGTERM", () => process.exit(0));
if (process.env.FLOWPLANE_SUPERVISOR === "ipc") process.on("disconnect", () => process.exit(0));
// Every child started, one line each (`<name> <pid>`), also those whose record a later start overwrites.
if (process.env.FAKE_RECORD_DIRECTORY !== undefined) {
  appendFileSync(join(recordDirectory, "started.log"), `${name} ${process.pid}\n`);
}
if (process.env.FAKE_EXIT_AT_START === role) {
  // Exits once the child `FAKE_EXIT_AFTER_RECORD` names recorded its start (at most 10 s later): on a busy machine a
  // broker started before this child may not have run yet, and the test checks what it was started with.
  const after = process.env.FAKE_EXIT_AFTER_RECORD;
  const deadlineMs = Date.now() + 10_000;
  while (after !== undefined && !existsSync(join(recordDirectory, `${after}.json`)) && Date.now() < deadlineMs) {
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 20);
  }
  process.exit(3);
}
// A crash at every start while `<name>.crash` exists in the record directory: a crash loop.
if (existsSync(join(recordDirectory, `${name}.crash`))) process.exit(3);
// Written once the child will keep running: a record naming a pid says that process started for good.
writeFileSync(join(recordDirectory, `${name}.json`), JSON.stringify(environment));
// `restore` ends at once: refused while `<name>.fail` exists in the record directory, else done. Before it ends it
// can get in the way of what follows it in the cluster's directory: while `<name>.occupy-commit` exists it leaves a
// non-empty `brokers.restored-over` (the commit's rename then fails), and while `<name>.saved-ports-directory` exists
// it turns the saved brokers file into a non-empty directory (deleting it then fails).
if (role === "restore") {
  const clusterDirectory = dirname(dirname(process.env.SERVICE_BROKER_DATA_DIRECTORY ?? "."));
  if (existsSync(join(recordDirectory, `${name}.occupy-commit`))) {
    mkdirSync(join(clusterDirectory, "brokers.restored-over", "occupied"), { recursive: true });
    writeFileSync(join(clusterDirectory, "brokers.restored-over", "occupied", "file"), "in the way");
  }
  if (existsSync(join(recordDirectory, `${name}.saved-ports-directory`))) {
    const savedPorts = join(clusterDirectory, "ports.before-restore.json");
    rmSync(savedPorts, { force: true });
    mkdirSync(savedPorts);
    writeFileSync(join(savedPorts, "file"), "in the way");
  }
  if (existsSync(join(recordDirectory, `${name}.fail`))) {
    process.stderr.write("restore refused: the backup's part of partition 1 is damaged\n");
    process.exit(1);
  }
  process.exit(0);
}
// Like real ones, brokers told to (FAKE_BROKERS_LISTEN=1) listen on their cluster ports, exiting when they cannot, and
// greet whoever connects; the gateway is then ready only once every contact point greets it as a broker.
const brokersListen = process.env.FAKE_BROKERS_LISTEN === "1";
if (role === "broker" && brokersListen) {
  createNetServer((socket) => socket.end("broker\n")).listen(
    Number(environment.SERVICE_BROKER_CLUSTER_CLUSTER_PORT),
    environment.SERVICE_BROKER_HOST,
  );
}

/** Whether `address` (host:port) greets a connection as a broker within a second. */
function greetsAsBroker(address) {
  const separator = address.lastIndexOf(":");
  return new Promise((resolveGreeting) => {
    const socket = connect({ host: address.slice(0, separator), port: Number(address.slice(separator + 1)) });
    let received = "";
    const done = (greeted) => {
      socket.destroy();
      resolveGreeting(greeted);
    };
    socket.setTimeout(1_000, () => done(false));
    socket.on("data", (data) => {
      received += data.toString();
      if (received.includes("\n")) done(received === "broker\n");
    });
    socket.on("error", () => done(false));
    socket.on("end", () => done(false));
  });
}

if (role === "gateway") {
  createServer(async (_request, response) => {
    const contactPoints = (environment.SERVICE_GATEWAY_CONTACT_POINTS ?? "").split(",").filter(Boolean);
    const ready =
      !existsSync(join(recordDirectory, "gateway.unready")) &&
      (!brokersListen || (await Promise.all(contactPoints.map(greetsAsBroker))).every(Boolean));
    const writes = { status: "UP", details: { paused: pausedReason !== "" } };
    response.writeHead(ready ? 200 : 503, { "content-type": "application/json" });
    response.end(JSON.stringify({ status: ready ? "UP" : "DOWN", components: { writes } }));
  }).listen(Number(environment.SERVICE_MANAGEMENT_PORT), environment.SERVICE_MANAGEMENT_HOST);
}
setInterval(() => undefined, 60_000);
