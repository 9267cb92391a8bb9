import { randomUUID } from "node:crypto";
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
import { createTestClient, requestToken } from "../../support/tokens.js";

/** A laid-out BPMN process: start, a user task, a decision, a service task and two ends. */
function orderProcess(shipName: string): string {
  return `<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" xmlns:bpmndi="http://www.omg.org/spec/BPMN/20100524/DI" xmlns:dc="http://www.omg.org/spec/DD/20100524/DC" xmlns:di="http://www.omg.org/spec/DD/20100524/DI" id="Definitions_1" targetNamespace="http://bpmn.io/schema/bpmn">
  <bpmn:process id="order-handling" name="Order handling" isExecutable="true">
    <bpmn:startEvent id="received" name="Order received" />
    <bpmn:userTask id="check" name="Check order" />
    <bpmn:exclusiveGateway id="valid" name="Valid?" />
    <bpmn:serviceTask id="ship" name="${shipName}" />
    <bpmn:endEvent id="shipped" name="Order shipped" />
    <bpmn:endEvent id="rejected" name="Order rejected" />
    <bpmn:sequenceFlow id="f1" sourceRef="received" targetRef="check" />
    <bpmn:sequenceFlow id="f2" sourceRef="check" targetRef="valid" />
    <bpmn:sequenceFlow id="f3" name="yes" sourceRef="valid" targetRef="ship" />
    <bpmn:sequenceFlow id="f4" sourceRef="ship" targetRef="shipped" />
    <bpmn:sequenceFlow id="f5" name="no" sourceRef="valid" targetRef="rejected" />
  </bpmn:process>
  <bpmndi:BPMNDiagram id="diagram">
    <bpmndi:BPMNPlane id="plane" bpmnElement="order-handling">
      <bpmndi:BPMNShape id="received_di" bpmnElement="received"><dc:Bounds x="152" y="102" width="36" height="36" /></bpmndi:BPMNShape>
      <bpmndi:BPMNShape id="check_di" bpmnElement="check"><dc:Bounds x="240" y="80" width="100" height="80" /></bpmndi:BPMNShape>
      <bpmndi:BPMNShape id="valid_di" bpmnElement="valid" isMarkerVisible="true"><dc:Bounds x="395" y="95" width="50" height="50" /></bpmndi:BPMNShape>
      <bpmndi:BPMNShape id="ship_di" bpmnElement="ship"><dc:Bounds x="500" y="80" width="100" height="80" /></bpmndi:BPMNShape>
      <bpmndi:BPMNShape id="shipped_di" bpmnElement="shipped"><dc:Bounds x="662" y="102" width="36" height="36" /></bpmndi:BPMNShape>
      <bpmndi:BPMNShape id="rejected_di" bpmnElement="rejected"><dc:Bounds x="402" y="222" width="36" height="36" /></bpmndi:BPMNShape>
      <bpmndi:BPMNEdge id="f1_di" bpmnElement="f1"><di:waypoint x="188" y="120" /><di:waypoint x="240" y="120" /></bpmndi:BPMNEdge>
      <bpmndi:BPMNEdge id="f2_di" bpmnElement="f2"><di:waypoint x="340" y="120" /><di:waypoint x="395" y="120" /></bpmndi:BPMNEdge>
      <bpmndi:BPMNEdge id="f3_di" bpmnElement="f3"><di:waypoint x="445" y="120" /><di:waypoint x="500" y="120" /></bpmndi:BPMNEdge>
      <bpmndi:BPMNEdge id="f4_di" bpmnElement="f4"><di:waypoint x="600" y="120" /><di:waypoint x="662" y="120" /></bpmndi:BPMNEdge>
      <bpmndi:BPMNEdge id="f5_di" bpmnElement="f5"><di:waypoint x="420" y="145" /><di:waypoint x="420" y="222" /></bpmndi:BPMNEdge>
    </bpmndi:BPMNPlane>
  </bpmndi:BPMNDiagram>
</bpmn:definitions>
`;
}

