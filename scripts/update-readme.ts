import { readFileSync, writeFileSync } from "node:fs";
import { withConfigurationReference } from "../src/config/reference.js";

// Regenerates the configuration reference in README.md from the configuration schema.
const path = new URL("../README.md", import.meta.url);
writeFileSync(path, withConfigurationReference(readFileSync(path, "utf8")));
console.log("README.md: configuration reference regenerated");
