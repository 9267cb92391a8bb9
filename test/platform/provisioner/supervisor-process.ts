/**
 * Run by supervisor-death.test.ts (under tsx): a supervisor that starts a one-broker local cluster of the real
 * command line, prints its children's process ids and ports as one line of JSON, then waits to be killed.
 */
import pino from "pino";
import { startLocalCluster } from "../../../src/platform/provisioner/index.js";
import { childCommand } from "../../support/child-command.js";

const dataDirectory = process.argv[2];
if (dataDirectory === undefined) throw new Error("usage: supervisor-process.ts <data directory>");
const cluster = await startLocalCluster({
  dataDirectory,
  command: childCommand(),
  gatewayPort: 0,
  managementPort: 0,
  issuerUrl: "http://127.0.0.1:1",
  brokers: 1,
  partitions: 1,
  replicationFactor: 1,
  logger: pino({ level: "warn" }, pino.destination(2)),
  readyTimeoutMs: 120_000,
});
const portOf = (address: string): number =>
  Number(new URL(address.includes("://") ? address : `tcp://${address}`).port);
const broker = cluster.brokers[0];
process.stdout.write(
  `${JSON.stringify({
    pids: [broker?.pid, cluster.gatewayPid],
    ports: [
      portOf(broker?.clusterAddress ?? ""),
      portOf(broker?.managementUrl ?? ""),
      portOf(cluster.gatewayUrl),
      portOf(cluster.managementUrl),
    ],
    brokerDirectory: broker?.dataDirectory,
    brokerLogFile: broker?.logFile,
    gatewayLogFile: cluster.gatewayLogFile,
  })}\n`,
);
