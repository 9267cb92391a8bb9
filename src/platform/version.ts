import { readFileSync } from "node:fs";

/** The product version, read once from package.json (two levels above both src/ and dist/). */
export const platformVersion: string = (
  JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { version: string }
).version;
