import type { Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { browserAvailable, launchBrowser } from "../support/browser.js";
import { startTestPlatform, type TestPlatform } from "../support/platform.js";

describe.runIf(browserAvailable())("browsable API documentation", () => {
  let platform: TestPlatform;
  let browser: Browser;

  beforeAll(async () => {
    platform = await startTestPlatform();
    browser = await launchBrowser();
  });
  afterAll(async () => {
    await browser?.close();
    await platform?.close();
  });

  for (const [api, path, operation] of [
    ["Administration API", "/admin/docs", "/members/{email}"],
    ["Modeler API", "/modeler/api/v1/docs", "/api/v1/info"],
    ["token issuer", "/oauth/docs", "/oauth/token"],
  ] as const) {
    it(`renders the ${api} operations from its OpenAPI document`, async () => {
      const page = await browser.newPage();
      try {
        await page.goto(`${platform.url}${path}`);
        await page.waitForSelector(".opblock-summary-path", { timeout: 15_000 });
        const paths = await page.locator(".opblock-summary-path").allTextContents();
        expect(paths.map((text) => text.replace(/\u200b/g, ""))).toContain(operation);
        expect(await page.locator(".info .title").first().textContent()).toContain("flowplane");
      } finally {
        await page.close();
      }
    });
  }
});
