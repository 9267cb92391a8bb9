/**
 * The clusters pages against a real platform running real clusters (the local provisioner's broker and gateway
 * processes): create one through the form, watch its status turn Healthy, see its live topology read from its
 * gateway across origins, and delete it with the typed confirmation.
 */
import type { Browser, Page } from "playwright-core";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { browserAvailable, launchBrowser } from "../../support/browser.js";
import {
  collectPolicyViolations,
  expectAccessible,
  horizontalOverflow,
  saveScreenshot,
  signIn,
  viewports,
} from "../../support/console-page.js";
import { startTestPlatform, type TestPlatform } from "../../support/platform.js";
import { createTestClient } from "../../support/tokens.js";

/** Starting three brokers and a gateway on a loaded two-core machine takes a while. */
const clusterStartMs = 150_000;

describe.runIf(browserAvailable())("console clusters pages", () => {
  let platform: TestPlatform;
  let browser: Browser;
  let page: Page;

  beforeAll(async () => {
    platform = await startTestPlatform(
      { "service.provisioner.healthCheckIntervalMs": 200, "service.log.level": "warn" },
      { localClusters: { createPrimaryCluster: false, readyTimeoutMs: 120_000 } },
    );
    browser = await launchBrowser();
  });
  afterEach(async () => {
    await page?.close();
  });
  afterAll(async () => {
    await browser?.close();
    await platform?.close();
  });

  function clusterRows(): Promise<string[]> {
    return page.getByRole("table", { name: "Clusters of the organization" }).locator("tbody tr").allTextContents();
  }

  it(
    "creates a cluster, follows it to Healthy, shows its live topology and deletes it after typing its name",
    async () => {
      page = await browser.newPage({ viewport: viewports.wide });
      const violations = collectPolicyViolations(page);
      await signIn(page, platform.url, platform.adminClient, "/console/clusters");
      await page.getByText("The organization has no clusters yet.").waitFor();
      const form = page.getByRole("form", { name: "Create a cluster" });
      await form.waitFor();
      await expectAccessible(page, "clusters");

      // Nothing is sent without a name; the error names the field.
      await form.getByRole("button", { name: "Create cluster" }).click();
      expect(await page.locator(".field-error").first().textContent()).toBe("Enter a name.");
      expect(await page.getByLabel("Name").getAttribute("aria-invalid")).toBe("true");

      await page.getByLabel("Name").fill("orders");
      await page.getByLabel("Plan").selectOption({ label: "Standard (3 brokers, 3 partitions, replication factor 3)" });
      expect(await page.getByLabel("Generation").locator("option").allTextContents()).toEqual([
        expect.stringMatching(/^flowplane .+ \(default\)$/),
      ]);
      await page.getByLabel("Stage").selectOption("dev");
      await form.getByRole("button", { name: "Create cluster" }).click();
      await expect.poll(clusterRows).toEqual([expect.stringContaining("orders")]);
      // The list follows the status by itself, without a reload.
      await expect
        .poll(async () => (await clusterRows()).join(""), { timeout: clusterStartMs, interval: 500 })
        .toContain("Healthy");

      await page.getByRole("link", { name: "orders" }).click();
      await page.getByRole("heading", { name: "Cluster orders" }).waitFor();
      const grid = page.getByRole("table", { name: "Partitions by broker" });
      await grid.waitFor({ timeout: 30_000 });
      expect(await grid.locator("thead th").allTextContents()).toEqual([
        "Partition",
        "Leader",
        "Replicas",
        "Broker 0",
        "Broker 1",
        "Broker 2",
      ]);
      await expect
        .poll(() => page.getByText("Every partition has a leader and all of its replicas.").count(), {
          timeout: 30_000,
        })
        .toBe(1);
      const rows = await grid.locator("tbody tr").allTextContents();
      expect(rows).toHaveLength(3);
      for (const row of rows) expect(row).toMatch(/broker \d3 of 3/);
      // Every partition has one leader among its replicas, each with its election priority.
      expect(await grid.locator("td.role-leader").count()).toBe(3);
      expect(await grid.locator("td.replica").filter({ hasText: "priority" }).count()).toBe(9);
      // Key metrics from the cluster's Prometheus endpoint, read across origins like the topology.
      await expect.poll(() => page.getByText("Brokers reachable: 3").count(), { timeout: 30_000 }).toBe(1);
      await expect.poll(() => page.locator("figure.metric polyline").count(), { timeout: 30_000 }).toBe(4);
      expect(await page.locator("figure.metric figcaption").allTextContents()).toEqual([
        expect.stringMatching(/^REST requests per second: [\d.]+ \/s$/),
        expect.stringMatching(/^REST requests in flight: \d+$/),
        expect.stringMatching(/^Records applied per second: [\d.]+ \/s$/),
        "Brokers reachable: 3",
      ]);
      await expectAccessible(page, "cluster overview");
      expect(violations).toEqual([]);
      await saveScreenshot(page, "console-cluster-overview");
      await page.setViewportSize(viewports.narrow);
      expect(await horizontalOverflow(page)).toBeLessThanOrEqual(0);
      await expectAccessible(page, "cluster overview at phone width");
      await saveScreenshot(page, "console-cluster-overview-narrow");
      await page.setViewportSize(viewports.wide);

      await page.getByRole("link", { name: "All clusters" }).click();
      await page.getByRole("button", { name: "Delete cluster orders" }).click();
      const dialog = page.getByRole("dialog", { name: "Delete cluster" });
      const confirm = dialog.getByRole("button", { name: "Delete cluster" });
      expect(await confirm.isDisabled()).toBe(true);
      await dialog.getByLabel("Type orders to confirm").fill("order");
      expect(await confirm.isDisabled()).toBe(true);
      await dialog.getByLabel("Type orders to confirm").fill("orders");
      await expectAccessible(page, "delete cluster dialog");
      await confirm.click();
      await page.getByText("The organization has no clusters yet.").waitFor({ timeout: 60_000 });
      expect(await page.getByRole("status").first().textContent()).toBe("Cluster orders was deleted.");
      await saveScreenshot(page, "console-cluster-deleted");
    },
    clusterStartMs + 120_000,
  );

  it("says why a cluster is not Healthy when the API gives a reason", async () => {
    page = await browser.newPage({ viewport: viewports.narrow });
    const reference = { uuid: "00000000-0000-4000-8000-000000000001", name: "local" };
    const unhealthy = {
      uuid: "5b0c3a1e-0000-4000-8000-000000000002",
      name: "billing",
      ownerId: "owner",
      created: "2026-11-25T04:00:00.000Z",
      autoUpdate: false,
      channel: reference,
      generation: reference,
      region: reference,
      planType: reference,
      status: { ready: "Unhealthy", gatewayStatus: "Unhealthy", reason: "broker 1 exited unexpectedly; restarting" },
      links: { gateway: "http://127.0.0.1:1", management: "http://127.0.0.1:1", oauth: "", console: "" },
      ipallowlist: [],
    };
    await page.route(`${platform.url}/admin/clusters`, (route) =>
      route.request().method() === "GET"
        ? route.fulfill({ status: 200, contentType: "application/json", body: JSON.stringify([unhealthy]) })
        : route.fallback(),
    );
    await signIn(page, platform.url, platform.adminClient, "/console/clusters");
    await expect.poll(clusterRows).toEqual([expect.stringContaining("broker 1 exited unexpectedly; restarting")]);
    expect((await clusterRows())[0]).toContain("Unhealthy");
    await expectAccessible(page, "clusters with an unhealthy one");
    await saveScreenshot(page, "console-clusters-unhealthy");
  });

  it("shows no clusters page to a client without the cluster scope", async () => {
    const membersOnly = await createTestClient(platform, ["members"]);
    page = await browser.newPage({ viewport: viewports.wide });
    await signIn(page, platform.url, membersOnly);
    const navigation = page.getByRole("navigation", { name: "Console" });
    expect(await navigation.getByRole("link").allTextContents()).toEqual(["Overview", "Members", "Activity"]);
  });
});
