// A stand-in for the flowplane command line in provisioner tests: it records the environment it was started with,
// serves a ready gateway health endpoint, and can be told to exit at once or to ignore SIGTERM.
import { writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { join } from "node:path";

const role = process.argv[2] ?? "unknown";
const environment = Object.fromEntries(Object.entries(process.env).filter(([name]) => name.startsWith("SERVICE_")));
environment.FAKE_ARGUMENTS = JSON.stringify(process.argv.slice(2));
const name = role === "broker" ? `broker-${environment.SERVICE_BROKER_CLUSTER_NODE_ID}` : role;
writeFileSync(join(process.env.FAKE_RECORD_DIRECTORY ?? ".", `${name}.json`), JSON.stringify(environment));
if (process.env.FAKE_EXIT_AT_START === role) process.exit(3);
if (process.env.FAKE_IGNORE_SIGTERM === "1") process.on("SIGTERM", () => undefined);
if (role === "gateway") {
  createServer((_request, response) => {
    response.writeHead(200, { "content-type": "application/json" });
    response.end(JSON.stringify({ status: "UP" }));
  }).listen(Number(environment.SERVICE_MANAGEMENT_PORT), environment.SERVICE_MANAGEMENT_HOST);
}
setInterval(() => undefined, 60_000);
