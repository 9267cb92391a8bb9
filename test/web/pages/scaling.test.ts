/**
 * The scaling page against a real three-broker cluster of the local provisioner: a scale-up to four brokers planned
 * as a dry run (before/after grids, operations, warnings), started after confirming (the platform starts the new
 * broker first) and watched to its end; a real scale-up to five brokers cancelled while it runs; and, with the
 * management API's answers replaced, how a running operation's bytes, time left and retries are shown, and how a
 * gateway refusing the console's token is (shown on the page, with the session going on); and that a console opened
 * from another machine sends no token to the cluster's loopback address, which is that machine's own.
 */
import { existsSync } from "node:fs";
import type { Browser, Page, Route } from "playwright-core";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { brokerDataDirectory } from "../../../src/platform/provisioner/child-environment.js";
import type { LocalProvisioner } from "../../../src/platform/provisioner/local-provisioner.js";
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
import { createHealthyCluster } from "../../support/provisioned-clusters.js";
import { requestToken } from "../../support/tokens.js";

const clusterStartMs = 150_000;

describe.runIf(browserAvailable())("console scaling page", () => {
  let platform: TestPlatform;
  let browser: Browser;
  let page: Page;
  let clusterId: string;
  let managementUrl: string;
  let gatewayUrl: string;
  const provisioner = (): LocalProvisioner => platform.running.provisioner as LocalProvisioner;
  const gatewayToken = async (): Promise<string> => await requestToken(platform, platform.adminClient, "gateway-api");

  beforeAll(async () => {
    platform = await startTestPlatform(
      { "service.provisioner.healthCheckIntervalMs": 200, "service.log.level": "warn" },
      { localClusters: { createPrimaryCluster: false, readyTimeoutMs: 120_000 } },
    );
    browser = await launchBrowser();
    const token = await requestToken(platform, platform.adminClient, "admin-api");
    const created = await createHealthyCluster(platform, token, {
      name: "payments",
      brokers: 3,
      timeoutMs: clusterStartMs,
    });
    clusterId = created.clusterId;
    const links = created.links;
    managementUrl = links.management;
    gatewayUrl = links.gateway;
  }, clusterStartMs + 30_000);
  afterEach(async () => {
    await page?.close();
  });
  afterAll(async () => {
    await browser?.close();
    await platform?.close();
  });

  it("previews a scale-up as a dry run, runs it after confirming (the platform starts the broker) and watches it complete", async () => {
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

    await page.getByLabel("Replication factor").fill("3");
    await page.getByLabel("Brokers").fill("4");
    await page.getByRole("button", { name: "Plan (dry run)" }).click();
    await page.getByRole("heading", { name: /^Plan: \d+ operations \(dry run, nothing recorded\)$/ }).waitFor();
    const operations = await page.locator("ol.operations li").allTextContents();
    expect(operations[0]).toBe("BROKER_ADD broker 3");
    expect(operations.filter((operation) => operation.startsWith("PARTITION_JOIN broker 3"))).toHaveLength(2);
    expect(await page.getByRole("note").filter({ hasText: "The platform starts broker 3 before" }).count()).toBe(1);
    const after = page.getByRole("table", { name: "After" });
    expect(await after.getByRole("columnheader", { name: "Broker 3" }).count()).toBe(1);
    expect(await page.getByRole("table", { name: "Before" }).getByRole("columnheader").count()).toBe(4);
    // A dry run starts and records nothing: no change runs, the configuration and the brokers are unchanged.
    const status = (await (
      await fetch(`${managementUrl}/actuator/cluster`, { headers: { authorization: `Bearer ${await gatewayToken()}` } })
    ).json()) as { pendingChange?: unknown; lastChange?: unknown };
    expect(status.pendingChange).toBeUndefined();
    expect(status.lastChange).toBeUndefined();
    expect((await provisioner().brokers(clusterId)).map((broker) => broker.nodeId)).toEqual([0, 1, 2]);
    await expectAccessible(page, "scaling plan");
    await saveScreenshot(page, "console-scaling-plan");

    await page.getByRole("button", { name: "Start the change" }).click();
    const dialog = page.getByRole("dialog", { name: "Start the change" });
    expect(await dialog.textContent()).toContain("The platform starts broker 3 first.");
    await dialog.getByRole("button", { name: "Start" }).click();
    await page.getByRole("heading", { name: /^Change \d+ COMPLETED$/ }).waitFor({ timeout: 90_000 });
    const current = page.getByRole("table", { name: "Current configuration" });
    await expect
      .poll(() => current.getByRole("columnheader", { name: "Broker 3" }).count(), { timeout: 30_000 })
      .toBe(1);
    expect(await current.locator("td.replica:not(.none)").count()).toBe(9);
    // The gateway's topology shows the new broker hosting replicas.
    const topology = await eventually("broker 3 in /v2/topology", 30_000, async () => {
      const response = await fetch(`${gatewayUrl}/v2/topology`, {
        headers: { authorization: `Bearer ${await gatewayToken()}` },
      });
      const document = (await response.json()) as { brokers: { nodeId: number; partitions: unknown[] }[] };
      const added = document.brokers.find((broker) => broker.nodeId === 3);
      return added !== undefined && added.partitions.length > 0 ? document : undefined;
    });
    expect(topology.brokers.map((broker) => broker.nodeId).sort()).toEqual([0, 1, 2, 3]);
    expect(violations).toEqual([]);
    await expectAccessible(page, "completed scale-up");
    await saveScreenshot(page, "console-scaling-completed");
  }, 180_000);

  it("shows a running change's bytes moved, time left, attempts and last error (answers replaced)", async () => {
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
    const cors = { "access-control-allow-origin": origin };
    await page.route(`${managementUrl}/actuator/cluster`, async (route) => {
      if (route.request().method() !== "GET") return await route.fallback();
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

    expect(await page.getByRole("button", { name: "Cancel the change" }).isVisible()).toBe(true);
  });

  it("shows a gateway's refusal of the console's token on the page and stays signed in (answers replaced)", async () => {
    page = await browser.newPage({ viewport: viewports.wide });
    const origin = new URL(platform.url).origin;
    // What a gateway answers while it does not yet know the key a token was signed with, though the platform does.
    const refusal = (route: Route) =>
      route.fulfill({
        status: 401,
        contentType: "application/problem+json",
        headers: { "access-control-allow-origin": origin },
        body: JSON.stringify({
          type: "about:blank",
          title: "Authentication is required",
          status: 401,
          detail: "The token was signed with a key this gateway does not know.",
        }),
      });
    await page.route(`${gatewayUrl}/v2/topology`, refusal);
    await page.route(`${managementUrl}/actuator/cluster`, refusal);
    const refused =
      "The cluster's gateway refused the console's token: The token was signed with a key this gateway does not know.";
    await signIn(page, platform.url, platform.adminClient, `/console/clusters/${clusterId}`);
    await page.getByText(`The topology could not be read: ${refused}`).waitFor();
    await page.getByRole("link", { name: "Scale this cluster" }).click();
    await page.getByText(`The cluster's configuration could not be read: ${refused}`).waitFor();
    await expectAccessible(page, "gateway refusing the token");
    await saveScreenshot(page, "console-gateway-refused-token");
    // The session goes on: another page opens without signing in again.
    await page.getByRole("link", { name: "Members" }).click();
    await page.getByRole("table", { name: "Members of the organization" }).waitFor();
    expect(await page.getByRole("button", { name: "Sign out" }).count()).toBe(1);
    expect(await page.getByLabel("Client secret").count()).toBe(0);
  });

  it("sends no token to a cluster at a loopback address when the console is opened from another machine", async () => {
    page = await browser.newPage({ viewport: viewports.wide });
    // The console as a remote browser sees it: loaded from a name of the platform's machine that is not loopback.
    const remote = "http://flowplane.test";
    await page.route(`${remote}/**`, async (route) => {
      const url = new URL(route.request().url());
      await route.fulfill({ response: await route.fetch({ url: `${platform.url}${url.pathname}${url.search}` }) });
    });
    const clusterOrigins = new Set([new URL(gatewayUrl).origin, new URL(managementUrl).origin]);
    const clusterRequests: string[] = [];
    page.on("request", (request) => {
      const url = new URL(request.url());
      // The metrics carry no token, so the console still asks for them.
      if (clusterOrigins.has(url.origin) && url.pathname !== "/actuator/prometheus")
        clusterRequests.push(request.url());
    });
    const ownMachine = (url: string) =>
      `The cluster's gateway listens at ${new URL(url).origin}, which is this browser's own machine, so the console can show this cluster only when it is opened on the platform's machine`;
    await signIn(page, remote, platform.adminClient, `/console/clusters/${clusterId}`);
    await page.getByText(`The topology could not be read: ${ownMachine(gatewayUrl)}`).waitFor();
    await page.getByRole("link", { name: "Scale this cluster" }).click();
    await page.getByText(`The cluster's configuration could not be read: ${ownMachine(managementUrl)}`).waitFor();
    await expectAccessible(page, "cluster at the viewer's own machine");
    await saveScreenshot(page, "console-cluster-on-own-machine");
    expect(clusterRequests).toEqual([]);
    expect(await page.getByRole("button", { name: "Sign out" }).count()).toBe(1);
  });

  it("cancels a real running scale-up after confirming; operations already applied stay applied", async () => {
    // After the scale-up to four brokers, partition 3 has replicas on brokers 2, 3 and 0. A scale-up to five joins
    // broker 4 to partition 3 (then broker 0 leaves it): with brokers 2 and 3 paused, partition 3 has no quorum and
    // the join cannot finish, so the change runs until it is cancelled. Broker 3 is paused first; a change needs a
    // majority of the four brokers to accept it, so broker 2 is paused only once the change is recorded, before the
    // join (which needs partition 3's quorum, brokers 0 and 2, to add the learner and promote it) can end.
    const cluster = await provisioner().whenStarted(clusterId);
    const pidOf = (nodeId: number): number => {
      const pid = cluster?.brokers.find((broker) => broker.nodeId === nodeId)?.pid;
      if (pid === undefined) throw new Error(`broker ${nodeId} does not run`);
      return pid;
    };
    const paused = [pidOf(3)];
    const pausedLater = pidOf(2);
    page = await browser.newPage({ viewport: viewports.narrow });
    const violations = collectPolicyViolations(page);
    for (const pid of paused) process.kill(pid, "SIGSTOP");
    try {
      await signIn(page, platform.url, platform.adminClient, `/console/clusters/${clusterId}/scaling`);
      await expect.poll(() => page.getByLabel("Brokers").inputValue()).toBe("4");
      await page.getByLabel("Brokers").fill("5");
      await page.getByRole("button", { name: "Plan (dry run)" }).click();
      await page.getByRole("heading", { name: "Plan: 3 operations (dry run, nothing recorded)" }).waitFor();
      expect(await page.locator("ol.operations li").allTextContents()).toEqual([
        "BROKER_ADD broker 4",
        "PARTITION_JOIN broker 4 partition 3 (priority 1)",
        "PARTITION_LEAVE broker 0 partition 3",
      ]);
      const token = await gatewayToken();
      const recorded = (async () => {
        // Bounded: 6,000 polls of at least 10 ms.
        for (let poll = 0; poll < 6_000; poll++) {
          const status = (await (
            await fetch(`${managementUrl}/actuator/cluster`, { headers: { authorization: `Bearer ${token}` } })
          ).json()) as { pendingChange?: { id: number } };
          if (status.pendingChange !== undefined) {
            process.kill(pausedLater, "SIGSTOP");
            paused.push(pausedLater);
            return;
          }
          await new Promise((resolve) => setTimeout(resolve, 10));
        }
        throw new Error("the change was never recorded");
      })();
      await page.getByRole("button", { name: "Start the change" }).click();
      await page.getByRole("dialog", { name: "Start the change" }).getByRole("button", { name: "Start" }).click();
      await recorded;
      const running = page.getByRole("heading", { name: /^Change \d+ in progress$/ });
      await running.waitFor({ timeout: 90_000 });
      const changeId = Number(/Change (\d+)/.exec((await running.textContent()) ?? "")?.[1]);
      // The new broker was started and added itself; the join waits for partition 3's quorum.
      await page.getByRole("progressbar", { name: "1 of 3 operations done" }).waitFor({ timeout: 60_000 });
      const steps = await page.locator("ol.operations li").allTextContents();
      expect(steps[0]).toMatch(/^done BROKER_ADD broker 4 at /);
      expect(steps[1]).toMatch(/^running PARTITION_JOIN broker 4 partition 3 \(priority 1\)/);
      expect(steps[2]).toBe("pending PARTITION_LEAVE broker 0 partition 3");
      await expectAccessible(page, "real running change");
      await saveScreenshot(page, "console-scaling-cancel");

      // Dismissing the confirmation cancels nothing: no DELETE leaves the page, even a moment later.
      const deletes: string[] = [];
      page.on("request", (request) => {
        if (request.method() === "DELETE") deletes.push(new URL(request.url()).pathname);
      });
      await page.getByRole("button", { name: "Cancel the change" }).click();
      const dialog = page.getByRole("dialog", { name: "Cancel the change" });
      await dialog.getByRole("button", { name: "Cancel", exact: true }).click();
      await page.waitForTimeout(500);
      expect(deletes).toEqual([]);
      const before = (await (
        await fetch(`${managementUrl}/actuator/cluster`, {
          headers: { authorization: `Bearer ${await gatewayToken()}` },
        })
      ).json()) as { pendingChange?: { id: number } };
      expect(before.pendingChange?.id).toBe(changeId);

      await page.getByRole("button", { name: "Cancel the change" }).click();
      await dialog.getByRole("button", { name: "Cancel the change" }).click();
      await page.getByRole("heading", { name: `Change ${changeId} CANCELLED` }).waitFor();
      // The page may show the outcome from its poll before the DELETE's own answer arrives: wait for both.
      await page.getByText(`Change ${changeId} was cancelled.`).waitFor();
      expect(deletes).toEqual([`/actuator/cluster/changes/${changeId}`]);
      const after = (await (
        await fetch(`${managementUrl}/actuator/cluster`, {
          headers: { authorization: `Bearer ${await gatewayToken()}` },
        })
      ).json()) as {
        pendingChange?: unknown;
        lastChange?: { id: number; status: string };
        earlierChanges?: { id: number; status: string }[];
        brokers: { id: number; partitions: { id: number }[] }[];
      };
      expect(after.pendingChange).toBeUndefined();
      expect(after.lastChange).toMatchObject({ id: changeId, status: "CANCELLED" });
      // The leave never ran: broker 0 keeps its replica of partition 3, and broker 4 stays a member.
      const brokerZero = after.brokers.find((broker) => broker.id === 0);
      expect(brokerZero?.partitions.map((partition) => partition.id)).toContain(3);
      expect(after.brokers.map((broker) => broker.id)).toContain(4);
      // The history keeps the completed scale-up under the cancelled change, newest first.
      expect(after.earlierChanges?.[0]).toMatchObject({ status: "COMPLETED" });
      const history = page.getByRole("table", { name: "Recent changes" }).locator("tbody tr");
      await expect
        .poll(() => history.allTextContents())
        .toEqual([
          expect.stringMatching(new RegExp(`^${changeId}CANCELLED`)),
          expect.stringMatching(new RegExp(`^${after.earlierChanges?.[0]?.id}COMPLETED`)),
        ]);
      expect(violations).toEqual([]);
      await saveScreenshot(page, "console-scaling-cancelled");
    } finally {
      for (const pid of paused) process.kill(pid, "SIGCONT");
    }
    // A member stays running after the change ended: the platform stops only brokers outside the configuration.
    // Two polls: a removal needs two in a row that agree.
    await platform.running.clusters.pollHealth();
    await platform.running.clusters.pollHealth();
    expect((await provisioner().brokers(clusterId)).map((broker) => broker.nodeId)).toEqual([0, 1, 2, 3, 4]);
    expect(existsSync(brokerDataDirectory((await provisioner().directoryOf(clusterId))!, 4))).toBe(true);
  }, 240_000);
});
