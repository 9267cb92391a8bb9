import { readFileSync } from "node:fs";

/** The gateway's version, read once from package.json (three levels above both src/cluster/gateway and dist/…). */
export const gatewayVersion: string = (
  JSON.parse(readFileSync(new URL("../../../package.json", import.meta.url), "utf8")) as { version: string }
).version;
