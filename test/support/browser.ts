import { existsSync } from "node:fs";
import { type Browser, chromium } from "playwright-core";

/** Debian's Chromium, which the tests drive; browsers are never downloaded. */
export const chromiumPath = "/usr/bin/chromium";

/** Whether browser tests can run here; with REQUIRE_BROWSER=1 a missing Chromium fails the run instead. */
export function browserAvailable(): boolean {
  if (existsSync(chromiumPath)) return true;
  if (process.env.REQUIRE_BROWSER === "1") {
    throw new Error(`REQUIRE_BROWSER=1 but ${chromiumPath} is missing (apt-get install chromium)`);
  }
  console.warn(
    `[flowplane tests] ${chromiumPath} is not installed (apt-get install chromium); browser tests are skipped`,
  );
  return false;
}

/** Launches headless Chromium with flags that keep it off the network and quiet. */
export async function launchBrowser(): Promise<Browser> {
  return await chromium.launch({
    executablePath: chromiumPath,
    headless: true,
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
      "--no-first-run",
    ],
  });
}
