import { type ActivityEntry, type ActivityQuery, endedSession } from "../api.js";
import { h, replaceChildren } from "../dom.js";
import { clearStatus, field, formatInstant, showStatus, statusRegion, table } from "../ui.js";
import type { Page, PageContext } from "./page.js";

/** Most entries the activity API answers at once. */
const maxLimit = 1_000;
const defaultLimit = 100;

const auditTypeNames: Record<ActivityEntry["auditType"], string> = {
  c: "created",
  r: "read",
  u: "updated",
  d: "deleted",
};

/** The activity log of the organization: any token of the Administration API reads it. */
export const activityPage: Page = {
  path: "activity",
  title: "Activity",
  visible: (session) => session.canCall("admin"),
  render(context) {
    const status = statusRegion();
    const results = h("div", { class: "activity" }, h("p", {}, "Loading activity…"));
    const limit = h("input", { type: "number", name: "limit", min: 1, max: maxLimit, value: defaultLimit });
    const since = h("input", { type: "datetime-local", name: "since", step: 1 });
    const entity = h("input", { type: "text", name: "entity", maxlength: 200 });
    const action = h(
      "select",
      { name: "action" },
      h("option", { value: "" }, "any"),
      Object.entries(auditTypeNames).map(([value, name]) => h("option", { value }, name)),
    );
    const client = h("input", { type: "text", name: "client", maxlength: 200 });
    const download = h("button", { type: "button" }, "Download CSV");
    let entries: ActivityEntry[] = [];

    /** The query the API filters by, or null (with the reason shown) when an input is out of range. */
    const query = (): ActivityQuery | null => {
      const count = Number(limit.value);
      if (!Number.isInteger(count) || count < 1 || count > maxLimit) {
        limit.setAttribute("aria-invalid", "true");
        showStatus(status, `Entries: a whole number from 1 to ${maxLimit}.`);
        limit.focus();
        return null;
      }
      limit.setAttribute("aria-invalid", "false");
      if (since.value === "") return { limit: count };
      const instant = new Date(since.value);
      if (Number.isNaN(instant.getTime())) {
        showStatus(status, "Since: enter a date and time.");
        since.focus();
        return null;
      }
      return { limit: count, since: instant.toISOString() };
    };

    /** Narrows the loaded entries by the filters the API does not take. */
    const show = (): void => {
      const entityFilter = entity.value.trim().toLowerCase();
      const clientFilter = client.value.trim().toLowerCase();
      const shown = entries.filter(
        (entry) =>
          (entityFilter === "" ||
            entry.entity.toLowerCase().includes(entityFilter) ||
            entry.entityId.toLowerCase().includes(entityFilter)) &&
          (action.value === "" || entry.auditType === action.value) &&
          (clientFilter === "" || entry.userId.toLowerCase().includes(clientFilter)),
      );
      replaceChildren(
        results,
        h("p", { class: "muted" }, `${shown.length} of ${entries.length} loaded entries shown.`),
        shown.length === 0
          ? null
          : table(
              "Activity, newest first",
              ["When", "Action", "Resource", "Which", "Client", "API"],
              shown.map((entry) => [
                timeElement(entry.timestamp),
                auditTypeNames[entry.auditType],
                entry.entity,
                entry.entityId,
                entry.userId,
                entry.service,
              ]),
            ),
      );
    };

    const load = async (): Promise<void> => {
      const current = query();
      if (current === null) return;
      clearStatus(status);
      try {
        entries = await context.api.activity(current);
        show();
      } catch (error) {
        if (endedSession(error)) return;
        showStatus(status, `The activity could not be loaded: ${(error as Error).message}`);
      }
    };

    download.addEventListener("click", () => void downloadCsv(context, query, status));
    for (const control of [entity, client]) control.addEventListener("input", show);
    action.addEventListener("change", show);
    const form = h(
      "form",
      { method: "post", class: "filters", "aria-label": "Activity filters", novalidate: true },
      field("Entries", limit, `Newest first, at most ${maxLimit}.`),
      field("Since", since, "Local time; empty for no lower bound."),
      field("Resource", entity, "Kind or name contains."),
      field("Action", action),
      field("Client", client, "Client id contains."),
      h("div", { class: "actions" }, h("button", { type: "submit" }, "Load"), download),
      h("p", { class: "hint" }, "The CSV holds the entries and time range loaded, without the other filters."),
    );
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      void load();
    });
    void load();
    return h("section", {}, form, status, results);
  },
};

async function downloadCsv(context: PageContext, query: () => ActivityQuery | null, status: HTMLElement) {
  const current = query();
  if (current === null) return;
  try {
    const csv = await context.api.activityCsv(current);
    const url = URL.createObjectURL(csv);
    const link = h("a", { href: url, download: "activity.csv", hidden: true });
    document.body.append(link);
    link.click();
    link.remove();
    // The browser has taken the file once the click's default action ran; the URL is no longer needed.
    window.setTimeout(() => URL.revokeObjectURL(url), 0);
  } catch (error) {
    if (endedSession(error)) return;
    showStatus(status, `The CSV could not be downloaded: ${(error as Error).message}`);
  }
}

/** A `<time>` element showing `timestampMs` (milliseconds since 1970) in the browser's locale. */
function timeElement(timestampMs: number): HTMLElement {
  const instant = new Date(timestampMs).toISOString();
  return h("time", { datetime: instant }, formatInstant(instant));
}
