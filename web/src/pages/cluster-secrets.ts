import { ApiError } from "../api.js";
import { h, replaceChildren, uniqueId } from "../dom.js";
import { clearStatus, confirmAction, field, showStatus, table } from "../ui.js";
import { type ClusterTabContext, clusterTabPage, sessionEnded } from "./cluster-tabs.js";

/** Bounds of the Administration API's connector secrets. */
const maxNameLength = 49;
const maxValueBytes = 65_536;

/** Why a secret name would be refused, or null; `existing` are the names the cluster holds. */
function nameProblem(name: string, existing: readonly string[]): string | null {
  if (name === "") return "Enter a name.";
  if (!new RegExp(`^[A-Za-z0-9_]{1,${maxNameLength}}$`).test(name)) {
    return `A name is 1 to ${maxNameLength} characters of A-Z, a-z, 0-9 and _.`;
  }
  if (existing.includes(name)) return "The cluster has a secret of this name: change its value instead.";
  return null;
}

/** Why a secret value would be refused, or null. */
function valueProblem(value: string): string | null {
  if (value === "") return "Enter a value.";
  const sizeBytes = new TextEncoder().encode(value).length;
  if (sizeBytes > maxValueBytes)
    return `A value holds at most ${maxValueBytes} bytes of UTF-8; this one has ${sizeBytes}.`;
  return null;
}

/**
 * A cluster's connector secrets (scope `secrets`): names listed with their values masked, each value revealed on
 * demand; add, change a value, delete. The console keeps no value it does not show: the list is read for its names,
 * and a value is read again when it is revealed and dropped from the page when it is hidden.
 */
export const clusterSecretsPage = clusterTabPage({
  segment: "secrets",
  title: "Connector secrets",
  render(tab) {
    const list = h("div", {}, h("p", {}, "Loading the connector secrets…"));
    let names: string[] = [];
    const form = secretForm(
      tab,
      () => names,
      () => void load(),
    );
    const load = async (): Promise<void> => {
      try {
        names = Object.keys(await tab.context.api.connectorSecrets(tab.clusterId)).sort();
        replaceChildren(
          list,
          secretTable(tab, names, form, () => void load()),
        );
      } catch (error) {
        if (!sessionEnded(error)) {
          showStatus(tab.status, `The connector secrets could not be loaded: ${(error as Error).message}`);
        }
      }
    };
    void load();
    return h("div", {}, list, form.element);
  },
});

interface SecretForm {
  element: HTMLElement;
  /** Turns the form into the change of one secret's value. */
  edit(name: string): void;
}

function secretTable(
  tab: ClusterTabContext,
  names: readonly string[],
  form: SecretForm,
  onChanged: () => void,
): HTMLElement {
  if (names.length === 0) return h("p", {}, "The cluster has no connector secrets yet.");
  return table(
    "Connector secrets of the cluster",
    ["Name", "Value", "Actions"],
    names.map((name) => {
      const value = h("div", { class: "secret-value" }, maskedValue());
      const reveal = h(
        "button",
        { type: "button", "aria-pressed": "false", "aria-label": `Reveal the value of ${name}` },
        "Reveal",
      );
      reveal.addEventListener("click", () => void toggleValue(tab, name, reveal, value));
      return [
        h("code", {}, name),
        value,
        h(
          "div",
          { class: "row-actions" },
          reveal,
          h(
            "button",
            { type: "button", "aria-label": `Change value of ${name}`, onclick: () => form.edit(name) },
            "Change value",
          ),
          h(
            "button",
            {
              type: "button",
              class: "danger",
              "aria-label": `Delete secret ${name}`,
              onclick: () => void deleteSecret(tab, name, onChanged),
            },
            "Delete",
          ),
        ),
      ];
    }),
  );
}

/** What stands for a value that is not shown: dots for the eye, words for screen readers. */
function maskedValue(): HTMLElement {
  return h(
    "span",
    { class: "masked" },
    h("span", { "aria-hidden": "true" }, "••••••••"),
    h("span", { class: "visually-hidden" }, "hidden"),
  );
}

/** Reveals a value, read afresh from the platform, or hides it again. */
async function toggleValue(
  tab: ClusterTabContext,
  name: string,
  button: HTMLButtonElement,
  container: HTMLElement,
): Promise<void> {
  if (button.getAttribute("aria-pressed") === "true") {
    replaceChildren(container, maskedValue());
    button.setAttribute("aria-pressed", "false");
    button.setAttribute("aria-label", `Reveal the value of ${name}`);
    button.textContent = "Reveal";
    return;
  }
  clearStatus(tab.status);
  button.disabled = true;
  try {
    const value = (await tab.context.api.connectorSecrets(tab.clusterId))[name];
    if (value === undefined) {
      showStatus(tab.status, `The secret ${name} no longer exists.`);
      return;
    }
    replaceChildren(container, h("code", {}, value));
    button.setAttribute("aria-pressed", "true");
    button.setAttribute("aria-label", `Hide the value of ${name}`);
    button.textContent = "Hide";
  } catch (error) {
    if (!sessionEnded(error)) showStatus(tab.status, `The value could not be read: ${(error as Error).message}`);
  } finally {
    button.disabled = false;
  }
}

