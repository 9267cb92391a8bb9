import { endedSession } from "../api.js";
import { h, uniqueId } from "../dom.js";
import type { Session } from "../session.js";
import { field, statusRegion } from "../ui.js";
import type { Page, PageContext } from "./page.js";

/** One tab of a cluster's pages: a path below `clusters/{clusterId}` and the scopes it needs. */
interface ClusterTab {
  /** Path segment after `clusters/{clusterId}`; "" for the cluster's own page. */
  segment: string;
  label: string;
  visible(session: Session): boolean;
}

/** Whether the client holds an Administration API token carrying `scope`. */
function administers(session: Session, scope: string): boolean {
  return session.canCall("admin") && session.holds(scope);
}

/** The cluster's tabs in order; each is shown only to clients whose scopes its API calls need. */
const clusterTabs: readonly ClusterTab[] = [
  { segment: "", label: "Overview", visible: (session) => administers(session, "cluster") },
  { segment: "clients", label: "API clients", visible: (session) => administers(session, "cluster-clients") },
  { segment: "secrets", label: "Connector secrets", visible: (session) => administers(session, "secrets") },
  {
    segment: "allowlist",
    label: "IP allowlist",
    // The list can be read with either scope; only `ipallowlist` may change it.
    visible: (session) => administers(session, "ipallowlist") || administers(session, "cluster"),
  },
  { segment: "monitoring", label: "Monitoring", visible: (session) => administers(session, "cluster") },
  { segment: "backups", label: "Backups", visible: (session) => administers(session, "backups") },
];

/** The console path of a cluster's tab. */
export function clusterTabPath(clusterId: string, segment: string): string {
  const base = `clusters/${encodeURIComponent(clusterId)}`;
  return segment === "" ? base : `${base}/${segment}`;
}

/** The navigation between a cluster's tabs the client may use, with the current one marked. */
export function clusterTabBar(session: Session, clusterId: string, current: string): HTMLElement {
  return h(
    "nav",
    { class: "tabs", "aria-label": "Cluster sections" },
    h(
      "ul",
      {},
      clusterTabs
        .filter((tab) => tab.visible(session))
        .map((tab) => {
          const path = clusterTabPath(clusterId, tab.segment);
          return h(
            "li",
            {},
            h(
              "a",
              {
                href: `/console/${path}`,
                "data-route": path,
                "aria-current": tab.segment === current ? "page" : undefined,
              },
              tab.label,
            ),
          );
        }),
    ),
  );
}

/** Cluster ids as the Administration API accepts them. */
const clusterIdPattern = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;

/**
 * For a client that may use some of a cluster's tabs but not list clusters (no `cluster` scope): a form that opens a
 * cluster's first tab the client may use by the cluster's id. Null for clients that have the list, or no tab at all.
 */
export function openClusterForm(session: Session, navigate: PageContext["navigate"]): HTMLElement | null {
  if (administers(session, "cluster")) return null;
  const first = clusterTabs.find((tab) => tab.visible(session));
  if (first === undefined) return null;
  const clusterId = h("input", { type: "text", name: "clusterId", maxlength: 128, autocomplete: "off" });
  const error = h("p", { class: "field-error", id: uniqueId("cluster-id-error") });
  const headingId = uniqueId("open-cluster-title");
  const form = h(
    "form",
    { method: "post", novalidate: true, "aria-labelledby": headingId, class: "card" },
    h("h2", { id: headingId }, "Open a cluster"),
    field("Cluster id", clusterId, "This client may not list clusters; ask an administrator for the id."),
    error,
    h("button", { type: "submit" }, "Open"),
  );
  clusterId.setAttribute("aria-describedby", `${clusterId.getAttribute("aria-describedby") ?? ""} ${error.id}`.trim());
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const value = clusterId.value.trim();
    const valid = clusterIdPattern.test(value);
    error.textContent = valid ? "" : "Enter a cluster id: letters, digits, dots, underscores and hyphens.";
    clusterId.setAttribute("aria-invalid", valid ? "false" : "true");
    if (!valid) {
      clusterId.focus();
      return;
    }
    navigate(clusterTabPath(value, first.segment));
  });
  return form;
}

/** Whether an error is the end of the session, which the console already reports by showing the sign-in form. */
export const sessionEnded = endedSession;

/** What a tab's content is built from. */
export interface ClusterTabContext {
  context: PageContext;
  clusterId: string;
  /** The page's status region, for outcomes and errors. */
  status: HTMLElement;
}

/**
 * A page that is one tab of a cluster: the tab bar, a status region and the tab's content, with the cluster's name
 * in the heading when the client may read the cluster.
 */
export function clusterTabPage(options: {
  segment: string;
  title: string;
  render(tab: ClusterTabContext): HTMLElement;
}): Page {
  const tab = clusterTabs.find((candidate) => candidate.segment === options.segment);
  if (tab === undefined) throw new Error(`no cluster tab ${options.segment}`);
  return {
    path: `clusters/:clusterId/${options.segment}`,
    title: options.title,
    listed: false,
    visible: (session) => tab.visible(session),
    render(context, parameters) {
      const clusterId = parameters.clusterId ?? "";
      const status = statusRegion();
      const section = h(
        "section",
        {},
        clusterTabBar(context.session, clusterId, options.segment),
        status,
        options.render({ context, clusterId, status }),
      );
      if (administers(context.session, "cluster")) {
        // The name only makes the heading friendlier: the tab's own calls report a missing cluster.
        context.api
          .cluster(clusterId)
          .then((cluster) => {
            if (section.isConnected) context.setTitle(`${options.title} of cluster ${cluster.name}`);
          })
          .catch(() => undefined);
      }
      return section;
    },
  };
}
