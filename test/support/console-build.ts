import { existsSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "vite";

const webDirectory = fileURLToPath(new URL("../../web/", import.meta.url));

/** Latest modification time of the console's sources (index.html, vite.config.ts and everything under src/). */
function newestSourceMs(path: string): number {
  const stats = statSync(path);
  if (!stats.isDirectory()) return stats.mtimeMs;
  return Math.max(stats.mtimeMs, ...readdirSync(path).map((name) => newestSourceMs(join(path, name))));
}

/**
 * Builds the web console into web/dist when it is missing or older than its sources, so that tests serve what the
 * sources say even when a developer changed them after `npm install` (whose `prepare` builds it too).
 */
export async function ensureConsoleBuilt(): Promise<void> {
  const builtIndex = join(webDirectory, "dist", "index.html");
  const sourcesMs = Math.max(
    newestSourceMs(join(webDirectory, "src")),
    newestSourceMs(join(webDirectory, "index.html")),
    newestSourceMs(join(webDirectory, "vite.config.ts")),
  );
  if (existsSync(builtIndex) && statSync(builtIndex).mtimeMs >= sourcesMs) return;
  await build({ configFile: join(webDirectory, "vite.config.ts"), logLevel: "warn" });
}
