/**
 * The Modeler's projects, folders and files, read-only (scope `modeler:read` on a Modeler API token): a list of
 * projects, and the folders and files inside a project or a folder, each linking to its own page.
 */
import { ApiError, type ContainerContent, endedSession, type FileMetadata, type ProjectMetadata } from "../api.js";
import { type Child, h, replaceChildren } from "../dom.js";
import type { Session } from "../session.js";
import { field, formatInstant, showStatus, statusRegion, table } from "../ui.js";
import type { Page, PageContext } from "./page.js";

/** Projects per page of the list: the most one Modeler API search answers. */
const projectsPerPage = 50;
/** Longest name the Modeler API accepts, and so the longest filter worth typing. */
const nameMaxLength = 255;

/** Whether the client may read the Modeler's resources: a Modeler API token carrying `modeler:read`. */
export function mayReadModeler(session: Session): boolean {
  return session.canCall("modeler") && session.holds("modeler:read");
}

/** What a file's type is called on its pages. */
export function fileKindName(type: FileMetadata["type"]): string {
  switch (type) {
    case "bpmn":
      return "BPMN diagram";
    case "dmn":
      return "DMN decisions";
    case "form":
      return "Form";
    case "connector_template":
      return "Connector template";
  }
}

/** A link to another page of the console, followed without reloading. */
export function routeLink(path: string, text: Child): HTMLAnchorElement {
  return h("a", { href: `/console/${path}`, "data-route": path }, text);
}

/** Shows a failed load in the page's status region; a 401 has already ended the session. */
export function reportLoadFailure(status: HTMLElement, what: string, error: unknown): void {
  if (endedSession(error)) return;
  if (error instanceof ApiError && error.status === 404) {
    showStatus(status, `The ${what} was not found: it may have been deleted.`);
    return;
  }
  showStatus(status, `The ${what} could not be loaded: ${(error as Error).message}`);
}

/** A breadcrumb trail: links to each ancestor, then the current item as text. */
export function breadcrumb(links: readonly { path: string; name: string }[], current: string): HTMLElement {
  return h(
    "nav",
    { "aria-label": "Breadcrumb", class: "breadcrumb" },
    h(
      "ol",
      {},
      h("li", {}, routeLink("modeler", "Projects")),
      links.map((link) => h("li", {}, routeLink(link.path, link.name))),
      h("li", { "aria-current": "page" }, current),
    ),
  );
}

/** The folders, then the files, directly inside a project or folder. */
function contentTable(caption: string, content: ContainerContent): HTMLElement {
  if (content.folders.length === 0 && content.files.length === 0) return h("p", {}, "This is empty.");
  const byName = <Item extends { name: string }>(items: readonly Item[]): Item[] =>
    [...items].sort((first, second) => first.name.localeCompare(second.name));
  const rows: Child[][] = [
    ...byName(content.folders).map((folder) => [
      routeLink(`modeler/folders/${encodeURIComponent(folder.id)}`, folder.name),
      "Folder",
      formatInstant(folder.updated),
      folder.updatedBy.name,
    ]),
    ...byName(content.files).map((file) => [
      routeLink(`modeler/files/${encodeURIComponent(file.id)}`, file.name),
      fileKindName(file.type),
      formatInstant(file.updated),
      file.updatedBy.name,
    ]),
  ];
  return table(caption, ["Name", "Kind", "Updated", "Updated by"], rows);
}

function projectsTable(projects: readonly ProjectMetadata[]): HTMLElement {
  return table(
    "Projects",
    ["Name", "Updated", "Updated by", "Created"],
    projects.map((project) => [
      routeLink(`modeler/projects/${encodeURIComponent(project.id)}`, project.name),
      formatInstant(project.updated),
      project.updatedBy.name,
      formatInstant(project.created),
    ]),
  );
}

