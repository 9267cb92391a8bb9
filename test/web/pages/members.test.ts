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

describe.runIf(browserAvailable())("console members page", () => {
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

  /** The members as the Administration API lists them, read with the page's own client. */
  async function membersTable(): Promise<string[]> {
    const table = page.getByRole("table", { name: "Members of the organization" });
    await table.waitFor();
    return await table.locator("tbody tr").allTextContents();
  }

  it("invites a member with inline validation, changes its roles and removes it after confirmation", async () => {
    page = await browser.newPage({ viewport: viewports.wide });
    const violations = collectPolicyViolations(page);
    await signIn(page, platform.url, platform.adminClient, "/console/members");
    expect((await membersTable()).join("\n")).toContain("owner");
    await expectAccessible(page, "members");

    // Nothing is sent while the form is invalid; each problem is shown next to its field.
    const form = page.getByRole("form", { name: "Invite a member or change roles" });
    await page.getByLabel("Email").fill("not an address");
    await form.getByRole("button", { name: "Invite or change roles" }).click();
    expect(await page.locator(".field-error").allTextContents()).toEqual([
      "Enter an email address such as ada@example.com.",
      "Choose at least one role.",
    ]);
    expect(await page.getByLabel("Email").getAttribute("aria-invalid")).toBe("true");
    await expectAccessible(page, "members with invalid input");

    await page.getByLabel("Email").fill("ada@example.com");
    await page.getByLabel("developer").check();
    await form.getByRole("button", { name: "Invite or change roles" }).click();
    await expect.poll(membersTable).toContainEqual(expect.stringContaining("ada@example.com"));
    expect((await membersTable()).find((row) => row.includes("ada@example.com"))).toContain("developerpending");

    await page.getByRole("button", { name: "Change roles of ada@example.com" }).click();
    expect(await page.getByLabel("Email").inputValue()).toBe("ada@example.com");
    expect(await page.getByLabel("developer").isChecked()).toBe(true);
    await page.getByLabel("analyst").check();
    await form.getByRole("button", { name: "Invite or change roles" }).click();
    await expect
      .poll(async () => (await membersTable()).find((row) => row.includes("ada@example.com")))
      .toContain("analyst, developer");

    // Cancelling the confirmation keeps the member; confirming removes it.
    await page.getByRole("button", { name: "Remove ada@example.com" }).click();
    await page.getByRole("dialog", { name: "Remove member" }).getByRole("button", { name: "Cancel" }).click();
    expect((await membersTable()).join("\n")).toContain("ada@example.com");
    await page.getByRole("button", { name: "Remove ada@example.com" }).click();
    await expectAccessible(page, "remove member dialog");
    await page.getByRole("dialog", { name: "Remove member" }).getByRole("button", { name: "Remove" }).click();
    await expect.poll(async () => (await membersTable()).join("\n")).not.toContain("ada@example.com");
    expect(await page.getByRole("status").first().textContent()).toBe("ada@example.com was removed.");
    expect(violations).toEqual([]);
    await saveScreenshot(page, "console-members");
  });

  it("works by keyboard alone at phone width", async () => {
    page = await browser.newPage({ viewport: viewports.narrow });
    await signIn(page, platform.url, platform.adminClient, "/console/members");
    await membersTable();
    await page.getByLabel("Email").focus();
    await page.keyboard.type("grace@example.com");
    // Tab to the first role box, tick it with the space bar, tab on to the submit button and press Enter.
    await page.keyboard.press("Tab");
    await page.keyboard.press("Space");
    let focused = "";
    for (let step = 0; step < 10 && focused !== "Invite or change roles"; step += 1) {
      await page.keyboard.press("Tab");
      focused = await focusedText(page);
    }
    expect(focused).toBe("Invite or change roles");
    await page.keyboard.press("Enter");
    await expect.poll(membersTable).toContainEqual(expect.stringContaining("grace@example.com"));
    expect(await horizontalOverflow(page)).toBeLessThanOrEqual(0);
    await expectAccessible(page, "members at phone width");
    await saveScreenshot(page, "console-members-narrow");
  });
});
