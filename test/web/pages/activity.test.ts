import { readFileSync } from "node:fs";
import type { Browser, Page } from "playwright-core";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { browserAvailable, launchBrowser } from "../../support/browser.js";
import {
  collectPolicyViolations,
  expectAccessible,
  saveScreenshot,
  signIn,
  viewports,
} from "../../support/console-page.js";
import { startTestPlatform, type TestPlatform } from "../../support/platform.js";
import { createTestClient } from "../../support/tokens.js";

describe.runIf(browserAvailable())("console activity page", () => {
  let platform: TestPlatform;
  let browser: Browser;
  let page: Page;

  beforeAll(async () => {
    platform = await startTestPlatform();
    browser = await launchBrowser();
    // Three changes for the log: two invitations and one removal, made through the Administration API.
    const token = await adminToken(platform.adminClient);
    for (const email of ["ada@example.com", "grace@example.com"]) {
      await call(token, "POST", `/admin/members/${email}`, { orgRoles: ["developer"] });
    }
    await call(token, "DELETE", "/admin/members/grace@example.com");
  });
  afterEach(async () => {
    await page?.close();
  });
  afterAll(async () => {
    await browser?.close();
    await platform?.close();
  });

  async function adminToken(client: { clientId: string; clientSecret: string }): Promise<string> {
    const response = await fetch(`${platform.url}/oauth/token`, {
      method: "POST",
      body: new URLSearchParams({
        grant_type: "client_credentials",
        audience: "admin-api",
        client_id: client.clientId,
        client_secret: client.clientSecret,
      }),
    });
    return ((await response.json()) as { access_token: string }).access_token;
  }

  async function call(token: string, method: string, path: string, body?: unknown): Promise<void> {
    const response = await fetch(`${platform.url}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${token}`,
        ...(body === undefined ? {} : { "content-type": "application/json" }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    expect(response.status).toBe(204);
  }

  function rows(): Promise<string[]> {
    return page.getByRole("table", { name: "Activity, newest first" }).locator("tbody tr").allTextContents();
  }

  it("lists the changes newest first, filters them and downloads them as CSV", async () => {
    page = await browser.newPage({ viewport: viewports.wide, acceptDownloads: true });
    const violations = collectPolicyViolations(page);
    await signIn(page, platform.url, platform.adminClient, "/console/activity");
    await expect.poll(async () => (await rows()).length).toBe(3);
    const [newest] = await rows();
    expect(newest).toContain("deleted");
    expect(newest).toContain("grace@example.com");
    await expectAccessible(page, "activity");

    await page.getByLabel("Action").selectOption({ label: "created" });
    await expect.poll(async () => (await rows()).length).toBe(2);
    await page.getByLabel("Resource").fill("ada");
    await expect.poll(rows).toEqual([expect.stringContaining("ada@example.com")]);
    expect(await page.getByText("1 of 3 loaded entries shown.").count()).toBe(1);

    // A limit out of range is refused in the form, naming the field; the API is not asked.
    await page.getByLabel("Entries").fill("5000");
    await page.getByRole("button", { name: "Load", exact: true }).click();
    expect(await page.getByRole("status").textContent()).toBe("Entries: a whole number from 1 to 1000.");
    await page.getByLabel("Entries").fill("2");
    await page.getByRole("button", { name: "Load", exact: true }).click();
    // The two newest entries are grace's invitation and removal, which the filters (created, "ada") leave out.
    await expect.poll(async () => await page.getByText("0 of 2 loaded entries shown.").count()).toBe(1);

    const [download] = await Promise.all([
      page.waitForEvent("download"),
      page.getByRole("button", { name: "Download CSV" }).click(),
    ]);
    expect(download.suggestedFilename()).toBe("activity.csv");
    const csv = readFileSync((await download.path())!, "utf8").split("\r\n");
    expect(csv[0]).toBe("service,orgId,auditType,entity,entityId,userId,timestamp,audit");
    // The download holds the two newest entries asked for: the removal and the second invitation.
    expect(csv.filter((line) => line !== "")).toHaveLength(3);
    expect(csv[1]).toContain(",d,member,grace@example.com,");
    expect(violations).toEqual([]);
    await saveScreenshot(page, "console-activity");
  });

  it("is readable by a client without administration scopes beyond its own API", async () => {
    const secretsClient = await createTestClient(platform, ["secrets"]);
    page = await browser.newPage({ viewport: viewports.narrow });
    await signIn(page, platform.url, secretsClient);
    const navigation = page.getByRole("navigation", { name: "Console" });
    expect(await navigation.getByRole("link").allTextContents()).toEqual(["Overview", "Activity"]);
    await navigation.getByRole("link", { name: "Activity" }).click();
    await expect.poll(async () => (await rows()).length).toBe(3);
    await expectAccessible(page, "activity at phone width");
    await saveScreenshot(page, "console-activity-narrow");
  });
});
