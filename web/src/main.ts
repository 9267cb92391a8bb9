/**
 * The web console: a single-page app over the platform's public APIs. It routes under /console/, shows the sign-in
 * form until a client has signed in, and then only the pages the client's scopes allow.
 */
import { ConsoleApi, fetchPlatformIndex, type PlatformIndex } from "./api.js";
import { h, replaceChildren } from "./dom.js";
import { activityPage } from "./pages/activity.js";
import { clusterAllowlistPage } from "./pages/cluster-allowlist.js";
import { clusterBackupsPage } from "./pages/cluster-backups.js";
import { clusterClientsPage } from "./pages/cluster-clients.js";
import { clusterMonitoringPage } from "./pages/cluster-monitoring.js";
import { clusterSecretsPage } from "./pages/cluster-secrets.js";
import { clusterPage, clustersPage } from "./pages/clusters.js";
import { membersPage } from "./pages/members.js";
import { modelerFolderPage, modelerProjectPage, modelerProjectsPage } from "./pages/modeler.js";
import { modelerFilePage, modelerMilestonePage } from "./pages/modeler-file.js";
import { organizationClientsPage } from "./pages/organization-clients.js";
import { overviewPage } from "./pages/overview.js";
import type { Page, PageContext } from "./pages/page.js";
import { scalingPage } from "./pages/scaling.js";
import { signInForm } from "./pages/sign-in.js";
import type { Session } from "./session.js";

/** Where the console's pages live; the platform answers index.html for every path below it. */
const basePath = "/console/";

/** Every page, in navigation order. */
const pages: readonly Page[] = [
  overviewPage,
  clustersPage,
  clusterPage,
  clusterClientsPage,
  clusterSecretsPage,
  clusterAllowlistPage,
  clusterMonitoringPage,
  clusterBackupsPage,
  scalingPage,
  membersPage,
  organizationClientsPage,
  activityPage,
  modelerProjectsPage,
  modelerProjectPage,
  modelerFolderPage,
  modelerFilePage,
  modelerMilestonePage,
];

/** The parameters of `path` when it matches the page's path pattern, or null. */
function match(page: Page, path: string): Record<string, string> | null {
  const expected = page.path.split("/");
  const actual = path.split("/");
  if (expected.length !== actual.length) return null;
  const parameters: Record<string, string> = {};
  for (const [index, segment] of expected.entries()) {
    const value = actual[index] ?? "";
    if (segment.startsWith(":")) {
      if (value === "") return null;
      try {
        parameters[segment.slice(1)] = decodeURIComponent(value);
      } catch {
        return null;
      }
    } else if (segment !== value) {
      return null;
    }
  }
  return parameters;
}

const root = document.getElementById("app")!;
let session: Session | null = null;
let index: PlatformIndex | null = null;

/** The page path below `/console/` of the current location ("" for the overview). */
function currentPath(): string {
  const { pathname } = window.location;
  return pathname.startsWith(basePath) ? pathname.slice(basePath.length).replace(/\/+$/, "") : "";
}

/** Moves to a page of the console without reloading it. */
function navigate(path: string): void {
  window.history.pushState(null, "", `${basePath}${path}`);
  render();
}

function signedOut(reason: string | null): void {
  session = null;
  render(reason);
}

function render(signInReason: string | null = null): void {
  if (index === null) return;
  if (session === null) {
    document.title = "Sign in · flowplane console";
    replaceChildren(
      root,
      h(
        "main",
        { id: "main", class: "sign-in" },
        signInForm({
          audiences: index.audiences,
          reason: signInReason,
          onSignedIn(signedIn) {
            session = signedIn;
            render();
          },
          onEnded: signedOut,
        }),
      ),
    );
    return;
  }
  const path = currentPath();
  const active = session;
  let page: Page | undefined;
  let parameters: Record<string, string> = {};
  for (const candidate of pages) {
    const matched = match(candidate, path);
    if (matched !== null) {
      page = candidate;
      parameters = matched;
      break;
    }
  }
  const visible = pages.filter((candidate) => candidate.listed !== false && candidate.visible(active));
  const navigation = h(
    "nav",
    { "aria-label": "Console" },
    h(
      "ul",
      {},
      visible.map((candidate) =>
        h(
          "li",
          {},
          h(
            "a",
            {
              href: `${basePath}${candidate.path}`,
              "data-route": candidate.path,
              "aria-current": candidate === page ? "page" : undefined,
            },
            candidate.title,
          ),
        ),
      ),
    ),
  );
  const heading = h("h1", { tabindex: -1 }, page?.title ?? "Page not found");
  const main = h("main", { id: "main" }, heading);
  replaceChildren(
    root,
    h("a", { class: "skip-link", href: "#main" }, "Skip to content"),
    h(
      "header",
      { class: "top" },
      h("p", { class: "brand" }, "flowplane console"),
      navigation,
      h(
        "div",
        { class: "account" },
        h("span", {}, "Client ", h("code", {}, active.clientId)),
        h("button", { type: "button", onclick: () => active.end("You signed out.") }, "Sign out"),
      ),
    ),
    main,
  );
  document.title = `${page?.title ?? "Page not found"} · flowplane console`;
  const context: PageContext = {
    session: active,
    api: new ConsoleApi(active),
    navigate,
    setTitle(title) {
      heading.textContent = title;
      document.title = `${title} · flowplane console`;
    },
  };
  if (page === undefined) {
    main.append(h("p", {}, "There is no such page in the console."));
  } else if (!page.visible(active)) {
    main.append(h("p", {}, "This client's scopes do not allow this page."));
  } else {
    main.append(page.render(context, parameters));
  }
  heading.focus();
}

document.addEventListener("click", (event) => {
  const target = event.target instanceof Element ? event.target.closest("a[data-route]") : null;
  if (target === null || event.defaultPrevented || event.button !== 0) return;
  if (event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
  event.preventDefault();
  navigate(target.getAttribute("data-route") ?? "");
});
window.addEventListener("popstate", () => render());

async function start(): Promise<void> {
  // `/` shows the console too; its pages live under /console/.
  if (!window.location.pathname.startsWith(basePath)) window.history.replaceState(null, "", basePath);
  try {
    index = await fetchPlatformIndex();
  } catch (error) {
    replaceChildren(
      root,
      h(
        "main",
        { id: "main" },
        h("h1", {}, "flowplane console"),
        h("p", { role: "alert" }, `The platform could not be reached: ${(error as Error).message}`),
      ),
    );
    return;
  }
  render();
}

void start();
