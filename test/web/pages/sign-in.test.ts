import type { Browser, Page, Request } from "playwright-core";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { browserAvailable, launchBrowser } from "../../support/browser.js";
import {
  browserStorage,
  collectPolicyViolations,
  expectAccessible,
  horizontalOverflow,
  saveScreenshot,
  signIn,
  viewports,
} from "../../support/console-page.js";
import { startTestPlatform, type TestPlatform } from "../../support/platform.js";
import { createTestClient } from "../../support/tokens.js";

describe.runIf(browserAvailable())("console sign-in and session", () => {
  let platform: TestPlatform;
  let browser: Browser;
  let page: Page;

  beforeAll(async () => {
    platform = await startTestPlatform();
    browser = await launchBrowser();
  });
  afterEach(async () => {
    await page?.close();
  });
  afterAll(async () => {
    await browser?.close();
    await platform?.close();
  });

  for (const [width, viewport] of Object.entries(viewports)) {
    it(`signs in with the bootstrap client and keeps its tokens out of storage and URLs (${width})`, async () => {
      page = await browser.newPage({ viewport });
      const violations = collectPolicyViolations(page);
      const requestUrls: string[] = [];
      page.on("request", (request) => requestUrls.push(request.url()));
      // Browsers ask for `/` first: it answers the console, which moves to /console/.
      await page.goto(`${platform.url}/`);
      await page.getByRole("heading", { name: "Sign in to flowplane" }).waitFor();
      await expectAccessible(page, `sign-in (${width})`);
      await signIn(page, platform.url, platform.adminClient);
      await expect.poll(() => new URL(page.url()).pathname).toBe("/console/");
      const navigation = page.getByRole("navigation", { name: "Console" });
      expect(await navigation.getByRole("link").allTextContents()).toEqual([
        "Overview",
        "Clusters",
        "Members",
        "Organization clients",
        "Activity",
        "Modeler",
      ]);
      expect(await page.getByRole("listitem").allTextContents()).toContain("members");
      await expectAccessible(page, `overview (${width})`);

      expect(await browserStorage(page)).toEqual({ local: "{}", session: "{}", cookies: "" });
      const secret = platform.adminClient.clientSecret;
      for (const url of [...requestUrls, page.url()]) {
        expect(url).not.toContain(secret);
        expect(url).not.toContain("eyJ");
      }
      // The page does not scroll sideways at this width.
      expect(await horizontalOverflow(page)).toBeLessThanOrEqual(0);
      expect(violations).toEqual([]);
      await saveScreenshot(page, `console-overview-${width}`);
    });
  }

  it("asks browsers not to keep the client secret, which the console holds in the tab's memory only", async () => {
    page = await browser.newPage({ viewport: viewports.wide });
    await page.goto(`${platform.url}/console/`);
    const secret = page.getByLabel("Client secret");
    expect(await secret.getAttribute("type")).toBe("password");
    expect(await secret.getAttribute("autocomplete")).toBe("off");
  });

  it("shows why a sign-in was refused and stays on the form", async () => {
    page = await browser.newPage({ viewport: viewports.wide });
    await page.goto(`${platform.url}/console/`);
    await page.getByLabel("Client id").fill(platform.adminClient.clientId);
    await page.getByLabel("Client secret").fill("not-the-secret");
    await page.getByRole("button", { name: "Sign in" }).click();
    await expect.poll(() => page.getByRole("status").textContent()).toMatch(/^Sign-in failed: /);
    expect(await page.getByRole("button", { name: "Sign out" }).count()).toBe(0);
    await expectAccessible(page, "refused sign-in");
    await saveScreenshot(page, "console-sign-in-refused");
  });

  it("shows a modeler:read client no administration pages", async () => {
    const reader = await createTestClient(platform, ["modeler:read"]);
    page = await browser.newPage({ viewport: viewports.wide });
    await signIn(page, platform.url, reader);
    const navigation = page.getByRole("navigation", { name: "Console" });
    expect(await navigation.getByRole("link").allTextContents()).toEqual(["Overview", "Modeler"]);
    expect(await page.locator("main").textContent()).toContain("the Modeler API");
    // A page the client may not use is not shown even when its address is typed in.
    await page.goto(`${platform.url}/console/members`);
    await page.getByLabel("Client id").fill(reader.clientId);
    await page.getByLabel("Client secret").fill(reader.clientSecret);
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.getByText("This client's scopes do not allow this page.").waitFor();
    expect(await page.getByRole("table").count()).toBe(0);
    await expectAccessible(page, "page not allowed");
    await saveScreenshot(page, "console-modeler-reader");
  });

  it("returns to the sign-in form with the reason when an API answers 401", async () => {
    page = await browser.newPage({ viewport: viewports.wide });
    await signIn(page, platform.url, platform.adminClient);
    await page.route("**/admin/members", (route) =>
      route.fulfill({
        status: 401,
        contentType: "application/problem+json",
        body: JSON.stringify({
          type: "about:blank",
          title: "Authentication is required",
          status: 401,
          detail: "The token has expired.",
        }),
      }),
    );
    await page.getByRole("link", { name: "Members" }).click();
    await page.getByRole("heading", { name: "Sign in to flowplane" }).waitFor();
    expect(await page.getByRole("alert").textContent()).toContain("The token has expired.");
    await expectAccessible(page, "sign-in after 401");
    await saveScreenshot(page, "console-session-ended");
  });

  it("renews its tokens before they expire and keeps working with the new ones", async () => {
    page = await browser.newPage({ viewport: viewports.wide });
    await page.clock.install();
    const tokenRequests: Request[] = [];
    page.on("request", (request) => {
      if (new URL(request.url()).pathname === "/oauth/token") tokenRequests.push(request);
    });
    await signIn(page, platform.url, platform.adminClient);
    // One token per API the bootstrap client may call.
    expect(tokenRequests).toHaveLength(2);
    const answers = await Promise.all(tokenRequests.map(async (request) => (await request.response())!.json()));
    const lifetimeMs = (answers[0] as { expires_in: number }).expires_in * 1000;
    // Just before expiry (inside the renewal margin), every token has been asked for again.
    await page.clock.runFor(lifetimeMs - 30_000);
    await expect.poll(() => tokenRequests.length).toBe(4);
    await page.getByRole("link", { name: "Members" }).click();
    await page.getByRole("table", { name: "Members of the organization" }).waitFor();
    expect(await page.getByRole("button", { name: "Sign out" }).count()).toBe(1);
  });
});
