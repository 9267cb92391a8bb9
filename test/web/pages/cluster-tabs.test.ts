/**
 * A cluster's tabs in the console against a real platform: API clients (the secret shown once, copied, downloaded as
 * environment variables and used for a token), connector secrets (masked, revealed on demand), the IP allowlist
 * editor (checked before it is sent, the platform's refusal shown on its entry), monitoring clients, and which tabs
 * each client's scopes show. The cluster is one the platform's directory knows without running processes; only its
 * details (`GET /admin/clusters/{id}`, which needs a provisioned cluster) are answered by the test. The Backups tab
 * needs a running cluster: cluster-backups.test.ts.
 */
import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { decodeJwt } from "jose";
import type { Browser, Page } from "playwright-core";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { createClusterAccessFixture } from "../../platform/admin/cluster-access-support.js";
import { browserAvailable, launchBrowser } from "../../support/browser.js";
import {
  browserStorage,
  collectPolicyViolations,
  expectAccessible,
  focusedText,
  horizontalOverflow,
  saveScreenshot,
  signIn,
  viewports,
} from "../../support/console-page.js";
import { startTestPlatform, type TestPlatform } from "../../support/platform.js";
import { createTestClient, requestToken } from "../../support/tokens.js";

describe.runIf(browserAvailable())("console cluster tabs", () => {
  let platform: TestPlatform;
  let browser: Browser;
  let page: Page;
  let adminToken: string;
  const access = createClusterAccessFixture();
  const clusterId = randomUUID();

  beforeAll(async () => {
    platform = await startTestPlatform({}, { clusterAccess: access.options });
    access.addCluster(platform.organizationId, clusterId);
    browser = await launchBrowser();
    adminToken = await requestToken(platform, platform.adminClient, "admin-api");
  });
  afterEach(async () => {
    await page?.close();
  });
  afterAll(async () => {
    await browser?.close();
    await platform?.close();
  });

  /** A page whose `GET /admin/clusters/{id}` answers the test's cluster, named "orders". */
  async function openPage(viewport: { width: number; height: number }): Promise<Page> {
    const opened = await browser.newPage({ viewport, acceptDownloads: true });
    const reference = { uuid: "00000000-0000-4000-8000-000000000001", name: "local" };
    const cluster = {
      uuid: clusterId,
      name: "orders",
      ownerId: "owner",
      created: "2026-11-25T04:00:00.000Z",
      autoUpdate: false,
      channel: reference,
      generation: reference,
      region: reference,
      planType: reference,
      status: { ready: "Healthy", gatewayStatus: "Healthy" },
      links: { gateway: "http://127.0.0.1:1", management: "http://127.0.0.1:1", oauth: "", console: "" },
      ipallowlist: [],
    };
    await opened.route(`${platform.url}/admin/clusters/${clusterId}`, (route) =>
      route.request().method() === "GET"
        ? route.fulfill({ status: 200, contentType: "application/json", body: JSON.stringify(cluster) })
        : route.fallback(),
    );
    return opened;
  }

  /** Everything the page wrote to its console, to look for secrets in. */
  function consoleLog(target: Page): string[] {
    const lines: string[] = [];
    target.on("console", (message) => lines.push(message.text()));
    return lines;
  }

  async function api(method: string, path: string, body?: unknown): Promise<Response> {
    return await fetch(`${platform.url}/admin/clusters/${clusterId}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${adminToken}`,
        ...(body === undefined ? {} : { "content-type": "application/json" }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
  }

  function tabNames(): Promise<string[]> {
    return page.getByRole("navigation", { name: "Cluster sections" }).getByRole("link").allTextContents();
  }

  it("creates a client and uses its secret to get a token, then sets an allowlist", async () => {
    page = await openPage(viewports.wide);
    await page.context().grantPermissions(["clipboard-read", "clipboard-write"], { origin: platform.url });
    const violations = collectPolicyViolations(page);
    const logged = consoleLog(page);
    await signIn(page, platform.url, platform.adminClient, `/console/clusters/${clusterId}/clients`);
    await page.getByText("The cluster has no API clients yet.").waitFor();
    await page.getByRole("heading", { name: "API clients of cluster orders" }).waitFor();
    expect(await tabNames()).toEqual([
      "Overview",
      "API clients",
      "Connector secrets",
      "IP allowlist",
      "Monitoring",
      "Backups",
    ]);
    expect(
      await page.getByRole("navigation", { name: "Cluster sections" }).locator('[aria-current="page"]').textContent(),
    ).toBe("API clients");
    await expectAccessible(page, "API clients");

    // Nothing is sent without a name; the error is next to the field.
    const form = page.getByRole("form", { name: "Create an API client" });
    await form.getByRole("button", { name: "Create client" }).click();
    expect(await form.locator(".field-error").first().textContent()).toBe("Enter a name.");
    expect(await page.getByLabel("Name").getAttribute("aria-invalid")).toBe("true");

    await page.getByLabel("Name").fill("order-worker");
    await page.getByLabel("secrets").check();
    await form.getByRole("button", { name: "Create client" }).click();
    const panel = page.getByRole("region", { name: "API client order-worker was created" });
    await panel.waitFor();
    expect(await focusedText(page)).toBe("API client order-worker was created");
    const clientId = await panel.getByLabel("Client id").inputValue();
    const secret = await panel.getByLabel("Client secret").inputValue();
    expect(secret).toMatch(/^[A-Za-z0-9_-]{43}$/);
    const rows = page.getByRole("table", { name: "API clients of the cluster" }).locator("tbody tr");
    await expect
      .poll(() => rows.allTextContents())
      .toEqual([`order-worker${clientId}gateway, secretsConnection detailsDelete`]);
    await expectAccessible(page, "API client created");

    await panel.getByRole("button", { name: "Copy client secret" }).click();
    await panel.getByText("Client secret copied to the clipboard.").waitFor();
    expect(await page.evaluate<string>("navigator.clipboard.readText()")).toBe(secret);

    const [download] = await Promise.all([
      page.waitForEvent("download"),
      panel.getByRole("button", { name: "Download environment variables" }).click(),
    ]);
    expect(download.suggestedFilename()).toBe("order-worker.env");
    const environment = Object.fromEntries(
      readFileSync((await download.path())!, "utf8")
        .split("\n")
        .filter((line) => line.startsWith("SERVICE_"))
        .map((line) => [line.slice(0, line.indexOf("=")), line.slice(line.indexOf("=") + 1)]),
    );
    expect(environment).toEqual({
      SERVICE_ADDRESS: `http://gateway-${clusterId}.test:8080`,
      SERVICE_CLIENT_ID: clientId,
      SERVICE_CLIENT_SECRET: secret,
      SERVICE_AUTHORIZATION_SERVER_URL: `${platform.issuerUrl}/oauth/token`,
      SERVICE_TOKEN_AUDIENCE: "gateway-api",
    });

    // The downloaded variables are all a client application needs for its token.
    const tokenAnswer = await fetch(environment.SERVICE_AUTHORIZATION_SERVER_URL!, {
      method: "POST",
      body: new URLSearchParams({
        grant_type: "client_credentials",
        audience: environment.SERVICE_TOKEN_AUDIENCE!,
        client_id: environment.SERVICE_CLIENT_ID!,
        client_secret: environment.SERVICE_CLIENT_SECRET!,
      }),
    });
    expect(tokenAnswer.status).toBe(200);
    const claims = decodeJwt(((await tokenAnswer.json()) as { access_token: string }).access_token);
    expect(claims.cluster).toBe(clusterId);
    expect(String(claims.scope).split(" ").sort()).toEqual(["gateway", "secrets"]);

    // Once dismissed, the secret is gone from the page; it never was in the URL, storage or the console's log.
    await panel.getByRole("button", { name: "Done" }).click();
    expect(await panel.count()).toBe(0);
    expect(await page.content()).not.toContain(secret);
    expect(page.url()).not.toContain(secret);
    expect(JSON.stringify(await browserStorage(page))).not.toContain(secret);
    expect(logged.join("\n")).not.toContain(secret);
    await saveScreenshot(page, "console-cluster-clients");

    // The allowlist: an invalid entry is named next to its field and nothing is sent.
    await page
      .getByRole("navigation", { name: "Cluster sections" })
      .getByRole("link", { name: "IP allowlist" })
      .click();
    await page.getByRole("heading", { name: "IP allowlist of cluster orders" }).waitFor();
    await page.getByText("The allowlist is empty: every address may reach").waitFor();
    await expectAccessible(page, "empty allowlist");
    await page.getByRole("button", { name: "Add entry" }).click();
    const first = page.getByRole("group", { name: "Entry 1" });
    await first.getByLabel("Addresses").fill("10.0.0.0/33");
    await first.getByLabel("Description").fill("office");
    await page.getByRole("button", { name: "Save allowlist" }).click();
    expect(await first.locator(".field-error").textContent()).toBe(
      '"10.0.0.0/33" is not an IPv4 or IPv6 address or CIDR block: the prefix length is above 32',
    );
    expect(await first.getByLabel("Addresses").getAttribute("aria-invalid")).toBe("true");
    expect(await page.evaluate<string>("document.activeElement.value")).toBe("10.0.0.0/33");
    expect(access.changes).toEqual([]);
    await expectAccessible(page, "allowlist with an invalid entry");

    await first.getByLabel("Addresses").fill("192.0.2.0/24, 2001:db8::/32");
    expect(await first.locator(".field-error").textContent()).toBe("");
    await page.getByRole("button", { name: "Add entry" }).click();
    const second = page.getByRole("group", { name: "Entry 2" });
    await second.getByLabel("Addresses").fill("198.51.100.7");
    await second.getByLabel("Description").fill("build server");
    await page.getByRole("button", { name: "Save allowlist" }).click();
    await page.getByText("The allowlist was saved with 2 entries").waitFor();
    const stored = (await (await api("GET", "/ipallowlist")).json()) as unknown;
    expect(stored).toEqual({
      ipallowlist: [
        { ip: "192.0.2.0/24, 2001:db8::/32", description: "office" },
        { ip: "198.51.100.7", description: "build server" },
      ],
    });
    // The platform told the cluster's gateway about its new access policy.
    expect(access.changes).toEqual([clusterId]);
    // The editor shows what the platform stored.
    await expect
      .poll(() => page.getByRole("group", { name: "Entry 2" }).getByLabel("Addresses").inputValue())
      .toBe("198.51.100.7");
    await expectAccessible(page, "saved allowlist");
    expect(violations).toEqual([]);
    await saveScreenshot(page, "console-cluster-allowlist");
  });

  /** Sets the cluster's allowlist through the API, so that each test starts from a known list. */
  async function setAllowlist(entries: { ip: string; description: string }[]): Promise<void> {
    expect((await api("PUT", "/ipallowlist", { ipallowlist: entries })).status).toBe(204);
  }

  it("shows the platform's refusal of an allowlist on the entry it names", async () => {
    await setAllowlist([
      { ip: "192.0.2.0/24", description: "office" },
      { ip: "198.51.100.7", description: "build server" },
    ]);
    page = await openPage(viewports.wide);
    // A refusal the console's own check cannot produce: the platform's answer is the authority.
    await page.route(`${platform.url}/admin/clusters/${clusterId}/ipallowlist`, (route) =>
      route.request().method() === "PUT"
        ? route.fulfill({
            status: 400,
            contentType: "application/problem+json",
            body: JSON.stringify({
              type: "https://flowplane.dev/problems/invalid-request",
              title: "Invalid request",
              status: 400,
              detail: "body/ipallowlist/1/description must NOT have more than 1024 characters",
              errors: [
                { location: "body/ipallowlist/1/description", message: "must NOT have more than 1024 characters" },
              ],
            }),
          })
        : route.fallback(),
    );
    await signIn(page, platform.url, platform.adminClient, `/console/clusters/${clusterId}/allowlist`);
    const second = page.getByRole("group", { name: "Entry 2" });
    await second.waitFor();
    await page.getByRole("button", { name: "Save allowlist" }).click();
    await expect
      .poll(() => second.locator(".field-error").textContent())
      .toBe("body/ipallowlist/1/description must NOT have more than 1024 characters");
    expect(await second.getByLabel("Description").getAttribute("aria-invalid")).toBe("true");
    expect(await page.getByRole("group", { name: "Entry 1" }).locator(".field-error").textContent()).toBe("");
    expect(await page.getByRole("status").first().textContent()).toContain("The allowlist was not saved");
  });

  it("masks connector secrets, reveals a value on demand, changes and deletes one", async () => {
    page = await openPage(viewports.wide);
    const logged = consoleLog(page);
    const violations = collectPolicyViolations(page);
    await signIn(page, platform.url, platform.adminClient, `/console/clusters/${clusterId}/secrets`);
    await page.getByText("The cluster has no connector secrets yet.").waitFor();
    const form = page.getByRole("form", { name: "Add a connector secret" });
    await page.getByLabel("Name").fill("smtp password");
    await form.getByRole("button", { name: "Add secret" }).click();
    expect(await form.locator(".field-error").allTextContents()).toEqual([
      "A name is 1 to 49 characters of A-Z, a-z, 0-9 and _.",
      "Enter a value.",
    ]);
    await page.getByLabel("Name").fill("SMTP_PASSWORD");
    await page.getByLabel("Value", { exact: true }).fill("s3cr3t-value");
    await form.getByRole("button", { name: "Add secret" }).click();
    const table = page.getByRole("table", { name: "Connector secrets of the cluster" });
    await table.waitFor();
    expect(await page.getByLabel("Value", { exact: true }).inputValue()).toBe("");
    // Listed masked: the value is nowhere in the page until asked for.
    expect(await table.locator("tbody tr").allTextContents()).toEqual([
      "SMTP_PASSWORD••••••••hiddenRevealChange valueDelete",
    ]);
    expect(await page.content()).not.toContain("s3cr3t-value");
    await expectAccessible(page, "connector secrets");

    const reveal = page.getByRole("button", { name: "Reveal the value of SMTP_PASSWORD" });
    await reveal.click();
    await table.getByText("s3cr3t-value").waitFor();
    expect(
      await page.getByRole("button", { name: "Hide the value of SMTP_PASSWORD" }).getAttribute("aria-pressed"),
    ).toBe("true");
    await expectAccessible(page, "connector secret revealed");
    await page.getByRole("button", { name: "Hide the value of SMTP_PASSWORD" }).click();
    expect(await page.content()).not.toContain("s3cr3t-value");

    await page.getByRole("button", { name: "Change value of SMTP_PASSWORD" }).click();
    const change = page.getByRole("form", { name: "Change the value of SMTP_PASSWORD" });
    expect(await change.getByLabel("Name").getAttribute("readonly")).not.toBeNull();
    await page.getByLabel("Value", { exact: true }).fill("n3w-value");
    await change.getByRole("button", { name: "Save value" }).click();
    await page.getByText("The value of SMTP_PASSWORD was changed.").waitFor();
    expect(await (await api("GET", "/secrets")).json()).toEqual({ SMTP_PASSWORD: "n3w-value" });
    await page.getByRole("button", { name: "Reveal the value of SMTP_PASSWORD" }).click();
    await table.getByText("n3w-value").waitFor();
    await saveScreenshot(page, "console-cluster-secrets");

    await page.getByRole("button", { name: "Delete secret SMTP_PASSWORD" }).click();
    await page
      .getByRole("dialog", { name: "Delete connector secret" })
      .getByRole("button", { name: "Delete secret" })
      .click();
    await page.getByText("The cluster has no connector secrets yet.").waitFor();
    expect(await (await api("GET", "/secrets")).json()).toEqual({});
    expect(logged.join("\n")).not.toMatch(/s3cr3t-value|n3w-value/);
    expect(violations).toEqual([]);
  });

  it("turns metrics protection on and shows a monitoring client's password once, also when rotated", async () => {
    page = await openPage(viewports.wide);
    const violations = collectPolicyViolations(page);
    await signIn(page, platform.url, platform.adminClient, `/console/clusters/${clusterId}/monitoring`);
    const protection = page.getByRole("region", { name: "Metrics protection" });
    await protection.getByRole("button", { name: "Turn protection on" }).click();
    await protection.getByRole("button", { name: "Turn protection off" }).waitFor();
    expect(await (await api("GET", "/monitoring")).json()).toEqual({ active: true });

    await page.getByLabel("Username").fill("prometheus");
    await page.getByRole("button", { name: "Create monitoring client" }).click();
    const created = page.getByRole("region", { name: "Monitoring client prometheus was created" });
    const password = await created.getByLabel("Password").inputValue();
    expect(password).toMatch(/^[A-Za-z0-9_-]{43}$/);
    const rows = page.getByRole("table", { name: "Monitoring clients of the cluster" }).locator("tbody tr");
    await expect.poll(() => rows.count()).toBe(1);
    await expectAccessible(page, "monitoring");
    await created.getByRole("button", { name: "Done" }).click();
    expect(await page.content()).not.toContain(password);

    await page.getByRole("button", { name: "Rotate password of prometheus" }).click();
    await page
      .getByRole("dialog", { name: "Rotate password" })
      .getByRole("button", { name: "Rotate password" })
      .click();
    const rotated = page.getByRole("region", { name: "New password of prometheus" });
    const newPassword = await rotated.getByLabel("Password").inputValue();
    expect(newPassword).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(newPassword).not.toBe(password);
    await saveScreenshot(page, "console-cluster-monitoring");

    await page.getByRole("button", { name: "Delete monitoring client prometheus" }).click();
    await page
      .getByRole("dialog", { name: "Delete monitoring client" })
      .getByRole("button", { name: "Delete client" })
      .click();
    await page.getByText("The cluster has no monitoring clients yet.").waitFor();
    await protection.getByRole("button", { name: "Turn protection off" }).click();
    await page
      .getByRole("dialog", { name: "Turn metrics protection off" })
      .getByRole("button", { name: "Turn protection off" })
      .click();
    await protection.getByRole("button", { name: "Turn protection on" }).waitFor();
    expect(await (await api("GET", "/monitoring")).json()).toEqual({ active: false });
    expect(violations).toEqual([]);
  });

  it("leads from the cluster's own page to its tabs and back", async () => {
    page = await openPage(viewports.wide);
    await signIn(page, platform.url, platform.adminClient, `/console/clusters/${clusterId}`);
    await page.getByRole("heading", { name: "Cluster orders" }).waitFor();
    const tabs = page.getByRole("navigation", { name: "Cluster sections" });
    expect(await tabs.locator('[aria-current="page"]').textContent()).toBe("Overview");
    await expectAccessible(page, "cluster page with its tabs");
    await tabs.getByRole("link", { name: "Monitoring" }).click();
    await page.getByRole("heading", { name: "Monitoring of cluster orders" }).waitFor();
    expect(new URL(page.url()).pathname).toBe(`/console/clusters/${clusterId}/monitoring`);
    await page.goBack();
    await page.getByRole("heading", { name: "Cluster orders" }).waitFor();
  });

  it("shows each client only the tabs its scopes allow", async () => {
    const secretsOnly = await createTestClient(platform, ["secrets"]);
    page = await openPage(viewports.wide);
    await signIn(page, platform.url, secretsOnly);
    // Such a client may not list clusters: it opens one by its id.
    const open = page.getByRole("form", { name: "Open a cluster" });
    await open.getByLabel("Cluster id").fill("no such/id");
    await open.getByRole("button", { name: "Open" }).click();
    expect(await open.locator(".field-error").textContent()).toBe(
      "Enter a cluster id: letters, digits, dots, underscores and hyphens.",
    );
    await expectAccessible(page, "overview of a client without the cluster scope");
    await open.getByLabel("Cluster id").fill(clusterId);
    await open.getByRole("button", { name: "Open" }).click();
    await page.getByRole("form", { name: "Add a connector secret" }).waitFor();
    expect(new URL(page.url()).pathname).toBe(`/console/clusters/${clusterId}/secrets`);
    expect(await tabNames()).toEqual(["Connector secrets"]);
    expect(await page.getByRole("heading", { level: 1 }).textContent()).toBe("Connector secrets");
    await signIn(page, platform.url, secretsOnly, `/console/clusters/${clusterId}/clients`);
    await page.getByText("This client's scopes do not allow this page.").waitFor();
    await page.close();

    // The cluster scope reads the allowlist but may not change it.
    const clusterOnly = await createTestClient(platform, ["cluster"]);
    page = await openPage(viewports.wide);
    await signIn(page, platform.url, clusterOnly, `/console/clusters/${clusterId}/allowlist`);
    await page.getByRole("table", { name: "Allowed addresses" }).waitFor();
    await page.getByRole("heading", { name: "IP allowlist of cluster orders" }).waitFor();
    expect(await tabNames()).toEqual(["Overview", "IP allowlist", "Monitoring"]);
    expect(await page.getByRole("button", { name: "Save allowlist" }).count()).toBe(0);
    await expectAccessible(page, "read-only allowlist");
  });

  it("edits the allowlist by keyboard alone at phone width", async () => {
    await setAllowlist([
      { ip: "192.0.2.0/24, 2001:db8::/32", description: "office" },
      { ip: "198.51.100.7", description: "build server" },
    ]);
    page = await openPage(viewports.narrow);
    await signIn(page, platform.url, platform.adminClient, `/console/clusters/${clusterId}/allowlist`);
    await page.getByRole("group", { name: "Entry 2" }).waitFor();
    // Remove the second entry: the focus moves to the entry that is now last.
    await page.getByRole("button", { name: "Remove entry 2" }).focus();
    await page.keyboard.press("Enter");
    expect(await page.getByRole("group", { name: "Entry 2" }).count()).toBe(0);
    expect(await page.evaluate<string>("document.activeElement.value")).toBe("192.0.2.0/24, 2001:db8::/32");
    // Tab on to adding an entry, type its addresses, and save with Enter.
    let focused = "";
    for (let step = 0; step < 6 && focused !== "Add entry"; step += 1) {
      await page.keyboard.press("Tab");
      focused = await focusedText(page);
    }
    expect(focused).toBe("Add entry");
    await page.keyboard.press("Enter");
    await page.keyboard.type("203.0.113.0/24");
    await page.keyboard.press("Enter");
    await page.getByText("The allowlist was saved with 2 entries").waitFor();
    expect(
      ((await (await api("GET", "/ipallowlist")).json()) as { ipallowlist: { ip: string }[] }).ipallowlist,
    ).toEqual([
      { ip: "192.0.2.0/24, 2001:db8::/32", description: "office" },
      { ip: "203.0.113.0/24", description: "" },
    ]);
    expect(await horizontalOverflow(page)).toBeLessThanOrEqual(0);
    await expectAccessible(page, "allowlist at phone width");
    await saveScreenshot(page, "console-cluster-allowlist-narrow");

    await page.getByRole("link", { name: "API clients" }).click();
    await page.getByRole("form", { name: "Create an API client" }).waitFor();
    expect(await horizontalOverflow(page)).toBeLessThanOrEqual(0);
    await expectAccessible(page, "API clients at phone width");
    await saveScreenshot(page, "console-cluster-clients-narrow");
  });
});
