import { type Child, h, uniqueId } from "./dom.js";

/** A labelled control: the label is tied to the control by id, and an optional hint describes it. */
export function field(labelText: string, control: HTMLInputElement | HTMLSelectElement, hint?: string): HTMLElement {
  const id = control.id === "" ? uniqueId("field") : control.id;
  control.id = id;
  let hintElement: HTMLElement | null = null;
  if (hint !== undefined) {
    hintElement = h("small", { id: `${id}-hint`, class: "hint" }, hint);
    control.setAttribute("aria-describedby", hintElement.id);
  }
  return h("div", { class: "field" }, h("label", { for: id }, labelText), control, hintElement);
}

/** The characters of `text` as the API counts them, code points, where `String.length` counts UTF-16 units. */
export function characterCount(text: string): number {
  let count = 0;
  for (const _ of text) count += 1;
  return count;
}

/**
 * The `maxlength` of an input that holds at most `characters` characters. HTML counts UTF-16 units, in which a
 * character outside the basic plane (most emoji) takes two, so the attribute only stops runaway input: the form
 * checks the exact count with `characterCount`, or leaves it to the API.
 */
export function inputLengthBound(characters: number): number {
  return 2 * characters;
}

/** A region announcing errors and outcomes to screen readers as they appear. */
export function statusRegion(): HTMLElement {
  return h("div", { class: "status", role: "status", "aria-live": "polite" });
}

/** Shows `message` in a status region, as an error or as a plain outcome. */
export function showStatus(region: HTMLElement, message: string, kind: "error" | "success" = "error"): void {
  region.className = `status ${kind}`;
  region.textContent = message;
}

/** Clears a status region. */
export function clearStatus(region: HTMLElement): void {
  region.className = "status";
  region.textContent = "";
}

/** A table in a scrollable region that keyboard users can focus and scroll on narrow screens. */
export function table(caption: string, headings: readonly string[], rows: readonly Child[][]): HTMLElement {
  return h(
    "div",
    { class: "table-scroll", role: "region", "aria-label": caption, tabindex: 0 },
    h(
      "table",
      {},
      h("caption", {}, caption),
      h(
        "thead",
        {},
        h(
          "tr",
          {},
          headings.map((heading) => h("th", { scope: "col" }, heading)),
        ),
      ),
      h(
        "tbody",
        {},
        rows.map((cells) =>
          h(
            "tr",
            {},
            cells.map((cell) => h("td", {}, cell)),
          ),
        ),
      ),
    ),
  );
}

/**
 * Asks for confirmation in a modal dialog; resolves true when confirmed. With `typedConfirmation`, the confirm button
 * stays disabled until that exact text is typed, for actions that cannot be undone.
 */
export function confirmAction(options: {
  title: string;
  message: string;
  confirmLabel: string;
  typedConfirmation?: string;
}): Promise<boolean> {
  return new Promise((resolve) => {
    const titleId = uniqueId("dialog-title");
    const confirmButton = h("button", { type: "submit", class: "danger" }, options.confirmLabel);
    let typed: HTMLElement | null = null;
    if (options.typedConfirmation !== undefined) {
      const expected = options.typedConfirmation;
      const input = h("input", { type: "text", autocomplete: "off", spellcheck: "false" });
      confirmButton.disabled = true;
      input.addEventListener("input", () => {
        confirmButton.disabled = input.value !== expected;
      });
      typed = field(`Type ${expected} to confirm`, input);
    }
    const dialog = h(
      "dialog",
      { "aria-labelledby": titleId },
      h(
        "form",
        { method: "dialog" },
        h("h2", { id: titleId }, options.title),
        h("p", {}, options.message),
        typed,
        h(
          "div",
          { class: "actions" },
          h("button", { type: "submit", value: "cancel", formnovalidate: true }, "Cancel"),
          confirmButton,
        ),
      ),
    );
    confirmButton.value = "confirm";
    dialog.addEventListener("close", () => {
      resolve(dialog.returnValue === "confirm");
      dialog.remove();
    });
    document.body.append(dialog);
    dialog.showModal();
  });
}

/** Formats an ISO-8601 instant for people, in the browser's time zone. */
export function formatInstant(iso: string): string {
  const instant = new Date(iso);
  return Number.isNaN(instant.getTime()) ? iso : instant.toLocaleString();
}

/**
 * Runs `task` now and again `intervalMs` after each run ends, for as long as `element` is in the document: a page
 * that is left stops polling by itself.
 */
export function repeatWhileShown(element: Element, intervalMs: number, task: () => Promise<void>): void {
  const run = (): void => {
    task()
      .catch(() => undefined)
      .finally(() => {
        window.setTimeout(() => {
          if (element.isConnected) run();
        }, intervalMs);
      });
  };
  run();
}

/**
 * Replaces a live region's content when it changed, keeping the keyboard focus on the equivalent control (same tag,
 * label and text) so that a list refreshing under a keyboard user does not throw their focus away.
 */
export function refreshContent(container: Element, content: Element, fingerprint: string): void {
  if (container.getAttribute("data-fingerprint") === fingerprint) return;
  container.setAttribute("data-fingerprint", fingerprint);
  const focused = document.activeElement;
  const key =
    focused !== null && container.contains(focused)
      ? `${focused.tagName}|${focused.getAttribute("aria-label") ?? ""}|${focused.textContent ?? ""}`
      : null;
  container.replaceChildren(content);
  if (key === null) return;
  for (const candidate of content.querySelectorAll<HTMLElement>("a, button, input, select, [tabindex]")) {
    if (`${candidate.tagName}|${candidate.getAttribute("aria-label") ?? ""}|${candidate.textContent ?? ""}` === key) {
      candidate.focus();
      return;
    }
  }
}