/** The organization's projects, by name, a page at a time, with a name filter. */
export const modelerProjectsPage: Page = {
  path: "modeler",
  title: "Modeler",
  visible: mayReadModeler,
  render(context) {
    const status = statusRegion();
    const list = h("div", { class: "projects" }, h("p", {}, "Loading projects…"));
    const filter = h("input", { type: "search", name: "name", maxlength: nameMaxLength, autocomplete: "off" });
    const previous = h("button", { type: "button", disabled: true }, "Previous page");
    const next = h("button", { type: "button", disabled: true }, "Next page");
    const position = h("p", { class: "page-position", "aria-live": "polite" });
    let pageNumber = 0;
    const load = async (): Promise<void> => {
      try {
        const name = filter.value.trim();
        const found = await context.api.searchProjects({
          ...(name === "" ? {} : { filter: { name } }),
          sort: [{ field: "name", direction: "ASC" }],
          page: pageNumber,
          size: projectsPerPage,
        });
        const pages = Math.max(1, Math.ceil(found.total / projectsPerPage));
        previous.disabled = pageNumber === 0;
        next.disabled = pageNumber + 1 >= pages;
        position.textContent = found.total === 0 ? "" : `Page ${pageNumber + 1} of ${pages} · ${found.total} projects`;
        replaceChildren(
          list,
          found.items.length === 0
            ? h("p", {}, name === "" ? "The organization has no projects yet." : "No project matches this name.")
            : projectsTable(found.items),
        );
      } catch (error) {
        reportLoadFailure(status, "list of projects", error);
      }
    };
    const search = h(
      "form",
      { role: "search", "aria-label": "Projects", class: "inline-form" },
      field("Project name contains", filter),
      h("button", { type: "submit" }, "Search"),
    );
    search.addEventListener("submit", (event) => {
      event.preventDefault();
      pageNumber = 0;
      void load();
    });
    previous.addEventListener("click", () => {
      pageNumber = Math.max(0, pageNumber - 1);
      void load();
    });
    next.addEventListener("click", () => {
      pageNumber += 1;
      void load();
    });
    void load();
    return h("section", {}, search, status, list, h("div", { class: "actions pager" }, previous, position, next));
  },
};

/** A project: the folders and files at its top level. */
export const modelerProjectPage: Page = {
  path: "modeler/projects/:projectId",
  title: "Project",
  listed: false,
  visible: mayReadModeler,
  render(context: PageContext, parameters) {
    const status = statusRegion();
    const body = h("div", {}, h("p", {}, "Loading the project…"));
    context.api
      .project(parameters.projectId ?? "")
      .then(({ metadata, content }) => {
        context.setTitle(`Project ${metadata.name}`);
        replaceChildren(body, breadcrumb([], metadata.name), contentTable(`Contents of ${metadata.name}`, content));
      })
      .catch((error: unknown) => {
        replaceChildren(body);
        reportLoadFailure(status, "project", error);
      });
    return h("section", {}, status, body);
  },
};

/** A folder: the folders and files directly inside it, under a trail back to its project. */
export const modelerFolderPage: Page = {
  path: "modeler/folders/:folderId",
  title: "Folder",
  listed: false,
  visible: mayReadModeler,
  render(context: PageContext, parameters) {
    const status = statusRegion();
    const body = h("div", {}, h("p", {}, "Loading the folder…"));
    const load = async (): Promise<void> => {
      const { metadata, content } = await context.api.folder(parameters.folderId ?? "");
      context.setTitle(`Folder ${metadata.name}`);
      // The trail shows the project and the parent folder; deeper ancestors are a step up from there.
      const [project, parent] = await Promise.all([
        context.api.project(metadata.projectId),
        metadata.parentId === null ? Promise.resolve(null) : context.api.folder(metadata.parentId),
      ]);
      const links = [
        { path: `modeler/projects/${encodeURIComponent(project.metadata.id)}`, name: project.metadata.name },
      ];
      if (parent !== null) {
        links.push({ path: `modeler/folders/${encodeURIComponent(parent.metadata.id)}`, name: parent.metadata.name });
      }
      replaceChildren(body, breadcrumb(links, metadata.name), contentTable(`Contents of ${metadata.name}`, content));
    };
    load().catch((error: unknown) => {
      replaceChildren(body);
      reportLoadFailure(status, "folder", error);
    });
    return h("section", {}, status, body);
  },
};
