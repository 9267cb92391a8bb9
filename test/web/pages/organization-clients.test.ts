import type { Browser, Page } from "playwright-core";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { browserAvailable, launchBrowser } from "../../support/browser.js";
import {
  collectPolicyViolations,
  expectAccessible,
  focusedText,
  horizontalOverflow,
  saveScreenshot,
  signIn,
  viewports,
} from "../../support/console-page.js";
import { startTestPlatform, type TestPlatform } from "../../support/platform.js";

describe.runIf(browserAvailable())("console organization API clients page", () => {
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

  function rows() {
    return page.getByRole("table", { name: "API clients of the organization" }).locator("tbody tr");
  }

  it("creates a client with chosen scopes (the secret shown once) that signs in to fewer pages, then deletes it", async () => {
    page = await browser.newPage({ viewport: viewports.wide });
    const violations = collectPolicyViolations(page);
    await signIn(page, platform.url, platform.adminClient, "/console/clients");
    // The signed-in client is listed and cannot delete itself.
    await expect.poll(() => rows().allTextContents()).toHaveLength(1);
    expect((await rows().allTextContents())[0]).toContain("signed in");
    await expectAccessible(page, "organization clients");

    // Nothing is sent while the form is invalid; each problem is shown next to its field.
    const form = page.getByRole("form", { name: "Create an API client" });
    await form.getByRole("button", { name: "Create client" }).click();
    expect(await form.locator(".field-error").allTextContents()).toEqual([
      "Enter a name.",
      "Choose at least one scope.",
    ]);
    await page.getByLabel("Name").fill("model uploads");
    await page.getByLabel("modeler:read").check();
    await page.getByLabel("modeler:update").check();
    await form.getByRole("button", { name: "Create client" }).click();
    const panel = page.getByRole("region", { name: "API client model uploads was created" });
    await panel.waitFor();
    expect(await focusedText(page)).toBe("API client model uploads was created");
    const clientId = await panel.getByLabel("Client id").inputValue();
    const clientSecret = await panel.getByLabel("Client secret").inputValue();
    expect(clientSecret).toMatch(/^[A-Za-z0-9_-]{43}$/);
    await expect.poll(() => rows().allTextContents()).toContainEqual(expect.stringContaining(clientId));
    expect((await rows().allTextContents()).find((row) => row.includes(clientId))).toContain(
      "modeler:read, modeler:update",
    );
    await expectAccessible(page, "organization client created");
    expect(violations).toEqual([]);
    await saveScreenshot(page, "console-organization-clients");

    // The new client signs in and sees only what its scopes allow: no client management among them.
    const other = await browser.newPage({ viewport: viewports.wide });
    await signIn(other, platform.url, { clientId, clientSecret });
    const navigation = other.getByRole("navigation", { name: "Console" });
    expect(await navigation.getByRole("link").allTextContents()).toEqual(["Overview", "Modeler"]);
    await other.close();

    await page.getByRole("button", { name: "Delete client model uploads" }).click();
    await page
      .getByRole("dialog", { name: "Delete API client" })
      .getByRole("button", { name: "Delete client" })
      .click();
    await expect.poll(() => rows().allTextContents()).toHaveLength(1);
    expect(await page.getByRole("status").first().textContent()).toBe("API client model uploads was deleted.");
  });

  it("counts a name's characters as the API does: 100 emoji are a valid name, 101 letters are not", async () => {
    page = await browser.newPage({ viewport: viewports.wide });
    await signIn(page, platform.url, platform.adminClient, "/console/clients");
    const form = page.getByRole("form", { name: "Create an API client" });
    await page.getByLabel("modeler:read").check();
    await page.getByLabel("Name").fill("a".repeat(101));
    await form.getByRole("button", { name: "Create client" }).click();
    expect(await form.locator(".field-error").allTextContents()).toEqual(["A name has at most 100 characters.", ""]);
    // Each of these takes two UTF-16 units, which HTML's maxlength and String.length count.
    const emoji = "\u{1F680}".repeat(100);
    await page.getByLabel("Name").fill(emoji);
    await form.getByRole("button", { name: "Create client" }).click();
    await page.getByRole("region", { name: `API client ${emoji} was created` }).waitFor();
  });

  it("fits a phone's width", async () => {
    page = await browser.newPage({ viewport: viewports.narrow });
    await signIn(page, platform.url, platform.adminClient, "/console/clients");
    await expect.poll(() => rows().count()).toBeGreaterThan(0);
    expect(await horizontalOverflow(page)).toBeLessThanOrEqual(0);
    await expectAccessible(page, "organization clients at phone width");
  });
});
