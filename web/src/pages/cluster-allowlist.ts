import { addressRangeEntryProblem, maxAddressRangeEntryLength } from "../address-ranges.js";
import { type AllowlistEntry, ApiError } from "../api.js";
import { h, replaceChildren, uniqueId } from "../dom.js";
import { clearStatus, confirmAction, inputLengthBound, showStatus, table } from "../ui.js";
import { type ClusterTabContext, clusterTabPage, sessionEnded } from "./cluster-tabs.js";

/** Bounds of the Administration API's allowlist. */
const maxEntries = 1_000;
const maxDescriptionLength = 1_024;

/** Where a refused allowlist names an entry's field: `body/ipallowlist/{index}/{field}`. */
const entryLocation = /body\/ipallowlist\/(\d+)(?:\/(ip|description))?/;

/**
 * A cluster's IP allowlist (scope `ipallowlist` to change it, `cluster` to read it): an editor of entries, each
 * addresses or CIDR blocks with a description, checked as they will be by the platform before the whole list is sent.
 */
export const clusterAllowlistPage = clusterTabPage({
  segment: "allowlist",
  title: "IP allowlist",
  render(tab) {
    const content = h("div", {}, h("p", {}, "Loading the allowlist…"));
    const load = async (): Promise<void> => {
      try {
        const entries = await tab.context.api.ipAllowlist(tab.clusterId);
        const editable = tab.context.session.holds("ipallowlist");
        replaceChildren(content, editable ? allowlistEditor(tab, entries, () => void load()) : allowlistTable(entries));
      } catch (error) {
        if (!sessionEnded(error))
          showStatus(tab.status, `The allowlist could not be loaded: ${(error as Error).message}`);
      }
    };
    void load();
    return content;
  },
});

/** What an empty allowlist means, said wherever the list is shown. */
const everyoneAllowed = "The allowlist is empty: every address may reach the cluster's gateway and management port.";

function allowlistTable(entries: readonly AllowlistEntry[]): HTMLElement {
  return h(
    "div",
    {},
    entries.length === 0
      ? h("p", {}, everyoneAllowed)
      : table(
          "Allowed addresses",
          ["Addresses", "Description"],
          entries.map((entry) => [h("code", {}, entry.ip), entry.description === "" ? "—" : entry.description]),
        ),
    h("p", { class: "hint" }, "Changing the allowlist needs the ipallowlist scope."),
  );
}

/** One row of the editor. */
interface EntryRow {
  element: HTMLFieldSetElement;
  legend: HTMLLegendElement;
  ip: HTMLInputElement;
  description: HTMLInputElement;
  error: HTMLElement;
  remove: HTMLButtonElement;
}

