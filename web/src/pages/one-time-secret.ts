import { h, uniqueId } from "../dom.js";
import { clearStatus, showStatus, statusRegion } from "../ui.js";

/** One value of a credential shown once: the secret ones get a copy button. */
export interface CredentialValue {
  label: string;
  value: string;
  secret?: boolean;
}

/** Saves `text` as a file through the browser's download, without the text ever appearing in a URL. */
export function downloadText(fileName: string, text: string): void {
  const url = URL.createObjectURL(new Blob([text], { type: "text/plain;charset=utf-8" }));
  const link = h("a", { href: url, download: fileName, hidden: true });
  document.body.append(link);
  link.click();
  link.remove();
  // The browser has taken the file once the click's default action ran; the URL is no longer needed.
  window.setTimeout(() => URL.revokeObjectURL(url), 0);
}

/**
 * Copies `text` to the clipboard. The asynchronous clipboard exists only in secure contexts (HTTPS or loopback);
 * elsewhere the text is selected in `input` and copied the older way, which browsers still honour on a click.
 */
async function copyText(text: string, input: HTMLInputElement): Promise<boolean> {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    input.focus();
    input.select();
    try {
      return document.execCommand("copy");
    } catch {
      return false;
    }
  }
}

/**
 * A panel showing credentials the platform answers only once (a client secret, a generated password): each value in
 * a read-only field that can be selected, a copy button for the secret ones, an optional download, and a button that
 * removes the panel and with it the only copy the console held. The panel takes the keyboard focus when shown.
 */
export function oneTimeSecretPanel(options: {
  heading: string;
  message: string;
  values: readonly CredentialValue[];
  download?: { label: string; fileName: string; content: string };
  onDismissed(): void;
}): HTMLElement {
  const headingId = uniqueId("secret-title");
  const status = statusRegion();
  const heading = h("h2", { id: headingId, tabindex: -1 }, options.heading);
  const rows = options.values.map((credential) => {
    const input = h("input", {
      type: "text",
      readonly: true,
      value: credential.value,
      autocomplete: "off",
      spellcheck: "false",
      id: uniqueId("credential"),
    });
    const copy =
      credential.secret === true
        ? h(
            "button",
            {
              type: "button",
              onclick: () => {
                void copyText(credential.value, input).then((copied) => {
                  if (copied) showStatus(status, `${credential.label} copied to the clipboard.`, "success");
                  else showStatus(status, `Select the ${credential.label.toLowerCase()} and copy it yourself.`);
                });
              },
            },
            `Copy ${credential.label.toLowerCase()}`,
          )
        : null;
    return h(
      "div",
      { class: "field" },
      h("label", { for: input.id }, credential.label),
      h("div", { class: "credential" }, input, copy),
    );
  });
  const download = options.download;
  const panel = h(
    "section",
    { class: "card one-time", "aria-labelledby": headingId },
    heading,
    h("p", {}, options.message),
    rows,
    status,
    h(
      "div",
      { class: "actions" },
      download === undefined
        ? null
        : h(
            "button",
            {
              type: "button",
              onclick: () => {
                clearStatus(status);
                downloadText(download.fileName, download.content);
              },
            },
            download.label,
          ),
      h(
        "button",
        {
          type: "button",
          onclick: () => {
            panel.remove();
            options.onDismissed();
          },
        },
        "Done",
      ),
    ),
  );
  window.setTimeout(() => {
    if (panel.isConnected) heading.focus();
  }, 0);
  return panel;
}