async function deleteSecret(tab: ClusterTabContext, name: string, onDeleted: () => void): Promise<void> {
  const confirmed = await confirmAction({
    title: "Delete connector secret",
    message: `Connectors that read ${name} will no longer find it.`,
    confirmLabel: "Delete secret",
  });
  if (!confirmed) return;
  clearStatus(tab.status);
  try {
    await tab.context.api.deleteConnectorSecret(tab.clusterId, name);
    showStatus(tab.status, `Secret ${name} was deleted.`, "success");
    onDeleted();
  } catch (error) {
    if (!sessionEnded(error)) showStatus(tab.status, `${name} could not be deleted: ${(error as Error).message}`);
  }
}

/** The form that adds a secret, or changes the value of the one chosen in the list. */
function secretForm(tab: ClusterTabContext, existing: () => readonly string[], onChanged: () => void): SecretForm {
  const name = h("input", {
    type: "text",
    name: "secretName",
    maxlength: maxNameLength,
    autocomplete: "off",
    spellcheck: "false",
  });
  const nameError = h("p", { class: "field-error", id: uniqueId("secret-name-error") });
  const valueId = uniqueId("secret-value");
  const value = h("textarea", {
    id: valueId,
    name: "secretValue",
    rows: 3,
    autocomplete: "off",
    spellcheck: "false",
  });
  const valueHint = h("small", { id: `${valueId}-hint`, class: "hint" }, "At most 64 KiB of UTF-8.");
  const valueError = h("p", { class: "field-error", id: uniqueId("secret-value-error") });
  value.setAttribute("aria-describedby", `${valueHint.id} ${valueError.id}`);
  const headingId = uniqueId("secret-form-title");
  const heading = h("h2", { id: headingId, tabindex: -1 }, "Add a connector secret");
  const submit = h("button", { type: "submit" }, "Add secret");
  const cancel = h("button", { type: "button", hidden: true }, "Cancel");
  const nameField = field("Name", name, `1 to ${maxNameLength} characters of A-Z, a-z, 0-9 and _.`);
  name.setAttribute("aria-describedby", `${name.getAttribute("aria-describedby") ?? ""} ${nameError.id}`.trim());
  const element = h(
    "form",
    { method: "post", novalidate: true, "aria-labelledby": headingId, class: "card" },
    heading,
    nameField,
    nameError,
    h("div", { class: "field" }, h("label", { for: valueId }, "Value"), value, valueHint),
    valueError,
    h("div", { class: "actions" }, submit, cancel),
  );
  /** The secret whose value is being changed, or null while adding one. */
  let editing: string | null = null;

  const show = (input: HTMLInputElement | HTMLTextAreaElement, error: HTMLElement, problem: string | null): void => {
    error.textContent = problem ?? "";
    input.setAttribute("aria-invalid", problem === null ? "false" : "true");
  };
  const reset = (): void => {
    editing = null;
    name.readOnly = false;
    name.value = "";
    value.value = "";
    show(name, nameError, null);
    show(value, valueError, null);
    heading.textContent = "Add a connector secret";
    submit.textContent = "Add secret";
    cancel.hidden = true;
  };
  cancel.addEventListener("click", () => {
    reset();
    name.focus();
  });
  name.addEventListener("input", () => {
    if (nameError.textContent !== "") show(name, nameError, nameProblem(name.value, existing()));
  });
  value.addEventListener("input", () => {
    if (valueError.textContent !== "") show(value, valueError, valueProblem(value.value));
  });
  element.addEventListener("submit", (event) => {
    event.preventDefault();
    clearStatus(tab.status);
    const secretName = editing ?? name.value;
    const namesProblem = editing === null ? nameProblem(secretName, existing()) : null;
    const valuesProblem = valueProblem(value.value);
    show(name, nameError, namesProblem);
    show(value, valueError, valuesProblem);
    if (namesProblem !== null) {
      name.focus();
      return;
    }
    if (valuesProblem !== null) {
      value.focus();
      return;
    }
    const changing = editing !== null;
    submit.disabled = true;
    (changing
      ? tab.context.api.updateConnectorSecret(tab.clusterId, secretName, value.value)
      : tab.context.api.createConnectorSecret(tab.clusterId, secretName, value.value)
    )
      .then(() => {
        // The value leaves the page as soon as the platform has it.
        reset();
        showStatus(
          tab.status,
          changing ? `The value of ${secretName} was changed.` : `Secret ${secretName} was added.`,
          "success",
        );
        onChanged();
      })
      .catch((error: unknown) => {
        if (sessionEnded(error)) return;
        // A secret another client added meanwhile is named next to the field; the cluster's limits are not.
        if (
          error instanceof ApiError &&
          error.status === 409 &&
          !changing &&
          /already has a secret/.test(error.message)
        ) {
          show(name, nameError, error.message);
          name.focus();
        }
        showStatus(tab.status, `The secret was not saved: ${(error as Error).message}`);
      })
      .finally(() => {
        submit.disabled = false;
      });
  });
  return {
    element,
    edit(secretName) {
      reset();
      editing = secretName;
      name.value = secretName;
      name.readOnly = true;
      heading.textContent = `Change the value of ${secretName}`;
      submit.textContent = "Save value";
      cancel.hidden = false;
      value.focus();
    },
  };
}