function allowlistEditor(tab: ClusterTabContext, saved: readonly AllowlistEntry[], onSaved: () => void): HTMLElement {
  const rows: EntryRow[] = [];
  const list = h("div", { class: "entries" });
  const empty = h("p", {}, everyoneAllowed);
  const headingId = uniqueId("allowlist-title");
  const hintId = uniqueId("allowlist-hint");
  const add = h("button", { type: "button" }, "Add entry");
  const submit = h("button", { type: "submit" }, "Save allowlist");

  /** Numbers the rows after one was added or removed, so that labels and errors name the right entry. */
  const renumber = (): void => {
    rows.forEach((row, index) => {
      row.legend.textContent = `Entry ${index + 1}`;
      row.remove.setAttribute("aria-label", `Remove entry ${index + 1}`);
    });
    empty.hidden = rows.length > 0;
    add.disabled = rows.length >= maxEntries;
  };
  const showProblem = (row: EntryRow, problem: string | null, field: "ip" | "description" = "ip"): void => {
    row.error.textContent = problem ?? "";
    row.ip.setAttribute("aria-invalid", problem !== null && field === "ip" ? "true" : "false");
    row.description.setAttribute("aria-invalid", problem !== null && field === "description" ? "true" : "false");
  };
  const addRow = (entry: AllowlistEntry): EntryRow => {
    const ipId = uniqueId("entry-ip");
    const descriptionId = uniqueId("entry-description");
    const error = h("p", { class: "field-error", id: uniqueId("entry-error") });
    const ip = h("input", {
      id: ipId,
      type: "text",
      value: entry.ip,
      maxlength: maxAddressRangeEntryLength,
      autocomplete: "off",
      spellcheck: "false",
      "aria-describedby": `${hintId} ${error.id}`,
    });
    const description = h("input", {
      id: descriptionId,
      type: "text",
      value: entry.description,
      maxlength: inputLengthBound(maxDescriptionLength),
      autocomplete: "off",
      "aria-describedby": error.id,
    });
    const legend = h("legend", {});
    const remove = h("button", { type: "button", class: "danger" }, "Remove");
    const element = h(
      "fieldset",
      { class: "entry" },
      legend,
      h("div", { class: "field" }, h("label", { for: ipId }, "Addresses"), ip),
      h("div", { class: "field" }, h("label", { for: descriptionId }, "Description"), description),
      h("div", { class: "entry-remove" }, remove),
      error,
    );
    const row: EntryRow = { element, legend, ip, description, error, remove };
    ip.addEventListener("input", () => {
      if (error.textContent !== "") showProblem(row, addressRangeEntryProblem(ip.value.trim()));
    });
    remove.addEventListener("click", () => {
      const index = rows.indexOf(row);
      rows.splice(index, 1);
      element.remove();
      renumber();
      // The keyboard focus goes to the entry that took this one's place, or to adding one.
      (rows[index]?.ip ?? rows[index - 1]?.ip ?? add).focus();
    });
    rows.push(row);
    list.append(element);
    return row;
  };
  for (const entry of saved) addRow(entry);
  renumber();
  add.addEventListener("click", () => {
    addRow({ ip: "", description: "" }).ip.focus();
    renumber();
  });

  const form = h(
    "form",
    { method: "post", novalidate: true, "aria-labelledby": headingId, class: "card" },
    h("h2", { id: headingId }, "Allowed addresses"),
    h(
      "p",
      { id: hintId, class: "hint" },
      "Each entry holds IPv4 or IPv6 addresses or CIDR blocks separated by commas, e.g. 192.0.2.0/24, 2001:db8::/32.",
    ),
    empty,
    list,
    h("div", { class: "actions" }, add, submit),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    clearStatus(tab.status);
    let firstInvalid: EntryRow | undefined;
    for (const [index, row] of rows.entries()) {
      const value = row.ip.value.trim();
      const problem = value === "" ? "Enter one or more addresses or CIDR blocks." : addressRangeEntryProblem(value);
      showProblem(row, problem);
      if (problem !== null && firstInvalid === undefined) {
        firstInvalid = row;
        showStatus(tab.status, `Entry ${index + 1}: ${problem}`);
      }
    }
    if (firstInvalid !== undefined) {
      firstInvalid.ip.focus();
      return;
    }
    const entries = rows.map((row) => ({ ip: row.ip.value.trim(), description: row.description.value.trim() }));
    void save(tab, entries, rows, showProblem, submit, onSaved);
  });
  return form;
}

async function save(
  tab: ClusterTabContext,
  entries: readonly AllowlistEntry[],
  rows: readonly EntryRow[],
  showProblem: (row: EntryRow, problem: string | null, field?: "ip" | "description") => void,
  submit: HTMLButtonElement,
  onSaved: () => void,
): Promise<void> {
  if (entries.length === 0) {
    const confirmed = await confirmAction({
      title: "Allow every address",
      message: "With an empty allowlist, every address may reach the cluster's gateway and management port.",
      confirmLabel: "Allow every address",
    });
    if (!confirmed) return;
  }
  submit.disabled = true;
  try {
    await tab.context.api.replaceIpAllowlist(tab.clusterId, entries);
    showStatus(
      tab.status,
      entries.length === 0
        ? "The allowlist was emptied: every address may reach the cluster."
        : `The allowlist was saved with ${entries.length} ${entries.length === 1 ? "entry" : "entries"}; the cluster's gateway applies it without a restart.`,
      "success",
    );
    onSaved();
  } catch (error) {
    if (sessionEnded(error)) return;
    // The platform's 400 names the entry at fault: the message goes next to it.
    const problem = error instanceof ApiError ? error.problem : undefined;
    const location = problem?.errors?.[0]?.location ?? problem?.detail ?? "";
    const match = entryLocation.exec(location);
    const row = match === null ? undefined : rows[Number(match[1])];
    if (row !== undefined) {
      showProblem(row, (error as Error).message, match?.[2] === "description" ? "description" : "ip");
      (match?.[2] === "description" ? row.description : row.ip).focus();
    }
    showStatus(tab.status, `The allowlist was not saved: ${(error as Error).message}`);
  } finally {
    submit.disabled = false;
  }
}