/** A DMN decision table with two rules. */
const dishDecisions = `<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="https://www.omg.org/spec/DMN/20191111/MODEL/" id="dish-definitions" name="Dish" namespace="http://example.com/dish">
  <decision id="dish" name="Dish">
    <decisionTable id="dish-table" hitPolicy="FIRST">
      <input id="season-input" label="Season">
        <inputExpression id="season-expression" typeRef="string"><text>season</text></inputExpression>
      </input>
      <output id="dish-output" label="Dish" name="dish" typeRef="string" />
      <rule id="rule-winter">
        <description>Warm food</description>
        <inputEntry id="winter-entry"><text>"Winter"</text></inputEntry>
        <outputEntry id="winter-dish"><text>"Roastbeef"</text></outputEntry>
      </rule>
      <rule id="rule-other">
        <inputEntry id="other-entry"><text></text></inputEntry>
        <outputEntry id="other-dish"><text>"Salad"</text></outputEntry>
      </rule>
    </decisionTable>
  </decision>
</definitions>
`;

/**
 * A process whose shapes carry colours: a plain one, and `url(…)` ones that would have the reader's browser fetch an
 * address of the file's choosing (under the `color` extension, and under `bioc` bound to another prefix); and a
 * collapsed sub-process with a diagram of its own.
 */
const colouredProcess = `<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" xmlns:bpmndi="http://www.omg.org/spec/BPMN/20100524/DI" xmlns:dc="http://www.omg.org/spec/DD/20100524/DC" xmlns:bioc="http://bpmn.io/schema/bpmn/biocolor/1.0" xmlns:paint="http://bpmn.io/schema/bpmn/biocolor/1.0" xmlns:color="http://www.omg.org/spec/BPMN/non-normative/color/1.0" id="coloured" targetNamespace="http://example.com">
  <bpmn:process id="colours" name="Coloured" isExecutable="true">
    <bpmn:userTask id="plain" name="Plain" />
    <bpmn:userTask id="beacon" name="Beacon" />
    <bpmn:userTask id="other-prefix" name="Other prefix" />
    <bpmn:subProcess id="collapsed" name="Collapsed"><bpmn:startEvent id="inner" /></bpmn:subProcess>
  </bpmn:process>
  <bpmndi:BPMNDiagram id="diagram">
    <bpmndi:BPMNPlane id="plane" bpmnElement="colours">
      <bpmndi:BPMNShape id="plain_di" bpmnElement="plain" bioc:fill="#ff0000"><dc:Bounds x="100" y="80" width="100" height="80" /></bpmndi:BPMNShape>
      <bpmndi:BPMNShape id="beacon_di" bpmnElement="beacon" color:background-color="url(https://beacon.example/a)" bioc:stroke="url(https://beacon.example/b)"><dc:Bounds x="240" y="80" width="100" height="80" /></bpmndi:BPMNShape>
      <bpmndi:BPMNShape id="other_di" bpmnElement="other-prefix" paint:fill="url(https://beacon.example/c)"><dc:Bounds x="380" y="80" width="100" height="80" /></bpmndi:BPMNShape>
      <bpmndi:BPMNShape id="collapsed_di" bpmnElement="collapsed" isExpanded="false"><dc:Bounds x="520" y="80" width="100" height="80" /></bpmndi:BPMNShape>
    </bpmndi:BPMNPlane>
  </bpmndi:BPMNDiagram>
  <bpmndi:BPMNDiagram id="inside">
    <bpmndi:BPMNPlane id="inside-plane" bpmnElement="collapsed">
      <bpmndi:BPMNShape id="inner_di" bpmnElement="inner"><dc:Bounds x="152" y="102" width="36" height="36" /></bpmndi:BPMNShape>
    </bpmndi:BPMNPlane>
  </bpmndi:BPMNDiagram>
</bpmn:definitions>
`;

