/**
 * A Modeler file, read-only: its diagram (BPMN), decision tables (DMN) or JSON (forms, connector templates), its
 * milestones, and the differences between two of them; and a milestone's frozen content.
 */
import type { FileMetadata, MilestoneMetadata } from "../api.js";
import { h, replaceChildren, uniqueId } from "../dom.js";
import { clearStatus, field, formatInstant, showStatus, statusRegion, table } from "../ui.js";
import { bpmnView } from "./bpmn-view.js";
import { dmnView } from "./dmn-view.js";
import { breadcrumb, fileKindName, mayReadModeler, reportLoadFailure, routeLink } from "./modeler.js";
import type { Page, PageContext } from "./page.js";

/** Milestones listed on a file's page: the most one Modeler API search answers. */
const milestonesShown = 50;
/** Most lines of a diff shown; the rest is summarised, so a huge diff cannot stall the page. */
const maximumDiffLines = 5_000;

/** The content of a file of `type`, drawn as its kind is read. */
function contentView(type: FileMetadata["type"], content: string): HTMLElement {
  if (type === "bpmn") return bpmnView(content);
  if (type === "dmn") return dmnView(content);
  let text = content;
  try {
    text = JSON.stringify(JSON.parse(content), null, 2);
  } catch {
    // The API checks forms and templates are JSON; should one not be, it is shown as it is.
  }
  return h("pre", { class: "code", tabindex: 0, role: "region", "aria-label": `${fileKindName(type)} as JSON` }, text);
}

/** The file's source text, folded away below its view. */
function sourceView(type: FileMetadata["type"], content: string): HTMLElement | null {
  if (type !== "bpmn" && type !== "dmn") return null;
  return h(
    "details",
    { class: "source" },
    h("summary", {}, "XML source"),
    h("pre", { class: "code", tabindex: 0, role: "region", "aria-label": "XML source" }, content),
  );
}

/** The trail of a file or milestone: the project, then the folders down to the file. */
function fileTrail(file: FileMetadata, current: string, includeFile: boolean): HTMLElement {
  const links = file.canonicalPath.map((segment, index) => ({
    path:
      index === 0
        ? `modeler/projects/${encodeURIComponent(segment.id)}`
        : `modeler/folders/${encodeURIComponent(segment.id)}`,
    name: segment.name,
  }));
  if (includeFile) links.push({ path: `modeler/files/${encodeURIComponent(file.id)}`, name: file.name });
  return breadcrumb(links, current);
}

/** Name and value pairs describing a resource. */
function facts(pairs: readonly [string, string][]): HTMLElement {
  return h(
    "dl",
    { class: "details" },
    pairs.map(([name, value]) => [h("dt", {}, name), h("dd", {}, value)]),
  );
}

/** A unified diff, each line marked as added, removed, a hunk header or context by its class and its first sign. */
export function diffView(diff: string, caption: string): HTMLElement {
  if (diff.trim() === "") return h("p", {}, "The two milestones have the same content.");
  const lines = diff.replace(/\n$/, "").split("\n");
  const shown = lines.slice(0, maximumDiffLines);
  let added = 0;
  let removed = 0;
  for (const line of lines) {
    if (line.startsWith("+") && !line.startsWith("+++")) added += 1;
    else if (line.startsWith("-") && !line.startsWith("---")) removed += 1;
  }
  const kindOf = (line: string): string => {
    if (line.startsWith("+++") || line.startsWith("---") || line.startsWith("Index:") || line.startsWith("====")) {
      return "diff-file";
    }
    if (line.startsWith("@@")) return "diff-hunk";
    if (line.startsWith("+")) return "diff-added";
    if (line.startsWith("-")) return "diff-removed";
    return "diff-context";
  };
  return h(
    "div",
    { class: "diff-view" },
    h("p", {}, `${added} ${added === 1 ? "line" : "lines"} added, ${removed} removed.`),
    h(
      "pre",
      { class: "diff", tabindex: 0, role: "region", "aria-label": caption },
      shown.map((line) => h("span", { class: kindOf(line) }, `${line}\n`)),
    ),
    lines.length > maximumDiffLines
      ? h("p", { class: "note" }, `Only the first ${maximumDiffLines} of ${lines.length} lines are shown.`)
      : null,
  );
}

