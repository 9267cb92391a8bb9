/**
 * Child process of the Modeler benchmark: starts a platform on 127.0.0.1 and a free port over the database named by
 * FLOWPLANE_BENCH_DATABASE_URL (empty: SQLite in FLOWPLANE_BENCH_DATA_DIRECTORY) and prints one JSON line with its
 * URL, organization and administration client, then serves until it is terminated.
 */
import { pino } from "pino";
import { loadConfiguration } from "../../src/config/load.js";
import { type BootstrapCredentials, startPlatform } from "../../src/platform/platform.js";

const configuration = loadConfiguration({
  environment: {},
  flags: {
    "service.dataDirectory": process.env.FLOWPLANE_BENCH_DATA_DIRECTORY ?? "",
    "service.database.url": process.env.FLOWPLANE_BENCH_DATABASE_URL ?? "",
    "service.platform.port": 0,
    "service.platform.host": "127.0.0.1",
    "service.log.level": "silent",
  },
});
let credentials: BootstrapCredentials | null = null;
const platform = await startPlatform(configuration, {
  logger: pino({ level: "silent" }),
  onBootstrapCredentials: (created) => {
    credentials = created;
  },
});
if (credentials === null) throw new Error("the benchmark platform did not create an administration client");
process.stdout.write(
  `${JSON.stringify({ url: platform.url, organizationId: platform.organizationId, ...(credentials as BootstrapCredentials) })}\n`,
);
const stop = async () => {
  await platform.close();
  process.exit(0);
};
process.on("SIGTERM", () => void stop());
process.on("SIGINT", () => void stop());
