import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { configurationLeaves } from "../src/config/load.js";
import { withConfigurationReference } from "../src/config/reference.js";

const readme = readFileSync(new URL("../README.md", import.meta.url), "utf8");

describe("README", () => {
  it("holds the configuration reference generated from the schema (run `npm run docs` after changing it)", () => {
    expect(readme).toBe(withConfigurationReference(readme));
  });

  it("documents every configuration setting by its environment variable and key", () => {
    for (const leaf of configurationLeaves()) {
      expect(readme, leaf.environmentVariable).toContain(`\`${leaf.environmentVariable}\``);
      expect(readme, leaf.key).toContain(`\`${leaf.key}\``);
    }
  });

  it("keeps the two-command quick start", () => {
    expect(readme).toContain("npm install && npm start");
    expect(readme).toContain("npm test");
  });
});