/** Two milestones to compare and the differences between them. */
function compareForm(context: PageContext, milestones: readonly MilestoneMetadata[]): HTMLElement {
  const status = statusRegion();
  const output = h("div", { class: "diff-output" });
  const option = (milestone: MilestoneMetadata): HTMLOptionElement =>
    h("option", { value: milestone.id }, `${milestone.name} (${formatInstant(milestone.created)})`);
  // Newest first: by default the diff runs from the second newest to the newest.
  const from = h("select", { name: "from" }, milestones.map(option));
  const to = h("select", { name: "to" }, milestones.map(option));
  from.value = milestones[1]?.id ?? "";
  to.value = milestones[0]?.id ?? "";
  const submit = h("button", { type: "submit" }, "Show differences");
  const headingId = uniqueId("compare-title");
  const form = h(
    "form",
    { class: "card", "aria-labelledby": headingId },
    h("h3", { id: headingId }, "Compare two milestones"),
    h("div", { class: "inline-form" }, field("From milestone", from), field("To milestone", to), submit),
    status,
    output,
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    clearStatus(status);
    if (from.value === to.value) {
      showStatus(status, "Choose two different milestones.");
      from.focus();
      return;
    }
    const fromName = from.selectedOptions[0]?.textContent ?? "";
    const toName = to.selectedOptions[0]?.textContent ?? "";
    submit.disabled = true;
    replaceChildren(output, h("p", {}, "Computing the differences…"));
    context.api
      .milestoneDiff(from.value, to.value)
      .then((diff) => replaceChildren(output, diffView(diff, `Differences from ${fromName} to ${toName}`)))
      .catch((error: unknown) => {
        replaceChildren(output);
        reportLoadFailure(status, "diff", error);
      })
      .finally(() => {
        submit.disabled = false;
      });
  });
  return form;
}

/** The milestones of a file, newest first, with the comparison of two of them. */
function milestonesSection(context: PageContext, file: FileMetadata): HTMLElement {
  const headingId = uniqueId("milestones-title");
  const status = statusRegion();
  const body = h("div", {}, h("p", {}, "Loading milestones…"));
  context.api
    .searchMilestones({
      filter: { fileId: file.id },
      sort: [{ field: "created", direction: "DESC" }],
      size: milestonesShown,
    })
    .then((found) => {
      if (found.items.length === 0) {
        replaceChildren(body, h("p", {}, "This file has no milestones."));
        return;
      }
      replaceChildren(
        body,
        table(
          `Milestones of ${file.name}`,
          ["Name", "Created", "Created by"],
          found.items.map((milestone) => [
            routeLink(`modeler/milestones/${encodeURIComponent(milestone.id)}`, milestone.name),
            formatInstant(milestone.created),
            milestone.createdBy.name,
          ]),
        ),
        found.total > found.items.length
          ? h("p", { class: "note" }, `The newest ${found.items.length} of ${found.total} milestones are listed.`)
          : null,
        found.items.length >= 2 ? compareForm(context, found.items) : null,
      );
    })
    .catch((error: unknown) => {
      replaceChildren(body);
      reportLoadFailure(status, "milestones", error);
    });
  return h("section", { "aria-labelledby": headingId }, h("h2", { id: headingId }, "Milestones"), status, body);
}

/** A file: what it holds, drawn for its kind, and its milestones. */
export const modelerFilePage: Page = {
  path: "modeler/files/:fileId",
  title: "File",
  listed: false,
  visible: mayReadModeler,
  render(context, parameters) {
    const status = statusRegion();
    const body = h("div", {}, h("p", {}, "Loading the file…"));
    context.api
      .modelerFile(parameters.fileId ?? "")
      .then(({ metadata, content }) => {
        context.setTitle(metadata.name);
        replaceChildren(
          body,
          fileTrail(metadata, metadata.name, false),
          facts([
            ["Kind", fileKindName(metadata.type)],
            ["Path", metadata.simplePath],
            ["Revision", String(metadata.revision)],
            ["Updated", `${formatInstant(metadata.updated)} by ${metadata.updatedBy.name}`],
            ["Created", `${formatInstant(metadata.created)} by ${metadata.createdBy.name}`],
          ]),
          contentView(metadata.type, content),
          sourceView(metadata.type, content),
          milestonesSection(context, metadata),
        );
      })
      .catch((error: unknown) => {
        replaceChildren(body);
        reportLoadFailure(status, "file", error);
      });
    return h("section", {}, status, body);
  },
};

/** A milestone: the content it froze, drawn as its file's kind is. */
export const modelerMilestonePage: Page = {
  path: "modeler/milestones/:milestoneId",
  title: "Milestone",
  listed: false,
  visible: mayReadModeler,
  render(context, parameters) {
    const status = statusRegion();
    const body = h("div", {}, h("p", {}, "Loading the milestone…"));
    const load = async (): Promise<void> => {
      const milestone = await context.api.milestone(parameters.milestoneId ?? "");
      const file = await context.api.modelerFile(milestone.metadata.fileId);
      context.setTitle(`Milestone ${milestone.metadata.name}`);
      replaceChildren(
        body,
        fileTrail(file.metadata, milestone.metadata.name, true),
        facts([
          ["File", file.metadata.simplePath],
          ["Created", `${formatInstant(milestone.metadata.created)} by ${milestone.metadata.createdBy.name}`],
        ]),
        contentView(file.metadata.type, milestone.content),
        sourceView(file.metadata.type, milestone.content),
      );
    };
    load().catch((error: unknown) => {
      replaceChildren(body);
      reportLoadFailure(status, "milestone", error);
    });
    return h("section", {}, status, body);
  },
};