describe.runIf(browserAvailable())("console modeler pages", () => {
  let platform: TestPlatform;
  let browser: Browser;
  let page: Page;
  let token: string;
  let projectId: string;
  let folderId: string;
  let bpmnFileId: string;
  let dmnFileId: string;
  let firstDraftId: string;
  let undrawnFileId: string;
  let formFileId: string;

  /** Calls the Modeler API with the administration client's Modeler token. */
  async function modeler<Answer>(method: string, path: string, body?: unknown): Promise<Answer> {
    const response = await fetch(`${platform.url}/modeler/api/v1${path}`, {
      method,
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    expect(response.status, `${method} ${path}`).toBe(200);
    return (await response.json()) as Answer;
  }

  beforeAll(async () => {
    platform = await startTestPlatform();
    browser = await launchBrowser();
    token = await requestToken(platform, platform.adminClient, "modeler-api");
    projectId = (await modeler<{ id: string }>("POST", "/projects", { name: "Shop" })).id;
    const billingId = (await modeler<{ id: string }>("POST", "/projects", { name: "Billing" })).id;
    undrawnFileId = (
      await modeler<{ id: string }>("POST", "/files", {
        name: "Unlaid",
        content:
          '<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" id="d" targetNamespace="http://example.com"><bpmn:process id="p" /></bpmn:definitions>',
        fileType: "bpmn",
        projectId: billingId,
      })
    ).id;
    formFileId = (
      await modeler<{ id: string }>("POST", "/files", {
        name: "Invoice form",
        content: JSON.stringify({ components: [{ key: "amount", label: "Amount", type: "number" }] }),
        fileType: "form",
        projectId: billingId,
      })
    ).id;
    folderId = (await modeler<{ id: string }>("POST", "/folders", { name: "Processes", projectId })).id;
    const bpmnFile = await modeler<{ id: string; revision: number }>("POST", "/files", {
      name: "Order handling",
      content: orderProcess("Ship order"),
      fileType: "bpmn",
      folderId,
    });
    bpmnFileId = bpmnFile.id;
    firstDraftId = (await modeler<{ id: string }>("POST", "/milestones", { name: "First draft", fileId: bpmnFileId }))
      .id;
    await modeler("PATCH", `/files/${bpmnFileId}`, {
      revision: bpmnFile.revision,
      content: orderProcess("Ship parcel"),
    });
    await modeler("POST", "/milestones", { name: "Parcel shipping", fileId: bpmnFileId });
    dmnFileId = (
      await modeler<{ id: string }>("POST", "/files", {
        name: "Dish",
        content: dishDecisions,
        fileType: "dmn",
        projectId,
      })
    ).id;
  });
  afterEach(async () => {
    await page?.close();
  });
  afterAll(async () => {
    await browser?.close();
    await platform?.close();
  });

  it("browse a BPMN file: projects, folder, file, drawn as a diagram", async () => {
    page = await browser.newPage({ viewport: viewports.wide });
    const violations = collectPolicyViolations(page);
    await signIn(page, platform.url, platform.adminClient);
    await page.getByRole("navigation", { name: "Console" }).getByRole("link", { name: "Modeler" }).click();
    const projects = page.getByRole("table", { name: "Projects" });
    await expect.poll(async () => await projects.getByRole("link").allTextContents()).toEqual(["Billing", "Shop"]);
    // The name filter matches parts of names, whatever their case.
    await page.getByLabel("Project name contains").fill("HO");
    await page.getByRole("button", { name: "Search" }).click();
    await expect.poll(async () => await projects.getByRole("link").allTextContents()).toEqual(["Shop"]);
    await expectAccessible(page, "modeler projects");
    await page.getByRole("table", { name: "Projects" }).getByRole("link", { name: "Shop" }).click();
    const contents = page.getByRole("table", { name: "Contents of Shop" });
    // The table appears before its rows have loaded: waited for, as the projects above.
    await expect
      .poll(async () => await contents.locator("tbody tr").allTextContents())
      .toEqual([expect.stringContaining("ProcessesFolder"), expect.stringContaining("DishDMN decisions")]);
    await expectAccessible(page, "modeler project");
    await contents.getByRole("link", { name: "Processes" }).click();
    await page
      .getByRole("table", { name: "Contents of Processes" })
      .getByRole("link", { name: "Order handling" })
      .click();

    const diagram = page.getByRole("application", { name: "Diagram of Order handling" });
    await diagram.waitFor();
    expect(await page.getByRole("heading", { level: 1 }).textContent()).toBe("Order handling");
    const element = (id: string) => diagram.locator(`g.djs-element[data-element-id="${id}"]`);
    for (const id of ["received", "check", "valid", "ship", "shipped", "rejected", "f1", "f2", "f3", "f4", "f5"]) {
      expect(await element(id).count(), id).toBe(1);
    }
    expect(await element("check").textContent()).toBe("Check order");
    expect(await element("f3_label").textContent()).toBe("yes");
    // The current revision is drawn, not a milestone's.
    expect(await element("ship").textContent()).toBe("Ship parcel");
    // The viewer's license asks for its watermark to stay visible.
    expect(await page.locator(".bjs-powered-by").isVisible()).toBe(true);
    await page.getByText("Elements of the diagram (8)").click();
    expect(await page.locator(".diagram-elements li").allTextContents()).toContain("user task: Check order check");
    expect(await page.getByRole("navigation", { name: "Breadcrumb" }).textContent()).toBe(
      "ProjectsShopProcessesOrder handling",
    );
    await expectAccessible(page, "modeler BPMN file");
    expect(violations).toEqual([]);
    await saveScreenshot(page, "console-modeler-bpmn");
  });

  it("shows a DMN file's decision table", async () => {
    page = await browser.newPage({ viewport: viewports.wide });
    const violations = collectPolicyViolations(page);
    await signIn(page, platform.url, platform.adminClient, `/console/modeler/files/${dmnFileId}`);
    const decisionTable = page.getByRole("table", { name: "Decision table of Dish" });
    await decisionTable.waitFor();
    expect(await decisionTable.locator("thead th").allTextContents()).toEqual([
      "#",
      "When: Season (season)",
      "Then: Dish",
      "Annotation",
    ]);
    expect(await decisionTable.locator("tbody tr").allTextContents()).toEqual([
      '1"Winter""Roastbeef"Warm food',
      '2-"Salad"',
    ]);
    expect(await page.getByText("Hit policy:").textContent()).toContain("FIRST");
    await expectAccessible(page, "modeler DMN file");
    expect(violations).toEqual([]);
    await saveScreenshot(page, "console-modeler-dmn");
  });

  it("draws a diagram's plain colours, drops colours that name a resource, and opens a collapsed sub-process", async () => {
    const colouredId = (
      await modeler<{ id: string }>("POST", "/files", {
        name: "Coloured",
        content: colouredProcess,
        fileType: "bpmn",
        projectId,
      })
    ).id;
    page = await browser.newPage({ viewport: viewports.wide });
    const violations = collectPolicyViolations(page);
    const foreignRequests: string[] = [];
    page.on("request", (request) => {
      if (!request.url().startsWith(platform.url)) foreignRequests.push(request.url());
    });
    await signIn(page, platform.url, platform.adminClient, `/console/modeler/files/${colouredId}`);
    const diagram = page.getByRole("application", { name: "Diagram of Coloured" });
    await diagram.waitFor();
    // The paint of an element's shape, as the browser computes it.
    const fillOf = (id: string) =>
      page.evaluate<string>(
        `getComputedStyle(document.querySelector('g.djs-element[data-element-id="${id}"] .djs-visual > :first-child')).fill`,
      );
    expect(await fillOf("plain")).toBe("rgb(255, 0, 0)");
    // Colours written as url(…), under either extension and any prefix, are drawn in the default colour.
    expect(await fillOf("beacon")).toBe("rgb(255, 255, 255)");
    expect(await fillOf("other-prefix")).toBe("rgb(255, 255, 255)");
    // Inside the collapsed sub-process the breadcrumbs show, with the separator the CSP allows.
    await page.locator(".bjs-drilldown").first().click();
    await page.locator(".bjs-breadcrumbs li").nth(1).waitFor();
    expect(
      await page.evaluate<string>(
        `getComputedStyle(document.querySelectorAll(".bjs-breadcrumbs li")[1], "::before").content`,
      ),
    ).toBe('"\u203A"');
    expect(violations).toEqual([]);
    expect(foreignRequests.filter((url) => url.includes("example"))).toEqual([]);
  });

  it("lists a file's milestones, shows one, and the differences between two", async () => {
    page = await browser.newPage({ viewport: viewports.wide });
    const violations = collectPolicyViolations(page);
    await signIn(page, platform.url, platform.adminClient, `/console/modeler/files/${bpmnFileId}`);
    const milestones = page.getByRole("table", { name: "Milestones of Order handling" });
    // The milestones arrive after the file: wait for them rather than read the table as it first renders.
    await expect.poll(() => milestones.getByRole("link").allTextContents()).toEqual(["Parcel shipping", "First draft"]);

    // By default the diff runs from the older of the two newest milestones to the newest.
    await page.getByRole("button", { name: "Show differences" }).click();
    const diff = page.getByRole("region", { name: /^Differences from First draft/ });
    await diff.waitFor();
    expect(await diff.locator(".diff-removed").allTextContents()).toEqual([
      expect.stringContaining('-    <bpmn:serviceTask id="ship" name="Ship order" />'),
    ]);
    expect(await diff.locator(".diff-added").allTextContents()).toEqual([
      expect.stringContaining('+    <bpmn:serviceTask id="ship" name="Ship parcel" />'),
    ]);
    expect(await page.getByText("1 line added, 1 removed.").count()).toBe(1);
    await expectAccessible(page, "milestone differences");
    await saveScreenshot(page, "console-modeler-milestone-diff");

    // The same milestone on both sides is refused before asking the API.
    await page.getByLabel("From milestone").selectOption(firstDraftId);
    await page.getByLabel("To milestone").selectOption(firstDraftId);
    await page.getByRole("button", { name: "Show differences" }).click();
    expect(await page.getByText("Choose two different milestones.").count()).toBe(1);

    await milestones.getByRole("link", { name: "First draft" }).click();
    // The file's own diagram has the same name: the milestone's page is there once its heading is.
    await expect.poll(() => page.getByRole("heading", { level: 1 }).textContent()).toBe("Milestone First draft");
    const diagram = page.getByRole("application", { name: "Diagram of Order handling" });
    await diagram.waitFor();
    expect(await diagram.locator('g.djs-element[data-element-id="ship"]').textContent()).toBe("Ship order");
    expect(violations).toEqual([]);
  });

  it("works by keyboard at phone width: zoom buttons, and the diagram takes the focus", async () => {
    page = await browser.newPage({ viewport: viewports.narrow });
    const violations = collectPolicyViolations(page);
    await signIn(page, platform.url, platform.adminClient, `/console/modeler/files/${bpmnFileId}`);
    const diagram = page.getByRole("application", { name: "Diagram of Order handling" });
    await diagram.waitFor();
    expect(await horizontalOverflow(page)).toBeLessThanOrEqual(0);
    const viewport = diagram.locator("g.viewport");
    const fitted = await viewport.getAttribute("transform");
    const zoomIn = page.getByRole("button", { name: "Zoom in" });
    await zoomIn.focus();
    await page.keyboard.press("Enter");
    await expect.poll(async () => await viewport.getAttribute("transform")).not.toBe(fitted);
    await page.getByRole("button", { name: "Fit diagram" }).focus();
    await page.keyboard.press("Enter");
    await expect.poll(async () => await viewport.getAttribute("transform")).toBe(fitted);
    // The next Tab reaches the drawing itself, whose keyboard bindings move it.
    await page.keyboard.press("Tab");
    expect(await page.evaluate<string>('document.activeElement?.getAttribute("aria-label") ?? ""')).toBe(
      "Diagram of Order handling",
    );
    await page.keyboard.press("Control+ArrowRight");
    await expect.poll(async () => await viewport.getAttribute("transform")).not.toBe(fitted);
    expect(await horizontalOverflow(page)).toBeLessThanOrEqual(0);
    await expectAccessible(page, "modeler file at phone width");
    await saveScreenshot(page, "console-modeler-bpmn-narrow");

    // The list of projects and a project's contents fit the phone's width too.
    await page.getByRole("link", { name: "Shop" }).click();
    await page.getByRole("table", { name: "Contents of Shop" }).waitFor();
    expect(await horizontalOverflow(page)).toBeLessThanOrEqual(0);
    await page.getByRole("link", { name: "Projects" }).first().click();
    await page.getByRole("table", { name: "Projects" }).waitFor();
    expect(await horizontalOverflow(page)).toBeLessThanOrEqual(0);
    await expectAccessible(page, "modeler projects at phone width");
    expect(violations).toEqual([]);
  });

  it("is not offered to a client without modeler:read", async () => {
    const membersOnly = await createTestClient(platform, ["members"]);
    page = await browser.newPage({ viewport: viewports.wide });
    await signIn(page, platform.url, membersOnly, `/console/modeler/files/${bpmnFileId}`);
    const navigation = page.getByRole("navigation", { name: "Console" });
    expect(await navigation.getByRole("link").allTextContents()).not.toContain("Modeler");
    expect(await page.getByText("This client's scopes do not allow this page.").count()).toBe(1);

    const writer = await createTestClient(platform, ["modeler:create"]);
    const writerPage = await browser.newPage({ viewport: viewports.wide });
    try {
      await signIn(writerPage, platform.url, writer, "/console/modeler");
      expect(
        await writerPage.getByRole("navigation", { name: "Console" }).getByRole("link").allTextContents(),
      ).not.toContain("Modeler");
    } finally {
      await writerPage.close();
    }
  });

  it("says what it cannot draw, shows forms as JSON, and explains a file that does not exist", async () => {
    page = await browser.newPage({ viewport: viewports.wide });
    const violations = collectPolicyViolations(page);
    await signIn(page, platform.url, platform.adminClient, `/console/modeler/files/${undrawnFileId}`);
    await page.getByText("The diagram cannot be shown: the file holds no diagram layout (BPMN DI) to draw.").waitFor();
    expect(await page.getByRole("application").count()).toBe(0);

    await page.getByRole("link", { name: "Billing" }).click();
    await page.getByRole("table", { name: "Contents of Billing" }).getByRole("link", { name: "Invoice form" }).click();
    const json = page.getByRole("region", { name: "Form as JSON" });
    await json.waitFor();
    expect(page.url()).toBe(`${platform.url}/console/modeler/files/${formFileId}`);
    expect(JSON.parse((await json.textContent()) ?? "")).toEqual({
      components: [{ key: "amount", label: "Amount", type: "number" }],
    });
    expect(await json.textContent()).toContain('\n  "components": [');
    await expectAccessible(page, "modeler form file");

    // A reload signs out: the console holds its tokens in memory only.
    await signIn(page, platform.url, platform.adminClient, `/console/modeler/files/${randomUUID()}`);
    await page.getByText("The file was not found: it may have been deleted.").waitFor();
    expect(violations).toEqual([]);
  });
});
