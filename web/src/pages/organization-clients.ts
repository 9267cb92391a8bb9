import { ApiError, endedSession, type OrganizationClient, organizationScopes } from "../api.js";
import { h, replaceChildren, uniqueId } from "../dom.js";
import { clearStatus, confirmAction, showStatus, statusRegion, table } from "../ui.js";
import { clientNameField } from "./client-name.js";
import { oneTimeSecretPanel } from "./one-time-secret.js";
import type { Page, PageContext } from "./page.js";

/**
 * The organization's API clients: list, create with chosen scopes (the secret shown once), delete. Managing them
 * takes a client holding every scope, so only such a client sees the page.
 */
export const organizationClientsPage: Page = {
  path: "clients",
  title: "Organization clients",
  visible: (session) => session.canCall("admin") && organizationScopes.every((scope) => session.holds(scope)),
  render(context) {
    const status = statusRegion();
    const revealed = h("div", {});
    const list = h("div", {}, h("p", {}, "Loading the API clients…"));
    let clients: OrganizationClient[] = [];
    const load = async (): Promise<void> => {
      try {
        clients = await context.api.organizationClients();
        replaceChildren(
          list,
          clientTable(clients, context, status, () => void load()),
        );
      } catch (error) {
        if (endedSession(error)) return;
        showStatus(status, `The API clients could not be loaded: ${(error as Error).message}`);
      }
    };
    void load();
    const form = creationForm(
      context,
      status,
      () => clients,
      (panel) => {
        replaceChildren(revealed, panel);
        void load();
      },
    );
    return h(
      "section",
      {},
      h(
        "p",
        { class: "hint" },
        "Clients of the whole organization: give each person, pipeline or tool its own, with only the scopes it needs. A cluster's own clients are on the cluster's API clients tab.",
      ),
      status,
      revealed,
      list,
      form,
    );
  },
};

function clientTable(
  clients: readonly OrganizationClient[],
  context: PageContext,
  status: HTMLElement,
  onChanged: () => void,
): HTMLElement {
  const signedIn = context.session.clientId;
  return table(
    "API clients of the organization",
    ["Name", "Client id", "Scopes", "Created", "Actions"],
    clients.map((client) => [
      client.name,
      h("code", {}, client.clientId),
      client.scopes.join(", "),
      client.created.slice(0, 10),
      client.clientId === signedIn
        ? h("span", { class: "muted" }, "signed in")
        : h(
            "button",
            {
              type: "button",
              class: "danger",
              "aria-label": `Delete client ${client.name}`,
              onclick: () => void deleteClient(client, context, status, onChanged),
            },
            "Delete",
          ),
    ]),
  );
}

async function deleteClient(
  client: OrganizationClient,
  context: PageContext,
  status: HTMLElement,
  onDeleted: () => void,
): Promise<void> {
  const confirmed = await confirmAction({
    title: "Delete API client",
    message: `${client.name} can no longer get tokens, and the platform and every cluster refuse the tokens it holds.`,
    confirmLabel: "Delete client",
  });
  if (!confirmed) return;
  clearStatus(status);
  try {
    await context.api.deleteOrganizationClient(client.clientId);
    showStatus(status, `API client ${client.name} was deleted.`, "success");
    onDeleted();
  } catch (error) {
    if (endedSession(error)) return;
    showStatus(status, `${client.name} could not be deleted: ${(error as Error).message}`);
  }
}

function creationForm(
  context: PageContext,
  status: HTMLElement,
  existing: () => readonly OrganizationClient[],
  onCreated: (panel: HTMLElement) => void,
): HTMLElement {
  const name = clientNameField(() => existing().map((client) => client.name), "the organization");
  const boxes = new Map<string, HTMLInputElement>();
  const scopesError = h("p", { class: "field-error", id: uniqueId("scopes-error") });
  const scopes = h(
    "fieldset",
    { class: "roles", "aria-describedby": scopesError.id },
    h("legend", {}, "Scopes"),
    organizationScopes.map((scope) => {
      const box = h("input", { type: "checkbox", name: "scopes", value: scope, id: uniqueId("scope") });
      boxes.set(scope, box);
      return h("div", { class: "check" }, box, h("label", { for: box.id }, scope));
    }),
    scopesError,
  );
  const submit = h("button", { type: "submit" }, "Create client");
  const headingId = uniqueId("create-organization-client-title");
  const form = h(
    "form",
    { method: "post", novalidate: true, "aria-labelledby": headingId, class: "card" },
    h("h2", { id: headingId }, "Create an API client"),
    name.elements,
    scopes,
    submit,
  );
  scopes.addEventListener("change", () => {
    if ([...boxes.values()].some((box) => box.checked)) scopesError.textContent = "";
  });
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    clearStatus(status);
    const clientName = name.input.value;
    const problem = name.check();
    const chosen = organizationScopes.filter((scope) => boxes.get(scope)?.checked === true);
    scopesError.textContent = chosen.length === 0 ? "Choose at least one scope." : "";
    if (problem !== null) {
      name.input.focus();
      return;
    }
    if (chosen.length === 0) {
      boxes.get(organizationScopes[0])?.focus();
      return;
    }
    submit.disabled = true;
    context.api
      .createOrganizationClient(clientName, chosen)
      .then((created) => {
        name.input.value = "";
        name.show(null);
        for (const box of boxes.values()) box.checked = false;
        onCreated(
          oneTimeSecretPanel({
            heading: `API client ${created.name} was created`,
            message:
              "Its secret is shown this once: copy it now. The platform keeps only a hash of it. Sign in or request tokens with the id and the secret.",
            values: [
              { label: "Client id", value: created.clientId },
              { label: "Client secret", value: created.clientSecret, secret: true },
            ],
            onDismissed: () => name.input.focus(),
          }),
        );
      })
      .catch((error: unknown) => {
        if (endedSession(error)) return;
        // A name another client took meanwhile is a 400 naming body/name: shown next to the field too.
        if (error instanceof ApiError && error.problem.errors?.some((entry) => entry.location === "body/name")) {
          name.show(error.message);
          name.input.focus();
        }
        showStatus(status, `The client was not created: ${(error as Error).message}`);
      })
      .finally(() => {
        submit.disabled = false;
      });
  });
  return form;
}
