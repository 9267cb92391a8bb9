/**
 * The scaling page against a real three-broker cluster of the local provisioner: the dry-run plan as before/after
 * grids and operations, the change started after confirming and watched to its end; and, with the management API's
 * answers replaced, how a running change's progress is shown and cancelled.
 */
import type { Browser, Page } from "playwright-core";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { clusterParameters, planTypes } from "../../../src/platform/admin/clusters/parameters.js";
import { browserAvailable, launchBrowser } from "../../support/browser.js";
import { eventually } from "../../support/cluster.js";
import {
  collectPolicyViolations,
  expectAccessible,
  saveScreenshot,
  signIn,
  viewports,
} from "../../support/console-page.js";
import { startTestPlatform, type TestPlatform } from "../../support/platform.js";
import { requestToken } from "../../support/tokens.js";

const clusterStartMs = 150_000;

describe.runIf(browserAvailable())("console scaling page", () => {
  let platform: TestPlatform;
  let browser: Browser;
  let page: Page;
  let clusterId: string;
  let managementUrl: string;

  beforeAll(async () => {
    platform = await startTestPlatform(
      { "service.provisioner.healthCheckIntervalMs": 200, "service.log.level": "warn" },
      { localClusters: { createPrimaryCluster: false, readyTimeoutMs: 120_000 } },
    );
    browser = await launchBrowser();
    const token = await requestToken(platform, platform.adminClient, "admin-api");
    const parameters = clusterParameters();
    const channel = parameters.channels[0]!;
    const created = await fetch(`${platform.url}/admin/clusters`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify({
        name: "payments",
        planTypeId: planTypes.find((plan) => plan.shape.brokers === 3)!.uuid,
        channelId: channel.uuid,
        generationId: channel.defaultGeneration.uuid,
        regionId: parameters.regions[0]!.uuid,
      }),
    });
    clusterId = ((await created.json()) as { clusterId: string }).clusterId;
    managementUrl = await eventually("cluster Healthy", clusterStartMs, async () => {
      const response = await fetch(`${platform.url}/admin/clusters/${clusterId}`, {
        headers: { authorization: `Bearer ${token}` },
      });
      const cluster = (await response.json()) as { status: { ready: string }; links: { management: string } };
      return cluster.status.ready === "Healthy" ? cluster.links.management : undefined;
    });
  }, clusterStartMs + 30_000);
  afterEach(async () => {
    await page?.close();
  });
  afterAll(async () => {
    await browser?.close();
    await platform?.close();
  });

  it("plans a new replication factor as a dry run, starts it after confirming and watches it complete", async () => {
    page = await browser.newPage({ viewport: viewports.wide });
    const violations = collectPolicyViolations(page);
    await signIn(page, platform.url, platform.adminClient, `/console/clusters/${clusterId}`);
    await page.getByRole("link", { name: "Scale this cluster" }).click();
    await page.getByRole("heading", { name: "Scaling payments" }).waitFor();
    // The form starts from today's shape, read from the management API.
    await expect.poll(() => page.getByLabel("Brokers").inputValue()).toBe("3");
    expect(await page.getByLabel("Replication factor").inputValue()).toBe("3");
    expect(await page.getByLabel("Partitions").inputValue()).toBe("3");
    await page.getByRole("table", { name: "Current configuration" }).waitFor();

    // A replication factor above the broker count is refused in the form, naming the field.
    await page.getByLabel("Replication factor").fill("4");
    await page.getByRole("button", { name: "Plan (dry run)" }).click();
    expect(await page.getByRole("alert").textContent()).toContain("Replication factor: a whole number from 1");
    expect(await page.getByLabel("Replication factor").getAttribute("aria-invalid")).toBe("true");

    await page.getByLabel("Replication factor").fill("2");
    await page.getByRole("button", { name: "Plan (dry run)" }).click();
    const plan = page.getByRole("region", { name: /^Plan: \d+ operations/ });
    await page.getByRole("heading", { name: /^Plan: \d+ operations \(dry run, nothing recorded\)$/ }).waitFor();
    expect(await plan.count()).toBe(1);
    const operations = await page
      .getByRole("list")
      .filter({ hasText: "PARTITION_LEAVE" })
      .locator("li")
      .allTextContents();
    expect(operations.filter((operation) => operation.startsWith("PARTITION_LEAVE"))).toHaveLength(3);
    const after = page.getByRole("table", { name: "After" });
    expect(await after.locator("td.removed").count()).toBe(3);
    expect(await page.getByRole("table", { name: "Before" }).locator("td.replica:not(.none)").count()).toBe(9);
    // A dry run records nothing: no change runs and the configuration is unchanged.
    const status = (await (
      await fetch(`${managementUrl}/actuator/cluster`, {
        headers: { authorization: `Bearer ${await requestToken(platform, platform.adminClient, "gateway-api")}` },
      })
    ).json()) as { pendingChange?: unknown; lastChange?: unknown };
    expect(status.pendingChange).toBeUndefined();
    expect(status.lastChange).toBeUndefined();
    await expectAccessible(page, "scaling plan");
    await saveScreenshot(page, "console-scaling-plan");

    await page.getByRole("button", { name: "Start the change" }).click();
    await page.getByRole("dialog", { name: "Start the change" }).getByRole("button", { name: "Start" }).click();
    await page.getByRole("heading", { name: /^Change \d+ COMPLETED$/ }).waitFor({ timeout: 60_000 });
    const current = page.getByRole("table", { name: "Current configuration" });
    await expect.poll(() => current.locator("td.replica:not(.none)").count(), { timeout: 30_000 }).toBe(6);
    expect(violations).toEqual([]);
    await saveScreenshot(page, "console-scaling-completed");
  }, 120_000);

  it("shows a running change's progress, each operation's state, and cancels it after confirming", async () => {
    page = await browser.newPage({ viewport: viewports.narrow });
    const origin = new URL(platform.url).origin;
    const running = {
      version: 9,
      brokers: [
        {
          id: 0,
          state: "ACTIVE",
          version: 3,
          lastUpdatedAt: "2026-11-25T04:00:00.000Z",
          partitions: [{ id: 1, state: "ACTIVE", priority: 1 }],
        },
        { id: 1, state: "JOINING", version: 1, lastUpdatedAt: "2026-11-25T04:00:00.000Z", partitions: [] },
      ],
      pendingChange: {
        id: 7,
        status: "IN_PROGRESS",
        startedAt: "2026-11-25T04:00:00.000Z",
        completed: [{ operation: "BROKER_ADD", brokerId: 1, completedAt: "2026-11-25T04:00:01.000Z" }],
        pending: [
          { operation: "PARTITION_JOIN", brokerId: 1, partitionId: 1, priority: 1 },
          { operation: "PARTITION_LEAVE", brokerId: 0, partitionId: 1 },
        ],
        progress: {
          operation: { operation: "PARTITION_JOIN", brokerId: 1, partitionId: 1, priority: 1 },
          startedAt: "2026-11-25T04:00:01.000Z",
          attempts: 2,
          lastError: "snapshot transfer interrupted",
          bytesTotal: 4 * 1024 * 1024,
          bytesMoved: 1024 * 1024,
          estimatedSecondsLeft: 30,
        },
      },
      routing: {},
    };
    let cancelled = false;
    const cors = { "access-control-allow-origin": origin };
    await page.route(`${managementUrl}/actuator/cluster`, async (route) => {
      if (route.request().method() !== "GET") return await route.fallback();
      const { pendingChange: _running, ...rest } = running;
      const body = cancelled
        ? {
            ...rest,
            lastChange: {
              id: 7,
              status: "CANCELLED",
              startedAt: running.pendingChange.startedAt,
              completedAt: "2026-11-25T04:00:05.000Z",
            },
          }
        : running;
      await route.fulfill({ status: 200, contentType: "application/json", headers: cors, body: JSON.stringify(body) });
    });
    await page.route(`${managementUrl}/actuator/cluster/changes/7`, async (route) => {
      if (route.request().method() === "OPTIONS") return await route.fallback();
      expect(route.request().method()).toBe("DELETE");
      cancelled = true;
      await route.fulfill({
        status: 200,
        contentType: "application/json",
        headers: cors,
        body: JSON.stringify(running),
      });
    });
    await signIn(page, platform.url, platform.adminClient, `/console/clusters/${clusterId}/scaling`);
    await page.getByRole("heading", { name: "Change 7 in progress" }).waitFor();
    const bar = page.getByRole("progressbar", { name: "1 of 3 operations done" });
    expect(await bar.getAttribute("value")).toBe("1");
    expect(await bar.getAttribute("max")).toBe("3");
    const steps = await page.locator("ol.operations li").allTextContents();
    expect(steps[0]).toMatch(/^done BROKER_ADD broker 1 at /);
    expect(steps[1]).toBe(
      "running PARTITION_JOIN broker 1 partition 1 (priority 1) (1.0 MiB of 4.0 MiB moved, about 30 s left, attempt 2, last error: snapshot transfer interrupted)",
    );
    expect(steps[2]).toBe("pending PARTITION_LEAVE broker 0 partition 1");
    // No new change can be planned while one runs.
    expect(await page.getByRole("button", { name: "Plan (dry run)" }).isVisible()).toBe(false);
    await expectAccessible(page, "running change");
    await saveScreenshot(page, "console-scaling-running");

    await page.getByRole("button", { name: "Cancel the change" }).click();
    const dialog = page.getByRole("dialog", { name: "Cancel the change" });
    await dialog.getByRole("button", { name: "Cancel", exact: true }).click();
    expect(cancelled).toBe(false);
    await page.getByRole("button", { name: "Cancel the change" }).click();
    await dialog.getByRole("button", { name: "Cancel the change" }).click();
    await page.getByRole("heading", { name: "Change 7 CANCELLED" }).waitFor();
    expect(cancelled).toBe(true);
    expect(await page.getByText("Change 7 was cancelled.").count()).toBe(1);
  });
});
