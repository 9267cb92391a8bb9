/**
 * The Backups tab against a real platform and a real one-broker cluster of the local provisioner: a backup taken from
 * the console and followed to Complete, the backup schedule set (the platform's refusal shown on its field) and
 * removed, a restore started after typing the backup's id and still followed after the page was reloaded, and the
 * backup deleted.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
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
import { createHealthyCluster } from "../../support/provisioned-clusters.js";
import { requestToken } from "../../support/tokens.js";

const clusterStartMs = 120_000;

describe.runIf(browserAvailable())("console backups tab on a real cluster", () => {
  let platform: TestPlatform;
  let browser: Browser;
  let page: Page;
  let dataDirectory: string;
  let adminToken: string;
  let clusterId: string;

  async function admin(method: string, path: string): Promise<Response> {
    return await fetch(`${platform.url}/admin/clusters/${clusterId}${path}`, {
      method,
      headers: { authorization: `Bearer ${adminToken}` },
    });
  }

  beforeAll(async () => {
    dataDirectory = mkdtempSync(join(tmpdir(), "flowplane-console-backups-"));
    platform = await startTestPlatform(
      { "service.provisioner.healthCheckIntervalMs": 200, "service.log.level": "warn" },
      { dataDirectory, localClusters: { createPrimaryCluster: false, readyTimeoutMs: clusterStartMs } },
    );
    browser = await launchBrowser();
    adminToken = await requestToken(platform, platform.adminClient, "admin-api");
    ({ clusterId } = await createHealthyCluster(platform, adminToken, {
      name: "ledger",
      brokers: 1,
      timeoutMs: clusterStartMs,
    }));
  }, clusterStartMs + 30_000);
  afterEach(async () => {
    await page?.close();
  });
  afterAll(async () => {
    await browser?.close();
    await platform?.close();
    if (dataDirectory !== undefined) rmSync(dataDirectory, { recursive: true, force: true });
  }, 60_000);

  it("takes a backup, sets and removes a schedule, restores with progress across a reload and deletes the backup", async () => {
    page = await browser.newPage({ viewport: viewports.wide });
    const violations = collectPolicyViolations(page);
    const backupsPath = `/console/clusters/${clusterId}/backups`;
    await signIn(page, platform.url, platform.adminClient, backupsPath);
    await page.getByText("The cluster has no backups yet.").waitFor();
    await page.getByText("No schedule: backups are taken only when someone asks for one.").waitFor();

    await page.getByRole("button", { name: "Take a backup" }).click();
    const started = page.getByText(/^Backup \d+ was started\.$/);
    await started.waitFor();
    const backupId = /^Backup (\d+) was started\.$/.exec((await started.textContent()) ?? "")![1]!;
    const rows = page.getByRole("table", { name: "Backups of the cluster" }).locator("tbody tr");
    // The list follows the backup by itself until the cluster reports it complete.
    await expect
      .poll(() => rows.allTextContents(), { timeout: 60_000 })
      .toEqual([expect.stringMatching(new RegExp(`^${backupId}Complete`))]);
    const listed = (await (await admin("GET", "/backups")).json()) as { uuid: string; status: string }[];
    expect(listed).toEqual([expect.objectContaining({ uuid: backupId, status: "Complete" })]);

    // The schedule: the shape is checked in the form, the platform's verdict lands on the field it names.
    const cron = page.getByLabel("Schedule (cron, UTC)");
    await cron.fill("0 3 * *");
    await page.getByRole("button", { name: "Save schedule" }).click();
    expect(await page.getByText("A cron expression has five fields").count()).toBe(1);
    expect(await cron.getAttribute("aria-invalid")).toBe("true");
    await cron.fill("*/5 * * * *");
    await page.getByRole("button", { name: "Save schedule" }).click();
    await page.getByText(/^The expression runs 5 minutes apart at its shortest/).waitFor();
    expect(await admin("GET", "/backups/schedule").then((response) => response.status)).toBe(404);
    await cron.fill("0 3 * * *");
    await page.getByLabel("Backups to keep").fill("3");
    await page.getByRole("button", { name: "Save schedule" }).click();
    await page.getByText("The backup schedule was saved.").waitFor();
    expect(await cron.getAttribute("aria-invalid")).toBe("false");
    expect(await (await admin("GET", "/backups/schedule")).json()).toMatchObject({ cron: "0 3 * * *", keep: 3 });
    expect(await page.getByText("the newest 3 complete backups").count()).toBe(1);
    await expectAccessible(page, "backups with a schedule");
    await saveScreenshot(page, "console-cluster-backups-schedule");
    // A schedule whose last runs could not start a backup says why and when it tries again (the platform's answer,
    // with the failure a refused run records, since no run comes due during this test).
    const schedulePath = `**/admin/clusters/${clusterId}/backups/schedule`;
    await page.route(schedulePath, async (route) => {
      if (route.request().method() !== "GET") return await route.continue();
      const response = await route.fetch();
      await route.fulfill({ response, json: { ...(await response.json()), ...failure } });
    });
    let failure: Record<string, unknown> = {
      lastFailure: "Another configuration change [7] is in progress.",
      consecutiveFailures: 2,
      retryAt: "2026-01-01T03:03:10.000Z",
      retrying: false,
    };
    // A reload drops the session (tokens live in memory only): signing in again shows the tab anew.
    await page.reload();
    await signIn(page, platform.url, platform.adminClient, backupsPath);
    await page
      .getByText("2 runs in a row could not start a backup: Another configuration change [7] is in progress.")
      .waitFor();
    expect(await page.getByText("Tried again at").count()).toBe(1);
    // A retry under way says so, rather than leaving it to the next scheduled run.
    failure = { ...failure, retryAt: null, retrying: true };
    await page.reload();
    await signIn(page, platform.url, platform.adminClient, backupsPath);
    await page.getByText("It is being tried again now.").waitFor();
    expect(await page.getByText("The next scheduled run tries again.").count()).toBe(0);
    await page.unroute(schedulePath);
    await page.reload();
    await signIn(page, platform.url, platform.adminClient, backupsPath);
    await page.getByText("the newest 3 complete backups").waitFor();
    expect(await page.getByText("could not start a backup").count()).toBe(0);
    await page.getByRole("button", { name: "Remove schedule" }).click();
    await page
      .getByRole("dialog", { name: "Remove the backup schedule" })
      .getByRole("button", { name: "Remove schedule" })
      .click();
    await page.getByText("The backup schedule was removed.").waitFor();
    expect(await admin("GET", "/backups/schedule").then((response) => response.status)).toBe(404);

    await page.getByRole("button", { name: `Restore from backup ${backupId}` }).click();
    const dialog = page.getByRole("dialog", { name: "Restore the cluster" });
    const confirm = dialog.getByRole("button", { name: "Restore" });
    expect(await confirm.isDisabled()).toBe(true);
    await dialog.getByLabel(`Type ${backupId} to confirm`).fill(backupId);
    await expectAccessible(page, "restore dialog");
    await confirm.click();
    await page.getByRole("region", { name: `Restore from backup ${backupId}` }).waitFor();

    // A reload drops the session (tokens live in memory only); after signing in again the restore is found and
    // followed to its end, whether it still runs or just ended.
    await page.reload();
    await signIn(page, platform.url, platform.adminClient, backupsPath);
    const progress = page.getByRole("region", { name: `Restore from backup ${backupId}` });
    await expect
      .poll(() => progress.getByText(`The cluster was restored from backup ${backupId} and runs again.`).count(), {
        timeout: 90_000,
      })
      .toBe(1);
    expect(await progress.locator("li").allTextContents()).toEqual([
      "Waiting to start (done)",
      "Checking the backup (done)",
      "Restoring every broker (done)",
      "Cluster restored and started (done)",
    ]);
    const restores = (await (await admin("GET", "/restores")).json()) as { backupId: string; state: string }[];
    expect(restores).toEqual([expect.objectContaining({ backupId, state: "COMPLETED" })]);
    // Reads that failed while the cluster was down leave no message behind once it answers again.
    await expect.poll(() => page.getByText(/could not be loaded/).count(), { timeout: 15_000 }).toBe(0);
    await expectAccessible(page, "restore completed");
    await saveScreenshot(page, "console-cluster-backups");

    await page.getByRole("button", { name: `Delete backup ${backupId}` }).click();
    await page.getByRole("dialog", { name: "Delete backup" }).getByRole("button", { name: "Delete backup" }).click();
    await page.getByText("The cluster has no backups yet.").waitFor({ timeout: 30_000 });
    expect(violations).toEqual([]);
  }, 300_000);
});
